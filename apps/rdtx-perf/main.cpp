// rdtx-perf: per-verb throughput and latency of an RDMA driver.
#include <getopt.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "env/eal.hpp"
#include "env/tsc.hpp"
#include "rdma/driver.hpp"
#include "rdtx-perf/perf.hpp"
#include "runtime/shutdown.hpp"
#include "version.h"

using namespace rdtx;
using namespace rdtx::perf;

namespace {

constexpr const char* kUsage = R"(usage: rdtx-perf [EAL options] -- [options]

Measures RDMA verbs on an embedded two-node cluster in this process: node 0
posts, node 1 is the target (one-sided) or the echo server (SEND/RECV). Each
combination of the list options below is one measured point.

Options (LIST = comma-separated values):
  --device DEVARGS     driver and its key=value arguments (default: shm),
                       e.g. shm,latency_ns=2000,bw_gbps=100
  --verb LIST          read, write, cas, faa, echo, rpc, or all (default:
                       read). echo is an RPC-style SEND + reply SEND on raw UD
                       QPs; rpc is a call to a trivial handler through lib/rpc;
                       both count round trips. Not in all: oracle and
                       oracle-faa, NAM-DB's timestamp vector oracle (a READ of
                       the vector, then a WRITE of the context's slot, or the
                       compressed vector's FAA), counting timestamp
                       transactions; every coroutine (--outstanding) of every
                       worker is a context; --size is ignored (the size column
                       is the vector's bytes), --batch must be 1
  --size LIST          payload bytes, 8..4096 (default: 64); atomics are 8
  --batch LIST         work requests per doorbell, 1..256 (default: 1); only
                       the last of a batch is signaled
  --outstanding LIST   batches in flight per worker, 1..256 (default: 1)
  --workers LIST       workers (initiator QPs, or echo client/server pairs),
                       dealt round-robin over the EAL lcores (default: 1)
  --duration S         measured seconds per point (default: 1)
  --warmup S           seconds before measuring each point (default: 0.2)
  --no-inline          never post WRITE/SEND payloads inline
  --oracle-fetch       oracle verbs: a fetch coroutine per worker READs the
                       vector continuously and the contexts use its latest
                       copy as their read timestamp (NAM-DB's dedicated fetch
                       thread): one round trip per timestamp transaction
  --idle POLICY        auto, spin, yield or sleep (default: auto: spin when
                       every lcore has a CPU of its own, else yield)
  --json FILE          also write the results as one JSON object
  --drivers            list the built drivers and their devargs, then exit
  -h, --help           this text

Without '--', every argument is an option of rdtx-perf and the EAL runs with
its defaults (-l 0 --no-huge --no-pci --no-shconf -m 512).

Output: one row per point: ops/s (verbs, or round trips for echo), Gbit/s of
payload, latency percentiles of a doorbell batch (post to completion seen),
the share of time the lcores were busy, and error completions. The exit
status is 1 if any point saw an error completion or completed no operation
at all (every datagram dropped, say), or standard output could not be
written; 2 for a bad command line, bad --device devargs included (checked
before the EAL starts).

Examples:
  rdtx-perf -l 0 --no-huge --no-pci -- --verb read --size 64 --batch 32 --outstanding 4
  rdtx-perf -- --verb echo --batch 1,8,32 --outstanding 8
  rdtx-perf -- --device shm,latency_ns=2000 --verb read --duration 2
  rdtx-perf -l 0-1 --no-huge --no-pci -- --device shm,nic=edr,nic_mops=4 --verb read --workers 1,2,4,8 --batch 8 --outstanding 8
)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "rdtx-perf: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  if (out.empty() || s.back() == ',') usage_error("empty item in list '" + s + "'");
  return out;
}

uint64_t parse_uint(const char* opt, const std::string& v, uint64_t lo, uint64_t hi) {
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || v[0] == '-' || errno != 0 || *end != '\0')
    usage_error(std::string(opt) + ": '" + v + "' is not a whole number");
  if (x < lo || x > hi)
    usage_error(std::string(opt) + ": " + v + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}

double parse_seconds(const char* opt, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x)) usage_error(std::string(opt) + ": '" + v + "' is not a number");
  if (x < lo || x > hi) usage_error(std::string(opt) + ": " + v + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}

std::vector<uint32_t> parse_list(const char* opt, const std::string& v, uint64_t lo, uint64_t hi) {
  std::vector<uint32_t> out;
  for (const auto& s : split(v)) out.push_back(static_cast<uint32_t>(parse_uint(opt, s, lo, hi)));
  return out;
}

bool wants_help(const std::vector<std::string>& app) {
  for (size_t i = 1; i < app.size(); ++i)
    if (app[i] == "-h" || app[i] == "--help") return true;
  return false;
}

