#include "txn/engine.hpp"
#include "txn/replication.hpp"

#include <algorithm>
#include <utility>

#include "env/log.hpp"
#include "env/tsc.hpp"
#include "env/virtual_clock.hpp"
#include "runtime/cq_poller.hpp"
#include "history/format.hpp"
#include "store/hash_index.hpp"

namespace rdtx::txn {

// Recorded ids are the engine's attempt ids (and lock words): one layout.
static_assert(history::make_txn_id(3, 77, 5, 9) == make_txn_id(3, 77, 5, 9));
static_assert(history::make_txn_id(65535, 1023, 63, UINT32_MAX) == make_txn_id(65535, 1023, 63, UINT32_MAX));
static_assert(kMaxWorkersPerNode <= history::kMaxWorkers && kMaxCoroutines <= history::kMaxCoroutines);

void WorkerEngine::publish_live() {
  live_counts_.measuring = measuring_;
  live_counts_.measured_commits = stats_.commits;
  for (size_t k = 0; k < kWorkerCounterCount; ++k) live_counts_.counters[k] = kWorkerCounters[k].bits(stats_);
  live_counts_.latency_tsc = stats_.latency_tsc;
  live_->publish(live_counts_);
  if (w_.rpc) w_.rpc->publish_stats();
  cache_.publish_stats();
}

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

WorkerEngine::WorkerEngine(cluster::WorkerContext& w, Database& db, const Options& opts, const ProtocolDef& proto,
                           Workload& workload)
    : w_(w),
      db_(db),
      opts_(opts),
      def_(proto),
      workload_(workload),
      cache_(opts.location_cache_entries,
             opts.location_cache ? "n" + std::to_string(w.node) + "w" + std::to_string(w.index) : "") {
  stats_.commits_by_type.resize(workload.type_names().size());
  stats_.latency_by_type.resize(workload.type_names().size());
  stats_.attempts_by_type.resize(workload.type_names().size());
  stats_.issued_by_type.resize(workload.type_names().size());
  live_ = std::make_unique<stats::Published<LiveStats>>();
  qp_acks_.resize(w.qps.size());
}

WorkerEngine::~WorkerEngine() {
  for (RunningService& r : services_) {
    // The cluster may have torn its workers down already (with their pollers).
    if (w_.worker && r.poller != 0) w_.worker->unregister_poller(r.poller);
    r.service->stop();
  }
}

Result<rpc::HandlerId> WorkerEngine::register_handler(const char* name, rpc::Handler h) {
  if (next_handler_ >= rpc::kMaxHandlers)
    return make_error(ENOSPC, "worker %u: no RPC handler id left for '%s' (%u in use)", w_.id, name,
                      static_cast<unsigned>(rpc::kMaxHandlers));
  const rpc::HandlerId id = next_handler_;
  auto r = w_.rpc->register_handler(id, name, std::move(h));
  if (!r.ok()) return r.error();
  ++next_handler_;
  return id;
}

void WorkerEngine::add_service(std::unique_ptr<Service> s) { services_.push_back({std::move(s)}); }

// Starts every service and gives each its named poller. Once the worker is
// stopping, the poller also starts a task that polls drain() until it
// returns true: a live task, so the loop keeps running until then.
Result<void> WorkerEngine::start_services() {
  runtime::Worker* worker = w_.worker.get();
  for (size_t i = 0; i < services_.size(); ++i) {
    RunningService& r = services_[i];
    if (auto st = r.service->start(); !st.ok())
      return make_error(st.error().code, "service %s: %s", r.service->name().c_str(), st.error().message.c_str());
    r.poller = worker->register_poller(
        r.service->name() + "@n" + std::to_string(w_.node) + "w" + std::to_string(w_.index),
        [this, worker, i] {
          RunningService& r = services_[i];
          if (!r.draining && worker->stopping()) {
            r.draining = true;
            worker->spawn(drain_service(*r.service));
          }
          return r.service->poll();
        },
        r.service->period_ns());
  }
  return {};
}

runtime::Task<void> WorkerEngine::drain_service(Service& s) {
  while (!s.drain()) co_await runtime::yield();
}

Result<void> WorkerEngine::start(uint64_t seed, const history::RecorderOptions& history) {
  scratch_per_co_ = scratch_bytes_needed(db_, 1, opts_.scratch_banks);
  if (scratch_per_co_ * opts_.coroutines > w_.scratch->size())
    return make_error(ENOMEM, "worker %u: %u coroutines need %zu bytes of scratch, the worker has %zu", w_.id,
                      opts_.coroutines, scratch_per_co_ * opts_.coroutines, w_.scratch->size());
  if (opts_.coroutines > kMaxCoroutines)
    return make_error(EINVAL, "txn.coroutines = %u exceeds %u", opts_.coroutines, kMaxCoroutines);
  if (kEngineAbortReasons + def_.abort_reasons.size() > kMaxAbortReasons)
    return make_error(EINVAL, "protocol %s declares %zu abort reasons; at most %d fit", def_.name,
                      def_.abort_reasons.size(), kMaxAbortReasons - kEngineAbortReasons);
  if (!toolkit_) {
    auto k = Toolkit::create(*this);
    if (!k.ok()) return k.error();
    toolkit_ = std::move(*k);
    auto rows = register_handler("rows", [this](rpc::Request& r) { serve_rows(r); });
    if (!rows.ok()) return rows.error();
    rows_handler_ = *rows;
    auto p = def_.create(*this);
    if (!p.ok()) return make_error(p.error().code, "protocol %s: %s", def_.name, p.error().message.c_str());
    protocol_ = std::move(*p);
    // The owner atomics, before any handler runs: the protocol has said
    // which of its stages post NIC atomics that its owner side meets.
    atomics_mode_ = txn::owner_atomics_mode(w_.device->caps(), atomic_stages_, opts_);
    if (atomics_mode_ == OwnerAtomicsMode::kLoopback) {
      // This node's tables as this worker's context reaches them.
      std::vector<uint32_t> rkeys(db_.tables(), 0);
      for (TableId t = 0; t < db_.tables(); ++t)
        if (db_.has_table(t)) rkeys[t] = db_.descriptor(w_.node, t, w_.index).rkey;
      RDTX_TRY(atomics_.init_loopback(*w_.device, std::move(rkeys), &stats_.commit_errors));
    }
    // Replication: the engine's log stage and the backups' applier
    // (replication.hpp), for every protocol that can take it.
    if (db_.replicas() > 1) {
      if (!def_.replicable)
        return make_error(EINVAL, "protocol %s does not replicate through the log stage: cluster.replicas must be 1",
                          def_.name);
      auto log = create_log_stage(*this);
      if (!log.ok()) return log.error();
      if (*log) protocol_->set_stage(Stage::kLog, std::move(*log));
    }
    RDTX_TRY(start_services());
  }
  if (opts_.record_history) {
    history::RecorderOptions ro = history;
    ro.node = static_cast<uint16_t>(w_.node);
    ro.worker = static_cast<uint16_t>(w_.index);
    ro.capacity_bytes = opts_.history_capacity_bytes;
    ro.record_aborted = opts_.record_aborted;
    ro.timestamp_order = def_.timestamp_order;
    ro.snapshot_vectors = def_.snapshot_vectors;
    if (ro.names.tables.empty()) {
      for (TableId t = 0; t < db_.tables(); ++t) ro.names.tables.push_back(db_.has_table(t) ? db_.def(t).name : "");
      ro.names.types = workload_.type_names();
      for (const AbortReasonName& n : abort_reason_names(def_)) ro.names.abort_reasons.emplace_back(n.text);
    }
    auto rec = history::Recorder::create(std::move(ro));
    if (!rec.ok()) return rec.error();
    recorder_.emplace(std::move(*rec));
    // Full halves of the history buffer are written by a control thread, off
    // the worker lcore; the poller takes each result between transactions.
    // In virtual time the worker writes them itself: when a background write
    // finishes is real time, and the run would depend on it.
    if (env::virtual_clock() == nullptr) RDTX_TRY(recorder_->stream_in_background());
    w_.worker->add_poller([this] { return recorder_->flush_pending() ? 1 : 0; });
  }
  // A memory node of the split layout runs no coordinator.
  if (!db_.coordinates(w_.node)) return {};
  for (uint32_t i = 0; i < opts_.coroutines; ++i) {
    auto* base = static_cast<std::byte*>(w_.scratch->data()) + i * scratch_per_co_;
    coordinators_.push_back(std::make_unique<Coordinator>(*this, i, base, scratch_per_co_, seed * 1000003 + i));
  }
  for (auto& c : coordinators_) w_.worker->spawn(c->run());
  return {};
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
      const uint64_t lat = env::tsc() - start;
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
      rdma::WorkRequest* wr = probe.add(nd);
      wr->opcode = rdma::Opcode::kRead;
      wr->local = probe_;
      wr->length = 8;
      wr->remote_addr = descriptor(nd, t).heap_addr;
      wr->rkey = descriptor(nd, t).rkey;
    }
    if (probe.empty()) break;
    if (e_.measuring()) ++e_.stats().commit_probes;
    (void)co_await probe.execute();
  }
  for (uint32_t k = 0; k < p.nodes; ++k) p.ticket[p.node[k]] = 0;
  p.nodes = 0;
}

