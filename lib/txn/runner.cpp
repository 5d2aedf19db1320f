#include "txn/runner.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <span>
#include <type_traits>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include <string>

#include "cluster/wire_codec.hpp"
#include "env/telemetry.hpp"
#include "env/tsc.hpp"
#include "runtime/shutdown.hpp"

namespace rdtx::txn {

// txn::Isolation and history::Isolation name the same levels in the same order.
static_assert(static_cast<int>(Isolation::kSerializable) == static_cast<int>(history::Isolation::kSerializable) &&
              static_cast<int>(Isolation::kSnapshot) == static_cast<int>(history::Isolation::kSnapshot) &&
              static_cast<int>(Isolation::kReadCommitted) == static_cast<int>(history::Isolation::kReadCommitted));

history::CheckOptions check_options(Isolation i) {
  history::CheckOptions o;
  o.isolation = static_cast<history::Isolation>(i);
  return o;
}

uint64_t count_locked(Database& db, const ProtocolDef& def) {
  uint64_t n = 0;
  for (uint32_t node = 0; node < db.nodes(); ++node)
    for (TableId t = 0; t < db.tables(); ++t) {
      if (!db.has_table(t) || !db.is_local(node)) continue;
      store::Table* tab = db.store(node).table(t);
      for (uint32_t i = 0; i < tab->capacity(); ++i) {
        const std::byte* tuple = tab->tuple(i);
        uint64_t state;
        std::memcpy(&state, tuple + tab->layout().state_offset(), 8);
        n += store::is_live(state) && def.lock_held(tuple);
      }
    }
  return n;
}

Result<void> Workload::check(Database& db, int64_t committed_delta) const {
  int64_t sum = 0;
  for (uint32_t n = 0; n < db.nodes(); ++n) {
    auto part = check_node(db, n);
    if (!part.ok()) return part.error();
    sum += *part;
  }
  return check_total(sum, db.nodes(), committed_delta);
}

Result<history::History> merged_history(const RunResult& r) {
  history::History h;
  for (const history::Recorder& rec : r.histories) RDTX_TRY(rec.append_to(h));
  RDTX_TRY(h.check_complete());
  return h;
}

namespace {

// The live figures of every worker added up; `lat` gets their merged latency.
LiveStats sum_live(const std::vector<std::unique_ptr<WorkerEngine>>& engines, stats::Histogram* lat) {
  LiveStats sum{}, l;
  for (const auto& e : engines)
    if (e->live().read(&l)) {
      sum.commits += l.commits;
      sum.attempts += l.attempts;
      sum.measured_commits += l.measured_commits;
      for (int r = 0; r < kMaxAbortReasons; ++r) sum.aborts[r] += l.aborts[r];
      lat->merge(l.latency_tsc);
    }
  return sum;
}

// Calls fn every 20 ms on a thread of its own until destroyed (or stop()).
class Ticker {
 public:
  Ticker() = default;
  explicit Ticker(std::function<void()> fn)
      : thread_([this, fn = std::move(fn)] {
          std::unique_lock lk(mu_);
          while (!cv_.wait_for(lk, std::chrono::milliseconds(20), [this] { return stop_; })) fn();
        }) {}
  ~Ticker() { stop(); }
  void stop() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is constructed
};

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

  void tick() {
    if (interval_ == 0) return;
    const uint64_t now = env::tsc();
    if (now < next_) return;
    next_ = now + interval_;
    print(now);
  }
  void start_thread() {
    if (interval_ != 0) ticker_.emplace([this] { tick(); });
  }
  void stop_thread() { ticker_.reset(); }

