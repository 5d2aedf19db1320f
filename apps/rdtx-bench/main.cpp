// rdtx-bench: runs a transaction workload on an embedded cluster with one
// protocol and pipeline, all chosen from TOML and --set overrides, and
// reports throughput, aborts, latency, round trips and the run's checks.
#include <getopt.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "txn/protocol.hpp"
#include "cluster/bootstrap.hpp"
#include "membership/launcher.hpp"
#include "drivers/rdma/shm/shm.hpp"
#include "env/eal.hpp"
#include "rdma/driver.hpp"
#include "rdtx-bench/bench_config.hpp"
#include "rdtx-bench/report.hpp"
#include "rdtx-bench/resources.hpp"
#include "rdtx-bench/zk_registration.hpp"
#include "runtime/shutdown.hpp"
#include "run/runner.hpp"
#include "txn/workload.hpp"
#include "version.h"

using namespace rdtx;
using namespace rdtx::bench;

namespace {

constexpr const char* kUsage = R"(usage: rdtx-bench [EAL options] -- [options]

Runs a transaction workload on an embedded cluster in this process (every
node on the shm software RNIC by default), or one node of a multi-process
cluster (cluster.mode = "process", --node N; doc/deployment.md), with the protocol and per-stage
primitives the configuration names, then prints throughput, aborts by
reason, latency percentiles, round trips per committed transaction, commits
per transaction type, location cache and lcore use, and the run's checks
(workload invariants, locks left, RPC errors, commit errors, and with
history recording the serializability of the recorded history). The exit
status is 1 if any check failed.

Options:
  --config FILE        TOML configuration (presets in conf/); without it the
                       defaults run: smallbank, occ, 2 nodes x 1 worker, shm
  --set KEY=VALUE      override one key, e.g. --set txn.coroutines=4
                       (repeatable; applied in order after the file)
  --duration S         same as --set run.duration_s=S
  --warmup S           same as --set run.warmup_s=S
  --seed N             same as --set run.seed=N
  --json FILE          also write the report as one JSON object to FILE: a
                       regular file (left only if the run reports), or a
                       pipe, FIFO or device that takes it now (a FIFO that
                       no process reads is refused; checked before the run,
                       exit 2)
  --csv FILE           also append the run as one CSV row to FILE (a header
                       first if the file is new or empty; for sweeps). FILE
                       must be a regular file or a new one in an existing
                       directory (checked before the run, exit 2)
  --no-progress        no progress line (same as --set run.progress_s=0);
                       the line goes to stderr every run.progress_s seconds
  --no-steady-state    report the steady-state check without failing on it
                       (correctness runs too short to be a measurement)
  --node N             cluster.mode = "process": run node N of cluster.hosts in
                       this process (start one process per node, same config);
                       under mpirun or srun the launcher's rank is the node id
                       and --node is not needed (doc/deployment.md)
  --history DIR        record the history, write it to DIR (one file per
                       worker, for rdtx-check) and check it after the run;
                       same as --set history.record=true --set history.dir=DIR
  --print-config       print the resolved configuration (TOML) and exit: a
                       config file that loads back to the same run (keys
                       that do not apply to it, e.g. a stage the protocol
                       has not, are comments)
  -q, --quiet          do not print the resolved configuration before the run
  --keys               print every configuration key (type, default, range,
                       description) and exit
  --list               list the workloads, protocols (stages, primitives and
                       isolation levels) and RDMA drivers, then exit
  --list-workloads     print the registered workloads for scripts, one a
                       line: the name, then the KEY=VALUE settings (for
                       --set) of a small, heavily contended instance, the
                       one the tests run; then exit
  --list-workloads=stress
                       the same, only the workloads the stress suites run
  --cleanup            remove what runs killed outright (kill -9) left on
                       this host: the shm driver's /dev/shm files of nodes
                       whose process is gone, and the EAL runtime
                       directories (rdtx-<pid>) of processes that are gone;
                       then exit. Live runs' files are never touched
  -h, --help           this text

Without EAL options (no '--', or nothing before it) the EAL runs with
-l 0 --no-huge --no-pci --no-shconf -m 512. Workers are dealt
round-robin over the EAL lcores (-l), so a many-node cluster runs on one.

Virtual time (--set run.virtual_time=true, one lcore): every worker runs on
the main lcore as if it had a CPU of its own, the one with the smallest
virtual clock next, each pass costing its measured CPU time (or, with
run.virtual_cost = model, a modelled cost: deterministic for a seed); the
shm driver's latency and RNIC models, the duration, throughput and latency
are in virtual time, and the report says so (doc/runtime.md).

Before the run, the configuration must fit this host: the tables, buffers,
queues, caches and history buffers it allocates are compared with the
available memory (MemAvailable or the cgroup limit), /dev/shm (shm driver)
and the device's queue depths; --history DIR must be writable; a
--file-prefix must be a plain name. Otherwise rdtx-bench exits 2 naming the
keys and sizes. The checks after the run include passive request timeouts
and failures (a lost passive COMMIT fails the run) and a steady state (a
measured window of ten median latencies at least, a warm-up of two: else
lengthen run.duration_s or run.warmup_s). run.idle = auto yields
when this host's node processes outnumber its CPUs; the report names the
idle policy that ran.

Exit status: 0 all checks passed, 1 a check failed or the run could not be
carried out (a report that could not be written to standard output, e.g. a
full disk, included), 2 bad command line or configuration (or one that does
not fit).

SIGINT or SIGTERM ends rdtx-bench within about a second: while loading, with
"stopped by SIGTERM during loading" (exit 1); while running, with the report
of the part that ran, marked interrupted; the checks after a run (the
invariants, a history) may go on for 0.3 s after the signal, then one still
going reads NOT CHECKED (exit 1). A second signal exits at once (128+signal).

Examples:
  rdtx-bench -- --config conf/default.toml
  rdtx-bench -l 0 --no-huge --no-pci -- --config conf/smallbank/occ-onesided.toml --duration 3
  rdtx-bench -- --config conf/smallbank/nowait-rpc.toml --set cluster.devargs=shm,latency_ns=2000
  rdtx-bench -- --config conf/emulations/smallbank/fasst.toml --set txn.coroutines=16 --json fasst.json
  rdtx-bench -l 0 --no-huge --no-pci -- --config conf/smallbank/occ-onesided.toml --set run.virtual_time=true \
      --set cluster.nodes=8 --set cluster.workers_per_node=10 --set cluster.devargs=shm,nic=edr,latency_ns=1000
                       (8 nodes x 10 workers in virtual time on one core)
  rdtx-bench -- --config conf/tpcc/occ-onesided.toml --set cluster.nodes=4 --set cluster.memory_nodes=2
                       (NAM-DB's split layout: nodes 0-1 hold the data and
                       run no coordinator, nodes 2-3 run the coordinators)
)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "rdtx-bench: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

