// EAL initialisation and lcores: the process-wide environment of an rdtx app.
// An app is launched as `app [EAL options] -- [app options]`; eal_init()
// consumes the EAL part. Lcores are pinned as the EAL decides (-l, --lcores).
// Thread-safety: eal_init()/eal_cleanup() from the main thread only; lcore
// queries from any thread after init.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace rdtx::env {

// Initialises DPDK's EAL from argv. On success returns n such that
// argv[n] is the program name and argv[n+1..argc) are the app's options
// (what followed `--`): call `argc -= n; argv += n;` and parse as usual.
// Errors name the EAL's reason (bad core list, file prefix in use, ...).
Result<int> eal_init(int argc, char** argv);

// An app's command line split at the first `--`: EAL options before it, the
// app's options after it (app[0] is the program name). Without `--`, every
// argument is the app's; without `--` or with nothing before it, the EAL
// gets the embedded defaults
// (kDefaultEalArgs: one lcore, no huge pages, no PCI, a private file prefix).
struct CommandLine {
  std::vector<std::string> eal;
  std::vector<std::string> app;
};
CommandLine split_command_line(int argc, char** argv);
inline constexpr const char* kDefaultEalArgs = "-l 0 --no-huge --no-pci --no-shconf -m 512";

// eal_init() on cl.eal (plus a --file-prefix unique to this process when the
// caller gave none, so concurrent runs never collide).
Result<void> eal_init(const CommandLine& cl);
void eal_cleanup();
bool eal_initialized();

// The EAL runtime directories (under /var/run/dpdk, $XDG_RUNTIME_DIR/dpdk or
// /tmp/dpdk) of rdtx processes that are gone: those named by the default
// --file-prefix, rdtx-<pid>, whose process no longer exists (a run killed
// outright leaves its directory). Removes each (its files, then itself) and
// returns their paths. Another user's, a live process's and any other
// prefix's directories are left alone.
std::vector<std::string> remove_dead_runtime_dirs();

unsigned lcore_id();        // calling thread's lcore, or kNoLcore
unsigned main_lcore();
unsigned lcore_count();     // enabled lcores, main included
std::vector<unsigned> worker_lcores();  // enabled lcores other than main
constexpr unsigned kNoLcore = UINT32_MAX;

// Number of CPUs this process may run on (its affinity mask).
unsigned available_cores();
// Number of distinct CPUs the enabled lcores are pinned to.
unsigned lcore_cpu_count();

// A thread for blocking work that must stay off the worker lcores (file
// writes): DPDK's control thread (rte_ctrl_thread_create), named, on the
// CPUs no lcore is pinned to (the main lcore's if every CPU is an lcore's);
// a plain thread before eal_init(). The destructor joins it: fn must return
// once the owner asks it to (its own protocol).
class ControlThread {
 public:
  static Result<std::unique_ptr<ControlThread>> start(const std::string& name, std::function<void()> fn);
  ~ControlThread();
  ControlThread(const ControlThread&) = delete;
  ControlThread& operator=(const ControlThread&) = delete;

 private:
  explicit ControlThread(std::function<void()> fn) : fn_(std::move(fn)) {}
  static void* trampoline(void* self);
  std::function<void()> fn_;
  unsigned long thread_ = 0;  // pthread_t
};

// Runs fn on a worker lcore; fails if that lcore is busy or not a worker.
Result<void> launch(unsigned lcore, std::function<int()> fn);
// Waits for every worker lcore; returns the first non-zero return value.
int wait_all();

}  // namespace rdtx::env