OneSidedBatch::OneSidedBatch(Coordinator& c) : c_(c) {}

rdma::WorkRequest* OneSidedBatch::add(uint32_t node) {
  if (n_ == kMaxWrs) return nullptr;
  wrs_[n_] = rdma::WorkRequest{};
  node_of_[n_] = node;
  return &wrs_[n_++];
}

void OneSidedBatch::link_per_node() {
  // Only the cluster's nodes are cleared: this runs several times per transaction.
  for (uint32_t nd = 0; nd < c_.db().nodes(); ++nd) head[nd] = tail[nd] = nullptr;
  for (uint32_t i = 0; i < n_; ++i) {
    uint32_t nd = node_of_[i];
    count(wrs_[i]);
    wrs_[i].next = nullptr;
    wrs_[i].lkey = wrs_[i].lkey ? wrs_[i].lkey : c_.lkey();
    if (tail[nd]) tail[nd]->next = &wrs_[i];
    else head[nd] = &wrs_[i];
    tail[nd] = &wrs_[i];
  }
}

void OneSidedBatch::count(const rdma::WorkRequest& wr) {
  switch (wr.opcode) {
    case rdma::Opcode::kRead: c_.count_verb(stats::Verb::kRead, wr.length); break;
    case rdma::Opcode::kWrite: c_.count_verb(stats::Verb::kWrite, wr.length); break;
    case rdma::Opcode::kCompareSwap: c_.count_verb(stats::Verb::kCas, 8); break;
    case rdma::Opcode::kFetchAdd: c_.count_verb(stats::Verb::kFaa, 8); break;
    default: c_.count_verb(stats::Verb::kSend, wr.length); break;
  }
}

