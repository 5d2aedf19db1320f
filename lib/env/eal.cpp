#include "env/eal.hpp"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_log.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>

namespace rdtx::env {

namespace {
std::atomic<bool> g_initialized{false};  // set once by eal_init
char g_runtime_dir[4096];                 // the EAL's runtime directory, removed at exit

// Nothing in DPDK removes /var/run/dpdk/<prefix>/ at exit: it keeps this
// process's telemetry socket and, without --no-shconf, the primary's shared
// configuration and memory maps (config, fbarray_*, mp_socket*,
// hugepage_info), which only this process, the primary, uses (rdtx starts
// no secondaries). Remove those and the directory at exit: a thousand runs
// would leave a thousand directories. rmdir leaves a directory that still
// holds anything else.
bool is_eal_runtime_file(const std::string& name) {
  for (const char* prefix : {"fbarray_", "mp_socket", "dpdk_telemetry"})
    if (name.rfind(prefix, 0) == 0) return true;
  return name == "config" || name == "hugepage_info";
}

void remove_runtime_dir() {
  if (g_runtime_dir[0] == '\0') return;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(g_runtime_dir, ec))
    if (is_eal_runtime_file(f.path().filename().string())) (void)unlink(f.path().c_str());
  (void)rmdir(g_runtime_dir);
}

int trampoline(void* arg) {
  std::unique_ptr<std::function<int()>> fn(static_cast<std::function<int()>*>(arg));
  return (*fn)();
}
}  // namespace

Result<int> eal_init(int argc, char** argv) {
  if (g_initialized.load()) return make_error(EALREADY, "EAL already initialised");
  // DPDK's start-up chatter (IOVA mode, telemetry socket) is not what an
  // rdtx user runs for; warnings still show and --log-level overrides this.
  rte_log_set_level_pattern("lib.*", RTE_LOG_WARNING);
  static const bool registered = std::atexit(remove_runtime_dir) == 0;
  (void)registered;
  int n = rte_eal_init(argc, argv);
  if (n < 0) {
    // Some of DPDK's failures leave rte_errno 0 (a --file-prefix locked by
    // another running process: "Cannot create lock on ..."); its EAL: lines
    // on stderr name the cause.
    if (rte_errno == 0)
      return make_error(EINVAL,
                        "EAL initialisation failed: see the EAL: lines above (check the EAL options before '--'; "
                        "concurrent processes need their own --file-prefix)");
    return make_error(rte_errno, "EAL initialisation failed: %s (check the EAL options before '--')",
                      rte_strerror(rte_errno));
  }
  std::snprintf(g_runtime_dir, sizeof g_runtime_dir, "%s", rte_eal_get_runtime_dir());
  g_initialized.store(true);
  // DPDK moves the program name to argv[n]; the app's options follow it.
  return n;
}

CommandLine split_command_line(int argc, char** argv) {
  CommandLine cl;
  std::string prog = argc > 0 ? argv[0] : "rdtx";
  int dash = -1;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) {
      dash = i;
      break;
    }
  cl.eal.push_back(prog);
  // "TELEMETRY: No legacy callbacks, legacy socket not created" is not a
  // problem; a later --log-level from the user still wins.
  cl.eal.push_back("--log-level=lib.telemetry:error");
  cl.app.push_back(prog);
  // No EAL options at all (no `--`, or nothing before it): the defaults.
  if (dash < 0 || dash == 1) {
    std::string defaults = kDefaultEalArgs;
    for (size_t pos = 0; pos < defaults.size();) {
      size_t end = defaults.find(' ', pos);
      if (end == std::string::npos) end = defaults.size();
      cl.eal.push_back(defaults.substr(pos, end - pos));
      pos = end + 1;
    }
    for (int i = dash < 0 ? 1 : dash + 1; i < argc; ++i) cl.app.push_back(argv[i]);
  } else {
    for (int i = 1; i < dash; ++i) cl.eal.push_back(argv[i]);
    for (int i = dash + 1; i < argc; ++i) cl.app.push_back(argv[i]);
  }
  return cl;
}

