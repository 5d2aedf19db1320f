// One logging facility for every component, on top of DPDK's rte_log, so
// that `--log-level=rdtx.rdma.shm:debug` (an EAL option) sets levels at run
// time. A component registers its tag once and logs through RDTX_LOG.
// Nothing is formatted unless the level is enabled.
// Thread-safety: registration at start-up; logging from any thread.
#pragma once

#include <cstdint>

namespace rdtx::env {

enum class LogLevel : uint32_t { kError = 4, kWarning = 5, kNotice = 6, kInfo = 7, kDebug = 8 };

class LogType {
 public:
  // Registers (or finds) the tag, default level notice.
  explicit LogType(const char* name);
  bool enabled(LogLevel level) const;
  [[gnu::format(printf, 3, 4)]] void log(LogLevel level, const char* fmt, ...) const;
  int id() const { return id_; }

 private:
  int id_;
  const char* name_;
};

}  // namespace rdtx::env

#define RDTX_LOG(type, LEVEL, ...)                                         \
  do {                                                                     \
    if ((type).enabled(::rdtx::env::LogLevel::k##LEVEL))                  \
      (type).log(::rdtx::env::LogLevel::k##LEVEL, __VA_ARGS__);           \
  } while (0)
