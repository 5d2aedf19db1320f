// A deadline for a coroutine waiting on other nodes, that time its thread
// did not run does not use up: a gap of more than 1 ms between two checks
// (the thread was descheduled, or the loop was stalled) moves it on by the
// gap, as the RPC layer's timeouts do (Endpoint::not_polled), so that a
// waiter is not failed for its own absence.
// Thread-safety: none; one coroutine's.
#pragma once

#include <cstdint>

#include "env/tsc.hpp"

namespace rdtx::runtime {

class Deadline {
 public:
  explicit Deadline(uint64_t timeout_ns)
      : last_(env::tsc()), deadline_(last_ + env::ns_to_tsc(timeout_ns)), gap_(env::ns_to_tsc(1'000'000)) {}
  // Whether it has passed; call it on every check.
  bool passed() {
    const uint64_t now = env::tsc();
    if (now - last_ > gap_) deadline_ += now - last_;
    last_ = now;
    return now > deadline_;
  }

 private:
  // Ticks are converted per deadline, not cached for the process: a thread
  // in virtual time counts ticks at another rate (env/virtual_clock.hpp).
  uint64_t last_, deadline_, gap_;
};

}  // namespace rdtx::runtime
