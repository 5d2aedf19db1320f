// Loop: the run-to-completion loop of one lcore. It runs one or more workers
// in turn (several workers per lcore is how a many-node embedded cluster runs
// on 1-2 cores, and deterministically on one thread in tests), accounts busy
// and idle time, and applies an idle policy after empty passes.
//
// Idle policy: `spin` polls without pause (lowest latency, one core per
// lcore); `yield` calls sched_yield() and `sleep` sleeps sleep_us after
// idle_polls consecutive empty passes, so that more busy threads than cores
// measure the protocol rather than the OS scheduler. `auto` (default) spins
// when every lcore has a CPU of its own (counting the loops of the run's
// other processes on this host) and yields otherwise.
// Draining: the loops of one run share a DrainGroup, so that a loop whose own
// coordinators have returned keeps polling its workers (RPC handlers, CQs,
// pollers) until every loop's tasks have returned: its nodes still serve the
// coordinators of the other loops, whose calls would otherwise time out with
// locks held.
// Time: a Loop runs in real time and reads the hardware counter
// (env::hw_tsc(), the same ticks as env::tsc() then); virtual time has its
// own loop (virtual_loop.hpp).
// Thread-safety: a Loop and its workers are used by one thread; a DrainGroup
// is shared by the loops of one run (atomics).
#pragma once

#include <atomic>
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
// As above, and also kYield when this process's loops and `other_loops`
// (loops of other processes of the run on this host) outnumber `host_cpus`
// (the CPUs of this process's affinity mask; 0: unknown, not counted):
// processes that each believe their lcore is their own would all spin.
IdlePolicy resolve_idle_policy(IdlePolicy p, unsigned loops, unsigned cpus, unsigned other_loops,
                               unsigned host_cpus);

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
  uint64_t idle_passes = 0;  // of them, passes that did no work (VirtualLoop; Loop leaves it 0)
  uint64_t idle_yields = 0;  // sched_yield/sleep calls
  double busy_share() const {
    uint64_t t = busy_tsc + idle_tsc;
    return t ? static_cast<double>(busy_tsc) / static_cast<double>(t) : 0.0;
  }
};

enum class StopReason { kDeadline, kShutdown, kIdle };

// The loops of one run, counted while any of their tasks is live. Created
// with the number of loops before any of them starts; each Loop::run given
// the group counts itself out when its workers have no live task (and in
// again if a task appears), and returns once the count is 0 (or its drain
// time bound passes).
class DrainGroup {
 public:
  explicit DrainGroup(unsigned loops) : busy_(loops) {}
  DrainGroup(const DrainGroup&) = delete;
  DrainGroup& operator=(const DrainGroup&) = delete;
  // Loops that still have a live task (or have not yet looked).
  unsigned busy() const { return busy_.load(std::memory_order_acquire); }

 private:
  friend class Loop;
  // The control path only: it is read once per pass while a loop drains, and
  // changed when a loop's own task count reaches or leaves 0. acq_rel/acquire
  // order a loop's last task's effects on this thread before the others see
  // the count fall (the data itself travels through the driver, which orders
  // it on its own).
  alignas(64) std::atomic<unsigned> busy_;
};

class Loop {
 public:
  explicit Loop(LoopOptions opts = {});
  void add_worker(Worker* w) { workers_.push_back(w); }
  const std::vector<Worker*>& workers() const { return workers_; }

  // Runs until the TSC reaches deadline_tsc (0: none), a shutdown is requested,
  // or (stop_when_idle) no worker has a live task. Then asks every worker to
  // stop and keeps running until their tasks finish or drain_ns passes.
  // With a `group` (the loops of one run, on other threads), "no live task"
  // means none on any loop of the group: this loop keeps polling its workers
  // until every loop's tasks have returned, bounded by drain_ns after the
  // stop (without bound while stop_when_idle waits for the others).
  StopReason run(uint64_t deadline_tsc, bool stop_when_idle = false, DrainGroup* group = nullptr);
  // One pass over all workers, with accounting; returns the work done.
  int run_once();

  const LoopStats& stats() const { return stats_; }

 private:
  size_t live_tasks() const;
  void idle();
  // Counts this loop in or out of group_ by whether it has a live task;
  // true when neither it nor (with a group) any other loop has one.
  bool all_idle();

  LoopOptions opts_;
  std::vector<Worker*> workers_;
  LoopStats stats_;
  uint64_t last_tsc_ = 0;
  uint32_t empty_passes_ = 0;
  DrainGroup* group_ = nullptr;
  bool counted_out_ = false;  // this loop has left group_'s busy count
};

}  // namespace rdtx::runtime
