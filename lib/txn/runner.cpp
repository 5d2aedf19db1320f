#include "txn/runner.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include <string>

#include "env/telemetry.hpp"
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

namespace {

// The progress line: every rc.progress_interval_s, the committed and
// attempted rates since the last line, the abort rate and the p99 latency
// of the measured window so far, from what the workers publish. A thread of
// its own when the workers run on lcores; ticked by the loop otherwise.
class Progress {
 public:
  Progress(const RunConfig& rc, const std::vector<std::unique_ptr<WorkerEngine>>& engines, uint64_t t0,
           uint64_t measure_at)
      : engines_(engines), t0_(t0), measure_at_(measure_at) {
    interval_ = rc.progress_interval_s > 0 ? env::ns_to_tsc(static_cast<uint64_t>(rc.progress_interval_s * 1e9)) : 0;
    next_ = t0 + interval_;
    last_ = t0;
  }
  ~Progress() { stop_thread(); }

  void tick() {
    if (interval_ == 0) return;
    const uint64_t now = env::tsc();
    if (now < next_) return;
    next_ = now + interval_;
    print(now);
  }
  void start_thread() {
    if (interval_ == 0) return;
    thread_ = std::thread([this] {
      std::unique_lock lk(mu_);
      while (!cv_.wait_for(lk, std::chrono::milliseconds(20), [this] { return stop_; })) tick();
    });
  }
  void stop_thread() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void print(uint64_t now) {
    uint64_t commits = 0, attempts = 0;
    stats::Histogram lat;
    LiveStats l;
    for (const auto& e : engines_)
      if (e->live().read(&l)) {
        commits += l.commits;
        attempts += l.attempts;
        lat.merge(l.latency_tsc);
      }
    const double dt = env::tsc_to_ns(now - last_) / 1e9;
    const uint64_t dc = commits - last_commits_, da = attempts - last_attempts_;
    char p99[32] = "-";
    if (lat.count()) std::snprintf(p99, sizeof p99, "%.2f us", env::tsc_to_ns(lat.percentile(0.99)) / 1000.0);
    std::fprintf(stderr, "[%6.1f s] %s %12.0f committed/s %12.0f attempted/s  aborts %5.1f %%  p99 %s\n",
                 env::tsc_to_ns(now - t0_) / 1e9, now < measure_at_ ? "warm-up " : "measured",
                 dt > 0 ? static_cast<double>(dc) / dt : 0.0, dt > 0 ? static_cast<double>(da) / dt : 0.0,
                 da ? 100.0 * static_cast<double>(da - dc) / static_cast<double>(da) : 0.0, p99);
    last_ = now;
    last_commits_ = commits;
    last_attempts_ = attempts;
  }

