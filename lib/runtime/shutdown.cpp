#include "runtime/shutdown.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace rdtx::runtime {

namespace {
std::atomic<bool> g_stop{false};  // lock-free, hence usable from a handler
static_assert(std::atomic<bool>::is_always_lock_free);
std::atomic<int> g_signal{0};  // the first signal that asked to stop
static_assert(std::atomic<int>::is_always_lock_free);

void on_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig, std::memory_order_relaxed);
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

void request_shutdown() { g_stop.store(true, std::memory_order_relaxed); }
bool shutdown_requested() { return g_stop.load(std::memory_order_relaxed); }
int shutdown_signal() { return g_signal.load(std::memory_order_relaxed); }
void reset_shutdown() {
  g_stop.store(false, std::memory_order_relaxed);
  g_signal.store(0, std::memory_order_relaxed);
}

}  // namespace rdtx::runtime
