// The transaction engine on one worker: the protocol's stages, the
// coordinators (coroutines running transactions in a closed loop), and what
// they share (location cache, statistics).
//
//   Protocol      a protocol's stage modules for one worker, chosen from the
//                 pipeline at construction (cc/<protocol>/), plus its RPC
//                 handlers, registered on the worker's endpoint
//   WorkerEngine  one per worker: cluster context, database, protocol,
//                 location cache, stats
//   Coordinator   one per coroutine: its Txn, its scratch memory slice, its
//                 doorbell batch; runs workload transactions until stopped
//
// Thread-safety: everything here belongs to the worker's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "cluster/cluster.hpp"
#include "history/recorder.hpp"
#include "runtime/task.hpp"
#include "env/tsc.hpp"
#include "stats/histogram.hpp"
#include "stats/published.hpp"
#include "stats/verbs.hpp"
#include "store/location_cache.hpp"
#include "txn/database.hpp"
#include "txn/item_batch.hpp"
#include "txn/options.hpp"
#include "txn/protocol.hpp"
#include "txn/replication.hpp"
#include "txn/service.hpp"
#include "txn/stages/owner_atomics.hpp"
#include "txn/stages/toolkit.hpp"
#include "txn/txn.hpp"
#include "txn/worker_stats.hpp"
#include "txn/workload.hpp"

namespace rdtx::txn {

class Coordinator;
class WorkerEngine;

inline constexpr uint32_t kMaxNodes = 64;

// What a worker knows of one of its RC QPs' send queues, for unsignaled
// commits (txn.options.unsignaled_commit): posts through OneSidedBatch are
// numbered; a signaled post that completed successfully confirms every
// post before it on that QP (an RC send queue completes in order), and a
// reconnect (after an error) leaves every unconfirmed post in doubt.
struct QpAck {
  uint64_t posted = 0;     // number of the last post
  uint64_t awaited = 0;    // number of the last post someone awaits (OneSidedBatch::execute)
  uint64_t confirmed = 0;  // every post up to this one completed
  uint64_t failed = 0;     // posts after `confirmed` up to this one may have failed
};

// A commit (or release) of one scratch bank left in flight with
// passive_ack: signaled, its WaitGroup; unsignaled, the post number of its
// requests on each node's QP.
struct PendingCommit {
  runtime::WaitGroup wg;
  uint32_t nodes = 0;                // entries of node[] used
  uint32_t node[kMaxNodes] = {};
  uint64_t ticket[kMaxNodes] = {};   // by node: its post number (0: none)
  bool in_flight() const { return wg.remaining() > 0 || wg.failed() || nodes > 0; }
  void add(uint32_t nd, uint64_t post) {
    if (ticket[nd] == 0) node[nodes++] = nd;
    ticket[nd] = post;
  }
};

// Registered scratch memory a worker needs for `coroutines` coordinators.
size_t scratch_bytes_needed(const Database& db, uint32_t coroutines, uint32_t banks);
// The same from the largest tuple (the runner sizes workers' scratch before
// the database exists).
size_t scratch_bytes_for_tuple(uint32_t max_tuple_bytes, uint32_t coroutines, uint32_t banks);

// Handler ids below this are left to components outside the engine.
inline constexpr rpc::HandlerId kFirstEngineHandler = 8;

class WorkerEngine {
 public:
  WorkerEngine(cluster::WorkerContext& w, Database& db, const Options& opts, const ProtocolDef& proto,
               Workload& workload);
  ~WorkerEngine();

