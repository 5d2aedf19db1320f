// rdtx-check: certifies a run's recorded history serializable (or snapshot
// isolated, or read committed), or prints the anomalies that show it is not.
#include <getopt.h>
#include <toml++/toml.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "history/checker.hpp"
#include "history/reader.hpp"
#include "version.h"

using namespace rdtx;
using namespace rdtx::history;

namespace {

constexpr const char* kUsage = R"(usage: rdtx-check [options] FILE|DIR...

Certifies a run from the histories its workers recorded (one .rdtxh file per
worker): loads every FILE and every *.rdtxh file in each DIR, rebuilds the
version chain of every key and the direct serialization graph (ww, wr and rw
dependencies), and checks the isolation level asked for. Files whose
protocol promises timestamp order (MVCC, SUNDIAL, TO, and CALVIN in (epoch,
timestamp): flag 4 in the header) are also checked for it: every ww and rw
dependency strictly forward in that order, every wr dependency not backward. Strict serializability
adds real-time order: a transaction whose commit its coordinator knew before
another transaction was invoked must come first (rt edges, from the begin
and outcome times the files record on their host's clock). Snapshot
isolation is decided on the snapshot vectors where the files record them
(NAM-DB: flag 16): G-SIa where a transaction read or overwrote a write
outside its snapshot, G-SIb where it missed a write its snapshot holds,
directly or through the snapshots of the writers it holds. Not seen: predicates
(phantoms), since every access is to one key. All files must be of the
same run, and every worker of the run must have one.

Options:
  --isolation LEVEL   serializable (default), strict (strict serializable:
                      serializable in an order consistent with real time;
                      needs files that record real time), si (snapshot
                      isolation), rr (repeatable read: Adya's PL-2.99) or
                      rc (read committed)
  --clock-skew-us N   strict, files from several hosts: the most their wall
                      clocks may disagree, 0..60000000 us (default: 0,
                      unknown: real-time order is then checked within each
                      host only); a commit precedes a begin on another host
                      only when it is N us earlier
  --allow-truncated   check the recorded prefix of a history whose recorder
                      ran out of room (default: refuse to certify it)
  --max-report N      keep and show the first N anomalies of each kind,
                      0..1000000 (default: 10); all of them are counted, and
                      no details are kept past N, so memory stays bounded
                      however broken the history is
  --threads N         threads for the checker's parallel phases, 0..1024
                      (default: 0, every core); the report does not depend
                      on it
  --json FILE         also write the summary and the anomalies shown as one
                      JSON object
  -h, --help          this text

Output: what was loaded, a summary (transactions, accesses, keys, edges by
kind, time), each anomaly shown -- a cycle as one line per dependency:
  T(n0.w0.c1#5 'WriteCheck') --rw checking[7]: read v=init, replaced by v=n0.w0.c2#6--> T(n0.w0.c2#6 'WriteCheck')
-- and the verdict line, CERTIFIED or NOT CERTIFIED.

Exit status: 0 certified; 1 anomalies found, or a truncated history without
--allow-truncated; 2 bad usage, or a file missing, unreadable, corrupt (a
checksum mismatch, say), of another run, or a worker's file missing. doc/history.md describes the
checks, the report and the file format.

Examples:
  rdtx-check run/history/
  rdtx-check --isolation si --json check.json run/history/*.rdtxh
  rdtx-check --isolation strict --clock-skew-us 500 hostA/history hostB/history
)";

struct Params {
  Isolation isolation = Isolation::kSerializable;
  uint64_t clock_skew_ns = 0;
  bool allow_truncated = false;
  size_t max_report = 10;
  unsigned threads = 0;
  std::string json_path;
  std::vector<std::string> paths;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "rdtx-check: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

[[noreturn]] void fail(const std::string& msg) {
  std::fprintf(stderr, "rdtx-check: %s\n", msg.c_str());
  std::exit(2);
}

uint64_t parse_uint(const char* opt, const std::string& v, uint64_t lo, uint64_t hi) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || v[0] == '-' || errno != 0 || *end != '\0')
    usage_error(std::string(opt) + ": '" + v + "' is not a whole number");
  if (x < lo || x > hi)
    usage_error(std::string(opt) + ": " + v + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}

Params parse_args(int argc, char** argv) {
  Params p;
  enum { kIsolation = 1, kClockSkew, kAllowTruncated, kMaxReport, kThreads, kJson, kHelp };
  static const option opts[] = {
      {"isolation", required_argument, nullptr, kIsolation},
      {"clock-skew-us", required_argument, nullptr, kClockSkew},
      {"allow-truncated", no_argument, nullptr, kAllowTruncated},
      {"max-report", required_argument, nullptr, kMaxReport},
      {"threads", required_argument, nullptr, kThreads},
      {"json", required_argument, nullptr, kJson},
      {"help", no_argument, nullptr, kHelp},
      {nullptr, 0, nullptr, 0},
  };
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":h", opts, nullptr)) != -1) {
    const std::string v = optarg ? optarg : "";
    switch (c) {
      case kIsolation: {
        auto level = parse_isolation(v);
        if (!level.ok()) usage_error("--isolation: " + level.error().message);
        p.isolation = *level;
        break;
      }
      case kClockSkew:
        p.clock_skew_ns = parse_uint("--clock-skew-us", v, 0, 60'000'000) * 1000;
        break;
      case kAllowTruncated:
        p.allow_truncated = true;
        break;
      case kMaxReport:
        p.max_report = parse_uint("--max-report", v, 0, 1'000'000);
        break;
      case kThreads:
        p.threads = static_cast<unsigned>(parse_uint("--threads", v, 0, 1024));
        break;
      case kJson:
        p.json_path = v;
        break;
      case 'h':
      case kHelp:
        std::fputs(kUsage, stdout);
        std::exit(0);
      case ':':
        usage_error(std::string(argv[optind - 1]) + " needs a value");
      default:
        usage_error("unknown option '" + std::string(argv[optind - 1]) + "'");
    }
  }
  for (int i = optind; i < argc; ++i) p.paths.push_back(argv[i]);
  if (p.paths.empty()) usage_error("no history file or directory given");
  return p;
}

std::string txn_label(TxnId id) {
  return "n" + std::to_string(txn_node(id)) + ".w" + std::to_string(txn_worker(id)) + ".c" +
         std::to_string(txn_coroutine(id)) + "#" + std::to_string(txn_seq(id));
}

int64_t i64(uint64_t v) { return static_cast<int64_t>(v); }

void write_json(const Params& p, const History& h, const CheckReport& r, double load_s) {
  toml::table counts;
  for (size_t k = 0; k < kAnomalyKinds; ++k) counts.insert(to_string(static_cast<Anomaly>(k)), i64(r.counts[k]));
  toml::array findings;
  size_t shown[kAnomalyKinds] = {};
  for (const Finding& f : r.findings) {
    if (shown[static_cast<size_t>(f.kind)]++ >= p.max_report) continue;
    toml::array txns;
    for (TxnId t : f.txns) txns.push_back(txn_label(t));
    findings.push_back(toml::table{{"kind", to_string(f.kind)},
                                   {"classification", f.classification},
                                   {"transactions", std::move(txns)},
                                   {"text", f.text}});
  }
  toml::array files;
  for (const Source& s : h.sources)
    files.push_back(toml::table{{"path", s.path},
                                {"node", s.node},
                                {"worker", s.worker},
                                {"transactions", i64(s.txns)},
                                {"truncated", s.truncated},
                                {"dropped", i64(s.dropped_txns)}});
  const CheckStats& st = r.stats;
  toml::table doc{
      {"tool", "rdtx-check"},
      {"git_revision", RDTX_GIT_REVISION},
      {"isolation", to_string(r.isolation)},
      {"certified", r.certified},
      {"truncated", r.truncated},
      {"verdict", r.verdict()},
      {"files", std::move(files)},
      {"stats",
       toml::table{{"committed", i64(st.committed)},
                   {"aborted", i64(st.aborted)},
                   {"accesses", i64(st.accesses)},
                   {"reads", i64(st.reads)},
                   {"writes", i64(st.writes)},
                   {"keys", i64(st.keys)},
                   {"edges", toml::table{{"ww", i64(st.edges[0])}, {"wr", i64(st.edges[1])}, {"rw", i64(st.edges[2])}}},
                   {"cyclic_components", i64(st.cyclic_components)},
                   {"largest_component", i64(st.largest_component)},
                   {"unrecorded_refs", i64(st.unrecorded_refs)},
                   {"timestamps", st.timestamps},
                   {"snapshot_slots", i64(st.snapshot_slots)},
                   {"snapshots_widened", i64(st.snapshots_widened)},
                   {"real_time", st.real_time},
                   {"load_seconds", load_s},
                   {"check_seconds", st.seconds}}},
      {"counts", std::move(counts)},
      {"findings", std::move(findings)},
  };
  std::ofstream out(p.json_path);
  out << toml::json_formatter{doc} << "\n";
  if (!out) fail("cannot write " + p.json_path);
}

}  // namespace

int main(int argc, char** argv) {
  const Params p = parse_args(argc, argv);

  const auto t0 = std::chrono::steady_clock::now();
  auto loaded = load_history(p.paths, p.threads);
  if (!loaded.ok()) fail(loaded.error().message);
  const History& h = *loaded;
  if (auto complete = h.check_complete(); !complete.ok()) fail(complete.error().message);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::printf("rdtx-check %s: %zu file%s of run %#llx (%u node%s); %zu transactions, %zu accesses loaded in %.3f s\n",
              RDTX_GIT_REVISION, h.sources.size(), h.sources.size() == 1 ? "" : "s",
              static_cast<unsigned long long>(h.run_id), h.cluster_nodes, h.cluster_nodes == 1 ? "" : "s", h.size(),
              h.access_count(), load_s);
  for (const Source& s : h.sources)
    if (s.truncated)
      std::printf("n%u.w%u: history truncated after %llu transactions (%llu not recorded): %s\n", s.node, s.worker,
                  static_cast<unsigned long long>(s.txns), static_cast<unsigned long long>(s.dropped_txns),
                  p.allow_truncated ? "checking the recorded prefix only"
                                    : "cannot certify (--allow-truncated checks the recorded prefix)");

  CheckOptions o;
  o.isolation = p.isolation;
  o.clock_skew_ns = p.clock_skew_ns;
  o.allow_truncated = p.allow_truncated;
  o.max_findings = p.max_report;
  o.threads = p.threads;
  auto report = check(h, o);
  if (!report.ok()) fail(report.error().message);
  std::fputs(format_report(*report, p.max_report).c_str(), stdout);
  std::fflush(stdout);
  if (!p.json_path.empty()) write_json(p, h, *report, load_s);
  return report->certified ? 0 : 1;
}
