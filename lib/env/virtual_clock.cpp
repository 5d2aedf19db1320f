#include "env/virtual_clock.hpp"

#include <ctime>

#if __has_include(<sys/rseq.h>)
#include <sys/rseq.h>
#define RDTX_HAVE_RSEQ 1
#endif

namespace rdtx::env {

namespace {

uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// This thread's rseq area (registered by glibc 2.35 and later), or nullptr.
struct rseq* thread_rseq() {
#ifdef RDTX_HAVE_RSEQ
  if (__rseq_size < 8) return nullptr;  // not registered (old kernel, or glibc.pthread.rseq=0)
  return reinterpret_cast<struct rseq*>(static_cast<char*>(__builtin_thread_pointer()) + __rseq_offset);
#else
  return nullptr;
#endif
}

}  // namespace

const char* to_string(VirtualCost c) { return c == VirtualCost::kModel ? "model" : "measured"; }

VirtualClock::VirtualClock(VirtualCost cost, const CostModel& model, uint64_t start, uint64_t max_pass_ns)
    : cost_(cost), model_(model), unit_{model.pass_ns, model.work_ns, model.resume_ns} {
  at = start;
  mark = hw_tsc();
  measured = cost == VirtualCost::kMeasured;
  max_pass = max_pass_ns;
  ns_per_hw_tick = 1e9 / static_cast<double>(hw_tsc_hz());
  rebase_ticks_ = hw_tsc_hz() / 100;
  if (measured) {
    if (struct rseq* r = thread_rseq(); r != nullptr) {
      // The kernel writes cpu_id_start (the first word) on every return to
      // user space after a preemption; glibc reads cpu_id, not this word.
      preempt_word = reinterpret_cast<volatile uint32_t*>(r);
      rebase();
      preemptions = 0;
    }
  }
}

VirtualClock::~VirtualClock() {
  if (preempt_word != nullptr) *preempt_word = thread_rseq()->cpu_id;
}

void VirtualClock::rebase() {
  if (*preempt_word != kArmed) ++preemptions;
  *preempt_word = kArmed;
  cpu_base = thread_cpu_ns();
  hw_base = hw_tsc();
  if (mark < hw_base) mark = hw_base;  // the system call is nobody's pass
}

namespace detail {

void VirtualNow::recover() {
  // No preemption between hw_base and mark (run_from() checked): the CPU
  // time at mark follows from the base; the pass's CPU time since is what
  // the thread ran, whatever the wall clock did meanwhile.
  const uint64_t cpu = thread_cpu_ns();
  const uint64_t hw = hw_tsc();
  const double at_mark = static_cast<double>(cpu_base) + static_cast<double>(mark - hw_base) * ns_per_hw_tick;
  const double ran = static_cast<double>(cpu) - at_mark;
  const uint64_t m = ran > 0 ? static_cast<uint64_t>(ran) : 0;
  at += m < max_pass ? m : max_pass;
  ++preemptions;
  *preempt_word = kArmed;
  mark = hw;
  cpu_base = cpu;
  hw_base = hw;
}

}  // namespace detail

}  // namespace rdtx::env