  cluster::WorkerContext& ctx() { return w_; }
  // The worker's record of the QP to `node` that coordinator `user` posts on.
  QpAck& qp_ack(uint32_t node, uint32_t user) { return qp_acks_[w_.qp_index(node, user)]; }
  Database& db() { return db_; }
  const Options& options() const { return opts_; }
  Protocol& protocol() { return *protocol_; }
  const ProtocolDef& protocol_def() const { return def_; }
  Toolkit& toolkit() { return *toolkit_; }
  // How owner-side code read-modify-writes tuple words that NICs may also
  // CAS or FAA (set up by start(): CPU atomics, or loopback NIC atomics on a
  // device whose atomics are not coherent with the CPU's).
  OwnerAtomics& owner_atomics() { return atomics_; }
  OwnerAtomicsMode owner_atomics_mode() const { return atomics_mode_; }
  // Called by the protocol when it is created (ProtocolDef::create): the
  // stages (stage_bit) that read-modify-write the words its owner side
  // shares with NICs (lock words, MVCC's rts): with NIC atomics (CAS, FAA)
  // in their one-sided form, on the owner's CPU through owner_atomics() in
  // their RPC form, both when hybrid. Not called: every stage (safe).
  // start() picks the owner atomics' mode from it (owner_atomics_mode()).
  void set_atomic_stages(uint32_t stages) { atomic_stages_ = stages; }
  // An RPC handler on the worker's endpoint, its id allocated here (every
  // worker registers the same handlers in the same order, so ids agree
  // across nodes and processes).
  Result<rpc::HandlerId> register_handler(const char* name, rpc::Handler h);
  // A per-node service (service.hpp): started by start() before the
  // coordinators, polled by a named poller of this worker, drained when the
  // worker stops, stopped when the engine goes.
  void add_service(std::unique_ptr<Service> s);
  // Replication: this worker's log region (set by its applier at start),
  // and the regions of the workers of the same index on every node, which
  // the runner hands out once every engine has started.
  void set_own_log_region(const LogRegionDesc& d) { own_log_region_ = d; }
  const LogRegionDesc& own_log_region() const { return own_log_region_; }
  void set_peer_log_regions(std::vector<LogRegionDesc> by_node) { peer_log_regions_ = std::move(by_node); }
  const LogRegionDesc& peer_log_region(uint32_t node) const { return peer_log_regions_[node]; }
  // After the run, on the runner's thread: Service::settle() of each.
  void settle_services() {
    for (RunningService& r : services_) r.service->settle();
  }
  // After the run: Service::locks_left() of each.
  uint64_t services_locks_left() const {
    uint64_t n = 0;
    for (const RunningService& r : services_) n += r.service->locks_left();
    return n;
  }
  Workload& workload() { return workload_; }
  // The engine's `rows` handler (row_changes.cpp): inserts and row changes
  // of a coordinator on another node, applied here by this worker.
  rpc::HandlerId rows_handler() const { return rows_handler_; }
  void serve_rows(rpc::Request& r);
  store::LocationCache* cache() { return opts_.location_cache ? &cache_ : nullptr; }
  WorkerStats& stats() { return stats_; }
  // Live figures, published by the worker every ~50 ms (publish_live()).
  const stats::Published<LiveStats>& live() const { return *live_; }
  // Publishes the live figures, and the counters of the worker's RPC
  // endpoint and location cache for their libraries' telemetry commands.
  void publish_live();
  LiveStats& live_counts() { return live_counts_; }
  uint32_t node() const { return w_.node; }
  uint32_t workers_per_node() const { return workers_per_node_; }
  // Start of the timestamp clock, the same for every worker of a run.
  uint64_t epoch() const { return epoch_; }
  void set_epoch(uint64_t tsc) { epoch_ = tsc; }
  // The worker's clock floor: timestamps it hands out from now on are larger
  // than every timestamp observed (next_timestamp()'s floor). A protocol
  // whose timestamps order transactions (MVCC) observes the timestamps it
  // finds in tuples and failure replies, so that a node whose clock is
  // behind catches up instead of aborting again and again.
  void observe_timestamp(uint64_t ts) {
    if (ts > clock_floor_) clock_floor_ = ts;
  }
  uint64_t clock_floor() const { return clock_floor_; }
  void set_workers_per_node(uint32_t n) { workers_per_node_ = n; }

  // Spawns the coordinators on the worker (none on a memory node of the
  // split layout, Database::coordinates(): its worker serves requests and
  // runs the services only). Each runs transactions until the worker is
  // asked to stop. Counting starts when measuring() turns true.
  // With options().record_history, `history` identifies the run in the
  // worker's recorder (its node and worker fields are filled in here).
  Result<void> start(uint64_t seed, const history::RecorderOptions& history = {});
  // The worker's history (recording only; nullptr otherwise).
  history::Recorder* recorder() { return recorder_ ? &*recorder_ : nullptr; }
  void set_measuring(bool on) { measuring_ = on; }
  bool measuring() const { return measuring_; }

