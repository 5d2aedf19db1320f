#include "runtime/loop.hpp"

#include <sched.h>
#include <unistd.h>

#include "env/tsc.hpp"
#include "runtime/shutdown.hpp"

namespace rdtx::runtime {

Result<IdlePolicy> parse_idle_policy(const std::string& s) {
  if (s == "auto") return IdlePolicy::kAuto;
  if (s == "spin") return IdlePolicy::kSpin;
  if (s == "yield") return IdlePolicy::kYield;
  if (s == "sleep") return IdlePolicy::kSleep;
  return make_error(EINVAL, "idle policy '%s' is not one of auto, spin, yield, sleep", s.c_str());
}

const char* to_string(IdlePolicy p) {
  switch (p) {
    case IdlePolicy::kAuto: return "auto";
    case IdlePolicy::kSpin: return "spin";
    case IdlePolicy::kYield: return "yield";
    case IdlePolicy::kSleep: return "sleep";
  }
  return "?";
}

IdlePolicy resolve_idle_policy(IdlePolicy p, unsigned loops, unsigned cpus) {
  if (p != IdlePolicy::kAuto) return p;
  return loops <= cpus ? IdlePolicy::kSpin : IdlePolicy::kYield;
}

IdlePolicy resolve_idle_policy(IdlePolicy p, unsigned loops, unsigned cpus, unsigned other_loops,
                               unsigned host_cpus) {
  if (p != IdlePolicy::kAuto) return p;
  if (other_loops != 0 && host_cpus != 0 && loops + other_loops > host_cpus) return IdlePolicy::kYield;
  return resolve_idle_policy(p, loops, cpus);
}

Loop::Loop(LoopOptions opts) : opts_(opts) {
  if (opts_.idle == IdlePolicy::kAuto) opts_.idle = IdlePolicy::kSpin;
}

int Loop::run_once() {
  if (last_tsc_ == 0) last_tsc_ = env::hw_tsc();
  int work = 0;
  for (Worker* w : workers_) work += w->poll_once();
  uint64_t now = env::hw_tsc();
  (work > 0 ? stats_.busy_tsc : stats_.idle_tsc) += now - last_tsc_;
  last_tsc_ = now;
  ++stats_.passes;
  if (work > 0) {
    empty_passes_ = 0;
  } else if (++empty_passes_ >= opts_.idle_polls && opts_.idle != IdlePolicy::kSpin) {
    idle();
  }
  return work;
}

void Loop::idle() {
  empty_passes_ = 0;
  ++stats_.idle_yields;
  if (opts_.idle == IdlePolicy::kYield)
    sched_yield();
  else
    usleep(opts_.sleep_us);
  // Time given away is idle time.
  uint64_t now = env::hw_tsc();
  stats_.idle_tsc += now - last_tsc_;
  last_tsc_ = now;
}

size_t Loop::live_tasks() const {
  size_t n = 0;
  for (Worker* w : workers_) n += w->live_tasks();
  return n;
}

bool Loop::all_idle() {
  const bool idle_here = live_tasks() == 0;
  if (group_ == nullptr) return idle_here;
  if (idle_here != counted_out_) {
    // A task may appear again after the count fell (a handler spawning one):
    // then this loop counts itself back in until it returns.
    if (idle_here)
      group_->busy_.fetch_sub(1, std::memory_order_acq_rel);
    else
      group_->busy_.fetch_add(1, std::memory_order_acq_rel);
    counted_out_ = idle_here;
  }
  return idle_here && group_->busy_.load(std::memory_order_acquire) == 0;
}

StopReason Loop::run(uint64_t deadline_tsc, bool stop_when_idle, DrainGroup* group) {
  group_ = group;
  counted_out_ = false;
  StopReason why;
  for (;;) {
    run_once();
    if (shutdown_requested()) {
      why = StopReason::kShutdown;
      break;
    }
    if (deadline_tsc != 0 && last_tsc_ >= deadline_tsc) {
      why = StopReason::kDeadline;
      break;
    }
    if (stop_when_idle && all_idle()) {
      group_ = nullptr;
      return StopReason::kIdle;
    }
  }
  for (Worker* w : workers_) w->request_stop();
  // Serve the other loops' coordinators until they have stopped too.
  const uint64_t drain_end = env::hw_tsc() + env::ns_to_tsc(opts_.drain_ns);
  // (No drain after a halt: a fenced node serves nobody.)
  while (!halt_requested() && !all_idle() && env::hw_tsc() < drain_end) run_once();
  group_ = nullptr;
  return why;
}

}  // namespace rdtx::runtime
