#include "txn/fault.hpp"

#include <csignal>
#include <cstdio>
#include <ctime>

#include "txn/types.hpp"

namespace rdtx::txn::fault {

void die_at(KillPoint p, uint64_t attempt, const char* what) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  std::fprintf(stderr,
               "rdtx-bench: fault: node %u kills itself (SIGKILL) in the %s stage of attempt %llx (worker %u, "
               "coroutine %u): %s, at %lld.%06ld\n",
               txn_node(attempt), p == KillPoint::kLog ? "log" : "commit", static_cast<unsigned long long>(attempt),
               txn_worker(attempt), txn_coroutine(attempt), what, static_cast<long long>(ts.tv_sec), ts.tv_nsec / 1000);
  std::fflush(stderr);
  ::raise(SIGKILL);
  for (;;) {
  }
}

}  // namespace rdtx::txn::fault