  // Per-coroutine slice of the worker's registered scratch memory.
  size_t scratch_per_coroutine() const { return scratch_per_co_; }

 private:
  cluster::WorkerContext& w_;
  Database& db_;
  Options opts_;
  const ProtocolDef& def_;
  Workload& workload_;
  store::LocationCache cache_;
  OwnerAtomics atomics_;
  OwnerAtomicsMode atomics_mode_ = OwnerAtomicsMode::kCpu;
  uint32_t atomic_stages_ = ~0u;
  std::unique_ptr<Toolkit> toolkit_;
  std::unique_ptr<Protocol> protocol_;
  std::vector<std::unique_ptr<Coordinator>> coordinators_;
  struct RunningService {
    std::unique_ptr<Service> service;
    runtime::PollerId poller = 0;
    bool draining = false;
  };
  std::vector<RunningService> services_;
  Result<void> start_services();
  runtime::Task<void> drain_service(Service& s);
  rpc::HandlerId next_handler_ = kFirstEngineHandler;
  rpc::HandlerId rows_handler_ = 0;
  std::optional<history::Recorder> recorder_;
  WorkerStats stats_;
  std::vector<QpAck> qp_acks_;  // by WorkerContext::qp_index
  LiveStats live_counts_;  // the worker's own copy, counted as it goes
  std::unique_ptr<stats::Published<LiveStats>> live_;
  size_t scratch_per_co_ = 0;
  uint32_t workers_per_node_ = 1;
  uint64_t epoch_ = 0;
  uint64_t clock_floor_ = 0;
  bool measuring_ = false;
  LogRegionDesc own_log_region_;
  std::vector<LogRegionDesc> peer_log_regions_;
};

// Collects one-sided work requests per node for one doorbell per QP and one
// wait (DESIGN: doorbell batching, outstanding requests). With the options
// off, it posts one request per doorbell, or waits node by node.
//
// One per coordinator (Coordinator::onesided()), reused by every stage: a
// batch is hundreds of work requests, which neither belong in coroutine
// frames nor should be zeroed per use.
class OneSidedBatch {
 public:
  static constexpr uint32_t kMaxWrs = 4 * Txn::kMaxAccesses;
  // Requests one coordinator has in flight on one QP at most: a batch with
  // more for a node is posted in chunks of this many, each awaited before
  // the next (TPC-C's Stock-Level and Delivery; SmallBank and YCSB never
  // reach it). Two banks' passive commits fit (the runner sizes QPs with
  // 2 x this x coroutines).
  static constexpr uint32_t kMaxInFlightPerNode = 128;
  explicit OneSidedBatch(Coordinator& c);
  void reset() { n_ = 0; }
  // A zeroed request for `node`, appended to its list (nullptr when full).
  rdma::WorkRequest* add(uint32_t node);
  // An inline 8-byte WRITE of 0 to the lock word (metadata word 0) of the
  // access's tuple: how every protocol releases a lock one-sided. False when full.
  bool add_unlock(const Access& a);
  // A shared holder's release (txn.options.read_locks = shared): FAA -1 on
  // the lock word, its old value landing in `result` (registered scratch of
  // the access: c.extra(i)). False when full.
  bool add_read_unlock(const Access& a, std::byte* result);
  bool empty() const { return n_ == 0; }
  // Whether post_only() can post it all at once (no node's list is longer
  // than kMaxInFlightPerNode); else execute() it.
  bool fits_in_flight() const;
  // Posts everything added now; co_await the result for the completions:
  // true if every request succeeded. No coroutine frame of its own, as
  // every stage of every attempt goes through here (with
  // txn.options.outstanding_requests off, node by node: then a task).
  class Execution;
  Execution execute();
  // Posts everything and returns without waiting (passive
  // acknowledgement), recorded in `p`: `p.wg` on each node's last request,
  // or with txn.options.unsignaled_commit every request unsignaled and its
  // post number per node; whoever reuses the memory the requests read from
  // settles `p` first (Coordinator::settle_pending_commit). False if a post
  // failed.
  bool post_only(PendingCommit& p);