Result<void> eal_init(const CommandLine& cl) {
  // Kept for the life of the process: some EAL versions keep pointers into
  // argv (program name, option values) instead of copying them.
  static std::vector<std::string> args;
  args = cl.eal;
  bool has_prefix = false;
  for (const auto& a : args) has_prefix |= a.rfind("--file-prefix", 0) == 0;
  if (!has_prefix) args.push_back("--file-prefix=rdtx-" + std::to_string(getpid()));
  static std::vector<char*> argv;
  argv.clear();
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  auto r = eal_init(static_cast<int>(args.size()), argv.data());
  if (!r.ok()) return r.error();
  return {};
}

void eal_cleanup() {
  if (g_initialized.exchange(false)) rte_eal_cleanup();
}

bool eal_initialized() { return g_initialized.load(); }

std::vector<std::string> remove_dead_runtime_dirs() {
  // Where the EAL puts them (eal_get_baseline_runtime_dir): /var/run for
  // root, else $XDG_RUNTIME_DIR or /tmp.
  std::vector<std::string> bases = {"/var/run/dpdk", "/tmp/dpdk"};
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0')
    bases.push_back(std::string(xdg) + "/dpdk");
  std::vector<std::string> removed;
  for (const std::string& base : bases) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("rdtx-", 0) != 0 || name.size() == 5 ||
          name.find_first_not_of("0123456789", 5) != std::string::npos)
        continue;
      const long pid = std::strtol(name.c_str() + 5, nullptr, 10);
      if (pid <= 0 || pid > INT32_MAX || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
      struct stat st;
      if (lstat(e.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
      // Its files only (sockets, config, fbarrays): nothing below them.
      std::error_code ec2;
      for (const auto& f : std::filesystem::directory_iterator(e.path(), ec2))
        if (!f.is_directory(ec2)) (void)unlink(f.path().c_str());
      if (rmdir(e.path().c_str()) == 0) removed.push_back(e.path().string());
    }
  }
  return removed;
}

unsigned lcore_id() {
  unsigned id = rte_lcore_id();
  return id == LCORE_ID_ANY ? kNoLcore : id;
}
unsigned main_lcore() { return rte_get_main_lcore(); }
unsigned lcore_count() { return rte_lcore_count(); }

std::vector<unsigned> worker_lcores() {
  std::vector<unsigned> v;
  unsigned id;
  RTE_LCORE_FOREACH_WORKER(id) { v.push_back(id); }
  return v;
}

unsigned available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return static_cast<unsigned>(CPU_COUNT(&set));
}

unsigned lcore_cpu_count() {
  std::set<int> cpus;
  unsigned id;
  RTE_LCORE_FOREACH(id) {
    rte_cpuset_t set = rte_lcore_cpuset(id);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.insert(c);
  }
  return static_cast<unsigned>(cpus.size());
}

void* ControlThread::trampoline(void* self) {
  static_cast<ControlThread*>(self)->fn_();
  return nullptr;
}

Result<std::unique_ptr<ControlThread>> ControlThread::start(const std::string& name, std::function<void()> fn) {
  std::unique_ptr<ControlThread> t(new ControlThread(std::move(fn)));
  pthread_t id;
  const int rc = eal_initialized() ? rte_ctrl_thread_create(&id, name.c_str(), nullptr, trampoline, t.get())
                                   : pthread_create(&id, nullptr, trampoline, t.get());
  if (rc != 0) return make_error(rc < 0 ? -rc : rc, "cannot start thread '%s': %s", name.c_str(), std::strerror(rc < 0 ? -rc : rc));
  static_assert(sizeof(pthread_t) <= sizeof t->thread_);
  t->thread_ = static_cast<unsigned long>(id);
  return t;
}

ControlThread::~ControlThread() { pthread_join(static_cast<pthread_t>(thread_), nullptr); }

Result<void> launch(unsigned lcore, std::function<int()> fn) {
  auto heap = std::make_unique<std::function<int()>>(std::move(fn));
  int rc = rte_eal_remote_launch(trampoline, heap.get(), lcore);
  if (rc != 0) return make_error(-rc, "cannot launch on lcore %u: %s", lcore, std::strerror(-rc));
  heap.release();  // owned by trampoline now
  return {};
}

int wait_all() {
  int first = 0;
  unsigned id;
  RTE_LCORE_FOREACH_WORKER(id) {
    int rc = rte_eal_wait_lcore(id);
    if (rc != 0 && first == 0) first = rc;
  }
  return first;
}

}  // namespace rdtx::env
