#include "rdtx-bench/report.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "env/eal.hpp"
#include "env/tsc.hpp"
#include "history/reader.hpp"
#include "rdtx-bench/bench_config.hpp"
#include "runtime/shutdown.hpp"
#include "txn/types.hpp"
#include "version.h"

namespace rdtx::bench {

namespace {

using txn::AbortReason;

constexpr struct {
  const char* key;
  double q;
} kPercentiles[] = {{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"p999", 0.999}};

// A result's ticks as microseconds, at the rate its figures were taken
// (RunResult::tsc_hz: the TSC's, or the virtual clock's; 0: this thread's).
struct Micros {
  uint64_t hz;
  double operator()(double ticks) const {
    const double t = static_cast<double>(static_cast<uint64_t>(ticks));
    return hz != 0 ? t * 1e6 / static_cast<double>(hz) : env::tsc_to_ns(static_cast<uint64_t>(ticks)) / 1000.0;
  }
};

// "virtual time, measured cost" or "real time".
std::string time_of(const run::RunConfig& run) {
  if (!run.virtual_time.on) return "real time";
  return std::string("virtual time, ") + env::to_string(run.virtual_time.cost) + " cost";
}

double per_s(uint64_t n, double seconds) { return seconds > 0 ? static_cast<double>(n) / seconds : 0.0; }

double ratio(uint64_t a, uint64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0; }

// 1234567 -> "1,234,567": throughput figures span six orders of magnitude.
std::string grouped(uint64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

// A signed count grouped the same way ("-1,234").
std::string grouped(int64_t v) {
  const uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  return (v < 0 ? "-" : "") + grouped(mag);
}

// A share as a percentage with three significant digits ("0.0452 %").
std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g %%", share * 100);
  return buf;
}

std::string pipeline_of(const run::RunConfig& run) {
  std::string out;
  for (int s = 0; s < static_cast<int>(txn::Stage::kCount_); ++s) {
    if (run.protocol->allowed[s].empty()) continue;
    out += (out.empty() ? "" : ", ") + std::string(txn::to_string(static_cast<txn::Stage>(s))) + " " +
           txn::to_string(run.options.pipeline[s]);
  }
  return out;
}

// Workers the cluster deals to loop k of n (Cluster::run: round-robin).
uint32_t workers_on_loop(uint32_t workers, size_t k, size_t n) {
  return static_cast<uint32_t>(workers / n + (k < workers % n ? 1 : 0));
}

// The lcore each loop of Cluster::run ran on: main first, then the workers.
std::vector<unsigned> loop_lcores() {
  std::vector<unsigned> l{env::main_lcore()};
  for (unsigned w : env::worker_lcores()) l.push_back(w);
  return l;
}

std::string hostname() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? buf : "unknown";
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// Figures of one node: its workers' stats merged (workers are node-major).
std::vector<txn::WorkerStats> per_node(const Report& rep) {
  const uint32_t wpn = rep.run->cluster.workers_per_node;
  std::vector<txn::WorkerStats> nodes(rep.run->cluster.nodes);
  const auto& pw = rep.result->per_worker;
  for (size_t id = 0; id < pw.size(); ++id) nodes[id / wpn].merge(pw[id]);
  return nodes;
}

// One-sided verbs and RPC messages the node's coordinators posted per second.
double messages_per_s(const txn::WorkerStats& s, double secs) { return per_s(s.net_all.total_verbs(), secs); }

// A phase is shown if the protocol has the stage, or recorded it anyway
// (CALVIN's lock manager waits: "schedule" and "lock", with no
// configurable stage).
bool phase_applies(const run::RunConfig& run, const txn::WorkerStats& t, txn::Phase p) {
  if (p == txn::Phase::kRelease) return true;
  const int i = static_cast<int>(p);
  return (i < txn::kStages && !run.protocol->allowed[i].empty()) || t.phase_tsc[i].count() > 0;
}

}  // namespace

double Report::seconds() const {
  // RunResult::seconds is not meaningful when a signal stopped the run
  // before the measured window opened (nothing was counted).
  if (interrupted && result->total.attempts == 0) return 0;
  return result->seconds;
}

bool Report::passed() const {
  for (const Check& c : checks)
    if (!c.ok) return false;
  return true;
}

HistoryResult handle_history(const config::Config& cfg, const run::RunResult& r, cluster::Bootstrap* boot) {
  HistoryResult h;
  const std::string& dir = cfg.get_string("history.dir");
  // Writing and checking a long run's history take seconds: a signal ends
  // them once its grace is over, and the report says what was not done.
  const history::StopFn stop = runtime::stop_grace_over;
  auto not_written = [&] {
    h.stopped = true;
    h.error = std::string("stopped by ") + runtime::shutdown_cause() + " while writing the files: " + dir +
              " holds only some of them";
    return h;
  };
  auto not_checked = [&] {
    h.stopped = true;
    h.error = std::string("stopped by ") + runtime::shutdown_cause();
    if (!h.dir.empty()) h.error += " (the files in " + h.dir + " are whole: rdtx-check " + h.dir + " checks them)";
    return h;
  };
  h.recorded = !r.histories.empty();
  if (!h.recorded) return h;
  for (const history::Recorder& rec : r.histories) {
    h.txns += rec.txn_count();
    h.accesses += rec.access_count();
    h.dropped += rec.dropped_txns();
    h.truncated |= rec.truncated();
  }
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      h.error = "history.dir = '" + dir + "': " + ec.message();
      return h;
    }
    for (const history::Recorder& rec : r.histories) {
      auto w = rec.write_file(dir + "/" + history::Recorder::file_name(rec.options().node, rec.options().worker), stop);
      if (!w.ok() && w.error().code == ECANCELED) return not_written();
      if (!w.ok()) {
        h.error = w.error().message;
        return h;
      }
    }
    h.dir = dir;
  }
  if (!r.cut_short.empty()) {
    // A peer was lost: no barrier (it would wait for the dead), and this
    // node's files alone are no history to check.
    h.error = "not checked: the run was cut short (" + r.cut_short + ")" +
              (h.dir.empty() ? "" : "; this node's files are in " + h.dir);
    return h;
  }
  if (boot != nullptr) {
    // Every node's files are in the directory once all have passed here.
    if (auto b = boot->barrier("history written"); !b.ok()) {
      h.error = b.error().message;
      return h;
    }
    if (boot->self() != 0 || !cfg.get_bool("history.check")) return h;
  }
  if (!cfg.get_bool("history.check")) return h;
  if (!r.removed.empty()) {
    // A node removed during the run took its files with it: the survivors'
    // files alone are no whole history (its transactions' reads and writes
    // are in the others' data).
    const bool one = r.removed.size() == 1;
    h.error = "not checked: " + run::removed_text(r.removed) + (one ? " was" : " were") +
              " removed during the run, and " + (one ? "its" : "their") + " history files went with " +
              (one ? "it" : "them");
    return h;
  }
  // A long run's check takes seconds after the run: with the progress line
  // on, a line says what is going on.
  if (cfg.get_float("run.progress_s") > 0)
    std::fprintf(stderr, "rdtx-bench: checking the history: %s attempts, %s accesses\n", grouped(h.txns).c_str(),
                 grouped(h.accesses).c_str());
  Result<history::History> merged =
      boot == nullptr ? run::merged_history(r, stop) : history::load_history({dir}, 0, stop);
  if (!merged.ok() && merged.error().code == ECANCELED) return not_checked();
  if (merged.ok() && boot != nullptr) {
    if (auto complete = merged->check_complete(); !complete.ok()) merged = complete.error();
  }
  if (!merged.ok()) {
    h.error = merged.error().message;
    return h;
  }
  history::CheckOptions co = txn::check_options(r.isolation);
  co.clock_skew_ns = static_cast<uint64_t>(cfg.get_int("history.clock_skew_us")) * 1000;
  co.stop = stop;
  auto rep = history::check(*merged, co);
  if (!rep.ok() && rep.error().code == ECANCELED) return not_checked();
  if (!rep.ok()) {
    h.error = rep.error().message;
    return h;
  }
  h.checked = true;
  h.report = std::move(*rep);
  h.text = history::format_report(h.report, 3);
  return h;
}