 private:
  Coordinator& c_;
  rdma::WorkRequest wrs_[kMaxWrs];
  uint32_t node_of_[kMaxWrs];
  uint32_t n_ = 0;
  // Each node's requests linked in the order they were added (and counted).
  void link_per_node();
  void count(const rdma::WorkRequest& wr);
  // Posts node `nd`'s list, `wg` on its last request (signaled; or none
  // unsignaled), its post number in post_no[nd]. False if the post failed
  // (its share of `wg` is then done, failed).
  bool post_node(uint32_t nd, runtime::WaitGroup& wg, bool doorbell, bool signaled = true);
  // After the completions of execute(): the round trip counted (if one was
  // waited for), failed QPs reconnected, the batch emptied.
  bool complete(bool waited);
  // Posts in chunks of kMaxInFlightPerNode per node, each awaited; node by
  // node when `serial` (txn.options.outstanding_requests off).
  runtime::Task<bool> execute_chunked(bool serial);
  rdma::WorkRequest* head[kMaxNodes];
  rdma::WorkRequest* tail[kMaxNodes];
  uint64_t post_no[kMaxNodes];  // each node's last post (QpAck::posted)
  runtime::WaitGroup wg_;  // execute()'s completions
  bool posted_ok_ = true;
};

// What execute() returns: the completions of the requests it posted (or,
// node by node, the task that posts and waits).
class OneSidedBatch::Execution {
 public:
  explicit Execution(OneSidedBatch* b) : b_(b) {}
  explicit Execution(runtime::Task<bool> serial) : serial_(std::move(serial)) {}
  bool await_ready() noexcept {
    if (b_ == nullptr) return false;  // the task starts when awaited
    waited_ = b_->wg_.remaining() > 0;
    return !waited_;
  }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> h) noexcept {
    if (b_ == nullptr) return std::move(serial_).operator co_await().await_suspend(h);
    b_->wg_.await_suspend(h);
    return std::noop_coroutine();
  }
  bool await_resume() {
    if (b_ == nullptr) return std::move(serial_).operator co_await().await_resume();
    return b_->complete(waited_);
  }

 private:
  OneSidedBatch* b_ = nullptr;  // nullptr: serial_
  runtime::Task<bool> serial_;
  bool waited_ = false;
};

class Coordinator {
 public:
  Coordinator(WorkerEngine& e, uint32_t index, std::byte* scratch, size_t scratch_bytes, uint64_t seed);

