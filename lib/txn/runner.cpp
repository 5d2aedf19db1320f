#include "txn/runner.hpp"

#include "env/tsc.hpp"
#include "runtime/shutdown.hpp"

namespace rdtx::txn {

uint64_t count_locked(Database& db) {
  uint64_t n = 0;
  for (uint32_t node = 0; node < db.nodes(); ++node)
    for (TableId t = 0; t < db.tables(); ++t) {
      if (!db.has_table(t)) continue;
      store::Table* tab = db.store(node).table(t);
      for (uint32_t i = 0; i < tab->capacity(); ++i) {
        const std::byte* tuple = tab->tuple(i);
        uint64_t state, lock;
        std::memcpy(&state, tuple + tab->layout().state_offset(), 8);
        std::memcpy(&lock, tuple, 8);
        n += store::is_live(state) && lock != 0;
      }
    }
  return n;
}

Result<history::History> merged_history(const RunResult& r) {
  history::History h;
  for (const history::Recorder& rec : r.histories) RDTX_TRY(rec.append_to(h));
  RDTX_TRY(h.check_complete());
  return h;
}

Result<RunResult> run(const RunConfig& rc) {
  if (rc.protocol == nullptr || rc.workload == nullptr) return make_error(EINVAL, "run: no protocol or workload");
  if (rc.cluster.nodes > kMaxNodes || rc.cluster.nodes > kMaxNodesTs)
    return make_error(EINVAL, "cluster.nodes = %u exceeds %u", rc.cluster.nodes, kMaxNodesTs);
  if (rc.cluster.workers_per_node > kMaxWorkersPerNode)
    return make_error(EINVAL, "cluster.workers_per_node = %u exceeds %u", rc.cluster.workers_per_node,
                      kMaxWorkersPerNode);

  // The scratch each worker needs depends on the tables: size the cluster
  // from a probe of the table layouts.
  cluster::ClusterConfig cc = rc.cluster;
  auto tables = rc.workload->tables(cc.nodes);
  uint32_t max_tuple = 0;
  for (const auto& t : tables) {
    store::TupleLayout l{rc.protocol->meta_bytes + (rc.options.record_history ? 8u : 0u), t.record_bytes};
    max_tuple = std::max(max_tuple, l.tuple_bytes());
  }
  uint32_t slot = (std::max<uint32_t>(max_tuple + 8, store::kBucketBytes) + 63) & ~63u;
  cc.scratch_bytes = (static_cast<size_t>(slot) + 128) * Txn::kMaxAccesses * rc.options.coroutines;
  cc.max_outstanding = std::max<uint32_t>(cc.max_outstanding, 4 * Txn::kMaxAccesses * rc.options.coroutines);
  auto cl = cluster::Cluster::create_embedded(cc);
  if (!cl.ok()) return cl.error();
  cluster::Cluster& c = **cl;

  // Lock words are CASed by the fetch/lock stage and released by the commit
  // stage. A NIC whose atomics are not atomic with respect to CPU atomics
  // (verbs: IBV_ATOMIC_HCA) must not see both touch one word: then both
  // stages must use the same side.
  if (!c.node(0).device->caps().atomics_coherent_with_cpu) {
    const bool occ_like = rc.protocol->allowed[static_cast<int>(Stage::kLock)].size() > 0;
    const Stage acquire = occ_like ? Stage::kLock : Stage::kFetch;
    auto side = [](Primitive p) { return p == Primitive::kRpc ? 1 : 0; };
    if (side(rc.options.stage(acquire)) != side(rc.options.stage(Stage::kCommit)))
      return make_error(EINVAL,
                        "device %s: remote atomics are not coherent with CPU atomics, so txn.pipeline.%s (%s) and "
                        "txn.pipeline.commit (%s) must both be rpc or both one-sided",
                        c.node(0).device->caps().name.c_str(), to_string(acquire),
                        to_string(rc.options.stage(acquire)), to_string(rc.options.stage(Stage::kCommit)));
  }

  auto db = Database::create(c, tables, rc.protocol->meta_bytes, rc.options.record_history);
  if (!db.ok()) return db.error();
  for (uint32_t n = 0; n < c.nodes(); ++n) RDTX_TRY(rc.workload->load(**db, n));

  std::vector<std::unique_ptr<WorkerEngine>> engines;
  const uint64_t epoch = env::tsc();
  for (uint32_t id = 0; id < c.workers(); ++id) {
    engines.push_back(std::make_unique<WorkerEngine>(c.worker(id), **db, rc.options, *rc.protocol, *rc.workload));
    engines.back()->set_workers_per_node(cc.workers_per_node);
    engines.back()->set_epoch(epoch);
  }
  history::RecorderOptions ho;
  ho.run_id = rc.run_id != 0 ? rc.run_id : (epoch | 1);
  ho.cluster_nodes = static_cast<uint16_t>(cc.nodes);
  ho.node_workers = static_cast<uint16_t>(cc.workers_per_node);
  for (uint32_t id = 0; id < c.workers(); ++id) RDTX_TRY(engines[id]->start(rc.seed * 7919 + id, ho));

  // Warm-up, then the measured window: the engines count from the moment
  // measuring is switched on, which a poller of each worker does itself.
  const uint64_t t0 = env::tsc();
  const uint64_t measure_at = t0 + env::ns_to_tsc(static_cast<uint64_t>(rc.warmup_s * 1e9));
  const uint64_t end = measure_at + env::ns_to_tsc(static_cast<uint64_t>(rc.duration_s * 1e9));
  for (auto& e : engines) {
    WorkerEngine* eng = e.get();
    eng->ctx().worker->add_poller([eng, measure_at, end] {
      if (!eng->measuring() && env::tsc() >= measure_at && env::tsc() < end) eng->set_measuring(true);
      if (eng->measuring() && env::tsc() >= end) eng->set_measuring(false);
      return 0;
    });
  }
  RunResult res;
  if (rc.single_thread) {
    while (env::tsc() < end && !runtime::shutdown_requested()) c.poll_all();
    for (uint32_t id = 0; id < c.workers(); ++id) c.worker(id).worker->request_stop();
    uint64_t drain_end = env::tsc() + env::ns_to_tsc(2'000'000'000);
    auto live = [&] {
      size_t n = 0;
      for (uint32_t id = 0; id < c.workers(); ++id) n += c.worker(id).worker->live_tasks();
      return n;
    };
    while (live() > 0 && env::tsc() < drain_end) c.poll_all();
  } else {
    auto rs = c.run(end, rc.idle);
    if (!rs.ok()) return rs.error();
    res.loops = rs->loops;
  }
  // Passive acknowledgements and releases still in flight land now.
  for (int i = 0; i < 1000; ++i) c.poll_all();
  // Interrupted during warm-up: nothing was measured.
  const uint64_t now = env::tsc();
  res.seconds = now <= measure_at ? 0 : std::min(rc.duration_s, env::tsc_to_ns(now - measure_at) / 1e9);
  for (auto& e : engines) {
    const WorkerStats& s = e->stats();
    res.per_worker.push_back(s);
    res.total.commits += s.commits;
    res.total.attempts += s.attempts;
    for (int r = 0; r < static_cast<int>(AbortReason::kCount_); ++r) res.total.aborts[r] += s.aborts[r];
    if (res.total.commits_by_type.size() < s.commits_by_type.size())
      res.total.commits_by_type.resize(s.commits_by_type.size());
    for (size_t k = 0; k < s.commits_by_type.size(); ++k) res.total.commits_by_type[k] += s.commits_by_type[k];
    res.total.latency_tsc.merge(s.latency_tsc);
    res.total.round_trips += s.round_trips;
    res.total.committed_delta += s.committed_delta;
    res.total.commit_errors += s.commit_errors;
    if (store::LocationCache* cache = e->cache()) {
      res.cache.hits += cache->stats().hits;
      res.cache.misses += cache->stats().misses;
      res.cache.stale += cache->stats().stale;
    }
    res.rpc_malformed += e->ctx().rpc->stats().malformed_total();
    res.rpc_timeouts += e->ctx().rpc->stats().timeouts;
    if (history::Recorder* h = e->recorder()) res.histories.push_back(std::move(*h));
  }
  res.locks_left = count_locked(**db);
  res.invariants = rc.workload->check(**db, res.total.committed_delta);
  // Coroutines (which refer to the engines) go before the engines.
  for (uint32_t id = 0; id < c.workers(); ++id) c.worker(id).worker.reset();
  engines.clear();
  return res;
}

}  // namespace rdtx::txn