std::vector<Check> run_checks(const run::RunResult& r, bool interrupted, const HistoryResult* history,
                              double warmup_s) {
  run::VerdictOptions o;
  o.interrupted = interrupted;
  o.warmup_s = warmup_s;
  run::HistoryVerdict hv;
  if (history && history->recorded && (history->checked || !history->error.empty())) {
    hv.certified = history->error.empty() && history->report.certified;
    hv.anomalies = history->report.anomalies();
    hv.message = history->error.empty() ? history->report.verdict() : history->error;
    hv.stopped = history->stopped;
    o.history = &hv;
  }
  return run::verdict(r, o);
}

void print_header(std::FILE* out, const config::Config& cfg, const run::RunConfig& run,
                  const rdma::DeviceCaps& device) {
  const auto& cl = run.cluster;
  std::string model = device.latency_ns ? ", " + std::to_string(device.latency_ns) + " ns one-way" : "";
  std::string qps = cl.qps_per_node > 1 ? " with " + std::to_string(cl.qps_per_node) + " RC QPs to each node" : "";
  std::string roles = cl.split() ? " (" + std::to_string(cl.data_nodes()) + " memory, " +
                                       std::to_string(cl.compute_nodes()) + " compute)"
                                 : "";
  std::fprintf(out,
               "%s on %u node(s)%s x %u worker(s)%s, %s (%s%s), %s [%s], %u coroutine(s) per worker, %u lcore(s)%s, "
               "%.2f s after %.2f s warm-up%s\n",
               cfg.get_string("workload").c_str(), cl.nodes, roles.c_str(), cl.workers_per_node, qps.c_str(),
               cfg.get_string("cluster.mode").c_str(), shortened(cl.devargs).c_str(), model.c_str(), run.protocol->name,
               pipeline_of(run).c_str(), run.options.coroutines, env::lcore_count(),
               run.single_thread && !run.virtual_time.on ? " (single thread)" : "", run.duration_s, run.warmup_s,
               run.virtual_time.on ? (" (" + time_of(run) + ")").c_str() : "");
}

// The timeline's bins the measured window ran (the last one of
// WorkerStats::timeline holds what came just after it), and what they show.
struct TimelineSummary {
  size_t bins = 0;
  uint32_t bin_ms = 1;
  uint32_t median = 0, lowest = 0, highest = 0;
  size_t lowest_at = 0;                  // bin
  size_t empty_run = 0, empty_at = 0;    // longest run of bins with no commit, and where it began
};

TimelineSummary summarize_timeline(const Report& rep) {
  const txn::WorkerStats& t = rep.result->total;
  TimelineSummary s;
  s.bin_ms = t.timeline_bin_ms;
  if (t.timeline.empty()) return s;
  const double window_ms = rep.seconds() * 1000;
  s.bins = std::min<size_t>(t.timeline.size() - 1,
                            static_cast<size_t>(std::ceil(window_ms / static_cast<double>(s.bin_ms))));
  if (s.bins == 0) return s;
  std::vector<uint32_t> sorted(t.timeline.begin(), t.timeline.begin() + static_cast<ptrdiff_t>(s.bins));
  std::sort(sorted.begin(), sorted.end());
  s.median = sorted[sorted.size() / 2];
  s.highest = sorted.back();
  s.lowest = UINT32_MAX;
  for (size_t k = 0, run = 0; k < s.bins; ++k) {
    if (t.timeline[k] < s.lowest) s.lowest = t.timeline[k], s.lowest_at = k;
    run = t.timeline[k] == 0 ? run + 1 : 0;
    if (run > s.empty_run) s.empty_run = run, s.empty_at = k + 1 - run;
  }
  return s;
}

