// The progress line of a run, and the ticker thread it (and the peer watch)
// runs on. Internal to lib/run.
// Thread-safety: Progress::tick() runs on one thread at a time (the ticker's,
// or the caller's in a single-threaded run); what it reads, the workers
// publish through stats::Published.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "stats/histogram.hpp"
#include "txn/engine.hpp"

namespace rdtx::run {

// The live figures of every worker added up (kWorkerCounters merged by
// adding their bits); `lat` gets their merged latency.
txn::LiveStats sum_live(const std::vector<std::unique_ptr<txn::WorkerEngine>>& engines, stats::Histogram* lat);

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

// The progress line: every `interval_s`, the committed and attempted rates
// since the last line, the abort rate and the p99 latency of the measured
// window so far, from what the workers publish. A thread of its own when the
// workers run on lcores; ticked by the loop otherwise.
class Progress {
 public:
  // interval_s = 0: no line at all. `wall_clock` (virtual time): a line
  // every interval_s of wall time, not of the run's (virtual) time, which
  // may pass far more slowly; it says both.
  Progress(double interval_s, const std::vector<std::unique_ptr<txn::WorkerEngine>>& engines, uint64_t t0,
           uint64_t measure_at, bool wall_clock = false);

  void tick();
  void start_thread();
  void stop_thread() { ticker_.reset(); }

 private:
  void print(uint64_t now);

  const std::vector<std::unique_ptr<txn::WorkerEngine>>& engines_;
  uint64_t t0_, measure_at_, interval_ = 0, next_ = 0, last_ = 0;
  bool wall_clock_ = false;
  uint64_t wall_t0_ = 0;  // hw_tsc() at construction (wall_clock_)
  uint64_t last_commits_ = 0, last_attempts_ = 0;
  std::optional<Ticker> ticker_;  // last: stopped before the rest goes
};

}  // namespace rdtx::run
