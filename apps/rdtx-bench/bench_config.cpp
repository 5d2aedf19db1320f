#include "rdtx-bench/bench_config.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "env/virtual_clock.hpp"
#include "history/format.hpp"
#include "membership/coordinator.hpp"
#include "rdma/driver.hpp"
#include "rpc/endpoint.hpp"
#include "rpc/wire.hpp"
#include "runtime/loop.hpp"
#include "txn/database.hpp"
#include "txn/item_batch.hpp"
#include "txn/options.hpp"
#include "txn/protocol.hpp"
#include "txn/types.hpp"

namespace rdtx::bench {

namespace {

// The cluster section: where the nodes run and how they are connected.
void add_cluster_schema(config::Schema& s) {
  s.add_enum("cluster.mode", "inproc", {"inproc", "process"},
             "where the nodes run: inproc = every node in this process; process = one process per node "
             "(rdtx-bench --node N, addresses in cluster.hosts)");
  s.add_string("cluster.hosts", "",
               "process mode: the nodes' bootstrap addresses, host:port for node 0, 1, ... separated by commas; empty "
               "under mpirun or srun with cluster.coordinator: published in ZooKeeper by the nodes themselves");
  s.add_string("cluster.coordinator", "",
               "process mode: keep the cluster's configuration and members in ZooKeeper at "
               "zk://host:port[,host:port]/path, with leases between its CM and every member (doc/membership.md); "
               "empty: none");
  s.add_check([](const config::Config& c) -> std::string { return check_coordinator(c); });
  s.add_string("cluster.host", "",
               "process mode under mpirun or srun without cluster.hosts: the address this node's bootstrap listens on "
               "and publishes in ZooKeeper (on a free port); empty: this machine's host name");
  s.add_float("cluster.lease_ms", 250.0, 1.0, 60'000,
              "with cluster.coordinator: the lease the CM grants each member over the fabric; a member that cannot "
              "renew it fences itself, and the CM removes it from the configuration (doc/membership.md \"Leases\")");
  s.add_float("cluster.connect_timeout_s", 30.0, 0.1, 3'600,
              "process mode: how long to wait for every node to join (and for each exchange: a third of it)");
  s.add_int("cluster.nodes", 2, 1, txn::kMaxNodes,
            "nodes: each holds a partition and runs coordinators, or, split (cluster.memory_nodes), one or the other");
  s.add_int("cluster.workers_per_node", 1, 1, txn::kMaxWorkersPerNode,
            "workers (threads with their own QPs and coroutines) per node");
  s.add_int("cluster.memory_nodes", 0, 0, txn::kMaxNodes - 1,
            "split layout (NAM-DB's): nodes 0..memory_nodes-1 hold the partitions and run the services but no "
            "coordinator, the others run the coordinators and hold no partition; 0 = symmetric (every node both)");
  s.add_int("cluster.compute_nodes", 0, 0, txn::kMaxNodes - 1,
            "split layout: the nodes that run coordinators (cluster.nodes - cluster.memory_nodes); 0 = the nodes "
            "cluster.memory_nodes leaves; given alone, the others are memory nodes");
  s.add_check([](const config::Config& c) -> std::string { return check_roles(c); });
  s.add_int("cluster.replicas", 1, 1, txn::kMaxNodes,
            "copies of each partition: 1 = the primary alone, 3 = the papers' 3-way replication (backups on the next "
            "nodes that hold data: memory nodes in the split layout; needs txn.pipeline.log)");
  s.add_check([](const config::Config& c) -> std::string {
    const int64_t r = c.get_int("cluster.replicas");
    const uint32_t memory = memory_nodes_of(c);
    if (memory != 0 && r > memory)
      return "cluster.replicas = " + std::to_string(r) + " (" + c.origin("cluster.replicas") + ") exceeds the " +
             std::to_string(memory) +
             " memory node(s) (cluster.memory_nodes, cluster.compute_nodes): backups live on memory nodes only";
    if (r > c.get_int("cluster.nodes"))
      return "cluster.replicas = " + std::to_string(r) + " (" + c.origin("cluster.replicas") +
             ") exceeds cluster.nodes = " + std::to_string(c.get_int("cluster.nodes"));
    const bool logging = c.get_string("txn.pipeline.log") != "off";
    if (r > 1 && !logging)
      return "cluster.replicas = " + std::to_string(r) + " (" + c.origin("cluster.replicas") +
             ") needs the log stage: set txn.pipeline.log = \"onesided\" or \"rpc\"";
    if (r == 1 && logging)
      return "txn.pipeline.log = '" + c.get_string("txn.pipeline.log") + "' (" + c.origin("txn.pipeline.log") +
             ") needs backups: set cluster.replicas > 1";
    return "";
  });
  s.add_bool("cluster.context_per_worker", true,
             "each worker opens its own device context (verbs: ibv_context and protection domain; tables are "
             "registered in every worker's); false: the workers of a node share one");
  s.add_int("cluster.qps_per_node", 1, 1, 64,
            "RC QPs each worker keeps to each node, used round-robin by its coroutines; more than 1 emulates the "
            "QP count of a larger cluster (RNIC QP-cache pressure)");
  s.add_string("cluster.devargs", "shm", "RDMA device: driver[,key=value...], e.g. shm,latency_ns=2000");
  s.add_check([](const config::Config& c) -> std::string {
    const bool process = c.get_string("cluster.mode") == "process";
    const std::string& hosts = c.get_string("cluster.hosts");
    if (!process) return hosts.empty() ? "" : "cluster.hosts (" + c.origin("cluster.hosts") + ") needs cluster.mode = \"process\"";
    // Empty with a coordinator: the endpoints rendezvous in ZooKeeper under
    // a launcher (doc/deployment.md "Starting under mpirun or srun"); the
    // run fills the list in and checks it then.
    if (hosts.empty() && !c.get_string("cluster.coordinator").empty()) return "";
    if (hosts.empty())
      return "cluster.hosts is empty: list host:port for every node, or start the nodes with mpirun or srun and set "
             "cluster.coordinator, through which they rendezvous (doc/deployment.md)";
    auto parsed = parse_hosts(hosts);
    if (!parsed.ok()) return "cluster.hosts = '" + hosts + "' (" + c.origin("cluster.hosts") + "): " + parsed.error().message;
    if (parsed->size() != static_cast<size_t>(c.get_int("cluster.nodes")))
      return "cluster.hosts (" + c.origin("cluster.hosts") + ") lists " + std::to_string(parsed->size()) +
             " node(s), cluster.nodes = " + std::to_string(c.get_int("cluster.nodes"));
    if (c.get_bool("run.single_thread")) return "run.single_thread does not apply to cluster.mode = \"process\"";
    if (c.get_bool("history.record") && c.get_string("history.dir").empty())
      return "history.record with cluster.mode = \"process\" needs history.dir (a directory every node writes and "
             "node 0 reads)";
    return "";
  });
  s.add_check([](const config::Config& c) -> std::string {
    const std::string& devargs = c.get_string("cluster.devargs");
    const std::string driver = devargs.substr(0, devargs.find(','));
    std::string names;
    for (const rdma::Driver* d : rdma::drivers()) {
      if (driver == d->name) return "";
      names += (names.empty() ? "" : ", ") + std::string(d->name);
    }
    return "cluster.devargs = '" + shortened(devargs) + "' (" + c.origin("cluster.devargs") + "): no driver named '" +
           shortened(driver) + "' (built: " + names + ")";
  });
}

// The rpc section: lib/rpc's endpoints (every worker has one).
void add_rpc_schema(config::Schema& s) {
  s.add_int("rpc.credits", rpc::EndpointConfig{}.credits, 1, rpc::kMaxCredits,
            "session credits: RPC datagrams a worker may have outstanding to one peer worker; each endpoint posts "
            "2 x credits x (cluster.nodes x cluster.workers_per_node) + 16 receive buffers");
  s.add_float("rpc.timeout_ms", static_cast<double>(rpc::EndpointConfig{}.timeout_ns) / 1e6, 0.1, 60'000,
              "the floor of an RPC call's timeout: each worker's timeout to a peer adapts to the round trips it "
              "measures (smoothed round trip + 4 x its variation, as TCP's), never below this");
  s.add_float("rpc.max_timeout_ms", static_cast<double>(rpc::EndpointConfig{}.max_timeout_ns) / 1e6, 0.1, 600'000,
              "the ceiling of an RPC call's timeout: the adaptive timeout, doubled after each call to a silent peer "
              "that timed out, never above this (at least rpc.timeout_ms)");
}

void add_run_schema(config::Schema& s) {
  s.add_float("run.duration_s", 5.0, 0.01, 86'400, "measured seconds");
  s.add_float("run.warmup_s", 1.0, 0.0, 3'600, "seconds run before measuring");
  s.add_int("run.seed", 1, 0, INT64_MAX, "seed of the transaction generators (one stream per worker)");
  s.add_enum("run.idle", "auto", {"auto", "spin", "yield", "sleep"},
             "idle policy of the lcore loops (auto: spin if every lcore has a CPU, counting the other node processes on this "
             "host, else yield)");
  s.add_float("run.progress_s", 1.0, 0.0, 3'600,
              "print a progress line to stderr every this many seconds (0: none)");
  s.add_bool("run.single_thread", false, "run every worker on the main thread, in a fixed order (deterministic)");
  // Virtual time (doc/runtime.md "Virtual time"); the runner refuses what it
  // cannot run (run::check_virtual_time), these the keys alone decide.
  const env::CostModel model;
  s.add_bool("run.virtual_time", false,
             "virtual time: every worker on the main lcore, each on a virtual clock as if on a CPU of its own, the "
             "smallest clock runs next; network completions, duration, throughput and latency in virtual time "
             "(shm driver, cluster.mode = \"inproc\", one lcore)");
  s.add_enum("run.virtual_cost", "measured", {"measured", "model"},
             "virtual time: what a worker pass costs: measured = its CPU time (time off the CPU left out; at most "
             "run.virtual_max_pass_us); model = run.virtual_pass_ns + run.virtual_work_ns per completion or message "
             "+ run.virtual_resume_ns per coroutine resumed (deterministic for a seed)");
  // Floors: a pass's virtual cost is at least run.virtual_pass_ns (model)
  // or min(its CPU time, run.virtual_max_pass_us) (measured), while it takes
  // 1-6 us of wall time here; at 1 ns a pass a 0.5 s run took hours. At the
  // floors a virtual second costs about three wall minutes here.
  s.add_int("run.virtual_pass_ns", static_cast<int64_t>(model.pass_ns), kMinVirtualPassNs, 1'000'000,
            "virtual_cost = model: ns every worker pass costs");
  s.add_int("run.virtual_work_ns", static_cast<int64_t>(model.work_ns), 0, 1'000'000,
            "virtual_cost = model: ns per unit of poller work (a completion, an RPC message)");
  s.add_int("run.virtual_resume_ns", static_cast<int64_t>(model.resume_ns), 0, 1'000'000,
            "virtual_cost = model: ns per coroutine resumed (a transaction step)");
  s.add_float("run.virtual_max_pass_us", 200.0, kMinVirtualMaxPassUs, 1'000'000,
              "virtual_cost = measured: the most one pass counts (a stall the preemption detection missed)");
  s.add_check([](const config::Config& c) -> std::string {
    if (c.get_bool("run.virtual_time")) {
      if (c.get_string("cluster.mode") == "process")
        return "run.virtual_time (" + c.origin("run.virtual_time") +
               ") runs every node in this process on one thread: it needs cluster.mode = \"inproc\"";
      if (c.get_string("run.idle") != "auto")
        return "run.idle = '" + c.get_string("run.idle") + "' (" + c.origin("run.idle") +
               ") does not apply to run.virtual_time: it has no lcore loops to idle";
      const std::string& devargs = c.get_string("cluster.devargs");
      if (devargs.substr(0, devargs.find(',')) != "shm")
        return "run.virtual_time (" + c.origin("run.virtual_time") +
               ") needs the shm driver, whose network runs on "
               "the virtual clock: cluster.devargs = '" +
               shortened(devargs) + "' (" + c.origin("cluster.devargs") + ")";
      return "";
    }
    for (const char* k : {"run.virtual_cost", "run.virtual_pass_ns", "run.virtual_work_ns", "run.virtual_resume_ns",
                          "run.virtual_max_pass_us"})
      if (c.origin(k) != "default") return std::string(k) + " (" + c.origin(k) + ") needs run.virtual_time = true";
    return "";
  });
}

// Crash injection (doc/rdtx-bench.md "Crash injection"): a node process
// kills itself, as a machine that dies, at a time of the measured window.
void add_fault_schema(config::Schema& s) {
  s.add_int("fault.kill_node", -1, -1, txn::kMaxNodes - 1,
            "cluster.mode = \"process\": this node's process kills itself (SIGKILL: no cleanup, as a machine that "
            "dies) fault.kill_at_s into the measured window; the others report what they measured (-1: none)");
  s.add_float("fault.kill_at_s", 1.0, 0.0, 86'400, "seconds into the measured window when fault.kill_node dies");
  s.add_enum("fault.kill_point", "time", {"time", "log", "commit"},
             "where fault.kill_node dies: at fault.kill_at_s (time), or at the first attempt after it whose one-sided "
             "log stage has entries for two backup nodes (log: it WRITEs one, then dies) or whose one-sided commit "
             "stage writes back two records (commit: it writes one, then dies)");
  s.add_bool("fault.broken_recovery", false,
             "tests only: recovery of a removed node's transactions releases their committed writes without "
             "installing them (the replicas check must catch it)");
  s.add_check([](const config::Config& c) -> std::string {
    const int64_t node = c.get_int("fault.kill_node");
    if (node < 0) return "";
    const std::string named = "fault.kill_node = " + std::to_string(node) + " (" + c.origin("fault.kill_node") + ")";
    if (c.get_string("cluster.mode") != "process")
      return named + " needs cluster.mode = \"process\": in one process the kill would take every node";
    if (node >= c.get_int("cluster.nodes"))
      return named + " is not a node of the cluster (0.." + std::to_string(c.get_int("cluster.nodes") - 1) + ")";
    if (c.get_float("fault.kill_at_s") >= c.get_float("run.duration_s")) {
      char why[256];
      std::snprintf(why, sizeof why, "fault.kill_at_s = %g (%s) is not within the measured window (run.duration_s = %g)",
                    c.get_float("fault.kill_at_s"), c.origin("fault.kill_at_s").c_str(), c.get_float("run.duration_s"));
      return why;
    }
    return "";
  });
}

// What rdtx-bench does with a recorded history (history.record and the
// recorder's own keys are the engine's: txn/options.cpp).
void add_history_schema(config::Schema& s) {
  s.add_string("history.dir", "", "write the recorded history files (one per worker) to this directory (created and write-tested before the run)");
  s.add_bool("history.check", true, "check the recorded history for serializability after the run");
  s.add_check([](const config::Config& c) -> std::string {
    if (c.get_bool("history.record") || c.get_string("history.dir").empty()) return "";
    return "history.dir = '" + c.get_string("history.dir") + "' (" + c.origin("history.dir") +
           ") needs history.record = true";
  });
}

}  // namespace

std::string check_coordinator(const config::Config& c) {
  const std::string& url = c.get_string("cluster.coordinator");
  if (url.empty()) return "";
  const std::string named = "cluster.coordinator = '" + shortened(url) + "' (" + c.origin("cluster.coordinator") + ")";
  if (c.get_string("cluster.mode") != "process") return named + " needs cluster.mode = \"process\"";
  auto parsed = membership::parse_coordinator(url);
  if (!parsed.ok()) return named + ": " + parsed.error().message;
  return "";
}

uint32_t memory_nodes_of(const config::Config& c) {
  const int64_t nodes = c.get_int("cluster.nodes"), memory = c.get_int("cluster.memory_nodes"),
                compute = c.get_int("cluster.compute_nodes");
  if (memory != 0) return static_cast<uint32_t>(memory);
  if (compute != 0 && compute < nodes) return static_cast<uint32_t>(nodes - compute);
  return 0;
}

std::string check_roles(const config::Config& c) {
  const int64_t nodes = c.get_int("cluster.nodes"), memory = c.get_int("cluster.memory_nodes"),
                compute = c.get_int("cluster.compute_nodes");
  if (memory == 0 && compute == 0) return "";
  auto key = [&c](const char* k) {
    return std::string(k) + " = " + std::to_string(c.get_int(k)) + " (" + c.origin(k) + ")";
  };
  if (memory != 0 && compute != 0 && memory + compute != nodes)
    return key("cluster.memory_nodes") + " and " + key("cluster.compute_nodes") + " do not add up to " +
           key("cluster.nodes");
  if (memory >= nodes)
    return key("cluster.memory_nodes") + " leaves no compute node: it must be below " + key("cluster.nodes");
  if (compute >= nodes)
    return key("cluster.compute_nodes") + " leaves no memory node: it must be below " + key("cluster.nodes");
  const std::string& protocol = c.get_string("txn.protocol");
  if (const txn::ProtocolDef* d = txn::find_protocol(protocol); d != nullptr && d->split_refusal != nullptr)
    return "txn.protocol = \"" + protocol + "\" (" + c.origin("txn.protocol") +
           ") cannot run with compute nodes apart (" +
           (memory != 0 ? key("cluster.memory_nodes") : key("cluster.compute_nodes")) + "): " + d->split_refusal;
  return "";
}

namespace {
bool is_this_machine(const std::string& host) {
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0) return true;
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 && host == name;
}
}  // namespace

Result<std::vector<cluster::NodeAddress>> parse_hosts(const std::string& hosts) {
  std::vector<cluster::NodeAddress> out;
  if (hosts.empty()) return make_error(EINVAL, "empty: list host:port for every node");
  size_t pos = 0;
  while (pos <= hosts.size()) {
    size_t end = hosts.find(',', pos);
    if (end == std::string::npos) end = hosts.size();
    std::string item = hosts.substr(pos, end - pos);
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size())
      return make_error(EINVAL, "node %zu: '%s' is not host:port", out.size(), item.c_str());
    std::string host = item.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    char* rest = nullptr;
    const unsigned long port = std::strtoul(item.c_str() + colon + 1, &rest, 10);
    if (*rest != '\0' || port == 0 || port > 65535)
      return make_error(EINVAL, "node %zu: port '%s' is not 1..65535", out.size(), item.c_str() + colon + 1);
    // Two nodes at one address: the second could never listen there (node
    // 0 would wait for it until cluster.connect_timeout_s).
    for (const cluster::NodeAddress& a : out)
      if (a.port == port && (a.host == host || (is_this_machine(a.host) && is_this_machine(host))))
        return make_error(EINVAL, "node %zu: '%s' is node %u's address too: every node needs its own host:port",
                          out.size(), item.c_str(), a.id);
    out.push_back({static_cast<uint32_t>(out.size()), host, static_cast<uint16_t>(port)});
    pos = end + 1;
  }
  return out;
}

uint32_t nodes_on_host_of(const std::vector<cluster::NodeAddress>& hosts, uint32_t self) {
  if (self >= hosts.size()) return 1;
  const std::string& mine = hosts[self].host;
  const bool local = is_this_machine(mine);
  uint32_t n = 0;
  for (const cluster::NodeAddress& a : hosts) n += a.host == mine || (local && is_this_machine(a.host));
  return n;
}

std::string shortened(const std::string& s, size_t keep) {
  if (s.size() <= keep) return s;
  return s.substr(0, keep) + "...(" + std::to_string(s.size()) + " bytes)";
}

// history.dir must take the files after the run: created and written to
// now, so that a bad directory fails before the run, not after it.
Result<void> check_history_dir(const config::Config& cfg) {
  const std::string& dir = cfg.get_string("history.dir");
  if (dir.empty()) return {};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(EINVAL, "history.dir = '%s' (%s): cannot create it: %s", dir.c_str(),
                            cfg.origin("history.dir").c_str(), ec.message().c_str());
  const std::string probe = dir + "/.rdtx-bench-write-test." + std::to_string(getpid());
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (f == nullptr)
    return make_error(EINVAL, "history.dir = '%s' (%s): cannot write there: %s", dir.c_str(),
                      cfg.origin("history.dir").c_str(), std::strerror(errno));
  std::fclose(f);
  std::remove(probe.c_str());
  // History files of another run would be merged with this run's by
  // rdtx-check (or refused by it only afterwards): refused now.
  std::vector<std::string> old;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == history::kFileExtension) old.push_back(e.path().filename().string());
  if (!old.empty()) {
    std::sort(old.begin(), old.end());
    std::string names;
    for (size_t i = 0; i < old.size() && i < 3; ++i) names += (i ? ", " : "") + old[i];
    if (old.size() > 3) names += " and " + std::to_string(old.size() - 3) + " more";
    return make_error(EEXIST, "history.dir = '%s' (%s) holds another run's history files (%s): give an empty or new "
                      "directory", dir.c_str(), cfg.origin("history.dir").c_str(), names.c_str());
  }
  return {};
}

// --file-prefix names a file in the EAL's runtime directory: a path
// separator would make the EAL build paths outside it.
Result<void> check_file_prefix(const std::vector<std::string>& eal) {
  for (size_t i = 0; i < eal.size(); ++i) {
    std::string v;
    if (eal[i].rfind("--file-prefix=", 0) == 0)
      v = eal[i].substr(std::strlen("--file-prefix="));
    else if (eal[i] == "--file-prefix" && i + 1 < eal.size())
      v = eal[i + 1];
    else
      continue;
    if (v.empty() || v.find('/') != std::string::npos)
      return make_error(EINVAL, "--file-prefix '%s': give a plain name (no '/'); it names files under the EAL's "
                        "runtime directory", v.c_str());
  }
  return {};
}

config::Schema make_schema() {
  config::Schema s;
  // Every registered workload (workloads/ is linked whole).
  std::vector<std::string> names;
  for (const txn::WorkloadDef* w : txn::workloads()) names.push_back(w->name);
  s.add_enum("workload", "smallbank", names, "benchmark to run");
  add_cluster_schema(s);
  add_rpc_schema(s);
  add_run_schema(s);
  add_history_schema(s);
  add_fault_schema(s);
  txn::add_schema(s, txn::protocols());
  for (const txn::WorkloadDef* w : txn::workloads()) w->add_schema(s);
  return s;
}

Result<Plan> plan_from(const config::Config& cfg) {
  Plan p;
  run::RunConfig& rc = p.run;
  rc.cluster.nodes = static_cast<uint32_t>(cfg.get_int("cluster.nodes"));
  rc.cluster.workers_per_node = static_cast<uint32_t>(cfg.get_int("cluster.workers_per_node"));
  rc.cluster.replicas = static_cast<uint32_t>(cfg.get_int("cluster.replicas"));
  rc.cluster.memory_nodes = memory_nodes_of(cfg);
  rc.cluster.qps_per_node = static_cast<uint32_t>(cfg.get_int("cluster.qps_per_node"));
  rc.cluster.context_per_worker = cfg.get_bool("cluster.context_per_worker");
  rc.cluster.devargs = cfg.get_string("cluster.devargs");
  // RPC endpoints keep lib/rpc's defaults (rpc::EndpointConfig) but credits
  // and the timeout's floor and ceiling.
  rc.cluster.rpc.credits = static_cast<uint32_t>(cfg.get_int("rpc.credits"));
  rc.cluster.rpc.timeout_ns = static_cast<uint64_t>(cfg.get_float("rpc.timeout_ms") * 1e6);
  rc.cluster.rpc.max_timeout_ns = static_cast<uint64_t>(cfg.get_float("rpc.max_timeout_ms") * 1e6);
  if (rc.cluster.rpc.max_timeout_ns < rc.cluster.rpc.timeout_ns)
    return make_error(EINVAL, "rpc.max_timeout_ms = %g is below rpc.timeout_ms = %g: the ceiling of the timeout "
                      "must be at least its floor", cfg.get_float("rpc.max_timeout_ms"), cfg.get_float("rpc.timeout_ms"));
  rc.options = txn::options_from(cfg);
  rc.protocol = txn::find_protocol(rc.options.protocol);
  if (rc.protocol == nullptr)
    return make_error(EINVAL, "txn.protocol = '%s': no such protocol", rc.options.protocol.c_str());
  const std::string& wl = cfg.get_string("workload");
  const txn::WorkloadDef* def = txn::find_workload(wl);
  if (def == nullptr) return make_error(EINVAL, "workload = '%s': no such workload", wl.c_str());
  // Its partitions are the nodes that hold data (the memory nodes, split).
  auto workload = def->create(cfg, rc.cluster.data_nodes());
  if (!workload.ok())
    return make_error(workload.error().code, "workload = '%s': %s", wl.c_str(), workload.error().message.c_str());
  p.workload = std::move(*workload);
  rc.workload = p.workload.get();
  rc.duration_s = cfg.get_float("run.duration_s");
  rc.warmup_s = cfg.get_float("run.warmup_s");
  rc.seed = static_cast<uint64_t>(cfg.get_int("run.seed"));
  auto idle = runtime::parse_idle_policy(cfg.get_string("run.idle"));
  if (!idle.ok()) return idle.error();
  rc.idle = *idle;
  rc.single_thread = cfg.get_bool("run.single_thread");
  run::RunConfig::VirtualTime& vt = rc.virtual_time;
  vt.on = cfg.get_bool("run.virtual_time");
  vt.cost = cfg.get_string("run.virtual_cost") == "model" ? env::VirtualCost::kModel : env::VirtualCost::kMeasured;
  vt.model.pass_ns = static_cast<uint64_t>(cfg.get_int("run.virtual_pass_ns"));
  vt.model.work_ns = static_cast<uint64_t>(cfg.get_int("run.virtual_work_ns"));
  vt.model.resume_ns = static_cast<uint64_t>(cfg.get_int("run.virtual_resume_ns"));
  vt.max_pass_ns = static_cast<uint64_t>(cfg.get_float("run.virtual_max_pass_us") * 1000);
  rc.progress_interval_s = cfg.get_float("run.progress_s");
  return p;
}

Result<void> check_plan(const config::Config& cfg, const Plan& plan, const rdma::DeviceCaps& caps, int self) {
  const run::RunConfig& rc = plan.run;
  const cluster::ClusterConfig cc = run::sized_cluster(rc);
  const std::vector<txn::TableDef> tables = rc.workload->tables(cc.data_nodes());
  if (auto r = txn::region_bytes(*rc.protocol, rc.options, cc, tables, txn::max_declared(*rc.workload)); !r.ok())
    return make_error(EINVAL, "txn.protocol = '%s': %s", rc.protocol->name, r.error().message.c_str());
  if (auto r = txn::preflight(*rc.protocol, rc.options, cc, tables, txn::max_declared(*rc.workload), self); !r.ok())
    return make_error(r.error().code, "%s", r.error().message.c_str());
  // shm's pause_node (a node the driver stalls) must be a node of the
  // cluster: another number pauses nothing, silently.
  const std::string& devargs = cfg.get_string("cluster.devargs");
  if (devargs.rfind("shm", 0) == 0 && (devargs.size() == 3 || devargs[3] == ','))
    for (size_t at = devargs.find(",pause_node="); at != std::string::npos; at = devargs.find(",pause_node=", at + 1)) {
      const std::string v = devargs.substr(at + 12, devargs.find(',', at + 1) - at - 12);
      char* end = nullptr;
      const unsigned long n = std::strtoul(v.c_str(), &end, 0);
      if (*end == '\0' && n >= cc.nodes)
        return make_error(EINVAL, "cluster.devargs = '%s' (%s): pause_node=%s is not a node of the cluster (0..%u)",
                          shortened(devargs).c_str(), cfg.origin("cluster.devargs").c_str(), v.c_str(), cc.nodes - 1);
    }
  if (auto fit = txn::check_rpc_items_fit(*rc.protocol, rc.options, tables, cc.replicas, caps.max_msg_size);
      !fit.ok())
    return make_error(EINVAL, "%s (cluster.devargs = '%s', %s)", fit.error().message.c_str(),
                      shortened(devargs).c_str(), cfg.origin("cluster.devargs").c_str());
  return {};
}

}  // namespace rdtx::bench
