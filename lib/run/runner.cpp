#include "run/runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <ctime>
#include <mutex>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <thread>

#include "env/eal.hpp"
#include "env/telemetry.hpp"
#include "env/tsc.hpp"
#include "env/virtual_clock.hpp"
#include "run/progress.hpp"
#include "run/result_wire.hpp"
#include "run/telemetry.hpp"
#include "runtime/shutdown.hpp"
#include "runtime/virtual_loop.hpp"
#include "txn/coordinator.hpp"
#include "txn/replication.hpp"

namespace rdtx::run {

using txn::Database;
using txn::Primitive;
using txn::Stage;
using txn::Txn;
using txn::WorkerEngine;
using txn::WorkerStats;

Result<history::History> merged_history(const RunResult& r, const history::StopFn& stop) {
  history::History h;
  // Sized once: regrowing copies hundreds of MB per doubling, seconds in
  // all, and a copy cannot be stopped.
  size_t txns = 0, accesses = 0;
  for (const history::Recorder& rec : r.histories) {
    txns += rec.txn_count();
    accesses += rec.access_count();
  }
  h.reserve(txns, accesses);
  for (const history::Recorder& rec : r.histories) RDTX_TRY(rec.append_to(h, stop));
  RDTX_TRY(h.check_complete());
  return h;
}

namespace {

// Where virtual time starts: any fixed value, not 0 (0 means "no time" to
// several callers), the same in every run so that runs repeat.
constexpr uint64_t kVirtualStart = 1'000'000'000;

// Multi-process: while the run goes on, a peer that stops answering (the
// bootstrap monitor) stops this node's run too; with a membership service,
// its verdict does (and the bootstrap's failures other than a lost peer).
class PeerWatch {
 public:
  PeerWatch(cluster::Bootstrap* b, RunMembership* m) {
    if (b != nullptr)
      ticker_.emplace([b, m] {
        if (b->failed() || (m != nullptr && m->verdict().has_value())) runtime::request_shutdown();
      });
  }