  WorkerEngine& engine() { return e_; }
  Database& db() { return e_.db(); }
  uint32_t index() const { return index_; }
  // The partition the workload generates this coordinator's transactions
  // for (Workload::generate's home_node): its own node, or, on a compute
  // node (split layout), one of the memory nodes, the cluster's compute
  // coordinators dealt round-robin over them.
  uint32_t home() const { return home_; }
  Txn& txn() { return txn_; }
  // The registered scratch slot of access i (tuple-sized) and extra space
  // after the slots for protocol use (bucket reads, validation words).
  // Both in the current scratch bank (txn.options.scratch_banks).
  std::byte* slot(uint32_t i) { return bank() + static_cast<size_t>(i) * slot_bytes_; }
  // kExtraBytes each: a protocol that uses more says so with a
  // static_assert against it.
  static constexpr uint32_t kExtraBytes = 128;
  std::byte* extra(uint32_t i) { return bank() + extra_offset_ + static_cast<size_t>(i) * kExtraBytes; }
  uint32_t lkey() const { return e_.ctx().scratch_mr.lkey; }
  // The table's partition on `node` as this worker reaches it (its rkey is
  // the one of the device context this worker's QPs to `node` connect to).
  const store::TableDescriptor& descriptor(uint32_t node, TableId t) const {
    return e_.db().descriptor(node, t, e_.ctx().index);
  }
  // Counts a network wait (round trip) of the current attempt.
  void count_round_trip() { ++net_.round_trips; }
  // The attempt's verbs, doorbells and bytes (with options().breakdown).
  void count_verb(stats::Verb v, uint64_t bytes) {
    if (breakdown_) net_.count(v, bytes);
  }
  void count_doorbell() { net_.doorbells += breakdown_; }
  // Phase timing: t0 = phase_clock() before the phase, add_phase(p, t0)
  // after it; both cost nothing without options().breakdown.
  uint64_t phase_clock() const { return timing_ ? env::tsc() : 0; }
  void add_phase(Phase p, uint64_t t0) {
    if (t0 != 0) phase_tsc_[static_cast<int>(p)] += env::tsc() - t0;
  }
  // For work done outside an attempt and charged to one later (CALVIN's
  // epoch sequencing, charged to the first transaction its home counts):
  // the current attempt's verbs so far, and adding such counts and time.
  const stats::VerbCounts& attempt_counts() const { return net_; }
  void add_counts(const stats::VerbCounts& v) { net_.add(v); }
  void add_phase_tsc(Phase p, uint64_t tsc) {
    if (timing_) phase_tsc_[static_cast<int>(p)] += tsc;
  }
  // A commit whose completion is acknowledged passively (one-sided WRITEs
  // left in flight, reading the current bank): an attempt waits for it
  // before it reuses that bank (settle_pending_commit()).
  PendingCommit& pending_commit() { return pending_commit_[bank_]; }
  bool commit_in_flight() { return pending_commit_[bank_].in_flight(); }
  runtime::Task<void> settle_pending_commit();
  // The next transaction's bank (the same one with a single bank).
  void next_bank() { bank_ = banks_ > 1 ? bank_ ^ 1u : 0u; }
  // The coordinator's reusable batches, emptied (one stage at a time uses them).
  OneSidedBatch& onesided() {
    onesided_.reset();
    return onesided_;
  }
  ItemBatch& items(rpc::HandlerId handler) {
    items_.reset(handler);
    return items_;
  }
  // A second batch for messages sent while items() is still being read
  // (cancelling the calls of a failed lock request).
  ItemBatch& aux_items(rpc::HandlerId handler) {
    aux_items_.reset(handler);
    return aux_items_;
  }
  // The batch of the attempt's write-back or release, which may stay in
  // flight (passive ACK) until settle_commit_batch().
  ItemBatch& commit_items(rpc::HandlerId handler) {
    commit_items_.reset(handler);
    return commit_items_;
  }
  // Awaits an in-flight commit batch and re-sends what got no answer.
  runtime::Task<void> settle_commit_batch();
  bool commit_batch_in_flight() const { return commit_items_.in_flight(); }
  // A release left in flight must be answered before this coordinator's
  // next attempt asks for locks (the owner refuses a release overtaken by a
  // later attempt's lock request as a stale copy); a write-back need not.
  void mark_release_in_flight() { release_in_flight_ = true; }
  // A message carrying this attempt's lock value was re-sent (its first copy
  // may still arrive): the next attempt takes a new timestamp.
  void lock_value_lingers() { lock_value_lingers_ = true; }
  // Gives `t` a new timestamp (above the worker's clock floor): for a
  // protocol that takes one per attempt (MVCC, from Protocol::begin).
  void renew_timestamp(Txn& t);

  // The pipeline driver (pipeline.cpp): every attempt goes through these.
  // A fetch round of accesses [from, t.size()); false: aborted, released.
  runtime::Task<bool> run_fetch(Txn& t, uint32_t from);
  // lock -> validate -> log -> commit; false: aborted, released.
  runtime::Task<bool> run_commit(Txn& t);
  // Releases what the attempt holds (the protocol's release module).
  runtime::Task<void> run_release(Txn& t);
  // The attempt's inserts (Txn::insert) on their owners, before the commit
  // stage (row_changes.cpp: in the store on the coordinator's own node, by
  // the owner's `rows` handler elsewhere); false: one failed (counted in
  // insert_errors, the ones done erased again, the attempt fails as a
  // workload error).
  runtime::Task<bool> apply_inserts(Txn& t);
  // Erases the attempt's inserts again (a commit stage that failed after them).
  runtime::Task<void> undo_inserts(Txn& t);
  // Row changes (Txn::erase, Txn::relocate), after the inserts, before the
  // commit stage: each row is erased or moved on its owner while the
  // attempt still holds it, and left out of the commit stage's write-back
  // and unlock (Access::locked cleared). Erases of a protocol that versions
  // them (ProtocolDef::versions_erases) are left to its commit stage.
  runtime::Task<void> apply_row_changes(Txn& t);