struct Args {
  std::string launch_run_id;  // started by a launcher: its run id (rendezvous())
  std::string config_file;
  std::vector<std::string> overrides;  // --set and the shortcuts, in order
  std::string json_path;
  std::string csv_path;
  int node = -1;  // --node
  bool print_config = false;
  bool quiet = false;
  bool keys = false;
  bool list = false;
  bool list_workloads = false;
  bool list_stress_only = false;  // --list-workloads=stress
  bool cleanup = false;           // --cleanup
  bool steady_state_required = true;  // --no-steady-state: reported, not failing
};

bool wants_help(const std::vector<std::string>& app) {
  for (size_t i = 1; i < app.size(); ++i)
    if (app[i] == "-h" || app[i] == "--help") return true;
  return false;
}

Args parse_args(std::vector<std::string> args) {
  Args a;
  enum { kConfig = 1, kSet, kDuration, kWarmup, kSeed, kJson, kCsv, kNoProgress, kHistory, kNode, kPrintConfig, kKeys, kList,
         kListWorkloads, kNoSteadyState, kCleanup };
  static const option opts[] = {
      {"config", required_argument, nullptr, kConfig},
      {"set", required_argument, nullptr, kSet},
      {"duration", required_argument, nullptr, kDuration},
      {"warmup", required_argument, nullptr, kWarmup},
      {"seed", required_argument, nullptr, kSeed},
      {"json", required_argument, nullptr, kJson},
      {"history", required_argument, nullptr, kHistory},
      {"csv", required_argument, nullptr, kCsv},
      {"node", required_argument, nullptr, kNode},
      {"no-progress", no_argument, nullptr, kNoProgress},
      {"no-steady-state", no_argument, nullptr, kNoSteadyState},
      {"print-config", no_argument, nullptr, kPrintConfig},
      {"quiet", no_argument, nullptr, 'q'},
      {"keys", no_argument, nullptr, kKeys},
      {"list", no_argument, nullptr, kList},
      {"list-workloads", optional_argument, nullptr, kListWorkloads},
      {"cleanup", no_argument, nullptr, kCleanup},
      {nullptr, 0, nullptr, 0},
  };
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  opterr = 0;
  optind = 1;
  int c;
  while ((c = getopt_long(static_cast<int>(args.size()), argv.data(), ":q", opts, nullptr)) != -1) {
    std::string v = optarg ? optarg : "";
    switch (c) {
      case kConfig:
        if (!a.config_file.empty()) usage_error("--config given twice");
        if (v.empty()) usage_error("--config needs a file name");
        a.config_file = v;
        break;
      case kSet:
        a.overrides.push_back(v);
        break;
      case kDuration:
        a.overrides.push_back("run.duration_s=" + v);
        break;
      case kWarmup:
        a.overrides.push_back("run.warmup_s=" + v);
        break;
      case kSeed:
        a.overrides.push_back("run.seed=" + v);
        break;
      case kJson:
        if (v.empty()) usage_error("--json needs a file name");
        a.json_path = v;
        break;
      case kCsv:
        if (v.empty()) usage_error("--csv needs a file name");
        a.csv_path = v;
        break;
      case kNode: {
        char* end = nullptr;
        const long n = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || n < 0 || n >= static_cast<long>(txn::kMaxNodes))
          usage_error("--node needs a node id 0.." + std::to_string(txn::kMaxNodes - 1) + ", not '" + v + "'");
        a.node = static_cast<int>(n);
        break;
      }
      case kNoProgress:
        a.overrides.push_back("run.progress_s=0");
        break;
      case kNoSteadyState:
        a.steady_state_required = false;
        break;
      case kHistory:
        if (v.empty()) usage_error("--history needs a directory");
        a.overrides.push_back("history.record=true");
        a.overrides.push_back("history.dir=" + v);
        break;
      case kPrintConfig:
        a.print_config = true;
        break;
      case 'q':
        a.quiet = true;
        break;
      case kKeys:
        a.keys = true;
        break;
      case kCleanup:
        a.cleanup = true;
        break;
      case kList:
        a.list = true;
        break;
      case kListWorkloads:
        if (!v.empty() && v != "stress") usage_error("--list-workloads=" + v + ": the only value is 'stress'");
        a.list_workloads = true;
        a.list_stress_only = v == "stress";
        break;
      case ':':
        usage_error(std::string(argv[optind - 1]) + " needs a value");
      default:
        usage_error("unknown option '" + std::string(argv[optind - 1]) + "'");
    }
  }
  if (optind < static_cast<int>(args.size())) usage_error("unexpected argument '" + args[optind] + "'");
  return a;
}