void print_report(std::FILE* out, const Report& rep) {
  const run::RunResult& r = *rep.result;
  const txn::WorkerStats& t = r.total;
  const double secs = rep.seconds();
  const Micros us{r.tsc_hz};
  if (!r.aggregate)
    std::fprintf(out,
                 "node %u: the figures are this node's workers; node 0 reports the cluster (checks: the cluster's)\n",
                 r.node);
  if (!r.removed.empty()) {
    // (Another node's figures are its own anyway.)
    const bool one = r.removed.size() == 1;
    std::fprintf(out, "removed       %s during the run, which went on without %s", run::removed_text(r.removed).c_str(),
                 one ? "it" : "them");
    if (r.aggregate)
      std::fprintf(out, ": %s figures up to %s removal are not in the totals", one ? "its" : "their",
                   one ? "its" : "their");
    std::fprintf(out, "\n");
  }
  if (rep.interrupted && secs > 0) std::fprintf(out, "interrupted: the figures cover %.2f s\n", secs);
  if (rep.interrupted && secs == 0) std::fprintf(out, "interrupted during the warm-up: nothing was measured\n");
  std::fprintf(out, "committed     %14s txn/s  (%s in %.2f s%s)\n",
               grouped(static_cast<uint64_t>(per_s(t.commits, secs))).c_str(), grouped(t.commits).c_str(), secs,
               r.virtual_time.on ? " of virtual time" : "");
  std::fprintf(out, "attempted     %14s txn/s\n", grouped(static_cast<uint64_t>(per_s(t.attempts, secs))).c_str());
  std::fprintf(out, "loaded        %14.2f s, tables %s MiB in this process", r.load_seconds,
               grouped(r.table_bytes >> 20).c_str());
  if (r.table_bytes_end != r.table_bytes)
    std::fprintf(out, " (%s MiB after the run: grown as it inserted)", grouped(r.table_bytes_end >> 20).c_str());
  std::fprintf(out, "\n");
  if (r.replicas > 1) {
    std::fprintf(out, "replicas      %14u copies: %s\n", r.replicas, r.placement.c_str());
    const uint64_t logged = t.log_bytes;
    std::fprintf(out, "log           %14s B per committed txn, %s entries, %s ring-full waits, %s records applied\n",
                 grouped(t.commits ? logged / t.commits : 0).c_str(), grouped(t.log_entries).c_str(),
                 grouped(t.log_full_waits).c_str(), grouped(t.log_applied).c_str());
  }
  std::fprintf(out, "abort rate    %13.2f %%", r.abort_rate() * 100);
  std::string reasons;
  for (size_t k = 0; k < r.abort_reasons.size(); ++k)
    if (t.aborts[k])
      reasons += (reasons.empty() ? "" : ", ") + std::string(r.abort_reasons[k].text) + " " +
                 percent(ratio(t.aborts[k], t.attempts));
  std::fprintf(out, "%s%s%s\n", reasons.empty() ? "" : "  (", reasons.c_str(), reasons.empty() ? "" : ")");
  std::fprintf(out, "latency (us)  ");
  for (const auto& p : kPercentiles)
    std::fprintf(out, " %s %.2f", p.key, us(static_cast<double>(t.latency_tsc.percentile(p.q))));
  std::fprintf(out, "  mean %.2f  max %.2f\n", us(t.latency_tsc.mean()), us(static_cast<double>(t.latency_tsc.max())));
  std::fprintf(out, "round trips   %14.2f per committed txn\n", ratio(t.net_committed.round_trips, t.commits));
  if (rep.run->options.breakdown) {
    const stats::VerbCounts& n = t.net_committed;
    std::fprintf(out, "per committed  ");
    for (int v = 0; v < stats::kVerbs; ++v)
      std::fprintf(out, "%s %.2f  ", stats::to_string(static_cast<stats::Verb>(v)), ratio(n.verbs[v], t.commits));
    std::fprintf(out, "doorbells %.2f  bytes %.0f\n", ratio(n.doorbells, t.commits), ratio(n.bytes, t.commits));
    std::fprintf(
        out, "stages (us)    mean per committed txn; p50 / p99 of the attempts that ran the stage (1 in %u timed)\n",
        rep.run->options.breakdown_sample);
    for (int p = 0; p < txn::kPhases; ++p) {
      const auto ph = static_cast<txn::Phase>(p);
      if (!phase_applies(*rep.run, t, ph)) continue;
      const stats::Histogram& h = t.phase_tsc[p];
      const bool rel = ph == txn::Phase::kRelease;
      const uint64_t denom = rel ? t.sampled_aborts : t.sampled_commits;
      std::fprintf(out, "  %-9s %9.2f%s  p50 %.2f  p99 %.2f\n", txn::to_string(ph),
                   us(denom ? static_cast<double>(t.phase_sum_tsc[p]) / static_cast<double>(denom) : 0.0),
                   rel ? " per abort" : "          ", us(static_cast<double>(h.percentile(0.5))),
                   us(static_cast<double>(h.percentile(0.99))));
    }
    std::fprintf(out, "per node      ");
    const auto nodes = per_node(rep);
    for (size_t nd = 0; nd < nodes.size(); ++nd)
      std::fprintf(out, " n%zu%s: %s txn/s, %s msg/s%s", nd,
                   !rep.run->cluster.split()                                ? ""
                   : rep.run->cluster.holds_data(static_cast<uint32_t>(nd)) ? " (memory)"
                                                                            : " (compute)",
                   grouped(static_cast<uint64_t>(per_s(nodes[nd].commits, secs))).c_str(),
                   grouped(static_cast<uint64_t>(messages_per_s(nodes[nd], secs))).c_str(),
                   nd + 1 < nodes.size() ? ";" : "");
    std::fprintf(out, "\n");
  }
  if (const TimelineSummary tl = summarize_timeline(rep); tl.bins > 0 && r.total.commits > 0) {
    std::fprintf(out, "timeline       commits per %u ms: median %s, highest %s, lowest %s (at %s ms)", tl.bin_ms,
                 grouped(uint64_t{tl.median}).c_str(), grouped(uint64_t{tl.highest}).c_str(), grouped(uint64_t{tl.lowest}).c_str(),
                 grouped(tl.lowest_at * tl.bin_ms).c_str());
    if (tl.empty_run > 0)
      std::fprintf(out, "; longest time with none %s ms (from %s ms)", grouped(tl.empty_run * tl.bin_ms).c_str(),
                   grouped(tl.empty_at * tl.bin_ms).c_str());
    std::fprintf(out, "\n");
  }
  const uint64_t lookups = r.cache.hits + r.cache.misses;
  if (lookups)
    std::fprintf(out, "location cache %12.2f %% hits  (%s hits, %s misses, %s stale)\n",
                 ratio(r.cache.hits, lookups) * 100, grouped(r.cache.hits).c_str(), grouped(r.cache.misses).c_str(),
                 grouped(r.cache.stale).c_str());
  else
    std::fprintf(out, "location cache  not used\n");
  if (const run::RunResult::VirtualTimeResult& v = r.virtual_time; v.on) {
    // Every figure above is in virtual time; how the emulation went.
    std::fprintf(out,
                 "time           virtual (%s cost): %.3f s virtual in %.2f s wall, %zu worker(s) on one thread, %s "
                 "passes (%s idle)\n",
                 env::to_string(v.cost), v.virtual_seconds, v.wall_seconds, v.workers.size(), grouped(v.passes).c_str(),
                 grouped(v.idle_passes).c_str());
    if (v.cost == env::VirtualCost::kMeasured) {
      // Preempted passes count the thread's CPU time (rseq detection); a
      // pass longer than the cap is cut to it, and the cut passes bound the
      // share of the workers' time that may be a stall rather than work.
      const double cap_s = rep.run->virtual_time.max_pass_ns / 1e9;
      const double total = v.virtual_seconds * static_cast<double>(v.workers.size());
      std::fprintf(out,
                   "preemptions    %s, %s; %s passes cut to %.0f us (run.virtual_max_pass_us): up to %.2f %% "
                   "of the workers' virtual time\n",
                   v.detects_preemption ? grouped(v.preemptions).c_str() : "not detected",
                   v.detects_preemption ? "their passes counted in thread CPU time" : "no rseq",
                   grouped(v.capped_passes).c_str(), cap_s * 1e6,
                   total > 0 ? 100 * static_cast<double>(v.capped_passes) * cap_s / total : 0.0);
    }
    double lo = 1, hi = 0, sum = 0;
    for (const runtime::LoopStats& w : v.workers) {
      lo = std::min(lo, w.busy_share());
      hi = std::max(hi, w.busy_share());
      sum += w.busy_share();
    }
    if (!v.workers.empty())
      std::fprintf(out,
                   "worker busy    %.1f %% mean, %.1f %% min, %.1f %% max (virtual CPU of each worker); %s work "
                   "units, %s resumes, %.3f s spent in busy waits\n",
                   100 * sum / static_cast<double>(v.workers.size()), 100 * lo, 100 * hi, grouped(v.work_units).c_str(),
                   grouped(v.resumes).c_str(), v.spent_seconds);
  } else if (r.loops.empty()) {
    std::fprintf(out, "lcore busy     n/a (single thread)\n");
  } else {
    std::vector<unsigned> lcores = loop_lcores();
    const uint32_t workers = rep.run->cluster.nodes * rep.run->cluster.workers_per_node;
    std::fprintf(out, "idle policy    %s%s\n", runtime::to_string(r.idle),
                 rep.run->idle == runtime::IdlePolicy::kAuto ? " (run.idle = auto)" : "");
    if (const auto& l = rep.leases; l && l->cm)
      std::fprintf(out, "leases         %.1f ms, this node the CM (%s): %s renewals seen, %s late, longest gap %.1f ms\n",
                   l->lease_ms, l->realtime ? "SCHED_FIFO" : "normal priority", grouped(l->renewals).c_str(),
                   grouped(l->late).c_str(), l->longest_gap_ms);
    else if (l)
      std::fprintf(out, "leases         %.1f ms, this node a member (%s): %s renewals sent, longest gap %.1f ms\n",
                   l->lease_ms, l->realtime ? "SCHED_FIFO" : "normal priority", grouped(l->renewals).c_str(),
                   l->longest_gap_ms);
    std::fprintf(out, "lcore busy    ");
    for (size_t k = 0; k < r.loops.size(); ++k)
      std::fprintf(out, " lcore %u: %.1f %% (%u worker(s))%s", k < lcores.size() ? lcores[k] : 0u,
                   r.loops[k].busy_share() * 100, workers_on_loop(workers, k, r.loops.size()),
                   k + 1 < r.loops.size() ? "," : "");
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "counters     ");
  for (size_t k = 0; k < txn::kWorkerCounterCount; ++k)
    std::fprintf(out, " %s %s%s", txn::kWorkerCounters[k].text, grouped(txn::kWorkerCounters[k].value(t)).c_str(),
                 k + 1 < txn::kWorkerCounterCount ? "," : "");
  std::fprintf(out, "\n");
  std::fprintf(out, "commits by type\n");
  for (size_t k = 0; k < rep.type_names.size(); ++k) {
    uint64_t n = k < t.commits_by_type.size() ? t.commits_by_type[k] : 0;
    const stats::Histogram* h = k < t.latency_by_type.size() ? &t.latency_by_type[k] : nullptr;
    const uint64_t att = k < t.attempts_by_type.size() ? t.attempts_by_type[k] : 0;
    const uint64_t iss = k < t.issued_by_type.size() ? t.issued_by_type[k] : 0;
    uint64_t issued_all = 0;
    for (uint64_t v : t.issued_by_type) issued_all += v;
    std::fprintf(out, "  %-20s %14s txn/s  %6.2f %% (issued %6.2f %%)  aborts %5.1f %%", rep.type_names[k].c_str(),
                 grouped(static_cast<uint64_t>(per_s(n, secs))).c_str(), ratio(n, t.commits) * 100,
                 ratio(iss, issued_all) * 100, att ? (1.0 - ratio(n, att)) * 100 : 0.0);
    if (h && h->count()) {
      std::fprintf(out, "  latency (us)");
      for (const auto& p : kPercentiles)
        std::fprintf(out, " %s %.2f", p.key, us(static_cast<double>(h->percentile(p.q))));
    }
    std::fprintf(out, "\n");
  }
  if (const HistoryResult* h = rep.history; h && h->recorded) {
    std::fprintf(
        out, "history       %14s txns, %s accesses recorded%s%s%s\n", grouped(h->txns).c_str(),
        grouped(h->accesses).c_str(),
        h->truncated ? " (TRUNCATED: an attempt larger than half of history.capacity_mb, or a write error)" : "",
        h->dir.empty() ? "" : ", written to ", h->dir.c_str());
    if (h->checked) {
      const auto& st = h->report.stats;
      std::fprintf(out, "  checked in %.2f s: %s ww, %s wr, %s rw edges; %s\n", st.seconds,
                   grouped(st.edges[0]).c_str(), grouped(st.edges[1]).c_str(), grouped(st.edges[2]).c_str(),
                   h->report.verdict().c_str());
      if (!h->report.certified) std::fprintf(out, "%s\n", h->text.c_str());
    }
  }
  std::fprintf(out, "checks\n");
  for (const Check& c : rep.checks) {
    const char* verdict = c.not_checked ? "NOT CHECKED" : c.ok ? "OK" : "FAILED";
    if (std::string(c.key) == "invariants" || std::string(c.key) == "history" || std::string(c.key) == "replicas" ||
        std::string(c.key) == "cluster")
      std::fprintf(out, "  %-20s %s%s%s\n", c.label, verdict, c.message.empty() ? "" : ": ", c.message.c_str());
    else
      std::fprintf(out, "  %-20s %14s  %s%s%s\n", c.label, grouped(c.value).c_str(), verdict,
                   c.message.empty() ? "" : ": ", c.message.c_str());
  }
  // A check a signal cut short proves nothing, but did not fail either.
  std::string failed, unchecked;
  for (const Check& c : rep.checks) {
    if (c.ok) continue;
    std::string& list = c.not_checked ? unchecked : failed;
    list += (list.empty() ? "" : ", ") + std::string(c.label);
  }
  if (!failed.empty())
    std::fprintf(out, "result: FAILED: %s%s%s\n", failed.c_str(),
                 unchecked.empty() ? "" : "; not checked: ", unchecked.c_str());
  else if (!unchecked.empty())
    std::fprintf(out, "result: NOT CHECKED: %s\n", unchecked.c_str());
  else
    std::fprintf(out, "result: PASS\n");
}

