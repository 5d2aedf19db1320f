// The transaction engine on one worker: its lifecycle (start, the
// coordinators it spawns, services, stop), the protocol's stages and RPC
// handlers, and what its coordinators share (location cache, statistics,
// owner atomics, replication's log regions).
//
//   Protocol      a protocol's stage modules for one worker, chosen from the
//                 pipeline at construction (cc/<protocol>/), plus its RPC
//                 handlers, registered on the worker's endpoint
//   WorkerEngine  one per worker: cluster context, database, protocol,
//                 location cache, stats, services
//   Coordinator   one per coroutine (coordinator.hpp): an attempt's life
//
// Thread-safety: everything here belongs to the worker's thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "cluster/cluster.hpp"
#include "history/recorder.hpp"
#include "runtime/task.hpp"
#include "stats/published.hpp"
#include "store/location_cache.hpp"
#include "txn/database.hpp"
#include "txn/message_timers.hpp"
#include "txn/options.hpp"
#include "txn/protocol.hpp"
#include "txn/replication.hpp"
#include "txn/service.hpp"
#include "txn/stages/owner_atomics.hpp"
#include "txn/worker_stats.hpp"
#include "txn/workload.hpp"

namespace rdtx::txn {

class Coordinator;
class Toolkit;

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
  // Replication's log regions of this worker (replication.hpp).
  LogRegions& log_regions() { return log_regions_; }
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
  // Timeouts of a kind of wait for other nodes outside the RPC endpoint
  // (message_timers.hpp): one set per kind, since their round trips differ
  // (a reply that an owner writes differs from a vote an RPC asked for),
  // made when a protocol is made; the run reports them all.
  MessageTimers& add_message_timers() {
    return message_timers_.emplace_back(w_.rpc_timeout_ns, w_.rpc_max_timeout_ns);
  }
  const std::deque<MessageTimers>& message_timers() const { return message_timers_; }
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
  // Opening the window (on the worker's thread) starts the timeline.
  void set_measuring(bool on);
  bool measuring() const { return measuring_; }
  // The timeline's bins (WorkerStats::timeline) for a window of
  // `window_ms`, and one for a commit just after its end (the window closes
  // at the worker's next pass): allocated before the run, nothing on the
  // hot path.
  // (GCC 12 at -march=x86-64-v2 with -Wall crashed compiling CALVIN's
  // executor coroutine with these three defined here: engine.cpp.)
  void set_timeline(uint64_t window_ms);
  // A commit at `now` (measuring): one more in its bin.
  void count_in_timeline(uint64_t now);

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
  std::deque<MessageTimers> message_timers_;  // stable addresses
  std::vector<QpAck> qp_acks_;  // by WorkerContext::qp_index
  LiveStats live_counts_;  // the worker's own copy, counted as it goes
  std::unique_ptr<stats::Published<LiveStats>> live_;
  size_t scratch_per_co_ = 0;
  uint32_t workers_per_node_ = 1;
  uint64_t epoch_ = 0;
  uint64_t clock_floor_ = 0;
  bool measuring_ = false;
  uint64_t timeline_start_ = 0, timeline_per_bin_ = 1;
  LogRegions log_regions_;
};

}  // namespace rdtx::txn