  // The coordinator's life: the protocol's loop (Protocol::run_coordinator,
  // by default run_closed_loop()), then what is left in flight settled.
  runtime::Task<void> run();
  // The engine's closed loop: generate an input, attempt it, retry it after
  // an abort (with backoff) until it commits, the workload gives up, or
  // txn.max_retries is reached; until the worker stops.
  runtime::Task<void> run_closed_loop();

  // For a protocol's own loop (Protocol::run_coordinator):
  // Starts an attempt of transaction `id` with timestamp `ts` on txn():
  // accesses emptied, the attempt's verbs and phase timing zeroed.
  Txn& begin_attempt(uint64_t id, uint64_t ts);
  // A fresh timestamp of this coordinator (above the worker's clock floor).
  uint64_t take_timestamp();
  // This coordinator's next transaction id (its sequence advanced).
  uint64_t take_txn_id();
  Rng& rng() { return rng_; }
  // Counts the attempt just run on txn() (input `in`, outcome `committed`,
  // `delta` for the invariant, latency from `start_tsc`): history (when
  // recording), live figures, and while measuring the commits, aborts by
  // reason, latency, verbs and sampled phases. Both loops call it.
  // `first`: the transaction's first attempt (counted as issued).
  // `invoked_at_start`: start_tsc is when the transaction was invoked, at or
  // before its first attempt's first access -- the history's real-time
  // begin; otherwise (a CALVIN executor that is not the input's home) the
  // begin is recorded as unknown.
  void account(const TxnInput& in, bool committed, int64_t delta, uint64_t start_tsc, bool first = true,
               bool invoked_at_start = true);

 private:
  // Recording: the attempt's accesses and outcome go to the worker's history.
  // begin_tsc: the transaction's invocation (0: unknown).
  void record_outcome(uint32_t type, bool committed, uint64_t begin_tsc);
  // row_changes.cpp: whether a row of `node` is changed in the store here;
  // erasing the inserts marked in `which`; the outcome `rc` of access i's
  // row change.
  bool row_is_local(uint32_t node) const;
  runtime::Task<void> erase_inserted(Txn& t, const bool* which);
  void changed(Txn& t, uint32_t i, int rc);

  friend class Txn;
  WorkerEngine& e_;
  uint32_t index_;
  uint32_t home_ = 0;
  std::byte* bank() const { return scratch_ + bank_ * bank_bytes_; }
  std::byte* scratch_;
  uint32_t banks_;
  size_t bank_bytes_;
  uint32_t bank_ = 0;
  uint32_t slot_bytes_;
  size_t extra_offset_;
  uint32_t seq_ = 0;
  uint64_t last_ts_ = 0;
  stats::VerbCounts net_;             // this attempt
  uint64_t phase_tsc_[kPhases] = {};  // this attempt
  bool breakdown_ = true;
  bool timing_ = false;      // this attempt's phases are timed (a sample)
  uint32_t sample_mask_ = 0;  // time attempts whose sequence & mask == 0
  Rng rng_;
  PendingCommit pending_commit_[2];  // per scratch bank
  std::byte* probe_ = nullptr;       // 8 registered bytes: confirmation READs land here
  bool release_in_flight_ = false;
  bool lock_value_lingers_ = false;
  OneSidedBatch onesided_;
  ItemBatch items_;
  ItemBatch aux_items_;
  ItemBatch commit_items_;
  std::vector<std::byte> insert_buf_;    // Txn::insert records: kMaxInserts x the largest record
  std::vector<std::byte> access_state_;  // Txn::state<T>: kMaxAccesses x the protocol's bytes
  std::unique_ptr<history::TxnTrace> trace_;  // recording only
  Txn txn_;
};

}  // namespace rdtx::txn