bool OneSidedBatch::add_unlock(const Access& a) {
  static const uint64_t kZero = 0;  // inline: copied at post time
  rdma::WorkRequest* un = add(a.node);
  if (un == nullptr) return false;
  un->opcode = rdma::Opcode::kWrite;
  un->local = const_cast<uint64_t*>(&kZero);
  un->length = 8;
  un->flags = rdma::kInline;
  un->remote_addr = a.tuple_addr;
  un->rkey = c_.descriptor(a.node, a.table).rkey;
  return true;
}

bool OneSidedBatch::add_read_unlock(const Access& a, std::byte* result) {
  rdma::WorkRequest* un = add(a.node);
  if (un == nullptr) return false;
  un->opcode = rdma::Opcode::kFetchAdd;
  un->local = result;
  un->length = 8;
  un->compare_add = ~uint64_t{0};  // -1: while shared holders count, no exclusive bit can be set
  un->remote_addr = a.tuple_addr;
  un->rkey = c_.descriptor(a.node, a.table).rkey;
  return true;
}

bool OneSidedBatch::post_node(uint32_t nd, runtime::WaitGroup& wg, bool doorbell, bool signaled) {
  if (signaled) {
    tail[nd]->flags |= rdma::kSignaled;
    tail[nd]->wr_id = runtime::CqPoller::wr_id(&wg);
    wg.add(1);
  }
  rdma::QueuePair* qp = c_.engine().ctx().qp_to(nd, c_.index());
  QpAck& ack = c_.engine().qp_ack(nd, c_.index());
  post_no[nd] = ++ack.posted;
  rdma::WorkRequest* bad = nullptr;
  if (doorbell) {
    c_.count_doorbell();
    if (qp->post_send(head[nd], &bad) == 0) return true;
  } else {
    // One doorbell per request: the cost doorbell batching saves.
    rdma::WorkRequest* r = head[nd];
    while (r != nullptr) {
      rdma::WorkRequest* next = r->next;
      r->next = nullptr;
      c_.count_doorbell();
      if (qp->post_send(r, &bad) != 0) break;
      r = next;
    }
    if (r == nullptr) return true;
  }
  if (signaled) wg.done(false);
  ack.failed = ack.posted;  // part of it may be posted: in doubt
  return false;
}

