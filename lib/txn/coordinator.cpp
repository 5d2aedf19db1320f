// The coordinator (coordinator.hpp): its scratch layout, the closed loop
// with retry and backoff, accounting of each attempt (statistics, live
// figures, history), and settling a passive commit left in flight.
#include "txn/coordinator.hpp"

#include <algorithm>
#include <utility>

#include "env/log.hpp"
#include "env/tsc.hpp"
#include "env/virtual_clock.hpp"
#include "history/format.hpp"
#include "store/hash_index.hpp"

namespace rdtx::txn {

// Recorded ids are the engine's attempt ids (and lock words): one layout.
static_assert(history::make_txn_id(3, 77, 5, 9) == make_txn_id(3, 77, 5, 9));
static_assert(history::make_txn_id(65535, 1023, 63, UINT32_MAX) == make_txn_id(65535, 1023, 63, UINT32_MAX));
static_assert(kMaxWorkersPerNode <= history::kMaxWorkers && kMaxCoroutines <= history::kMaxCoroutines);

namespace {
// Per access: a tuple copy (plus an 8-byte word after it) or a bucket.
uint32_t slot_bytes_for_tuple(uint32_t max_tuple_bytes) {
  uint32_t b = std::max<uint32_t>(max_tuple_bytes + 8, store::kBucketBytes);
  return (b + 63) & ~63u;
}
uint32_t slot_bytes_for(const Database& db) { return slot_bytes_for_tuple(db.max_tuple_bytes()); }
}  // namespace

// After a coordinator's banks: the landing place of its confirmation READs.
constexpr size_t kProbeBytes = 64;

size_t scratch_bytes_for_tuple(uint32_t max_tuple_bytes, uint32_t coroutines, uint32_t banks) {
  size_t per_bank = static_cast<size_t>(slot_bytes_for_tuple(max_tuple_bytes)) * Txn::kMaxAccesses + size_t{Coordinator::kExtraBytes} * Txn::kMaxAccesses;
  return (per_bank * banks + kProbeBytes) * coroutines;
}

size_t scratch_bytes_needed(const Database& db, uint32_t coroutines, uint32_t banks) {
  return scratch_bytes_for_tuple(db.max_tuple_bytes(), coroutines, banks);
}

Coordinator::Coordinator(WorkerEngine& e, uint32_t index, std::byte* scratch, size_t scratch_bytes, uint64_t seed)
    : e_(e),
      index_(index),
      scratch_(scratch),
      banks_(e.options().scratch_banks),
      bank_bytes_((scratch_bytes - kProbeBytes) / e.options().scratch_banks),
      slot_bytes_(slot_bytes_for(e.db())),
      rng_(seed),
      onesided_(*this),
      items_(*this, 0),
      aux_items_(*this, 0),
      commit_items_(*this, 0) {
  extra_offset_ = static_cast<size_t>(slot_bytes_) * Txn::kMaxAccesses;
  probe_ = scratch_ + banks_ * bank_bytes_;
  access_state_.resize(static_cast<size_t>(Txn::kMaxAccesses) * ((e.protocol_def().access_state_bytes + 7) & ~7u));
  txn_.state_ = access_state_.data();
  txn_.state_bytes_ = (e.protocol_def().access_state_bytes + 7) & ~7u;
  txn_.co_ = this;
  uint32_t max_record = 8;
  for (TableId t = 0; t < e.db().tables(); ++t)
    if (e.db().has_table(t)) max_record = std::max(max_record, (e.db().def(t).record_bytes + 7) & ~7u);
  insert_buf_.resize(static_cast<size_t>(Txn::kMaxInserts) * max_record);
  txn_.ins_buf_ = insert_buf_.data();
  txn_.ins_stride_ = max_record;
  breakdown_ = e.options().breakdown;
  sample_mask_ = e.options().breakdown_sample - 1;
  if (e.options().record_history) trace_ = std::make_unique<history::TxnTrace>(Txn::kMaxAccesses);
  home_ = e.node();
  const Database& db = e.db();
  if (db.split()) {
    // This coordinator's rank among the compute nodes' coordinators, dealt
    // over the memory nodes: every partition is some coordinators' home.
    const uint64_t rank =
        (uint64_t{e.node() - db.data_nodes()} * e.workers_per_node() + e.ctx().index) * e.options().coroutines + index;
    home_ = static_cast<uint32_t>(rank % db.data_nodes());
  }
}

void Coordinator::record_outcome(uint32_t type, bool committed, uint64_t begin_tsc) {
  history::Recorder* rec = e_.recorder();
  if (rec == nullptr || (!committed && !rec->options().record_aborted)) return;
  history::TxnTrace& tr = *trace_;
  // No snapshot timestamps (serializable protocols); the invocation's time.
  tr.begin(txn_.id(), static_cast<uint16_t>(type), 0, begin_tsc);
  for (uint32_t i = 0; i < txn_.size(); ++i) {
    const Access& a = txn_.access(i);
    if (!a.fetched) continue;  // an aborted attempt's accesses that never saw a version
    // Every write of the Txn API is computed from the fetched copy, so it is
    // a read-modify-write: the version it saw and the one it replaced.
    if (a.mode == AccessMode::kWrite && a.change == RowChange::kErase && committed)
      tr.read_erase(a.table, a.key, {a.writer, 0}, {a.replaced, 0});
    else if (a.mode == AccessMode::kWrite)
      tr.read_modify_write(a.table, a.key, {a.writer, 0}, {a.replaced, 0});
    else
      tr.read(a.table, a.key, {a.writer, 0});
  }
  // Inserted rows: new keys, no version replaced.
  if (committed)
    for (uint32_t k = 0; k < txn_.inserts(); ++k) tr.insert(txn_.insert_at(k).table, txn_.insert_at(k).key, {0, 0});
  if (!txn_.snapshot().empty())
    tr.set_snapshot(txn_.snapshot(), txn_.commit_slot());
  else
    tr.set_commit_epoch(txn_.commit_slot());
  if (committed)
    rec->commit(tr, txn_.commit_timestamp());
  else
    rec->abort(tr, static_cast<uint16_t>(txn_.abort_reason()));
}

runtime::Task<void> Protocol::run_coordinator(Coordinator& c) { return c.run_closed_loop(); }

runtime::Task<void> Coordinator::run() {
  co_await e_.protocol().run_coordinator(*this);
  for (uint32_t b = 0; b < banks_; ++b) {
    bank_ = b;
    co_await settle_pending_commit();
  }
  co_await settle_commit_batch();
}

Txn& Coordinator::begin_attempt(uint64_t id, uint64_t ts) {
  txn_.reset(id);
  txn_.ts_ = ts;
  net_ = {};
  timing_ = breakdown_ && (seq_ & sample_mask_) == 0;
  if (timing_)
    for (uint64_t& p : phase_tsc_) p = 0;
  return txn_;
}

uint64_t Coordinator::take_timestamp() {
  return last_ts_ = next_timestamp(env::tsc(), e_.epoch(), last_ts_, e_.node(), e_.ctx().index, index_,
                                   e_.clock_floor());
}

uint64_t Coordinator::take_txn_id() { return make_txn_id(e_.node(), e_.ctx().index, index_, ++seq_); }

void Coordinator::account(const TxnInput& in, bool ok, int64_t delta, uint64_t start, bool first, bool invoked_at_start) {
  WorkerStats& st = e_.stats();
  if (trace_) record_outcome(in.type, ok, invoked_at_start ? start : 0);
  const bool measuring = e_.measuring();
  LiveStats& live = e_.live_counts();
  ++live.attempts;
  if (measuring) {
    ++st.attempts;
    if (in.type < st.attempts_by_type.size()) ++st.attempts_by_type[in.type];
    if (first && in.type < st.issued_by_type.size()) ++st.issued_by_type[in.type];
    st.net_all.add(net_);
  }
  if (ok) {
    st.committed_delta += delta;  // always: the invariant covers the whole run
    ++live.commits;
    if (measuring) {
      ++st.commits;
      const uint64_t now = env::tsc();
      const uint64_t lat = now - start;
      e_.count_in_timeline(now);
      st.latency_tsc.record(lat);
      if (in.type < st.commits_by_type.size()) {
        ++st.commits_by_type[in.type];
        st.latency_by_type[in.type].record(lat);
      }
      st.net_committed.add(net_);
      if (timing_) {
        ++st.sampled_commits;
        for (int p = 0; p < kPhases; ++p)
          if (phase_tsc_[p] != 0) {
            st.phase_tsc[p].record(phase_tsc_[p]);
            st.phase_sum_tsc[p] += phase_tsc_[p];
          }
      }
    }
    return;
  }
  ++live.aborts[static_cast<int>(txn_.abort_reason())];
  if (measuring) {
    ++st.aborts[static_cast<int>(txn_.abort_reason())];
    constexpr int kRel = static_cast<int>(Phase::kRelease);
    st.sampled_aborts += timing_;
    if (timing_ && phase_tsc_[kRel] != 0) {
      st.phase_tsc[kRel].record(phase_tsc_[kRel]);
      st.phase_sum_tsc[kRel] += phase_tsc_[kRel];
    }
  }
}

runtime::Task<void> Coordinator::run_closed_loop() {
  runtime::Worker* self = runtime::Worker::current();
  const Workload& wl = e_.workload();
  const uint32_t node = home_;
  const uint32_t max_retries = e_.options().max_retries;
  TxnInput in;
  while (!self->stopping()) {
    // A new transaction takes the other scratch bank: the last one's commit
    // may still be reading its bank (WRITEs passively acknowledged). The
    // commit that used this bank, two transactions ago, is settled first;
    // it is not this transaction's latency. (Checked here first: settling
    // costs a coroutine frame, and most attempts find nothing in flight.)
    next_bank();
    if (commit_in_flight()) co_await settle_pending_commit();
    wl.generate(rng_, node, in);
    const uint64_t start = env::tsc();
    uint64_t ts = take_timestamp();
    for (uint32_t attempt = 0;; ++attempt) {
      if (commit_in_flight()) co_await settle_pending_commit();
      // After an abort, a commit or release still in flight is settled
      // first: a lost one is re-sent before this attempt meets its locks.
      if ((attempt > 0 || release_in_flight_) && commit_items_.in_flight()) co_await settle_commit_batch();
      // A release or cancel of the last attempt had to be re-sent: its first
      // copy may still reach its owner, and would free a lock this attempt
      // takes with the same value (WAITDIE locks with the timestamp). A new
      // timestamp makes the copy find nothing to free.
      if (std::exchange(lock_value_lingers_, false) && attempt > 0) ts = take_timestamp();
      begin_attempt(take_txn_id(), ts);
      e_.protocol().begin(*this, txn_);
      int64_t delta = 0;
      bool ok = co_await wl.execute(txn_, in, &delta);
      account(in, ok, delta, start, attempt == 0);
      if (ok) break;
      // A workload abort (e.g. insufficient funds) is the transaction's
      // outcome: retrying the same input would abort again.
      if (txn_.abort_reason() == AbortReason::kUser) break;
      if (self->stopping() || (max_retries != 0 && attempt + 1 >= max_retries)) break;
      // Let the conflicting transaction finish before retrying.
      const uint64_t window = uint64_t{e_.options().backoff_ns} << std::min<uint32_t>(attempt, 6);
      if (window > 0) {
        const uint64_t slept_from = env::tsc(), nap = rng_() % window;
        co_await runtime::sleep_for(nap);
        // A worker whose loop takes longer than the whole window to come
        // back (coroutines that compute, a sanitizer build, one thread for
        // the cluster) wakes every retry at its next pass whatever the
        // draw: the retries of a conflict then meet in lock-step, a waiter
        // and a dier phase-locked for ever (WAITDIE's oldest transaction
        // starved). Then the delay is drawn in passes as well.
        if (env::tsc() - slept_from > env::ns_to_tsc(nap + window))
          for (uint64_t passes = rng_() % 4; passes > 0; --passes) co_await runtime::yield();
      } else {
        co_await runtime::yield();
      }
    }
  }
}

void Coordinator::renew_timestamp(Txn& t) {
  t.ts_ = last_ts_ =
      next_timestamp(env::tsc(), e_.epoch(), last_ts_, e_.node(), e_.ctx().index, index_, e_.clock_floor());
}

runtime::Task<void> Coordinator::settle_pending_commit() {
  PendingCommit& p = pending_commit_[bank_];
  runtime::WaitGroup& wg = p.wg;
  if (wg.remaining() > 0) {
    bool ok = co_await wg.wait();
    if (!ok) ++e_.stats().commit_errors;
  }
  wg.reset(0);
  if (p.nodes == 0) co_return;
  // Unsignaled: confirmed once a later signaled post on the same QP has
  // completed: another coordinator's, awaited by it (this one yields until
  // it is in), or, where none is in flight, one 8-byte READ of the node's
  // first table, signaled, posted behind and awaited (counted: probes).
  for (bool waiting = true; waiting;) {
    waiting = false;
    for (uint32_t k = 0; k < p.nodes && !waiting; ++k) {
      const QpAck& ack = e_.qp_ack(p.node[k], index_);
      const uint64_t t = p.ticket[p.node[k]];
      waiting = ack.confirmed < t && ack.failed < t && ack.awaited > t;
    }
    if (waiting) co_await runtime::yield();
  }
  for (int round = 0; round < 2; ++round) {
    OneSidedBatch& probe = onesided();
    for (uint32_t k = 0; k < p.nodes; ++k) {
      const uint32_t nd = p.node[k];
      const QpAck& ack = e_.qp_ack(nd, index_);
      if (ack.confirmed >= p.ticket[nd]) continue;
      if (ack.failed >= p.ticket[nd] || round == 1) {
        ++e_.stats().commit_errors;  // its QP failed, or the READ behind it did
        p.ticket[nd] = 0;
        continue;
      }
      TableId t = 0;
      while (!e_.db().has_table(t)) ++t;
      probe.read({nd, descriptor(nd, t).heap_addr, descriptor(nd, t).rkey}, probe_, 8);
    }
    if (probe.empty()) break;
    if (e_.measuring()) ++e_.stats().commit_probes;
    (void)co_await probe.execute();
  }
  for (uint32_t k = 0; k < p.nodes; ++k) p.ticket[p.node[k]] = 0;
  p.nodes = 0;
}

}  // namespace rdtx::txn
