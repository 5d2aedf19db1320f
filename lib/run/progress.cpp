#include "run/progress.hpp"

#include <cstdio>

#include "env/tsc.hpp"

namespace rdtx::run {

txn::LiveStats sum_live(const std::vector<std::unique_ptr<txn::WorkerEngine>>& engines, stats::Histogram* lat) {
  txn::LiveStats sum{}, l;
  for (const auto& e : engines)
    if (e->live().read(&l)) {
      sum.commits += l.commits;
      sum.attempts += l.attempts;
      sum.measured_commits += l.measured_commits;
      for (int r = 0; r < txn::kMaxAbortReasons; ++r) sum.aborts[r] += l.aborts[r];
      for (size_t k = 0; k < txn::kWorkerCounterCount; ++k) sum.counters[k] += l.counters[k];
      lat->merge(l.latency_tsc);
    }
  return sum;
}

Progress::Progress(double interval_s, const std::vector<std::unique_ptr<txn::WorkerEngine>>& engines, uint64_t t0,
                   uint64_t measure_at, bool wall_clock)
    : engines_(engines), t0_(t0), measure_at_(measure_at), wall_clock_(wall_clock) {
  last_ = t0;
  if (interval_s <= 0) return;
  if (wall_clock_) {
    wall_t0_ = env::hw_tsc();
    interval_ = static_cast<uint64_t>(interval_s * static_cast<double>(env::hw_tsc_hz()));
    next_ = wall_t0_ + interval_;
  } else {
    interval_ = env::ns_to_tsc(static_cast<uint64_t>(interval_s * 1e9));
    next_ = t0 + interval_;
  }
}

void Progress::tick() {
  if (interval_ == 0) return;
  const uint64_t clock = wall_clock_ ? env::hw_tsc() : env::tsc();
  if (clock < next_) return;
  next_ = clock + interval_;
  print(env::tsc());
}

void Progress::start_thread() {
  if (interval_ != 0) ticker_.emplace([this] { tick(); });
}

void Progress::print(uint64_t now) {
  stats::Histogram lat;
  const txn::LiveStats sum = sum_live(engines_, &lat);
  const uint64_t commits = sum.commits, attempts = sum.attempts;
  const double dt = env::tsc_to_ns(now - last_) / 1e9;
  const uint64_t dc = commits - last_commits_, da = attempts - last_attempts_;
  char p99[32] = "-";
  if (lat.count()) std::snprintf(p99, sizeof p99, "%.2f us", env::tsc_to_ns(lat.percentile(0.99)) / 1000.0);
  char when[64];
  if (wall_clock_)
    std::snprintf(when, sizeof when, "[wall %6.1f s, virtual %.6f s]",
                  static_cast<double>(env::hw_tsc() - wall_t0_) / static_cast<double>(env::hw_tsc_hz()),
                  env::tsc_to_ns(now - t0_) / 1e9);
  else
    std::snprintf(when, sizeof when, "[%6.1f s]", env::tsc_to_ns(now - t0_) / 1e9);
  std::fprintf(stderr, "%s %s %12.0f committed/s %12.0f attempted/s  aborts %5.1f %%  p99 %s\n", when,
               now < measure_at_ ? "warm-up " : "measured",
               dt > 0 ? static_cast<double>(dc) / dt : 0.0, dt > 0 ? static_cast<double>(da) / dt : 0.0,
               da ? 100.0 * static_cast<double>(da - dc) / static_cast<double>(da) : 0.0, p99);
  last_ = now;
  last_commits_ = commits;
  last_attempts_ = attempts;
}

}  // namespace rdtx::run