bool OneSidedBatch::fits_in_flight() const {
  uint32_t per_node[kMaxNodes] = {};
  for (uint32_t i = 0; i < n_; ++i)
    if (++per_node[node_of_[i]] > kMaxInFlightPerNode) return false;
  return true;
}

OneSidedBatch::Execution OneSidedBatch::execute() {
  const Options& o = c_.engine().options();
  wg_.reset(0);
  posted_ok_ = true;
  if (n_ == 0) return Execution(this);
  if (!o.outstanding_requests) return Execution(execute_chunked(true));
  if (n_ > kMaxInFlightPerNode && !fits_in_flight()) return Execution(execute_chunked(false));
  link_per_node();
  for (uint32_t nd = 0; nd < c_.db().nodes(); ++nd)
    if (head[nd]) {
      if (post_node(nd, wg_, o.doorbell_batching)) c_.engine().qp_ack(nd, c_.index()).awaited = post_no[nd];
      else posted_ok_ = false;
    }
  return Execution(this);
}

bool OneSidedBatch::complete(bool waited) {
  if (waited) c_.count_round_trip();
  const bool ok = posted_ok_ && !wg_.failed();
  if (n_ != 0)
    for (uint32_t nd = 0; nd < c_.db().nodes(); ++nd) {
      if (!head[nd]) continue;
      QpAck& ack = c_.engine().qp_ack(nd, c_.index());
      if (ok) {
        // Every post before this one on the QP has completed too.
        ack.confirmed = std::max(ack.confirmed, post_no[nd]);
      } else {
        // A failed verb leaves its QP in the error state: bring it back;
        // what was posted on it unconfirmed is in doubt.
        ack.failed = ack.posted;
        (void)c_.engine().ctx().reconnect(nd, c_.index());
      }
    }
  n_ = 0;
  return ok;
}

runtime::Task<bool> OneSidedBatch::execute_chunked(bool serial) {
  const bool doorbell = c_.engine().options().doorbell_batching;
  const uint32_t nodes = c_.db().nodes();
  link_per_node();
  rdma::WorkRequest* next[kMaxNodes];     // each node's requests not posted yet
  rdma::WorkRequest* first[kMaxNodes];    // head[] as linked (complete() reads it)
  for (uint32_t nd = 0; nd < nodes; ++nd) next[nd] = first[nd] = head[nd];
  for (uint32_t from = 0; from < nodes;) {
    // One chunk of every node's list (of one node's, when serial), in flight together.
    wg_.reset(0);
    bool posted = false;
    const uint32_t to = serial ? from + 1 : nodes;
    for (uint32_t nd = from; nd < to; ++nd) {
      if (next[nd] == nullptr) continue;
      rdma::WorkRequest* last = next[nd];
      for (uint32_t k = 1; k < kMaxInFlightPerNode && last->next != nullptr; ++k) last = last->next;
      rdma::WorkRequest* rest = last->next;
      last->next = nullptr;
      head[nd] = next[nd];
      tail[nd] = last;
      next[nd] = rest;
      if (post_node(nd, wg_, doorbell)) {
        posted = true;
        c_.engine().qp_ack(nd, c_.index()).awaited = post_no[nd];
      } else {
        posted_ok_ = false;
      }
    }
    if (posted) {
      posted_ok_ &= co_await wg_.wait();
      c_.count_round_trip();
    }
    bool left = false;
    for (uint32_t nd = from; nd < to; ++nd) left |= next[nd] != nullptr;
    if (!left) from = to;  // serial: the next node
  }
  for (uint32_t nd = 0; nd < nodes; ++nd) head[nd] = first[nd];
  wg_.reset(0);
  co_return complete(false);
}

bool OneSidedBatch::post_only(PendingCommit& p) {
  if (n_ == 0) return true;
  if (!fits_in_flight()) return false;  // callers check fits_in_flight() first
  link_per_node();
  const bool signaled = !c_.engine().options().unsignaled_commit;
  bool ok = true;
  for (uint32_t nd = 0; nd < c_.db().nodes(); ++nd) {
    if (!head[nd]) continue;
    if (!post_node(nd, p.wg, true, signaled)) ok = false;
    else if (!signaled) p.add(nd, post_no[nd]);
  }
  n_ = 0;
  return ok;
}

}  // namespace rdtx::txn
