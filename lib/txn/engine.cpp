// The worker engine (engine.hpp): its lifecycle (start, services, the
// coordinators it spawns), RPC handler registration, live figures.
#include "txn/engine.hpp"
#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"
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

void WorkerEngine::publish_live() {
  live_counts_.measuring = measuring_;
  live_counts_.measured_commits = stats_.commits;
  for (size_t k = 0; k < kWorkerCounterCount; ++k) live_counts_.counters[k] = kWorkerCounters[k].bits(stats_);
  live_counts_.latency_tsc = stats_.latency_tsc;
  live_->publish(live_counts_);
  if (w_.rpc) w_.rpc->publish_stats();
  cache_.publish_stats();
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

void WorkerEngine::set_measuring(bool on) {
  if (on && !measuring_) {
    timeline_start_ = env::tsc();
    timeline_per_bin_ = std::max<uint64_t>(env::ns_to_tsc(uint64_t{stats_.timeline_bin_ms} * 1'000'000), 1);
  }
  measuring_ = on;
}

void WorkerEngine::set_timeline(uint64_t window_ms) {
  const uint64_t bin =
      std::max<uint64_t>(1, (window_ms + WorkerStats::kMaxTimelineBins - 2) / (WorkerStats::kMaxTimelineBins - 1));
  stats_.timeline_bin_ms = static_cast<uint32_t>(bin);
  stats_.timeline.assign((window_ms + bin - 1) / bin + 1, 0);
}

void WorkerEngine::count_in_timeline(uint64_t now) {
  std::vector<uint32_t>& t = stats_.timeline;
  if (t.empty()) return;
  const uint64_t bin = now > timeline_start_ ? (now - timeline_start_) / timeline_per_bin_ : 0;
  ++t[std::min<uint64_t>(bin, t.size() - 1)];
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

void WorkerEngine::add_service(std::unique_ptr<Service> s) {
  // Recovery reaches a node's services through the database (node_services).
  std::shared_ptr<void>& slot = db_.node_state(w_.node, "services");
  if (!slot) slot = std::make_shared<std::vector<Service*>>();
  static_cast<std::vector<Service*>*>(slot.get())->push_back(s.get());
  services_.push_back({std::move(s)});
}

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

}  // namespace rdtx::txn
