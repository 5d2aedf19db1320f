// Time-stamp counter: the cheap, monotonic clock of every hot path.
// tsc() is inline and needs no initialisation; tsc_hz() comes from DPDK once
// the EAL is up, and from a one-off calibration against CLOCK_MONOTONIC
// otherwise (unit tests that run without an EAL).
//
// Virtual time (virtual_clock.hpp, doc/runtime.md "Virtual time"): a thread
// that installs a VirtualClock reads that clock from tsc(), and tsc_hz() is
// then the virtual clock's rate (1 GHz: a tick is a nanosecond). Without
// one, tsc() costs one thread-local load and a predictable branch more than
// the bare counter (hw_tsc()).
// Thread-safety: all functions may be called from any thread; a virtual
// clock is seen only by the thread that installed it.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace rdtx::env {

// The hardware counter, whatever clock this thread runs on: for measuring
// real CPU time (the virtual clock's own measurement, load times).
inline uint64_t hw_tsc() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#elif defined(__aarch64__)
  uint64_t v;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
#error "rdtx::env::tsc needs a cycle counter for this architecture"
#endif
}

namespace detail {
// What tsc() reads of a thread's VirtualClock (virtual_clock.hpp, which
// explains it), inline and without a call on either path, so that callers
// keep their registers and real time pays two loads and a branch.
struct VirtualNow {
  uint64_t at = 0;  // ticks: where the pass started, plus what was charged or spent
  // kMeasured: the pass's real time since `mark` (hw_tsc()) is added, at
  // most max_pass ticks. With preemption detection, preempt_word (this
  // thread's rseq cpu_id_start) holds kArmed; the kernel rewrites it when
  // it preempts (or signals, or migrates) the thread. A read that finds it
  // rewritten counts the pass up to the previous read (`last`) and measures
  // on from here: the time off the CPU is left out.
  uint64_t mark = 0;
  uint64_t max_pass = 0;
  double ns_per_hw_tick = 0;
  volatile uint32_t* preempt_word = nullptr;
  uint64_t last = 0;         // the measured part of the previous read of this pass
  uint64_t preemptions = 0;  // reads that found the word rewritten
  bool measured = false;
  static constexpr uint32_t kArmed = 0xffff'fffe;

  uint64_t now() {
    if (!measured) return at;
    const uint64_t t = hw_tsc();
    auto m = static_cast<uint64_t>(static_cast<double>(t - mark) * ns_per_hw_tick);
    if (m > max_pass) m = max_pass;
    if (preempt_word != nullptr && *preempt_word != kArmed) [[unlikely]] {
      at += last;
      mark = t;
      m = 0;
      *preempt_word = kArmed;
      ++preemptions;
    }
    last = m;
    return at + m;
  }
};
// This thread's virtual clock, or nullptr (real time). Constant-initialised
// (no TLS wrapper call) and initial-exec (no __tls_get_addr: the libraries
// are static, linked into executables).
extern constinit thread_local VirtualNow* t_virtual_clock __attribute__((tls_model("initial-exec")));
}  // namespace detail

// Now, in ticks: this thread's virtual clock if it has one, else hw_tsc().
inline uint64_t tsc() {
  if (detail::VirtualNow* v = detail::t_virtual_clock; v != nullptr) [[unlikely]]
    return v->now();
  return hw_tsc();
}

// Ticks per second of tsc(): the virtual clock's rate under one, else the
// hardware counter's (hw_tsc_hz()).
uint64_t tsc_hz();
uint64_t hw_tsc_hz();

inline uint64_t ns_to_tsc(uint64_t ns) {
  return static_cast<uint64_t>(static_cast<double>(ns) * static_cast<double>(tsc_hz()) / 1e9);
}
inline double tsc_to_ns(uint64_t ticks) {
  return static_cast<double>(ticks) * 1e9 / static_cast<double>(tsc_hz());
}

// Spends `ticks` of this thread's time, as a CPU does in a busy wait (an
// MMIO doorbell, a computation): spins on the hardware counter in real
// time; under a virtual clock, advances the clock instead (no wall time).
// Returns tsc() afterwards.
uint64_t spend_ticks(uint64_t ticks);

// Wall-clock nanoseconds (CLOCK_MONOTONIC); for control paths only.
uint64_t monotonic_ns();

}  // namespace rdtx::env