 private:
  void print(uint64_t now) {
    stats::Histogram lat;
    const LiveStats sum = sum_live(engines_, &lat);
    const uint64_t commits = sum.commits, attempts = sum.attempts;
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
  std::optional<Ticker> ticker_;  // last: stopped before the rest goes
};

// Live counters for DPDK's telemetry client while the run goes on
// (doc/telemetry.md): /rdtx/stats (the cluster) and /rdtx/workers (each
// worker), read from what the workers publish. Unbound when the run ends.
std::vector<env::TelemetryCommand> register_telemetry(const std::vector<std::unique_ptr<WorkerEngine>>& engines,
                                                      uint64_t t0, uint64_t measure_at,
                                                      const std::vector<AbortReasonName>& names) {
  std::vector<env::TelemetryCommand> cmds;
  if (!env::telemetry_available()) return cmds;
  auto ns = [](uint64_t tsc) { return env::tsc_to_ns(tsc); };
  auto stats = env::telemetry_register(
      "/rdtx/stats", "rdtx: committed/attempted txns, aborts by reason, latency (ns) of the measured window",
      [&engines, t0, measure_at, ns, &names](std::string_view, env::TelemetryDict& out) {
        stats::Histogram lat;
        const LiveStats sum = sum_live(engines, &lat);
        const uint64_t now = env::tsc();
        out.add_u64("running", 1);
        out.add_u64("elapsed_ms", ns(now - t0) / 1'000'000);
        out.add_u64("measuring", now >= measure_at);
        out.add_u64("workers", engines.size());
        out.add_u64("committed", sum.commits);
        out.add_u64("attempted", sum.attempts);
        out.add_u64("committed_measured", sum.measured_commits);
        out.add_dict("aborts", [&](env::TelemetryDict& d) {
          for (size_t r = 1; r < names.size(); ++r) d.add_u64(names[r].key, sum.aborts[r]);
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
          for (int r = 0; r < kMaxAbortReasons; ++r) aborted += l.aborts[r];
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

// Byte encoding of what node 0 gathers from the others: the bootstrap's wire
// codec (big-endian; every length is checked when decoding).
using Writer = cluster::WireWriter;
using Reader = cluster::WireReader;

void put_stats(Writer& w, const WorkerStats& s) {
  w.put(s.commits);
  w.put(s.attempts);
  w.put(s.aborts);
  w.put_vector(s.commits_by_type);
  w.put_vector(s.attempts_by_type);
  w.put_vector(s.latency_by_type);
  w.put(s.latency_tsc);
  w.put(s.committed_delta);
  w.put(s.commit_errors);
  w.put(s.commit_retries);
  w.put(s.cancel_failures);
  w.put(s.phase_tsc);
  w.put(s.phase_sum_tsc);
  w.put(s.sampled_commits);
  w.put(s.sampled_aborts);
  w.put(s.net_committed);
  w.put(s.net_all);
}
bool get_stats(Reader& r, WorkerStats* s) {
  return r.get(&s->commits) && r.get(&s->attempts) && r.get(&s->aborts) && r.get_vector(&s->commits_by_type) &&
         r.get_vector(&s->attempts_by_type) &&
         r.get_vector(&s->latency_by_type) && r.get(&s->latency_tsc) &&
         r.get(&s->committed_delta) && r.get(&s->commit_errors) && r.get(&s->commit_retries) &&
         r.get(&s->cancel_failures) && r.get(&s->phase_tsc) &&
         r.get(&s->phase_sum_tsc) && r.get(&s->sampled_commits) && r.get(&s->sampled_aborts) &&
         r.get(&s->net_committed) && r.get(&s->net_all);
}

// Multi-process: while the run goes on, a peer that stops answering (the
// bootstrap monitor) stops this node's run too.
class PeerWatch {
 public:
  explicit PeerWatch(cluster::Bootstrap* b) {
    if (b != nullptr) ticker_.emplace([b] {
        if (b->failed()) runtime::request_shutdown();
      });
  }

 private:
  std::optional<Ticker> ticker_;
};

// Runs `op` (a bootstrap collective) on a thread of its own while this
// thread keeps polling the cluster's workers, so that peers still finishing
// get their RPCs answered and their one-sided completions delivered.
Result<void> while_polling(cluster::Cluster& c, const std::function<Result<void>()>& op) {
  std::atomic<bool> done{false};
  Result<void> r;
  std::thread t([&] {
    r = op();
    done.store(true, std::memory_order_release);
  });
  while (!done.load(std::memory_order_acquire)) c.poll_all();
  t.join();
  return r;
}

// Multi-process, after the run: every node learns the cluster's checks
// (each node's share of the invariant sum, committed deltas and locks left:
// all_gather), and node 0 gathers every worker's figures into its result.
Result<void> exchange_results(cluster::Bootstrap& boot, cluster::Cluster& c, Database& db, const Workload& wl,
                              RunResult& res) {
  const uint32_t self = boot.self();
  auto part = wl.check_node(db, self);
  Writer cw;
  cw.put<int64_t>(part.ok() ? *part : 0);
  cw.put<int64_t>(res.total.committed_delta);
  cw.put<uint64_t>(res.locks_left);
  std::string err = part.ok() ? "" : part.error().message;
  std::vector<char> err_bytes(err.begin(), err.end());
  cw.put_vector(err_bytes);
  auto checks = boot.all_gather(cw.view(), "checks");
  if (!checks.ok()) return checks.error();
  int64_t sum = 0, delta = 0;
  uint64_t locks = 0;
  std::string first_error;
  for (uint32_t n = 0; n < checks->size(); ++n) {
    Reader r((*checks)[n]);
    int64_t s = 0, d = 0;
    uint64_t l = 0;
    std::vector<char> e;
    if (!r.get(&s) || !r.get(&d) || !r.get(&l) || !r.get_vector(&e) || !r.done())
      return make_error(EPROTO, "node %u sent malformed checks", n);
    sum += s;
    delta += d;
    locks += l;
    if (!e.empty() && first_error.empty()) first_error = "node " + std::to_string(n) + ": " + std::string(e.begin(), e.end());
  }
  res.locks_left = locks;
  res.invariants = first_error.empty() ? wl.check_total(sum, c.nodes(), delta)
                                       : Result<void>(make_error(EIO, "%s", first_error.c_str()));
  // Figures: node 0 gathers the others'.
  Writer w;
  w.put<uint64_t>(res.per_worker.size());
  for (const WorkerStats& s : res.per_worker) put_stats(w, s);
  w.put(res.rpc_malformed);
  w.put(res.rpc_timeouts);
  w.put(res.rpc_passive_timeouts);
  w.put(res.rpc_passive_failures);
  w.put(res.cache);
  auto all = boot.gather(w.view(), "results");
  if (!all.ok()) return all.error();
  res.aggregate = self == 0;
  if (self != 0) return {};
  res.per_worker.clear();
  res.total = WorkerStats{};
  res.rpc_malformed = res.rpc_timeouts = res.rpc_passive_timeouts = res.rpc_passive_failures = 0;
  res.cache = {};
  for (uint32_t n = 0; n < all->size(); ++n) {
    Reader r((*all)[n]);
    uint64_t workers = 0;
    if (!r.get(&workers) || workers > 4096) return make_error(EPROTO, "node %u sent malformed results", n);
    for (uint64_t k = 0; k < workers; ++k) {
      WorkerStats s;
      if (!get_stats(r, &s)) return make_error(EPROTO, "node %u sent malformed results (worker %llu)", n,
                                               static_cast<unsigned long long>(k));
      res.total.merge(s);
      res.per_worker.push_back(std::move(s));
    }
    uint64_t malformed = 0, timeouts = 0, passive_timeouts = 0, passive_failures = 0;
    store::LocationCacheStats cache;
    if (!r.get(&malformed) || !r.get(&timeouts) || !r.get(&passive_timeouts) || !r.get(&passive_failures) ||
        !r.get(&cache) || !r.done())
      return make_error(EPROTO, "node %u sent malformed results", n);
    res.rpc_malformed += malformed;
    res.rpc_timeouts += timeouts;
    res.rpc_passive_timeouts += passive_timeouts;
    res.rpc_passive_failures += passive_failures;
    res.cache.hits += cache.hits;
    res.cache.misses += cache.misses;
    res.cache.stale += cache.stale;
  }
  return {};
}

}  // namespace

cluster::ClusterConfig sized_cluster(const RunConfig& rc) {
  // The scratch each worker needs depends on the tables: size the cluster
  // from a probe of the table layouts.
  cluster::ClusterConfig cc = rc.cluster;
  uint32_t max_tuple = 0;
  for (const auto& t : rc.workload->tables(cc.nodes)) {
    store::TupleLayout l{rc.protocol->meta_bytes + (rc.options.record_history ? 8u : 0u), t.record_bytes};
    max_tuple = std::max(max_tuple, l.tuple_bytes());
  }
  uint32_t slot = (std::max<uint32_t>(max_tuple + 8, store::kBucketBytes) + 63) & ~63u;
  cc.scratch_bytes = (static_cast<size_t>(slot) + 128) * Txn::kMaxAccesses * rc.options.coroutines;
  cc.max_outstanding = std::max<uint32_t>(cc.max_outstanding, 4 * Txn::kMaxAccesses * rc.options.coroutines);
  return cc;
}

uint64_t worker_cq_depth(const cluster::ClusterConfig& cc) {
  return uint64_t{cc.max_outstanding} * cc.nodes * cc.qps_per_node + 16;
}

Result<RunResult> run(const RunConfig& rc) {
  if (rc.protocol == nullptr || rc.workload == nullptr) return make_error(EINVAL, "run: no protocol or workload");
  if (rc.cluster.nodes > kMaxNodes || rc.cluster.nodes > kMaxNodesTs)
    return make_error(EINVAL, "cluster.nodes = %u exceeds %u", rc.cluster.nodes, kMaxNodesTs);
  if (rc.cluster.workers_per_node > kMaxWorkersPerNode)
    return make_error(EINVAL, "cluster.workers_per_node = %u exceeds %u", rc.cluster.workers_per_node,
                      kMaxWorkersPerNode);

  cluster::ClusterConfig cc = sized_cluster(rc);
  auto tables = rc.workload->tables(cc.nodes);
  cluster::Bootstrap* boot = rc.bootstrap;
  cluster::AllGather all_gather = [boot](std::span<const std::byte> mine, std::string_view what) {
    return boot->all_gather(mine, what);
  };
  uint64_t run_id = rc.run_id;
  Result<std::unique_ptr<cluster::Cluster>> cl = make_error(EINVAL, "no cluster");
  if (boot == nullptr) {
    cl = cluster::Cluster::create_embedded(cc);
  } else {
    // Node 0 names the run: its id (histories) and its fabric (shm segments).
    uint64_t mine = run_id != 0 ? run_id : (env::tsc() ^ (uint64_t{static_cast<uint32_t>(getpid())} << 32)) | 1;
    auto ids = boot->all_gather(std::as_bytes(std::span(&mine, 1)), "run id");
    if (!ids.ok()) return ids.error();
    if ((*ids)[0].size() != 8) return make_error(EPROTO, "node 0 sent a run id of %zu bytes", (*ids)[0].size());
    std::memcpy(&run_id, (*ids)[0].data(), 8);
    char fabric[40];
    std::snprintf(fabric, sizeof fabric, "rdtx-run-%016llx", static_cast<unsigned long long>(run_id));
    cc.fabric = fabric;
    cl = cluster::Cluster::create_node(cc, boot->self(), all_gather);
  }
  if (!cl.ok()) return cl.error();
  cluster::Cluster& c = **cl;
  const uint32_t local = c.first_local_node();

  // Lock words are CASed by the fetch/lock stage and released by the commit
  // stage. A NIC whose atomics are not atomic with respect to CPU atomics
  // (verbs: IBV_ATOMIC_HCA) must not see both touch one word: then both
  // stages must use the same side.
  if (!c.node(local).device->caps().atomics_coherent_with_cpu) {
    const Stage acquire = rc.protocol->acquires;
    auto side = [](Primitive p) { return p == Primitive::kRpc ? 1 : 0; };
    if (side(rc.options.stage(acquire)) != side(rc.options.stage(Stage::kCommit)))
      return make_error(EINVAL,
                        "device %s: remote atomics are not coherent with CPU atomics, so txn.pipeline.%s (%s) and "
                        "txn.pipeline.commit (%s) must both be rpc or both one-sided",
                        c.node(local).device->caps().name.c_str(), to_string(acquire),
                        to_string(rc.options.stage(acquire)), to_string(rc.options.stage(Stage::kCommit)));
  }

  auto db = Database::create(c, tables, rc.protocol->meta_bytes, rc.options.record_history);
  if (!db.ok()) return db.error();
  if (boot != nullptr) RDTX_TRY((*db)->exchange_descriptors(all_gather));
  for (uint32_t n = 0; n < c.nodes(); ++n)
    if (c.is_local(n)) RDTX_TRY(rc.workload->load(**db, n));

  std::vector<std::unique_ptr<WorkerEngine>> engines;
  const uint64_t epoch = env::tsc();
  for (uint32_t id = 0; id < c.workers(); ++id) {
    engines.push_back(std::make_unique<WorkerEngine>(c.worker(id), **db, rc.options, *rc.protocol, *rc.workload));
    engines.back()->set_workers_per_node(cc.workers_per_node);
    engines.back()->set_epoch(epoch);
  }
  history::RecorderOptions ho;
  ho.run_id = run_id != 0 ? run_id : (epoch | 1);
  ho.cluster_nodes = static_cast<uint16_t>(cc.nodes);
  ho.node_workers = static_cast<uint16_t>(cc.workers_per_node);
  for (uint32_t id = 0; id < c.workers(); ++id)
    RDTX_TRY(engines[id]->start(rc.seed * 7919 + c.worker(id).id, ho));
  // Multi-process: every node loaded and listening before anyone sends;
  // from then on a node that stops answering ends the run everywhere.
  if (boot != nullptr) {
    RDTX_TRY(boot->barrier("loaded"));
    boot->start_monitor();
  }
  PeerWatch watch(boot);

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
  res.abort_reasons = abort_reason_names(*rc.protocol);
  res.isolation = rc.protocol->isolation;
  Progress progress(rc, engines, t0, measure_at);
  std::vector<env::TelemetryCommand> telemetry = register_telemetry(engines, t0, measure_at, res.abort_reasons);
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
    auto rs = c.run(end, rc.idle, false, rc.host_share);
    progress.stop_thread();
    if (!rs.ok()) return rs.error();
    res.loops = rs->loops;
    res.idle = rs->idle;
  }
  telemetry.clear();  // unbound before the engines go
  if (boot != nullptr) {
    if (boot->failed()) return make_error(EPIPE, "%s", boot->failure().c_str());
    // Stop this node's coordinators; keep serving the others until every
    // node's have stopped.
    for (uint32_t id = 0; id < c.workers(); ++id) c.worker(id).worker->request_stop();
    const uint64_t drain_end = env::tsc() + env::ns_to_tsc(5'000'000'000);
    auto live = [&] {
      size_t n = 0;
      for (uint32_t id = 0; id < c.workers(); ++id) n += c.worker(id).worker->live_tasks();
      return n;
    };
    while (live() > 0 && env::tsc() < drain_end && !boot->failed()) c.poll_all();
    RDTX_TRY(while_polling(c, [boot] { return boot->barrier("drained"); }));
    boot->stop_monitor();
  }
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
    res.rpc_passive_timeouts += e->ctx().rpc->stats().passive_timeouts;
    res.rpc_passive_failures += e->ctx().rpc->stats().passive_failures;
    if (history::Recorder* h = e->recorder()) res.histories.push_back(std::move(*h));
  }
  res.locks_left = count_locked(**db, *rc.protocol);
  if (boot == nullptr) {
    res.invariants = rc.workload->check(**db, res.total.committed_delta);
  } else {
    res.node = local;
    RDTX_TRY(exchange_results(*boot, c, **db, *rc.workload, res));
  }
  // Coroutines (which refer to the engines) go before the engines.
  for (uint32_t id = 0; id < c.workers(); ++id) c.worker(id).worker.reset();
  engines.clear();
  return res;
}

}  // namespace rdtx::txn