Params parse_args(std::vector<std::string> args, bool& list_drivers) {
  Params p;
  enum { kDevice = 1, kVerb, kSize, kBatch, kOutstanding, kWorkers, kDuration, kWarmup, kNoInline, kOracleFetch, kIdle, kJson, kDrivers };
  static const option opts[] = {
      {"device", required_argument, nullptr, kDevice},
      {"verb", required_argument, nullptr, kVerb},
      {"size", required_argument, nullptr, kSize},
      {"batch", required_argument, nullptr, kBatch},
      {"outstanding", required_argument, nullptr, kOutstanding},
      {"workers", required_argument, nullptr, kWorkers},
      {"duration", required_argument, nullptr, kDuration},
      {"warmup", required_argument, nullptr, kWarmup},
      {"no-inline", no_argument, nullptr, kNoInline},
      {"oracle-fetch", no_argument, nullptr, kOracleFetch},
      {"idle", required_argument, nullptr, kIdle},
      {"json", required_argument, nullptr, kJson},
      {"drivers", no_argument, nullptr, kDrivers},
      {nullptr, 0, nullptr, 0},
  };
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  opterr = 0;
  optind = 1;
  int c;
  while ((c = getopt_long(static_cast<int>(args.size()), argv.data(), ":", opts, nullptr)) != -1) {
    std::string v = optarg ? optarg : "";
    switch (c) {
      case kDevice: p.devargs = v; break;
      case kVerb: {
        p.verbs.clear();
        for (const auto& s : split(v)) {
          if (s == "all")
            p.verbs.insert(p.verbs.end(), {Verb::kRead, Verb::kWrite, Verb::kCas, Verb::kFaa, Verb::kEcho, Verb::kRpc});
          else if (s == "read") p.verbs.push_back(Verb::kRead);
          else if (s == "write") p.verbs.push_back(Verb::kWrite);
          else if (s == "cas") p.verbs.push_back(Verb::kCas);
          else if (s == "faa") p.verbs.push_back(Verb::kFaa);
          else if (s == "echo" || s == "send") p.verbs.push_back(Verb::kEcho);
          else if (s == "rpc") p.verbs.push_back(Verb::kRpc);
          else if (s == "oracle") p.verbs.push_back(Verb::kOracle);
          else if (s == "oracle-faa") p.verbs.push_back(Verb::kOracleFaa);
          else usage_error("--verb: '" + s + "' is not one of read, write, cas, faa, echo, rpc, all, oracle, oracle-faa");
        }
        break;
      }
      case kSize: p.sizes = parse_list("--size", v, 8, 4096); break;
      case kBatch: p.batches = parse_list("--batch", v, 1, 256); break;
      case kOutstanding: p.outstanding = parse_list("--outstanding", v, 1, 256); break;
      case kWorkers: p.worker_counts = parse_list("--workers", v, 1, 256); break;
      case kDuration: p.duration_s = parse_seconds("--duration", v, 0.01, 3600); break;
      case kWarmup: p.warmup_s = parse_seconds("--warmup", v, 0, 600); break;
      case kNoInline: p.use_inline = false; break;
      case kOracleFetch: p.oracle_fetch = true; break;
      case kIdle: {
        auto r = runtime::parse_idle_policy(v);
        if (!r.ok()) usage_error("--idle: " + r.error().message);
        p.idle = *r;
        break;
      }
      case kJson: p.json_path = v; break;
      case kDrivers: list_drivers = true; break;
      case ':': usage_error(std::string(argv[optind - 1]) + " needs a value");
      default: usage_error("unknown option '" + std::string(argv[optind - 1]) + "'");
    }
  }
  if (optind < static_cast<int>(args.size())) usage_error("unexpected argument '" + args[optind] + "'");
  for (Verb v : p.verbs)
    if (v == Verb::kOracle || v == Verb::kOracleFaa)
      for (uint32_t b : p.batches)
        if (b != 1)
          usage_error("--batch " + std::to_string(b) + ": --verb " + to_string(v) +
                      " is one READ, then one WRITE or FAA per timestamp transaction (batch 1)");
  return p;
}

double us(uint64_t ticks) { return env::tsc_to_ns(ticks) / 1000.0; }

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

void print_row(const Point& pt) {
  std::printf("%-6s %6u %6u %6u %7u %10.3f %9.2f %9.2f %9.2f %9.2f %6.0f%% %6llu\n", to_string(pt.verb), pt.size,
              pt.batch, pt.outstanding, pt.workers, pt.mops(), pt.gbps(), us(pt.latency_tsc.percentile(0.5)),
              us(pt.latency_tsc.percentile(0.99)), us(pt.latency_tsc.percentile(0.999)), pt.busy_share * 100,
              static_cast<unsigned long long>(pt.errors));
  std::fflush(stdout);
}

toml::table point_json(const Point& pt) {
  return toml::table{
      {"verb", to_string(pt.verb)},
      {"size", pt.size},
      {"batch", pt.batch},
      {"outstanding", pt.outstanding},
      {"workers", pt.workers},
      {"ops", static_cast<int64_t>(pt.ops)},
      {"seconds", pt.seconds},
      {"mops", pt.mops()},
      {"gbps", pt.gbps()},
      {"latency_us", toml::table{{"p50", us(pt.latency_tsc.percentile(0.5))},
                                 {"p90", us(pt.latency_tsc.percentile(0.9))},
                                 {"p99", us(pt.latency_tsc.percentile(0.99))},
                                 {"p999", us(pt.latency_tsc.percentile(0.999))},
                                 {"mean", us(static_cast<uint64_t>(pt.latency_tsc.mean()))},
                                 {"max", us(pt.latency_tsc.max())}}},
      {"busy_share", pt.busy_share},
      {"errors", static_cast<int64_t>(pt.errors)},
  };
}

}  // namespace

