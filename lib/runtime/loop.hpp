// Loop: the run-to-completion loop of one lcore. It runs one or more workers
// in turn (several workers per lcore is how a many-node embedded cluster runs
// on 1-2 cores, and deterministically on one thread in tests), accounts busy
// and idle time, and applies an idle policy after empty passes.
//
// Idle policy: `spin` polls without pause (lowest latency, one core per
// lcore); `yield` calls sched_yield() and `sleep` sleeps sleep_us after
// idle_polls consecutive empty passes, so that more busy threads than cores
// measure the protocol rather than the OS scheduler. `auto` (default) spins
// when every lcore has a CPU of its own and yields otherwise.
// Thread-safety: a Loop and its workers are used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "runtime/worker.hpp"

namespace rdtx::runtime {

enum class IdlePolicy { kAuto, kSpin, kYield, kSleep };
Result<IdlePolicy> parse_idle_policy(const std::string& s);
const char* to_string(IdlePolicy p);
// kAuto -> kSpin if each of `loops` loops has a CPU of its own, else kYield.
IdlePolicy resolve_idle_policy(IdlePolicy p, unsigned loops, unsigned cpus);

struct LoopOptions {
  IdlePolicy idle = IdlePolicy::kSpin;  // resolved (not kAuto)
  uint32_t idle_polls = 256;            // empty passes before yielding/sleeping
  uint32_t sleep_us = 50;
  uint64_t drain_ns = 1'000'000'000;    // after stop: wait this long for tasks
};

struct LoopStats {
  uint64_t busy_tsc = 0;
  uint64_t idle_tsc = 0;
  uint64_t passes = 0;
  uint64_t idle_yields = 0;  // sched_yield/sleep calls
  double busy_share() const {
    uint64_t t = busy_tsc + idle_tsc;
    return t ? static_cast<double>(busy_tsc) / static_cast<double>(t) : 0.0;
  }
};

enum class StopReason { kDeadline, kShutdown, kIdle };

class Loop {
 public:
  explicit Loop(LoopOptions opts = {});
  void add_worker(Worker* w) { workers_.push_back(w); }
  const std::vector<Worker*>& workers() const { return workers_; }

  // Runs until the TSC reaches deadline_tsc (0: none), a shutdown is requested,
  // or (stop_when_idle) no worker has a live task. Then asks every worker to
  // stop and keeps running until their tasks finish or drain_ns passes.
  StopReason run(uint64_t deadline_tsc, bool stop_when_idle = false);
  // One pass over all workers, with accounting; returns the work done.
  int run_once();

  const LoopStats& stats() const { return stats_; }

 private:
  size_t live_tasks() const;
  void idle();

  LoopOptions opts_;
  std::vector<Worker*> workers_;
  LoopStats stats_;
  uint64_t last_tsc_ = 0;
  uint32_t empty_passes_ = 0;
};

}  // namespace rdtx::runtime