std::string report_json(const Report& rep) {
  const run::RunResult& r = *rep.result;
  const txn::WorkerStats& t = r.total;
  const Micros us{r.tsc_hz};
  auto i64 = [](uint64_t v) { return static_cast<int64_t>(v); };

  toml::table counters;
  for (const txn::WorkerCounter& c : txn::kWorkerCounters) counters.insert(c.key, c.value(t));
  toml::table by_reason;
  for (size_t k = 1; k < r.abort_reasons.size(); ++k) by_reason.insert(r.abort_reasons[k].key, i64(t.aborts[k]));
  toml::table latency;
  for (const auto& p : kPercentiles) latency.insert(p.key, us(static_cast<double>(t.latency_tsc.percentile(p.q))));
  latency.insert("mean", us(t.latency_tsc.mean()));
  latency.insert("max", us(static_cast<double>(t.latency_tsc.max())));
  auto latency_of = [us](const stats::Histogram& h) {
    toml::table l;
    for (const auto& p : kPercentiles) l.insert(p.key, us(static_cast<double>(h.percentile(p.q))));
    l.insert("mean", us(h.mean()));
    l.insert("max", us(static_cast<double>(h.max())));
    return l;
  };
  toml::table types;
  for (size_t k = 0; k < rep.type_names.size(); ++k) {
    uint64_t n = k < t.commits_by_type.size() ? t.commits_by_type[k] : 0;
    const uint64_t att = k < t.attempts_by_type.size() ? t.attempts_by_type[k] : 0;
    const uint64_t iss = k < t.issued_by_type.size() ? t.issued_by_type[k] : 0;
    toml::table ty{{"commits", i64(n)},
                   {"issued", i64(iss)},
                   {"committed_per_s", per_s(n, rep.seconds())},
                   {"attempted_per_s", per_s(att, rep.seconds())},
                   {"abort_rate", att ? 1.0 - ratio(n, att) : 0.0}};
    if (k < t.latency_by_type.size()) ty.insert("latency_us", latency_of(t.latency_by_type[k]));
    types.insert(rep.type_names[k], std::move(ty));
  }
  toml::array nodes;
  {
    const auto pn = per_node(rep);
    for (size_t nd = 0; nd < pn.size(); ++nd)
      nodes.push_back(toml::table{{"node", static_cast<int64_t>(nd)},
                                  {"role", cluster::role_name(rep.run->cluster, static_cast<uint32_t>(nd))},
                                  {"committed", i64(pn[nd].commits)},
                                  {"committed_per_s", per_s(pn[nd].commits, rep.seconds())},
                                  {"attempted_per_s", per_s(pn[nd].attempts, rep.seconds())},
                                  {"messages_per_s", messages_per_s(pn[nd], rep.seconds())},
                                  {"latency_us", latency_of(pn[nd].latency_tsc)}});
  }
  toml::table stages;
  toml::table net;
  if (rep.run->options.breakdown) {
    for (int p = 0; p < txn::kPhases; ++p) {
      const auto ph = static_cast<txn::Phase>(p);
      if (!phase_applies(*rep.run, t, ph)) continue;
      const bool rel = ph == txn::Phase::kRelease;
      const uint64_t denom = rel ? t.sampled_aborts : t.sampled_commits;
      toml::table st = latency_of(t.phase_tsc[p]);
      st.insert(rel ? "mean_per_abort" : "mean_per_commit",
                us(denom ? static_cast<double>(t.phase_sum_tsc[p]) / static_cast<double>(denom) : 0.0));
      st.insert("count", i64(t.phase_tsc[p].count()));
      stages.insert(txn::to_string(ph), std::move(st));
    }
    const stats::VerbCounts& n = t.net_committed;
    for (int v = 0; v < stats::kVerbs; ++v)
      net.insert(stats::to_string(static_cast<stats::Verb>(v)), ratio(n.verbs[v], t.commits));
    net.insert("doorbells", ratio(n.doorbells, t.commits));
    net.insert("bytes", ratio(n.bytes, t.commits));
    net.insert("round_trips", ratio(n.round_trips, t.commits));
  }
  toml::array lcores;
  std::vector<unsigned> ids = loop_lcores();
  const uint32_t workers = rep.run->cluster.nodes * rep.run->cluster.workers_per_node;
  for (size_t k = 0; k < r.loops.size(); ++k)
    lcores.push_back(toml::table{{"lcore", static_cast<int64_t>(k < ids.size() ? ids[k] : 0)},
                                 {"workers", static_cast<int64_t>(workers_on_loop(workers, k, r.loops.size()))},
                                 {"busy_share", r.loops[k].busy_share()}});
  toml::array removed;
  for (uint32_t n : r.removed) removed.push_back(static_cast<int64_t>(n));
  toml::table checks{{"passed", rep.passed()}};
  for (const Check& c : rep.checks) {
    toml::table entry{{"ok", c.ok}};
    if (c.not_checked) entry.insert("not_checked", true);
    if (std::string(c.key) == "invariants" || std::string(c.key) == "history" || std::string(c.key) == "replicas" ||
        std::string(c.key) == "cluster")
      entry.insert("message", c.message);
    else
      entry.insert("value", i64(c.value));
    checks.insert(c.key, std::move(entry));
  }
  const uint64_t lookups = r.cache.hits + r.cache.misses;
  toml::table time{{"mode", r.virtual_time.on ? "virtual" : "real"}};
  if (const run::RunResult::VirtualTimeResult& v = r.virtual_time; v.on) {
    toml::array busy;
    for (const runtime::LoopStats& w : v.workers) busy.push_back(w.busy_share());
    time.insert("cost", env::to_string(v.cost));
    time.insert("wall_seconds", v.wall_seconds);
    time.insert("virtual_seconds", v.virtual_seconds);
    time.insert("passes", i64(v.passes));
    time.insert("idle_passes", i64(v.idle_passes));
    time.insert("capped_passes", i64(v.capped_passes));
    time.insert("detects_preemption", v.detects_preemption);
    time.insert("preemptions", i64(v.preemptions));
    time.insert("work_units", i64(v.work_units));
    time.insert("resumes", i64(v.resumes));
    time.insert("spent_seconds", v.spent_seconds);
    time.insert("worker_busy_share", std::move(busy));
  }

  // The timeline: commits per bin of the measured window (bins the window
  // ran; node 0's aggregate adds every node's, each from its own window's
  // start, which the nodes open within a bootstrap barrier of each other).
  toml::table timeline;
  {
    const TimelineSummary tl = summarize_timeline(rep);
    toml::array bins;
    for (size_t k = 0; k < tl.bins; ++k) bins.push_back(i64(t.timeline[k]));
    timeline.insert("bin_ms", static_cast<int64_t>(tl.bin_ms));
    timeline.insert("committed", std::move(bins));
    timeline.insert("longest_empty_ms", i64(tl.empty_run * tl.bin_ms));
    // Counted after the window's end, before a worker's next pass closed
    // it (the last bin): with the listed bins, every commit of `committed`.
    uint64_t after = 0;
    for (size_t k = tl.bins; k < t.timeline.size(); ++k) after += t.timeline[k];
    timeline.insert("after_window", i64(after));
  }
  toml::table doc{
      {"tool", "rdtx-bench"},
      {"git_revision", RDTX_GIT_REVISION},
      {"machine", toml::table{{"cpu", cpu_model()},
                              {"hostname", hostname()},
                              {"cores", static_cast<int64_t>(env::available_cores())},
                              {"lcores", static_cast<int64_t>(env::lcore_count())}}},
      {"device", toml::table{{"driver", rep.device.driver},
                             {"devargs", rep.run->cluster.devargs},
                             {"name", rep.device.name},
                             {"latency_ns", i64(rep.device.latency_ns)},
                             {"bw_gbps", rep.device.bw_gbps},
                             {"atomics_coherent_with_cpu", rep.device.atomics_coherent_with_cpu}}},
      {"interrupted", rep.interrupted},
      {"node", static_cast<int64_t>(r.node)},
      {"aggregate", r.aggregate},
      {"removed", std::move(removed)},
      {"seconds", rep.seconds()},
      {"time", std::move(time)},
      {"committed", i64(t.commits)},
      {"attempted", i64(t.attempts)},
      {"committed_per_s", per_s(t.commits, rep.seconds())},
      {"attempted_per_s", per_s(t.attempts, rep.seconds())},
      {"abort_rate", r.abort_rate()},
      {"aborts", toml::table{{"total", i64(t.aborts_total())}, {"by_reason", std::move(by_reason)}}},
      {"counters", std::move(counters)},
      {"latency_us", std::move(latency)},
      {"round_trips_per_commit", ratio(t.net_committed.round_trips, t.commits)},
      {"timeline", std::move(timeline)},
      {"commits_by_type", std::move(types)},
      {"per_node", std::move(nodes)},
      {"stages_us", std::move(stages)},
      {"per_commit", std::move(net)},
      {"location_cache", toml::table{{"hits", i64(r.cache.hits)},
                                     {"misses", i64(r.cache.misses)},
                                     {"stale", i64(r.cache.stale)},
                                     {"hit_rate", ratio(r.cache.hits, lookups)}}},
      {"lcores", std::move(lcores)},
      {"load", toml::table{{"seconds", r.load_seconds},
                           {"table_bytes", i64(r.table_bytes)},
                           {"table_bytes_end", i64(r.table_bytes_end)}}},
      {"replication", toml::table{{"replicas", i64(r.replicas)},
                                  {"placement", r.placement},
                                  {"log_bytes_per_commit", ratio(t.log_bytes, t.commits)}}},
      // The policy the loops ran, auto resolved ("n/a": single thread).
      {"idle_policy", r.loops.empty() ? "n/a" : runtime::to_string(r.idle)},
      {"checks", std::move(checks)},
  };
  if (rep.leases)
    doc.insert("leases", toml::table{{"lease_ms", rep.leases->lease_ms},
                                   {"cm", rep.leases->cm},
                                   {"realtime", rep.leases->realtime},
                                   {"renewals", i64(rep.leases->renewals)},
                                   {"late", i64(rep.leases->late)},
                                   {"longest_gap_ms", rep.leases->longest_gap_ms}});
  if (const HistoryResult* h = rep.history; h && h->recorded) {
    toml::table ht{{"txns", i64(h->txns)},
                   {"accesses", i64(h->accesses)},
                   {"truncated", h->truncated},
                   {"dropped_txns", i64(h->dropped)},
                   {"dir", h->dir},
                   {"checked", h->checked}};
    if (!h->error.empty()) ht.insert("error", h->error);
    if (h->checked) {
      const history::CheckReport& cr = h->report;
      toml::table anomalies;
      for (size_t k = 0; k < history::kAnomalyKinds; ++k)
        if (cr.counts[k]) anomalies.insert(history::to_string(static_cast<history::Anomaly>(k)), i64(cr.counts[k]));
      toml::array findings;
      for (const history::Finding& f : cr.findings) findings.push_back(f.text);
      ht.insert("isolation", history::to_string(cr.isolation));
      ht.insert("certified", cr.certified);
      ht.insert("verdict", cr.verdict());
      ht.insert("anomalies", std::move(anomalies));
      ht.insert("findings", std::move(findings));
      ht.insert(
          "edges",
          toml::table{{"ww", i64(cr.stats.edges[0])}, {"wr", i64(cr.stats.edges[1])}, {"rw", i64(cr.stats.edges[2])}});
      ht.insert("check_seconds", cr.stats.seconds);
    }
    doc.insert("history", std::move(ht));
  }
  // The RNIC model's unaccounted requests (the check nic_unaccounted).
  if (r.nic_model)
    doc.insert("nic_model", toml::table{{"stale", i64(r.nic_stale)}, {"overflow", i64(r.nic_overflow)}});
  std::ostringstream os;
  os << toml::json_formatter{doc};
  // toml++ cannot hold raw JSON, so the resolved config (Config::to_json(),
  // which also renders non-finite floats as JSON strings) is spliced in as
  // the first member.
  std::string json = os.str();
  return "{\n    \"config\" : " + rep.cfg->to_json() + "," + json.substr(1) + "\n";
}

}  // namespace rdtx::bench