  const std::vector<std::unique_ptr<WorkerEngine>>& engines_;
  uint64_t t0_, measure_at_, interval_ = 0, next_ = 0, last_ = 0;
  uint64_t last_commits_ = 0, last_attempts_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

// Live counters for DPDK's telemetry client while the run goes on
// (doc/telemetry.md): /rdtx/stats (the cluster) and /rdtx/workers (each
// worker), read from what the workers publish. Unbound when the run ends.
std::vector<env::TelemetryCommand> register_telemetry(const std::vector<std::unique_ptr<WorkerEngine>>& engines,
                                                      uint64_t t0, uint64_t measure_at) {
  std::vector<env::TelemetryCommand> cmds;
  if (!env::telemetry_available()) return cmds;
  auto ns = [](uint64_t tsc) { return env::tsc_to_ns(tsc); };
  auto stats = env::telemetry_register(
      "/rdtx/stats", "rdtx: committed/attempted txns, aborts by reason, latency (ns) of the measured window",
      [&engines, t0, measure_at, ns](std::string_view, env::TelemetryDict& out) {
        LiveStats sum{}, l;
        stats::Histogram lat;
        for (const auto& e : engines)
          if (e->live().read(&l)) {
            sum.commits += l.commits;
            sum.attempts += l.attempts;
            sum.measured_commits += l.measured_commits;
            for (int r = 0; r < static_cast<int>(AbortReason::kCount_); ++r) sum.aborts[r] += l.aborts[r];
            lat.merge(l.latency_tsc);
          }
        const uint64_t now = env::tsc();
        out.add_u64("running", 1);
        out.add_u64("elapsed_ms", ns(now - t0) / 1'000'000);
        out.add_u64("measuring", now >= measure_at);
        out.add_u64("workers", engines.size());
        out.add_u64("committed", sum.commits);
        out.add_u64("attempted", sum.attempts);
        out.add_u64("committed_measured", sum.measured_commits);
        out.add_dict("aborts", [&](env::TelemetryDict& d) {
          for (int r = 1; r < static_cast<int>(AbortReason::kCount_); ++r)
            d.add_u64(to_key(static_cast<AbortReason>(r)), sum.aborts[r]);
        });
        out.add_u64("latency_p50_ns", ns(lat.percentile(0.5)));
        out.add_u64("latency_p99_ns", ns(lat.percentile(0.99)));
        out.add_u64("latency_p999_ns", ns(lat.percentile(0.999)));
      });
  if (stats.ok()) cmds.push_back(std::move(*stats));
  auto workers = env::telemetry_register(
      "/rdtx/workers", "rdtx: per worker (n<node>w<index>): committed, attempted, aborted",
      [&engines](std::string_view, env::TelemetryDict& out) {
        LiveStats l;
        for (const auto& e : engines) {
          if (!e->live().read(&l)) continue;
          uint64_t aborted = 0;
          for (int r = 0; r < static_cast<int>(AbortReason::kCount_); ++r) aborted += l.aborts[r];
          out.add_dict("n" + std::to_string(e->node()) + "w" + std::to_string(e->ctx().index),
                       [&](env::TelemetryDict& d) {
                         d.add_u64("committed", l.commits);
                         d.add_u64("attempted", l.attempts);
                         d.add_u64("aborted", aborted);
                       });
        }
      });
  if (workers.ok()) cmds.push_back(std::move(*workers));
  return cmds;
}

}  // namespace

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
    const uint64_t publish_every = env::ns_to_tsc(50'000'000);
    eng->ctx().worker->add_poller([eng, measure_at, end, publish_every, next = uint64_t{0}]() mutable {
      const uint64_t now = env::tsc();
      if (!eng->measuring() && now >= measure_at && now < end) eng->set_measuring(true);
      if (eng->measuring() && now >= end) eng->set_measuring(false);
      if (now >= next) {  // live figures for the progress line and telemetry
        eng->publish_live();
        next = now + publish_every;
      }
      return 0;
    });
  }
  RunResult res;
  Progress progress(rc, engines, t0, measure_at);
  std::vector<env::TelemetryCommand> telemetry = register_telemetry(engines, t0, measure_at);
  if (rc.single_thread) {
    while (env::tsc() < end && !runtime::shutdown_requested()) {
      c.poll_all();
      progress.tick();
    }
    for (uint32_t id = 0; id < c.workers(); ++id) c.worker(id).worker->request_stop();
    uint64_t drain_end = env::tsc() + env::ns_to_tsc(2'000'000'000);
    auto live = [&] {
      size_t n = 0;
      for (uint32_t id = 0; id < c.workers(); ++id) n += c.worker(id).worker->live_tasks();
      return n;
    };
    while (live() > 0 && env::tsc() < drain_end) c.poll_all();
  } else {
    progress.start_thread();
    auto rs = c.run(end, rc.idle);
    progress.stop_thread();
    if (!rs.ok()) return rs.error();
    res.loops = rs->loops;
  }
  telemetry.clear();  // unbound before the engines go
  // Passive acknowledgements and releases still in flight land now.
  for (int i = 0; i < 1000; ++i) c.poll_all();
  // Interrupted during warm-up: nothing was measured.
  const uint64_t now = env::tsc();
  res.seconds = now <= measure_at ? 0 : std::min(rc.duration_s, env::tsc_to_ns(now - measure_at) / 1e9);
  for (auto& e : engines) {
    const WorkerStats& s = e->stats();
    res.per_worker.push_back(s);
    res.total.merge(s);
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
