#include "env/virtual_clock.hpp"

#if __has_include(<sys/rseq.h>)
#include <sys/rseq.h>
#define RDTX_HAVE_RSEQ 1
#endif

namespace rdtx::env {

namespace {

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
  if (measured) {
    if (struct rseq* r = thread_rseq(); r != nullptr) {
      // The kernel writes cpu_id_start (the first word) on every return to
      // user space after a preemption; glibc reads cpu_id, not this word.
      preempt_word = reinterpret_cast<volatile uint32_t*>(r);
      *preempt_word = kArmed;
    }
  }
}

VirtualClock::~VirtualClock() {
  if (preempt_word != nullptr) *preempt_word = thread_rseq()->cpu_id;
}

}  // namespace rdtx::env
