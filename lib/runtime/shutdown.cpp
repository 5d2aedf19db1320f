#include "runtime/shutdown.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

namespace rdtx::runtime {

namespace {
std::atomic<bool> g_stop{false};  // lock-free, hence usable from a handler
static_assert(std::atomic<bool>::is_always_lock_free);
std::atomic<bool> g_halt{false};
std::atomic<int> g_signal{0};  // the first signal that asked to stop
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<int64_t> g_stop_ns{0};  // CLOCK_MONOTONIC of the first request
static_assert(std::atomic<int64_t>::is_always_lock_free);

// clock_gettime is async-signal-safe (POSIX.1-2008).
int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Records when the first request came; later ones keep it.
void note_request_time() {
  int64_t none = 0;
  g_stop_ns.compare_exchange_strong(none, monotonic_ns(), std::memory_order_relaxed);
}

void on_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig, std::memory_order_relaxed);
  note_request_time();
  if (g_stop.exchange(true, std::memory_order_relaxed)) {
    constexpr char msg[] = "rdtx: second signal, exiting now\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(128 + sig);
  }
  constexpr char msg[] = "rdtx: stopping (signal again to exit at once)\n";
  (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
}
}  // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void request_shutdown() {
  note_request_time();
  g_stop.store(true, std::memory_order_relaxed);
}
bool shutdown_requested() { return g_stop.load(std::memory_order_relaxed); }
int shutdown_signal() { return g_signal.load(std::memory_order_relaxed); }

const char* shutdown_cause() {
  switch (shutdown_signal()) {
    case 0:
      return "a stop request";
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:  // not a signal install_signal_handlers() catches
      return "a signal";
  }
}

void request_halt() {
  g_halt.store(true, std::memory_order_relaxed);
  request_shutdown();
}
bool halt_requested() { return g_halt.load(std::memory_order_relaxed); }

void reset_shutdown() {
  g_stop.store(false, std::memory_order_relaxed);
  g_halt.store(false, std::memory_order_relaxed);
  g_signal.store(0, std::memory_order_relaxed);
  g_stop_ns.store(0, std::memory_order_relaxed);
}

bool stop_grace_over() {
  if (!shutdown_requested()) return false;
  // A request whose time is not stored yet (request_shutdown() between its
  // two stores) has only just come.
  const int64_t at = g_stop_ns.load(std::memory_order_relaxed);
  return at != 0 && monotonic_ns() - at >= static_cast<int64_t>(kStopGraceNs);
}

}  // namespace rdtx::runtime