void print_workloads() {
  for (const txn::WorkloadDef* w : txn::workloads()) std::printf("  %-10s %s\n", w->name, w->summary);
}

// --help: the usage, then what `workload` can name (the registry).
void print_usage() {
  std::fputs(kUsage, stdout);
  std::printf("\nWorkloads (workload = NAME):\n");
  print_workloads();
}

// --list-workloads: for scripts (test/cluster/stress_multiprocess.py, which
// asks for `stress_only`: WorkloadDef::stress_suites).
void print_workloads_machine(bool stress_only) {
  for (const txn::WorkloadDef* w : txn::workloads()) {
    if (stress_only && !w->stress_suites) continue;
    std::printf("%s", w->name);
    for (const char* kv : w->contended) std::printf(" %s", kv);
    std::printf("\n");
  }
}

void print_list() {
  std::printf("workloads (workload = ...):\n");
  print_workloads();
  std::printf("protocols (txn.protocol = ...), with the primitives of each stage (txn.pipeline.*):\n");
  for (const txn::ProtocolDef* p : txn::protocols()) {
    if (p->broken) continue;
    std::printf("  %-10s %s\n", p->name, p->summary);
    for (int s = 0; s < static_cast<int>(txn::Stage::kCount_); ++s) {
      if (p->allowed[s].empty()) continue;
      std::string prims;
      for (txn::Primitive x : p->allowed[s]) prims += (prims.empty() ? "" : ", ") + std::string(txn::to_string(x));
      std::printf("             %-9s %s\n", txn::to_string(static_cast<txn::Stage>(s)), prims.c_str());
    }
    // The log stage is the engine's (doc/replication.md), for every protocol
    // that replicates through it.
    if (p->replicable && p->allowed[static_cast<int>(txn::Stage::kLog)].empty())
      std::printf("             %-9s onesided, rpc (the engine's, with cluster.replicas > 1)\n", txn::to_string(txn::Stage::kLog));
    // The levels txn.isolation may ask of it.
    std::string levels = txn::to_string(p->isolation);
    for (txn::Isolation l : p->weaker_levels) levels += std::string(", ") + txn::to_string(l);
    std::printf("             %-9s %s (txn.isolation)\n", "isolation", levels.c_str());
    // Real-time order on top (ProtocolDef::strict): the certified level.
    if (p->strict)
      std::printf("             %-9s %s runs are certified strict serializable (real-time order)\n", "", 
                  txn::to_string(p->isolation));
  }
  std::printf("RDMA drivers (cluster.devargs = \"driver[,key=value...]\"):\n");
  for (const rdma::Driver* d : rdma::drivers()) std::printf("  %-10s %s\n", d->name, d->help);
}

