// A coordinator: one coroutine of a worker running transactions in a closed
// loop, and everything of an attempt's life from begin to release -- the
// pipeline driver (begin -> fetch rounds -> lock -> validate -> log ->
// commit, or the protocol's release on any failure), retry and backoff,
// settling what a passive commit left in flight, inserts and row changes,
// accounting (statistics, history). Its scratch memory slice, its one-sided
// batch (onesided_batch.hpp) and its RPC batches (item_batch.hpp) are what
// the protocols' stages (cc/, stages/toolkit.hpp) work with.
//
//   coordinator.cpp   the loop, retry and backoff, accounting, settling
//   pipeline.cpp      the pipeline driver
//   row_changes.cpp   inserts and row changes
//
// Thread-safety: everything here belongs to the worker's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "env/tsc.hpp"
#include "history/recorder.hpp"
#include "runtime/task.hpp"
#include "stats/verbs.hpp"
#include "txn/engine.hpp"
#include "txn/item_batch.hpp"
#include "txn/onesided_batch.hpp"
#include "txn/txn.hpp"

namespace rdtx::txn {

// Registered scratch memory a worker needs for `coroutines` coordinators.
size_t scratch_bytes_needed(const Database& db, uint32_t coroutines, uint32_t banks);
// The same from the largest tuple (the runner sizes workers' scratch before
// the database exists).
size_t scratch_bytes_for_tuple(uint32_t max_tuple_bytes, uint32_t coroutines, uint32_t banks);

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