int main(int argc, char** argv) {
  env::CommandLine cl = env::split_command_line(argc, argv);
  if (wants_help(cl.app)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  bool list_drivers = false;
  Params p = parse_args(cl.app, list_drivers);
  if (list_drivers) {
    for (const rdma::Driver* d : rdma::drivers()) std::printf("%-6s %s\n", d->name, d->help);
    return 0;
  }
  // The devargs (unknown keys, bad values) before the EAL starts: a bad
  // command line is exit 2.
  if (auto dev = rdma::open_device(p.devargs); !dev.ok()) usage_error("--device " + dev.error().message);
  if (auto r = env::eal_init(cl); !r.ok()) {
    std::fprintf(stderr, "rdtx-perf: %s\n", r.error().message.c_str());
    return 1;
  }
  runtime::install_signal_handlers();

  int rc = 0;
  {
    auto cluster = open_cluster(p.devargs);
    if (!cluster.ok()) {
      std::fprintf(stderr, "rdtx-perf: %s\n", cluster.error().message.c_str());
      env::eal_cleanup();
      return 1;
    }
    const auto& caps = cluster->node[0]->caps();
    std::printf("rdtx-perf %s: device %s (%s), latency %llu ns, %s, %u lcore(s), %.2f s per point\n",
                RDTX_GIT_REVISION, caps.name.c_str(), p.devargs.c_str(),
                static_cast<unsigned long long>(caps.latency_ns),
                caps.bw_gbps > 0 ? (std::to_string(caps.bw_gbps) + " Gbit/s").c_str() : "unlimited bandwidth",
                env::lcore_count(), p.duration_s);
    std::printf("%-6s %6s %6s %6s %7s %10s %9s %9s %9s %9s %7s %6s\n", "verb", "size", "batch", "outst", "workers",
                "Mops/s", "Gbit/s", "p50(us)", "p99(us)", "p999(us)", "busy", "errors");
    toml::array points;
    for (Verb v : p.verbs)
      for (uint32_t size : p.sizes) {
        // The oracle's size is its vector's: one point per other value.
        if ((v == Verb::kOracle || v == Verb::kOracleFaa) && size != p.sizes.front()) break;
        for (uint32_t batch : p.batches)
          for (uint32_t out : p.outstanding)
            for (uint32_t workers : p.worker_counts) {
              if (runtime::shutdown_requested()) break;
              p.workers = workers;
              auto pt = run_point(*cluster, p, v, size, batch, out);
              if (!pt.ok()) {
                std::fprintf(stderr, "rdtx-perf: %s %uB batch %u outstanding %u: %s\n", to_string(v), size, batch, out,
                             pt.error().message.c_str());
                rc = 1;
                continue;
              }
              print_row(*pt);
              if (pt->errors > 0) rc = 1;
              // Nothing completed (every datagram dropped, say): the point
              // measured nothing, which is a failure, not 0 Mops/s.
              if (pt->ops == 0 && !runtime::shutdown_requested()) {
                std::fprintf(stderr, "rdtx-perf: %s %uB batch %u outstanding %u: no operation completed in %.2f s\n",
                             to_string(v), size, batch, out, p.duration_s);
                rc = 1;
              }
              points.push_back(point_json(*pt));
            }
      }
    if (!p.json_path.empty()) {
      toml::table doc{
          {"tool", "rdtx-perf"},
          {"git_revision", RDTX_GIT_REVISION},
          {"machine", toml::table{{"cpu", cpu_model()}, {"cores", static_cast<int64_t>(env::available_cores())},
                                  {"lcores", static_cast<int64_t>(env::lcore_count())}}},
          {"device", toml::table{{"devargs", p.devargs}, {"driver", caps.driver}, {"name", caps.name},
                                 {"latency_ns", static_cast<int64_t>(caps.latency_ns)}, {"bw_gbps", caps.bw_gbps},
                                 {"atomics_coherent_with_cpu", caps.atomics_coherent_with_cpu}}},
          {"params", toml::table{{"duration_s", p.duration_s}, {"warmup_s", p.warmup_s},
                                 {"inline", p.use_inline}, {"oracle_fetch", p.oracle_fetch},
                                 {"idle", runtime::to_string(p.idle)}}},
          {"points", std::move(points)},
      };
      std::ofstream out(p.json_path);
      out << toml::json_formatter{doc} << "\n";
      if (!out) {
        std::fprintf(stderr, "rdtx-perf: cannot write %s\n", p.json_path.c_str());
        rc = 1;
      }
    }
  }
  env::eal_cleanup();
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "rdtx-perf: cannot write to standard output\n");
    rc = 1;
  }
  return rc;
}
