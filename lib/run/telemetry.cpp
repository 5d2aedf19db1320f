#include "run/telemetry.hpp"

#include <string>

#include "env/tsc.hpp"
#include "run/progress.hpp"

namespace rdtx::run {

void add_worker_counters(env::TelemetryDict& out, const uint64_t (&counters)[txn::kWorkerCounterCount]) {
  out.add_dict("counters", [&](env::TelemetryDict& d) {
    for (size_t k = 0; k < txn::kWorkerCounterCount; ++k) {
      const txn::WorkerCounter& c = txn::kWorkerCounters[k];
      if (c.is_signed())
        d.add_i64(c.key, static_cast<int64_t>(counters[k]));
      else
        d.add_u64(c.key, counters[k]);
    }
  });
}

std::vector<env::TelemetryCommand> register_run_telemetry(
    const std::vector<std::unique_ptr<txn::WorkerEngine>>& engines, uint64_t t0, uint64_t measure_at,
    const std::vector<txn::AbortReasonName>& names) {
  std::vector<env::TelemetryCommand> cmds;
  if (!env::telemetry_available()) return cmds;
  auto ns = [](uint64_t tsc) { return env::tsc_to_ns(tsc); };
  auto stats = env::telemetry_register(
      "/rdtx/stats", "rdtx: committed/attempted txns, aborts by reason, latency (ns) of the measured window",
      [&engines, t0, measure_at, ns, &names](std::string_view, env::TelemetryDict& out) {
        stats::Histogram lat;
        const txn::LiveStats sum = sum_live(engines, &lat);
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
        add_worker_counters(out, sum.counters);
      });
  if (stats.ok()) cmds.push_back(std::move(*stats));
  auto workers = env::telemetry_register(
      "/rdtx/workers", "rdtx: per worker (n<node>w<index>): committed, attempted, aborted",
      [&engines](std::string_view, env::TelemetryDict& out) {
        txn::LiveStats l;
        for (const auto& e : engines) {
          if (!e->live().read(&l)) continue;
          uint64_t aborted = 0;
          for (int r = 0; r < txn::kMaxAbortReasons; ++r) aborted += l.aborts[r];
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

}  // namespace rdtx::run