// The device the configuration names, opened once to check the devargs
// (unknown keys, bad values) before anything is loaded, and for its caps.
Result<rdma::DeviceCaps> probe_device(const config::Config& cfg) {
  const std::string& devargs = cfg.get_string("cluster.devargs");
  auto dev = rdma::open_device(devargs);
  if (!dev.ok()) {
    // The driver's message may quote the devargs again: once is enough, and
    // an oversized value is shortened.
    const std::string brief = shortened(devargs);
    std::string why = dev.error().message;
    // (The driver may have cut its copy short: match a prefix, up to the
    // closing quote.)
    const std::string head = devargs.substr(0, 32);
    for (size_t at = why.find(head); !head.empty() && at != std::string::npos; at = why.find(head, at + 3)) {
      const size_t end = why.find('\'', at);
      why.replace(at, (end == std::string::npos ? why.size() : end) - at, "...");
    }
    if (why.size() > 512) why = shortened(why, 512);
    return make_error(dev.error().code, "cluster.devargs = '%s' (%s): %s", brief.c_str(),
                      cfg.origin("cluster.devargs").c_str(), why.c_str());
  }
  return (*dev)->caps();
}

// A report that could not be written is lost: standard output full (a
// disk, /dev/full) or closed is an error, not a silent success. Says so
// and returns 1 if anything written to stdout so far failed, else `rc`.
int stdout_status(int rc) {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return rc;
  const int err = errno != 0 ? errno : EIO;
  std::fprintf(stderr, "rdtx-bench: cannot write to standard output: %s\n", std::strerror(err));
  return 1;
}

bool process_mode(const config::Config& cfg) { return cfg.get_string("cluster.mode") == "process"; }

// CPUs this process may run on, read before the EAL pins the main thread.
unsigned affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return static_cast<unsigned>(CPU_COUNT(&set));
}