namespace rdtx::bench {

namespace {

// RFC 4180: quote a field holding a comma, quote or newline.
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

Result<void> append_csv(const std::string& path, const Report& rep) {
  const run::RunResult& r = *rep.result;
  const txn::WorkerStats& t = r.total;
  const run::RunConfig& run = *rep.run;
  const double secs = rep.seconds();
  const Micros us{r.tsc_hz};
  std::vector<std::pair<std::string, std::string>> cols = {
      {"git_revision", RDTX_GIT_REVISION},
      {"workload", rep.cfg->get_string("workload")},
      {"protocol", run.protocol->name},
      {"fetch", txn::to_string(run.options.stage(txn::Stage::kFetch))},
      {"lock", txn::to_string(run.options.stage(txn::Stage::kLock))},
      {"validate", txn::to_string(run.options.stage(txn::Stage::kValidate))},
      {"commit", txn::to_string(run.options.stage(txn::Stage::kCommit))},
      {"nodes", std::to_string(run.cluster.nodes)},
      {"workers_per_node", std::to_string(run.cluster.workers_per_node)},
      {"coroutines", std::to_string(run.options.coroutines)},
      {"devargs", run.cluster.devargs},
      {"seed", std::to_string(run.seed)},
      {"seconds", num(secs)},
      {"committed_per_s", num(per_s(t.commits, secs))},
      {"attempted_per_s", num(per_s(t.attempts, secs))},
      {"abort_rate", num(r.abort_rate())},
  };
  for (const auto& p : kPercentiles)
    cols.emplace_back(std::string("latency_") + p.key + "_us",
                      num(us(static_cast<double>(t.latency_tsc.percentile(p.q)))));
  cols.emplace_back("round_trips_per_commit", num(ratio(t.net_committed.round_trips, t.commits)));
  for (int v = 0; v < stats::kVerbs; ++v)
    cols.emplace_back(std::string(stats::to_string(static_cast<stats::Verb>(v))) + "_per_commit",
                      num(ratio(t.net_committed.verbs[v], t.commits)));
  cols.emplace_back("doorbells_per_commit", num(ratio(t.net_committed.doorbells, t.commits)));
  cols.emplace_back("bytes_per_commit", num(ratio(t.net_committed.bytes, t.commits)));
  for (int p = 0; p < txn::kPhases - 1; ++p)
    cols.emplace_back(
        std::string(txn::to_string(static_cast<txn::Phase>(p))) + "_us_per_commit",
        num(us(t.sampled_commits ? static_cast<double>(t.phase_sum_tsc[p]) / static_cast<double>(t.sampled_commits)
                                 : 0)));
  for (const txn::WorkerCounter& c : txn::kWorkerCounters) cols.emplace_back(c.key, std::to_string(c.value(t)));
  cols.emplace_back("passed", rep.passed() ? "true" : "false");
  // "real", or "virtual-measured" / "virtual-model": the clock of every figure.
  cols.emplace_back("time", r.virtual_time.on ? std::string("virtual-") + env::to_string(r.virtual_time.cost) : "real");

  std::string header, row;
  for (size_t i = 0; i < cols.size(); ++i) {
    header += (i ? "," : "") + cols[i].first;
    row += (i ? "," : "") + csv_field(cols[i].second);
  }
  if (auto r = check_csv_path(path); !r.ok()) return r.error();
  std::string existing;
  {
    // O_NONBLOCK: a FIFO put in the file's place since the check does not
    // block the open; fstat() then refuses it.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st;
      if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return make_error(EINVAL, "--csv %s: not a regular file", path.c_str());
      }
      std::string head(kCsvHeaderMax + 1, '\0');
      size_t got = 0;
      ssize_t n;
      while (got < head.size() && (n = ::read(fd, head.data() + got, head.size() - got)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          const int err = errno;
          ::close(fd);
          return make_error(err, "--csv %s: cannot read: %s", path.c_str(), std::strerror(err));
        }
        got += static_cast<size_t>(n);
        if (std::memchr(head.data() + got - static_cast<size_t>(n), '\n', static_cast<size_t>(n))) break;
      }
      ::close(fd);
      head.resize(got);
      const size_t eol = head.find('\n');
      if (eol == std::string::npos && got > kCsvHeaderMax)
        return make_error(EINVAL, "--csv %s: its first line is longer than %zu KiB: not a CSV file of rdtx-bench",
                          path.c_str(), kCsvHeaderMax >> 10);
      existing = head.substr(0, eol);
    }
  }
  if (!existing.empty() && existing != header) {
    size_t i = 0;
    while (i < existing.size() && i < header.size() && existing[i] == header[i]) ++i;
    const size_t start = header.rfind(',', i == 0 ? 0 : i - 1);
    const size_t from = start == std::string::npos ? 0 : start + 1;
    return make_error(EINVAL, "--csv %s: the file has other columns (first difference at '%s'); use a new file",
                      path.c_str(), header.substr(from, header.find(',', from) - from).c_str());
  }
  std::ofstream out(path, std::ios::app);
  if (existing.empty()) out << header << "\n";
  out << row << "\n";
  out.close();
  if (!out) return make_error(EIO, "--csv %s: cannot write", path.c_str());
  return {};
}

