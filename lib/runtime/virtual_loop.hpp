// VirtualLoop: runs many workers on the calling thread in virtual time, each
// as if it had a CPU of its own (doc/runtime.md "Virtual time"). Every
// worker has a clock; each step runs one pass of the worker whose clock is
// smallest (ties: the one added first), with the thread's VirtualClock
// started at that worker's clock, and the worker's clock becomes the
// clock's reading at the end of the pass: the pass's measured or modelled
// cost later (env/virtual_clock.hpp). Everything the pass reads from
// env::tsc() — the shm driver's latency and RNIC models, timers, deadlines,
// timestamps, latencies — is that worker's virtual time, so a request
// posted at virtual time t completes at t plus the modelled latency and
// queueing, seen by the poster's first pass at or after then.
//
// Between steps the thread's clock reads the smallest worker clock: the
// cluster's "now", which only grows.
// Thread-safety: one thread, the one whose clock it drives.
#pragma once

#include <cstdint>
#include <queue>
#include <utility>
#include <vector>

#include "env/virtual_clock.hpp"
#include "runtime/loop.hpp"
#include "runtime/worker.hpp"

namespace rdtx::runtime {

class VirtualLoop {
 public:
  // `clock` is the calling thread's installed clock (VirtualClock::Scope).
  explicit VirtualLoop(env::VirtualClock& clock) : clock_(clock) {}
  VirtualLoop(const VirtualLoop&) = delete;
  VirtualLoop& operator=(const VirtualLoop&) = delete;

  // Adds a worker whose clock starts at now().
  void add_worker(Worker* w);

  // One pass of the worker with the smallest clock; returns its work.
  int step();
  // Steps until now() reaches `until` or stop() returns true (checked
  // between steps).
  template <typename Stop>
  void run_until(uint64_t until, Stop stop) {
    while (now() < until && !stop()) step();
  }

  // The smallest worker clock.
  uint64_t now() const { return heap_.empty() ? clock_.now() : heap_.top().first; }
  // Worker i's clock (in the order added).
  uint64_t clock_of(size_t i) const { return clocks_[i]; }
  size_t workers() const { return workers_.size(); }

  // Per worker: passes, and the virtual time of passes that did work
  // (busy) and of those that did none (idle).
  const std::vector<LoopStats>& stats() const { return stats_; }
  // kMeasured passes whose real time was cut to the cap (preempted).
  uint64_t capped_passes() const { return capped_; }

 private:
  using Entry = std::pair<uint64_t, uint32_t>;  // clock, worker
  env::VirtualClock& clock_;
  std::vector<Worker*> workers_;
  std::vector<uint64_t> clocks_;
  std::vector<LoopStats> stats_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap_;
  uint64_t capped_ = 0;
};

}  // namespace rdtx::runtime