// Everything between EAL init and cleanup, so that every object is gone
// before the EAL is.
int run_bench(const Args& args, const config::Config& cfg, Plan& plan, const rdma::DeviceCaps& device,
              JsonOutput& json) {
  // A run that ends without a report leaves no JSON file (not an empty one).
  struct DiscardUnlessWritten {
    JsonOutput& out;
    ~DiscardUnlessWritten() { out.discard(); }
  } json_file{json};
  const rdma::DeviceCaps* caps = &device;
  // Virtual time and the lcores the EAL was given.
  if (auto r = run::check_virtual_time(plan.run); !r.ok()) {
    std::fprintf(stderr, "rdtx-bench: %s\n", r.error().message.c_str());
    return 2;
  }
  // Everything the run will allocate on this host, before allocating it
  // (after removing what runs killed outright left in /dev/shm).
  {
    if (caps->driver == "shm") rdma::shm::reclaim_dead_nodes();
    const uint32_t here = plan.run.host_share.other_processes + 1;
    const Footprint fp = footprint(plan.run, *caps, process_mode(cfg) ? here : plan.run.cluster.nodes);
    if (auto r = check_resources(cfg, plan.run, *caps, fp, host_limits()); !r.ok()) {
      std::fprintf(stderr, "rdtx-bench: %s\n", r.error().message.c_str());
      return 2;
    }
  }
  // One process per node: join the others, agree on the configuration.
  std::unique_ptr<cluster::Bootstrap> boot;
  if (cfg.get_string("cluster.mode") == "process") {
    cluster::BootstrapOptions bo;
    bo.self = static_cast<uint32_t>(args.node);
    bo.nodes = *parse_hosts(cfg.get_string("cluster.hosts"));  // checked with the configuration
    bo.connect_timeout_ms = static_cast<uint64_t>(cfg.get_float("cluster.connect_timeout_s") * 1000);
    bo.op_timeout_ms = std::max<uint64_t>(bo.connect_timeout_ms / 3, 1000);
    // With cluster.coordinator the leases judge a lost peer (doc/membership.md).
    bo.lost_peer_fatal = cfg.get_string("cluster.coordinator").empty();
    std::fprintf(stderr, "rdtx-bench: node %d of %zu, waiting for the others at %s\n", args.node, bo.nodes.size(),
                 cfg.get_string("cluster.hosts").c_str());
    auto b = cluster::Bootstrap::connect(bo);
    if (!b.ok()) {
      std::fprintf(stderr, "rdtx-bench: %s\n", b.error().message.c_str());
      return 1;
    }
    boot = std::move(*b);
    // Devargs may differ per machine (device names, GID index); the driver may not.
    auto flat = cfg.flat();
    const std::string& devargs = cfg.get_string("cluster.devargs");
    for (auto& [key, value] : flat)
      if (key == "cluster.devargs") value = "driver " + devargs.substr(0, devargs.find(','));
    if (auto r = boot->agree(flat); !r.ok()) {
      std::fprintf(stderr, "rdtx-bench: %s\n", r.error().message.c_str());
      return 2;
    }
    plan.run.bootstrap = boot.get();
    if (cfg.get_int("fault.kill_node") == static_cast<int64_t>(boot->self()))
    {
      plan.run.crash_at_s = cfg.get_float("fault.kill_at_s");
      const std::string point = cfg.get_string("fault.kill_point");
      plan.run.crash_point = point == "log"      ? txn::fault::KillPoint::kLog
                             : point == "commit" ? txn::fault::KillPoint::kCommit
                                                 : txn::fault::KillPoint::kNone;
    }
  }
  plan.run.broken_recovery = cfg.get_bool("fault.broken_recovery");
  // cluster.coordinator: configuration 1 and the members in ZooKeeper
  // (doc/membership.md); destroyed before `boot`: node 0 removes them.
  std::unique_ptr<ZkRegistration> zk;
  if (boot && !cfg.get_string("cluster.coordinator").empty()) {
    auto z = ZkRegistration::join(cfg, plan.run, *boot, args.launch_run_id);
    if (!z.ok()) {
      std::fprintf(stderr, "rdtx-bench: %s\n", z.error().message.c_str());
      return 1;
    }
    zk = std::move(*z);
    std::fprintf(stderr, "rdtx-bench: %s\n", zk->summary().c_str());
    plan.run.membership = zk.get();
  }
  std::printf("rdtx-bench %s\n", RDTX_GIT_REVISION);
  if (!args.quiet) std::printf("# resolved configuration\n%s\n", cfg.to_toml().c_str());
  print_header(stdout, cfg, plan.run, *caps);
  // Before the run: a report that cannot be written is not worth a run.
  if (stdout_status(0) != 0) return 1;

  auto result = run::run(plan.run);
  if (!result.ok()) {
    std::fprintf(stderr, "rdtx-bench: %s\n", result.error().message.c_str());
    return 1;
  }
  // Cut short by a lost peer: said as an error would be, then this node's
  // own figures up to then (the check `cluster` fails the run).
  if (!result->cut_short.empty())
    std::fprintf(stderr, "rdtx-bench: %s (this node's figures follow)\n", result->cut_short.c_str());
  Report rep;
  rep.cfg = &cfg;
  rep.run = &plan.run;
  rep.result = &*result;
  rep.device = *caps;
  rep.type_names = plan.workload->type_names();
  rep.interrupted = runtime::shutdown_requested();
  if (zk) rep.leases = zk->lease_figures();
  HistoryResult hist = handle_history(cfg, *result, boot.get());
  rep.history = &hist;
  rep.checks = run_checks(*result, rep.interrupted, &hist, plan.run.warmup_s);
  if (!args.steady_state_required)
    for (Check& c : rep.checks)
      if (c.key == std::string("steady_state") && !c.ok) {
        c.ok = true;
        c.message += " (not required: --no-steady-state)";
      }
  print_report(stdout, rep);
  int rc = rep.passed() ? 0 : 1;
  if (!args.csv_path.empty()) {
    if (auto w = append_csv(args.csv_path, rep); !w.ok()) {
      std::fprintf(stderr, "rdtx-bench: %s\n", w.error().message.c_str());
      rc = 1;
    }
  }
  if (json.is_open()) {
    if (auto w = json.write_and_close(report_json(rep)); !w.ok()) {
      std::fprintf(stderr, "rdtx-bench: %s\n", w.error().message.c_str());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  env::CommandLine cl = env::split_command_line(argc, argv);
  if (wants_help(cl.app)) {
    print_usage();
    return stdout_status(0);
  }
  Args args = parse_args(cl.app);
  config::Schema schema = make_schema();
  if (args.keys) {
    std::fputs(schema.describe().c_str(), stdout);
    return stdout_status(0);
  }
  if (args.list) {
    print_list();
    return stdout_status(0);
  }
  if (args.list_workloads) {
    print_workloads_machine(args.list_stress_only);
    return stdout_status(0);
  }
  if (args.cleanup) {
    // What runs killed outright left: their nodes' /dev/shm files and their
    // EAL runtime directories (only of processes that are gone).
    rdma::shm::reclaim_dead_nodes();
    const std::vector<std::string> dirs = env::remove_dead_runtime_dirs();
    for (const std::string& d : dirs) std::printf("removed %s\n", d.c_str());
    std::printf("rdtx-bench --cleanup: the shm files of dead nodes reclaimed, %zu EAL runtime director%s of dead "
                "runs removed\n", dirs.size(), dirs.size() == 1 ? "y" : "ies");
    return stdout_status(0);
  }
  auto cfg = config::Config::load(schema, args.config_file, args.overrides);
  if (!cfg.ok()) {
    std::fprintf(stderr, "rdtx-bench: %s\n", cfg.error().message.c_str());
    return 2;
  }
  if (args.print_config) {
    std::fputs(cfg->to_config_file(schema).c_str(), stdout);
    return stdout_status(0);
  }
  const bool process = cfg->get_string("cluster.mode") == "process";
  // Started by mpirun or srun without cluster.hosts: the node id and the
  // endpoints come from the launcher and ZooKeeper (doc/deployment.md).
  if (process && cfg->get_string("cluster.hosts").empty()) {
    auto l = rendezvous(*cfg, args.node);
    if (!l.ok()) {
      std::fprintf(stderr, "rdtx-bench: %s\n", l.error().message.c_str());
      return 2;
    }
    std::vector<std::string> overrides = args.overrides;
    overrides.insert(overrides.end(), l->overrides.begin(), l->overrides.end());
    cfg = config::Config::load(schema, args.config_file, overrides);
    if (!cfg.ok()) {
      std::fprintf(stderr, "rdtx-bench: %s\n", cfg.error().message.c_str());
      return 2;
    }
    args.node = l->node;
    args.launch_run_id = l->run_id;
    std::fprintf(stderr, "rdtx-bench: %s\n", l->summary.c_str());
  }
  // Under a launcher with cluster.hosts given: its rank is the node id.
  if (process && args.node < 0) {
    auto l = membership::detect_launch(txn::kMaxNodes);
    if (!l.ok()) {
      std::fprintf(stderr, "rdtx-bench: %s\n", l.error().message.c_str());
      return 2;
    }
    if (l->has_value()) {
      if ((*l)->size != cfg->get_int("cluster.nodes")) {
        std::fprintf(stderr, "rdtx-bench: cluster.nodes = %lld (%s), but %s started %u processes: one process per node\n",
                     static_cast<long long>(cfg->get_int("cluster.nodes")), cfg->origin("cluster.nodes").c_str(),
                     (*l)->launcher.c_str(), (*l)->size);
        return 2;
      }
      args.node = static_cast<int>((*l)->rank);
    }
  }
  if (process && args.node < 0) usage_error("cluster.mode = \"process\" needs --node N (this process's node)");
  if (!process && args.node >= 0) usage_error("--node needs cluster.mode = \"process\"");
  if (process && args.node >= cfg->get_int("cluster.nodes"))
    usage_error("--node " + std::to_string(args.node) + " is not below cluster.nodes = " +
                std::to_string(cfg->get_int("cluster.nodes")));
  auto plan = plan_from(*cfg);
  if (!plan.ok()) {
    std::fprintf(stderr, "rdtx-bench: %s\n", plan.error().message.c_str());
    return 2;
  }
  if (auto r = check_history_dir(*cfg); !r.ok()) {
    std::fprintf(stderr, "rdtx-bench: %s\n", r.error().message.c_str());
    return 2;
  }
  if (auto r = check_file_prefix(cl.eal); !r.ok()) usage_error(r.error().message);
  if (!args.csv_path.empty())
    if (auto r = check_csv_path(args.csv_path); !r.ok()) {
      std::fprintf(stderr, "rdtx-bench: %s\n", r.error().message.c_str());
      return 2;
    }
  // The device (its devargs) and what the run asks of it and of the
  // protocol, before the EAL starts and anything is loaded.
  auto caps = probe_device(*cfg);
  if (!caps.ok()) {
    std::fprintf(stderr, "rdtx-bench: %s\n", caps.error().message.c_str());
    return 2;
  }
  if (auto r = check_plan(*cfg, *plan, *caps, args.node); !r.ok()) {
    std::fprintf(stderr, "rdtx-bench: %s\n", r.error().message.c_str());
    return 2;
  }
  // idle = auto counts the other node processes on this host against the
  // CPUs this process may use (read before the EAL pins the main thread).
  plan->run.host_share.host_cpus = affinity_cpus();
  if (process) {
    auto hosts = parse_hosts(cfg->get_string("cluster.hosts"));  // checked with the configuration
    if (hosts.ok())
      plan->run.host_share.other_processes = nodes_on_host_of(*hosts, static_cast<uint32_t>(args.node)) - 1;
  }
  // The --json file, last of the checks before the EAL: opening creates or
  // truncates it.
  JsonOutput json;
  if (!args.json_path.empty())
    if (auto r = JsonOutput::open(args.json_path, json); !r.ok()) {
      std::fprintf(stderr, "rdtx-bench: %s\n", r.error().message.c_str());
      return 2;
    }
  if (auto r = env::eal_init(cl); !r.ok()) {
    json.discard();
    std::fprintf(stderr, "rdtx-bench: %s\n", r.error().message.c_str());
    return 1;
  }
  runtime::install_signal_handlers();
  int rc = stdout_status(run_bench(args, *cfg, *plan, *caps, json));
  env::eal_cleanup();
  return rc;
}