Result<void> check_csv_path(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      return make_error(EINVAL, "--csv %s: not a regular file (a CSV table is appended to a file)", path.c_str());
    if (::access(path.c_str(), W_OK) != 0)
      return make_error(EINVAL, "--csv %s: cannot write: %s", path.c_str(), std::strerror(errno));
    return {};
  }
  if (errno != ENOENT) return make_error(EINVAL, "--csv %s: %s", path.c_str(), std::strerror(errno));
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return make_error(EINVAL, "--csv %s: no directory %s", path.c_str(), dir.c_str());
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return make_error(EINVAL, "--csv %s: cannot create a file in %s: %s", path.c_str(), dir.c_str(),
                      std::strerror(errno));
  return {};
}


JsonOutput::~JsonOutput() {
  if (fd_ >= 0) ::close(fd_);
}

Result<void> JsonOutput::open(const std::string& path, JsonOutput& out) {
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) return make_error(EINVAL, "--json %s: %s", path.c_str(), std::strerror(errno));
  if (exists && S_ISDIR(st.st_mode)) return make_error(EINVAL, "--json %s: is a directory", path.c_str());
  const bool regular = !exists || S_ISREG(st.st_mode);
  if (!regular && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
    return make_error(EINVAL, "--json %s: not a regular file, a pipe or a character device", path.c_str());
  // O_NONBLOCK: opening a FIFO for writing would otherwise wait for a
  // reader; without one it fails with ENXIO, and that is the error.
  const int flags = regular ? O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC : O_WRONLY | O_NONBLOCK | O_CLOEXEC;
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    const int err = errno;
    if (err == ENXIO) return make_error(EINVAL, "--json %s: a FIFO that no process reads", path.c_str());
    if (!exists && err == ENOENT) {
      const std::filesystem::path parent = std::filesystem::path(path).parent_path();
      return make_error(EINVAL, "--json %s: no directory %s", path.c_str(),
                        parent.empty() ? "." : parent.string().c_str());
    }
    return make_error(EINVAL, "--json %s: cannot write: %s", path.c_str(), std::strerror(err));
  }
  if (!regular) {
    const int fl = ::fcntl(fd, F_GETFL);
    if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);  // the report may fill the pipe: wait then
  }
  if (out.fd_ >= 0) ::close(out.fd_);
  out.fd_ = fd;
  out.regular_ = regular;
  out.path_ = path;
  return {};
}

Result<void> JsonOutput::write_and_close(const std::string& text) {
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd_) != 0 && err == 0 && errno != EINTR) err = errno;
  fd_ = -1;
  if (err != 0) return make_error(err, "cannot write %s: %s", path_.c_str(), std::strerror(err));
  return {};
}

void JsonOutput::discard() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  if (regular_) std::remove(path_.c_str());
}

}  // namespace rdtx::bench
