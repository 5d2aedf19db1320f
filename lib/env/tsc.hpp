// Time-stamp counter: the cheap, monotonic clock of every hot path.
// tsc() is inline and needs no initialisation; tsc_hz() comes from DPDK once
// the EAL is up, and from a one-off calibration against CLOCK_MONOTONIC
// otherwise (unit tests that run without an EAL).
// Thread-safety: all functions may be called from any thread.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace rdtx::env {

inline uint64_t tsc() {
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

// Ticks per second.
uint64_t tsc_hz();

inline uint64_t ns_to_tsc(uint64_t ns) {
  return static_cast<uint64_t>(static_cast<double>(ns) * static_cast<double>(tsc_hz()) / 1e9);
}
inline double tsc_to_ns(uint64_t ticks) {
  return static_cast<double>(ticks) * 1e9 / static_cast<double>(tsc_hz());
}

// Wall-clock nanoseconds (CLOCK_MONOTONIC); for control paths only.
uint64_t monotonic_ns();

}  // namespace rdtx::env