 private:
  std::optional<Ticker> ticker_;
};

// RunConfig::crash_at_s: a thread that kills the process at that time of
// the measured window, unless the run ends first.
class Crash {
 public:
  Crash(double at_s, txn::fault::KillPoint point, uint64_t measure_at, uint32_t node) {
    if (at_s < 0) return;
    const uint64_t now = env::tsc();
    const auto wait = std::chrono::nanoseconds(
        (measure_at > now ? static_cast<int64_t>(env::tsc_to_ns(measure_at - now)) : 0) +
        static_cast<int64_t>(at_s * 1e9));
    thread_ = std::thread([this, wait, at_s, node, point] {
      std::unique_lock lk(mu_);
      if (cv_.wait_for(lk, wait, [this] { return cancelled_; })) return;
      const char* why = "";
      if (point != txn::fault::KillPoint::kNone) {
        // The next attempt at the point dies there; none within 5 s: now.
        txn::fault::armed.store(static_cast<uint8_t>(point), std::memory_order_relaxed);
        if (cv_.wait_for(lk, std::chrono::seconds(5), [this] { return cancelled_; })) return;
        why = " (no attempt reached fault.kill_point within 5 s)";
      }
      timespec ts{};
      clock_gettime(CLOCK_REALTIME, &ts);
      std::fprintf(stderr,
                   "rdtx-bench: fault: node %u kills itself (SIGKILL) %.3f s into the measured window%s, at "
                   "%lld.%06ld\n",
                   node, at_s, why, static_cast<long long>(ts.tv_sec), ts.tv_nsec / 1000);
      std::fflush(stderr);
      ::raise(SIGKILL);
    });
  }
  ~Crash() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lk(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool cancelled_ = false;
  std::thread thread_;
};

// A stop request (SIGINT, SIGTERM) while the cluster is built and loaded
// ends the run there, whichever step saw it (Table::create, store::load, a
// workload's own loops, CALVIN reading its recordings). In process mode a
// collective entered after a signal fails on every node, naming this one:
// the others learn of it when they reach it (at the end of their loading).
Error stopped_loading(cluster::Bootstrap* boot) {
  if (boot != nullptr) (void)boot->barrier("loaded");
  return make_error(ECANCELED, "stopped by %s during loading", runtime::shutdown_cause());
}

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

// Replication: every worker's log region (its appliers' rings), handed to
// the workers of the same index on every node (one-sided logging WRITEs
// into them). Multi-process: through the bootstrap.
Result<void> exchange_log_regions(cluster::Cluster& c, std::vector<std::unique_ptr<WorkerEngine>>& engines,
                                  cluster::Bootstrap* boot) {
  const uint32_t nodes = c.nodes(), wpn = c.config().workers_per_node;
  std::vector<txn::LogRegionDesc> mine;
  for (auto& e : engines) mine.push_back(e->log_regions().own);
  std::vector<txn::LogRegionDesc> all = mine;
  if (boot != nullptr) {
    auto got = boot->all_gather(std::as_bytes(std::span(mine)), "log regions");
    if (!got.ok()) return got.error();
    all.clear();
    for (uint32_t from = 0; from < got->size(); ++from) {
      const auto& blob = (*got)[from];
      if (blob.size() % sizeof(txn::LogRegionDesc) != 0)
        return make_error(EPROTO, "node %u sent %zu bytes of log regions, not a whole number", from, blob.size());
      for (size_t off = 0; off < blob.size(); off += sizeof(txn::LogRegionDesc)) {
        txn::LogRegionDesc d;
        std::memcpy(&d, blob.data() + off, sizeof d);
        all.push_back(d);
      }
    }
  }
  // Only nodes that hold data have rings (a compute node backs nothing up:
  // its region stays empty, and nobody logs to it).
  const uint32_t data_nodes = (*engines.front()).db().data_nodes();
  std::vector<txn::LogRegionDesc> by(size_t{nodes} * wpn);
  for (const txn::LogRegionDesc& d : all) {
    if (d.addr == 0 && d.node < nodes && d.node >= data_nodes) continue;
    if (d.node >= data_nodes || d.worker >= wpn || d.senders != nodes || d.addr == 0 ||
        d.ring_bytes != engines.front()->options().log_ring_bytes)
      return make_error(EPROTO,
                        "log region of node %u worker %u: no such worker, or %u rings of %llu bytes for %u senders of "
                        "%llu (txn.log_ring_kb must be the same on every node)",
                        d.node, d.worker, d.senders, static_cast<unsigned long long>(d.ring_bytes), nodes,
                        static_cast<unsigned long long>(engines.front()->options().log_ring_bytes));
    by[d.node * wpn + d.worker] = d;
  }
  for (uint32_t i = 0; i < data_nodes * wpn; ++i)
    if (by[i].addr == 0) return make_error(EPROTO, "no log region of node %u worker %u arrived", i / wpn, i % wpn);
  for (auto& e : engines) {
    std::vector<txn::LogRegionDesc> peers(nodes);
    for (uint32_t n = 0; n < nodes; ++n) peers[n] = by[n * wpn + e->ctx().index];
    e->log_regions().peers = std::move(peers);
  }
  return {};
}

}  // namespace

Result<void> check_virtual_time(const RunConfig& rc) {
  if (!rc.virtual_time.on) return {};
  if (rc.bootstrap != nullptr)
    return make_error(EINVAL,
                      "run.virtual_time runs every node on one thread of one process: it needs cluster.mode = "
                      "\"inproc\", not \"process\"");
  const std::string& devargs = rc.cluster.devargs;
  const std::string driver = devargs.substr(0, devargs.find(','));
  if (driver != "shm")
    return make_error(EINVAL,
                      "run.virtual_time needs the shm driver, whose latency and RNIC models run on the virtual "
                      "clock; cluster.devargs names driver '%s', whose network runs in real time",
                      driver.c_str());
  if (env::eal_initialized() && env::lcore_count() > 1)
    return make_error(EINVAL,
                      "run.virtual_time runs every worker on the main lcore, each on a virtual CPU of its own: give "
                      "one lcore (-l 0), not %u",
                      env::lcore_count());
  const env::CostModel& m = rc.virtual_time.model;
  if (rc.virtual_time.cost == env::VirtualCost::kModel && m.pass_ns == 0)
    return make_error(EINVAL, "run.virtual_pass_ns must be at least 1: an idle pass must take time");
  if (rc.virtual_time.cost == env::VirtualCost::kMeasured && rc.virtual_time.max_pass_ns == 0)
    return make_error(EINVAL, "run.virtual_max_pass_us must be above 0");
  return {};
}

Result<void> check_roles(const RunConfig& rc) {
  const cluster::ClusterConfig& cc = rc.cluster;
  if (cc.replicas > cc.data_nodes())
    return make_error(EINVAL, "cluster.replicas = %u exceeds the %u node(s) that hold data (%s)", cc.replicas,
                      cc.data_nodes(),
                      cc.split() ? "cluster.memory_nodes: backups live on memory nodes only" : "cluster.nodes");
  if (!cc.split()) return {};
  if (cc.memory_nodes >= cc.nodes)
    return make_error(EINVAL,
                      "cluster.memory_nodes = %u leaves no compute node: cluster.nodes = %u must exceed it (the "
                      "compute nodes, cluster.nodes - cluster.memory_nodes, run the coordinators)",
                      cc.memory_nodes, cc.nodes);
  if (rc.protocol != nullptr && rc.protocol->split_refusal != nullptr)
    return make_error(EINVAL, "protocol %s cannot run with cluster.memory_nodes = %u (compute nodes apart): %s",
                      rc.protocol->name, cc.memory_nodes, rc.protocol->split_refusal);
  return {};
}

cluster::ClusterConfig sized_cluster(const RunConfig& rc) {
  // The scratch each worker needs depends on the tables: size the cluster
  // from a probe of the table layouts.
  cluster::ClusterConfig cc = rc.cluster;
  uint32_t max_tuple = 0;
  for (const auto& t : rc.workload->tables(cc.data_nodes())) {
    const store::TupleLayout l =
        txn::tuple_layout(txn::tuple_shape(*rc.protocol), rc.options.record_history, t.record_bytes, cc.replicas);
    max_tuple = std::max(max_tuple, l.tuple_bytes());
  }
  cc.scratch_bytes = txn::scratch_bytes_for_tuple(max_tuple, rc.options.coroutines, rc.options.scratch_banks);
  cc.max_outstanding =
      std::max<uint32_t>(cc.max_outstanding,
                         2 * txn::OneSidedBatch::kMaxInFlightPerNode * rc.options.coroutines + txn::kServiceVerbsPerQp);
  return cc;
}

uint64_t worker_cq_depth(const cluster::ClusterConfig& cc) {
  return uint64_t{cc.max_outstanding} * cc.nodes * cc.qps_per_node + 16;
}

namespace {

// Refusals that need nothing built: what the protocol cannot run with the
// workload, the level and the cluster asked.
Result<void> check_request(const RunConfig& rc) {
  if (rc.protocol == nullptr || rc.workload == nullptr) return make_error(EINVAL, "run: no protocol or workload");
  if (rc.cluster.nodes > txn::kMaxNodes || rc.cluster.nodes > txn::kMaxNodesTs)
    return make_error(EINVAL, "cluster.nodes = %u exceeds %u", rc.cluster.nodes, txn::kMaxNodesTs);
  if (rc.cluster.workers_per_node > txn::kMaxWorkersPerNode)
    return make_error(EINVAL, "cluster.workers_per_node = %u exceeds %u", rc.cluster.workers_per_node,
                      txn::kMaxWorkersPerNode);
  RDTX_TRY(check_roles(rc));
  if (rc.protocol->needs_declared_sets) {
    const std::vector<std::string> types = rc.workload->type_names();
    for (uint16_t t = 0; t < types.size(); ++t)
      if (!rc.workload->declares(t))
        return make_error(EINVAL,
                          "protocol %s: workload '%s' does not declare the read/write set of transaction type '%s' up "
                          "front (Workload::declare), which it needs",
                          rc.protocol->name, rc.workload->name(), types[t].c_str());
  }
  // The level asked (txn.isolation), if the protocol offers it (the
  // configuration refuses one it does not; a test may set it directly).
  if (!txn::offers(*rc.protocol, rc.options.isolation))
    return make_error(EINVAL, "txn.isolation = %s: protocol '%s' runs at %s only", txn::to_string(rc.options.isolation),
                      rc.protocol->name, txn::to_string(rc.protocol->isolation));
  if (rc.workload->relocates() && !rc.protocol->relocates_rows)
    return make_error(EINVAL,
                      "protocol %s cannot relocate rows (a moved row would lose the timestamps its versions or "
                      "leases carry), which workload '%s' does with its settings",
                      rc.protocol->name, rc.workload->name());
  return check_virtual_time(rc);
}

// A step of building and loading: a failure, or a stop request that cut it
// short (stopped_loading), ends the run.
using Loading = std::function<Result<void>(Result<void>)>;

// The run's cluster: every node in this process, or this process's node of
// a multi-process run, whose id (`run_id`: the configured one in, the
// run's out; histories) and fabric (shm segments) node 0 names.
Result<std::unique_ptr<cluster::Cluster>> make_cluster(const RunConfig& rc, cluster::ClusterConfig& cc,
                                                       uint64_t& run_id) {
  cluster::Bootstrap* boot = rc.bootstrap;
  if (boot == nullptr) return cluster::Cluster::create_embedded(cc);
  uint64_t mine = run_id != 0 ? run_id : (env::tsc() ^ (uint64_t{static_cast<uint32_t>(getpid())} << 32)) | 1;
  auto ids = boot->all_gather(std::as_bytes(std::span(&mine, 1)), "run id");
  if (!ids.ok()) return ids.error();
  if ((*ids)[0].size() != 8) return make_error(EPROTO, "node 0 sent a run id of %zu bytes", (*ids)[0].size());
  std::memcpy(&run_id, (*ids)[0].data(), 8);
  char fabric[40];
  std::snprintf(fabric, sizeof fabric, "rdtx-run-%016llx", static_cast<unsigned long long>(run_id));
  cc.fabric = fabric;
  return cluster::Cluster::create_node(cc, boot->self(), [boot](std::span<const std::byte> m, std::string_view what) {
    return boot->all_gather(m, what);
  });
}

struct Loaded {
  std::unique_ptr<Database> db;
  double seconds = 0;        // loading, in real time
  uint64_t table_bytes = 0;  // of this process's nodes, loaded
};

// The database over the cluster, its descriptors exchanged (multi-process),
// and this process's nodes loaded: partitions, replicated tables, backups.
Result<Loaded> load_database(const RunConfig& rc, cluster::Cluster& c, const cluster::ClusterConfig& cc,
                             const std::vector<txn::TableDef>& tables, const Loading& loading) {
  // An RPC item of the largest tuple must fit the device's datagrams.
  RDTX_TRY(txn::check_rpc_items_fit(*rc.protocol, rc.options, tables, cc.replicas,
                                     c.workers() == 0 ? 0 : c.worker(0).device->caps().max_msg_size));
  auto region = txn::region_bytes(*rc.protocol, rc.options, rc.cluster, tables, txn::max_declared(*rc.workload));
  if (!region.ok())
    return make_error(region.error().code, "protocol %s: %s", rc.protocol->name, region.error().message.c_str());
  auto db = Database::create(c, tables, txn::tuple_shape(*rc.protocol), rc.options.record_history, *region,
                             rc.protocol->region_per_node);
  if (!db.ok()) return loading(db.error()).error();
  if (cluster::Bootstrap* boot = rc.bootstrap)
    RDTX_TRY((*db)->exchange_descriptors(
        [boot](std::span<const std::byte> m, std::string_view what) { return boot->all_gather(m, what); }));
  bool has_replicated = false;
  for (const txn::TableDef& t : tables) has_replicated |= t.replicated;
  Loaded l;
  const uint64_t t0 = env::hw_tsc();  // real time, in virtual time too
  for (uint32_t n = 0; n < c.nodes(); ++n) {
    if (!c.is_local(n)) continue;
    if (cc.holds_data(n))
      RDTX_TRY(loading(rc.workload->load((*db)->store(n), n)));
    else if (has_replicated)  // a compute node: the replicated tables alone
      RDTX_TRY(loading(rc.workload->load_replicated((*db)->store(n))));
  }
  for (const Database::BackupCopy& b : (*db)->backups()) RDTX_TRY(loading(rc.workload->load(*b.store, b.partition)));
  l.seconds = static_cast<double>(env::hw_tsc() - t0) / static_cast<double>(env::hw_tsc_hz());
  for (uint32_t n = 0; n < c.nodes(); ++n)
    if (c.is_local(n)) l.table_bytes += (*db)->store(n).memory_report().total_bytes();
  l.db = std::move(*db);
  return l;
}

// An engine per worker of this process, started (coordinators spawned,
// history recorders set up), and replication's log regions exchanged.
Result<void> start_engines(const RunConfig& rc, cluster::Cluster& c, const cluster::ClusterConfig& cc, Database& db,
                           uint64_t run_id, const Loading& loading,
                           std::vector<std::unique_ptr<WorkerEngine>>& engines) {
  const uint64_t epoch = env::tsc();
  for (uint32_t id = 0; id < c.workers(); ++id) {
    engines.push_back(std::make_unique<WorkerEngine>(c.worker(id), db, rc.options, *rc.protocol, *rc.workload));
    engines.back()->set_workers_per_node(cc.workers_per_node);
    engines.back()->set_timeline(static_cast<uint64_t>(std::ceil(rc.duration_s * 1000)));
    // (Node n's clock ahead of the last node's by (nodes - 1 - n) lags.)
    engines.back()->set_epoch(epoch - env::ns_to_tsc(rc.node_clock_lag_ns * (c.nodes() - 1 - c.worker(id).node)));
  }
  history::RecorderOptions ho;
  ho.run_id = run_id != 0 ? run_id : (epoch | 1);
  ho.cluster_nodes = static_cast<uint16_t>(cc.nodes);
  ho.node_workers = static_cast<uint16_t>(cc.workers_per_node);
  // Real time on this host's counter; in virtual time each worker reads a
  // clock of its own, and the history records no real time.
  if (!rc.virtual_time.on) ho.clock = history::host_clock();
  for (uint32_t id = 0; id < c.workers(); ++id)
    RDTX_TRY(loading(engines[id]->start(rc.seed * 7919 + c.worker(id).id, ho)));
  // How owner-side code read-modify-writes the words NICs CAS and FAA
  // (the same on every worker: one device kind, one pipeline).
  if (!engines.empty()) txn::log_owner_atomics(engines[0]->owner_atomics_mode(), c.worker(0).device->caps());
  if (cc.replicas > 1) RDTX_TRY(exchange_log_regions(c, engines, rc.bootstrap));
  return loading({});
}

// Each worker's poller that opens the measured window at measure_at and
// closes it at end, or at a stop request (measured_until: the earliest
// close, so that the seconds reported are those the coordinators ran),
// and publishes the live figures.
void add_window_pollers(std::vector<std::unique_ptr<WorkerEngine>>& engines, uint64_t measure_at, uint64_t end,
                        bool virtual_time, std::atomic<uint64_t>& measured_until) {
  // In virtual time every virtual millisecond: the progress line comes per
  // wall second, in which a slow model may run a few virtual ms.
  const uint64_t publish_every = env::ns_to_tsc(virtual_time ? 1'000'000 : 50'000'000);
  for (auto& e : engines) {
    WorkerEngine* eng = e.get();
    eng->ctx().worker->add_poller([eng, measure_at, end, publish_every, &measured_until, next = uint64_t{0}]() mutable {
      const uint64_t now = env::tsc();
      const bool stopping = runtime::shutdown_requested();
      if (!eng->measuring() && now >= measure_at && now < end && !stopping) eng->set_measuring(true);
      if (eng->measuring() && (now >= end || stopping)) {
        eng->set_measuring(false);
        uint64_t until = measured_until.load();
        while (now < until && !measured_until.compare_exchange_weak(until, now)) {
        }
      }
      if (now >= next) {  // live figures for the progress line and telemetry
        eng->publish_live();
        next = now + publish_every;
      }
      return 0;
    });
  }
}

// Virtual time's account of the run.
RunResult::VirtualTimeResult virtual_time_result(const RunConfig& rc, runtime::VirtualLoop& vloop,
                                                 env::VirtualClock& vclock, uint64_t t0, uint64_t wall_t0) {
  RunResult::VirtualTimeResult v;
  v.on = true;
  v.cost = rc.virtual_time.cost;
  v.wall_seconds = static_cast<double>(env::hw_tsc() - wall_t0) / static_cast<double>(env::hw_tsc_hz());
  v.virtual_seconds = env::tsc_to_ns(vloop.now() - t0) / 1e9;
  v.workers = vloop.stats();
  for (const runtime::LoopStats& w : v.workers) {
    v.passes += w.passes;
    v.idle_passes += w.idle_passes;
  }
  v.capped_passes = vloop.capped_passes();
  v.detects_preemption = vclock.detects_preemption();
  v.preemptions = vclock.preemptions_seen();
  v.work_units = vclock.units(env::CostUnit::kWork);
  v.resumes = vclock.units(env::CostUnit::kResume);
  v.spent_seconds = env::tsc_to_ns(vclock.spent()) / 1e9;
  return v;
}

// The figures and checks of a run whose workers have stopped: every
// worker's counters, histories and RPC figures, locks left, the devices'
// models, the replicas and the workload's invariant (exchanged between the
// nodes of a multi-process run).
Result<void> collect(const RunConfig& rc, const cluster::ClusterConfig& cc, cluster::Cluster& c, Database& db,
                     std::vector<std::unique_ptr<WorkerEngine>>& engines, RunResult& res) {
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
    // Calls through the endpoint and waits outside it (message_timers.hpp).
    res.rpc_timeouts += e->ctx().rpc->stats().timeouts;
    res.rpc_timeout_settled_ns = std::max(res.rpc_timeout_settled_ns, e->ctx().rpc->settled_timeout_ns());
    res.rpc_timeout_max_ns = std::max(res.rpc_timeout_max_ns, e->ctx().rpc->stats().timeout_max_ns);
    res.rpc_longest_reply_ns = std::max(res.rpc_longest_reply_ns, e->ctx().rpc->stats().longest_reply_ns);
    for (const txn::MessageTimers& mt : e->message_timers()) {
      res.rpc_timeouts += mt.stats().timeouts;
      res.rpc_timeout_settled_ns = std::max(res.rpc_timeout_settled_ns, mt.settled_ns());
      res.rpc_timeout_max_ns = std::max(res.rpc_timeout_max_ns, mt.stats().timeout_max_ns);
      res.rpc_longest_reply_ns = std::max(res.rpc_longest_reply_ns, mt.stats().longest_reply_ns);
    }
    res.rpc_passive_timeouts += e->ctx().rpc->stats().passive_timeouts;
    res.rpc_passive_failures += e->ctx().rpc->stats().passive_failures;
    if (history::Recorder* h = e->recorder()) {
      h->end_streaming();
      res.histories.push_back(std::move(*h));
    }
  }
  res.locks_left = txn::count_locked(db, *rc.protocol);
  for (auto& e : engines) res.locks_left += e->services_locks_left();
  for (uint32_t n = 0; n < c.nodes(); ++n)
    if (c.is_local(n)) res.table_bytes_end += db.store(n).memory_report().total_bytes();
  for (uint32_t n = 0; n < c.nodes(); ++n)
    if (c.is_local(n) && c.node(n).device != nullptr) {
      res.nic_model = res.nic_model || c.node(n).device->caps().nic_model;
      const rdma::Device::ModelUnaccounted u = c.node(n).device->model_unaccounted();
      res.nic_stale += u.stale;
      res.nic_overflow += u.overflow;
    }
  // The log entries still in the backups' rings are applied before the
  // replicas are compared.
  for (auto& e : engines) e->settle_services();
  res.replicas = cc.replicas;
  res.placement = txn::placement_text(cc.data_nodes(), cc.replicas);
  if (rc.inspect_database) rc.inspect_database(db);
  if (rc.bootstrap == nullptr) {
    res.invariants = rc.workload->check(db, res.total.committed_delta);
    res.replicas_equal = txn::compare_replicas(db, txn::replica_digests(db));
  } else if (!res.cut_short.empty()) {
    // This node's figures alone; the invariants and replicas span the
    // cluster, whose other shares are not here (verdict: not checked).
    res.node = c.first_local_node();
    res.aggregate = false;
    res.coordinates = cc.coordinates(res.node);
    for (uint32_t n = 0; n < 64 && n < c.nodes(); ++n)
      if (rc.bootstrap->excluded() >> n & 1) res.removed.push_back(n);
    res.invariants = make_error(ENOTCONN, "they span every node's partition, and a peer was lost");
    res.replicas_equal = make_error(ENOTCONN, "not compared: a peer was lost");
    return {};
  } else {
    res.node = c.first_local_node();
    RDTX_TRY(exchange_results(*rc.bootstrap, db, *rc.workload, res));
    res.coordinates = res.aggregate || cc.coordinates(res.node);
  }
  if (res.invariants.ok()) res.invariants_note = rc.workload->check_note();
  return {};
}

}  // namespace

// A run: the request checked, the cluster built and loaded, the engines
// started, the warm-up and the measured window driven (on the EAL's lcores,
// one thread, or virtual time), the drain, then the results collected.
Result<RunResult> run(const RunConfig& rc) {
  RDTX_TRY(check_request(rc));
  // What the workload's check holds the run to (in every process).
  rc.workload->set_isolation(rc.options.isolation);
  // Virtual time: this thread's clock from here until everything the run
  // built is gone (declared before the cluster: destroyed after it). The
  // devices' latency and RNIC models convert their ns at the clock's rate.
  std::optional<env::VirtualClock> vclock;
  std::optional<env::VirtualClock::Scope> vscope;
  if (rc.virtual_time.on) {
    vclock.emplace(rc.virtual_time.cost, rc.virtual_time.model, kVirtualStart, rc.virtual_time.max_pass_ns);
    vscope.emplace(&*vclock);
  }

  cluster::ClusterConfig cc = sized_cluster(rc);
  // The workload's partitions are the nodes that hold data (all, or the
  // memory nodes of the split layout).
  const auto tables = rc.workload->tables(cc.data_nodes());
  cluster::Bootstrap* boot = rc.bootstrap;
  // Loading, from here until the run starts.
  const Loading loading = [boot](Result<void> r) -> Result<void> {
    if (runtime::shutdown_requested()) return stopped_loading(boot);
    return r;
  };
  uint64_t run_id = rc.run_id;
  auto cl = make_cluster(rc, cc, run_id);
  if (!cl.ok()) return loading(cl.error()).error();
  cluster::Cluster& c = **cl;
  auto loaded = load_database(rc, c, cc, tables, loading);
  if (!loaded.ok()) return loaded.error();
  Database& db = *loaded->db;
  std::vector<std::unique_ptr<WorkerEngine>> engines;
  RDTX_TRY(start_engines(rc, c, cc, db, run_id, loading, engines));
  // Multi-process: every node loaded and listening before anyone sends;
  // from then on a node that stops answering ends the run everywhere.
  if (rc.membership != nullptr) {
    RDTX_TRY(rc.membership->attach(c));
    // A removed node's transactions, resolved on the membership's thread
    // while the workers run (txn/recovery.hpp).
    rc.membership->set_recovery([&db, &rc](uint64_t removed, const txn::RecoveryExchange& ex) -> Result<std::string> {
      auto f = txn::resolve_removed(db, *rc.protocol, removed, 1'000'000'000, ex, rc.broken_recovery);
      if (!f.ok()) return f.error();
      char line[512];
      std::snprintf(line, sizeof line,
                    "%llu transaction(s) holding locks, %llu of them committed; here %llu lock(s) released, %llu "
                    "write(s) completed, %llu backup image(s) undone (ms: %s)",
                    static_cast<unsigned long long>(f->transactions), static_cast<unsigned long long>(f->committed),
                    static_cast<unsigned long long>(f->locks_released), static_cast<unsigned long long>(f->installed),
                    static_cast<unsigned long long>(f->reverted), f->timing.c_str());
      return std::string(line);
    });
  }
  if (boot != nullptr) {
    RDTX_TRY(boot->barrier("loaded"));
    boot->start_monitor();
    if (rc.membership != nullptr) rc.membership->start();
  }
  PeerWatch watch(boot, rc.membership);

  // Warm-up, then the measured window: the engines count from the moment
  // measuring is switched on, which a poller of each worker does itself.
  const uint64_t t0 = env::tsc();
  const uint64_t measure_at = t0 + env::ns_to_tsc(static_cast<uint64_t>(rc.warmup_s * 1e9));
  const uint64_t end = measure_at + env::ns_to_tsc(static_cast<uint64_t>(rc.duration_s * 1e9));
  std::atomic<uint64_t> measured_until{end};
  add_window_pollers(engines, measure_at, end, rc.virtual_time.on, measured_until);
  Crash crash(boot != nullptr ? rc.crash_at_s : -1, rc.crash_point, measure_at, boot != nullptr ? boot->self() : 0);
  RunResult res;
  res.load_seconds = loaded->seconds;
  res.table_bytes = loaded->table_bytes;
  res.abort_reasons = txn::abort_reason_names(*rc.protocol);
  res.isolation = txn::certified_level(*rc.protocol, rc.options.isolation, !rc.virtual_time.on);
  if (!engines.empty()) res.owner_atomics = engines[0]->owner_atomics_mode();
  // In virtual time a line every run.progress_s of wall time: the virtual
  // clock may take minutes for one of its seconds.
  Progress progress(rc.progress_interval_s, engines, t0, measure_at, rc.virtual_time.on);
  // Not in virtual time: the telemetry thread has no virtual clock to read
  // the run's time from.
  std::vector<env::TelemetryCommand> telemetry;
  if (!rc.virtual_time.on) telemetry = register_run_telemetry(engines, t0, measure_at, res.abort_reasons);
  std::optional<runtime::VirtualLoop> vloop;
  const uint64_t wall_t0 = env::hw_tsc();
  // One pass of every worker: for draining and for what lands after the
  // run. In virtual time, as many steps of the virtual loop (time moves).
  auto poll_all = [&] {
    if (!vloop) return c.poll_all();
    int work = 0;
    for (size_t i = 0; i < vloop->workers(); ++i) work += vloop->step();
    return work;
  };
  auto live = [&] {
    size_t n = 0;
    for (uint32_t id = 0; id < c.workers(); ++id) n += c.worker(id).worker->live_tasks();
    return n;
  };
  auto stop_workers = [&] {
    for (uint32_t id = 0; id < c.workers(); ++id) c.worker(id).worker->request_stop();
  };
  if (rc.virtual_time.on) {
    vloop.emplace(*vclock);
    for (uint32_t id = 0; id < c.workers(); ++id) vloop->add_worker(c.worker(id).worker.get());
    vloop->run_until(end, [&] {
      progress.tick();
      return runtime::shutdown_requested();
    });
    stop_workers();
    // As Loop::run drains: 1 s (virtual) for the coordinators to return.
    vloop->run_until(vloop->now() + env::ns_to_tsc(1'000'000'000), [&] { return live() == 0; });
  } else if (rc.single_thread) {
    const uint64_t pass_tsc = env::ns_to_tsc(rc.single_thread_pass_ns);
    while (env::tsc() < end && !runtime::shutdown_requested()) {
      const uint64_t pass_t0 = env::tsc();
      c.poll_all();
      progress.tick();
      while (env::tsc() - pass_t0 < pass_tsc) {
      }
    }
    stop_workers();
    uint64_t drain_end = env::tsc() + env::ns_to_tsc(2'000'000'000);
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
    if (rc.membership != nullptr) {
      // Halted (fenced, removed, deposed): it serves nobody, no drain; the
      // membership says why.
      if (runtime::halt_requested()) {
        Error v = rc.membership->await_verdict();
        rc.membership->stop();
        return v;
      }
      if (auto v = rc.membership->verdict()) {
        rc.membership->stop();
        res.cut_short = v->message;
      }
    }
    if (res.cut_short.empty() && boot->failed()) res.cut_short = boot->failure();
  }
  if (boot != nullptr && !res.cut_short.empty()) {
    // A peer lost: this node reports what it measured (its timeline shows
    // when), without the collectives that would wait for the dead. Its
    // coordinators stop; those waiting on the lost peer get a bounded
    // drain, and what it leaves is counted (tasks left).
    stop_workers();
    const uint64_t drain_end = env::tsc() + env::ns_to_tsc(2'000'000'000);
    while (live() > 0 && env::tsc() < drain_end) c.poll_all();
  } else if (boot != nullptr) {
    // Stop this node's coordinators; keep serving the others until every
    // node's have stopped.
    stop_workers();
    const uint64_t drain_end = env::tsc() + env::ns_to_tsc(5'000'000'000);
    while (live() > 0 && env::tsc() < drain_end && !boot->failed()) c.poll_all();
    auto drained = while_polling(c, [boot] { return boot->barrier("drained"); });
    // Leases end once every node has drained: a node still draining keeps
    // its lease (and its CM its grants) until then.
    if (rc.membership != nullptr) {
      rc.membership->stop();
      if (auto v = rc.membership->verdict()) return *v;
    }
    RDTX_TRY(drained);
    boot->stop_monitor();
  }
  // Passive acknowledgements and releases still in flight land now.
  for (int i = 0; i < 1000; ++i) poll_all();
  // What the drain left running (its coroutines are abandoned with the
  // workers): the run did not end cleanly.
  res.tasks_left = live();
  // Interrupted during warm-up: nothing was measured.
  const uint64_t until = std::min(measured_until.load(), env::tsc());
  res.seconds = until <= measure_at ? 0 : std::min(rc.duration_s, env::tsc_to_ns(until - measure_at) / 1e9);
  res.tsc_hz = env::tsc_hz();
  if (vloop) res.virtual_time = virtual_time_result(rc, *vloop, *vclock, t0, wall_t0);
  RDTX_TRY(collect(rc, cc, c, db, engines, res));
  // Coroutines (which refer to the engines) go before the engines.
  for (uint32_t id = 0; id < c.workers(); ++id) c.worker(id).worker.reset();
  engines.clear();
  return res;
}

}  // namespace rdtx::run
