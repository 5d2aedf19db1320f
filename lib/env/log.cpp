#include "env/log.hpp"

#include <rte_log.h>

#include <cstdarg>
#include <cstdio>

namespace rdtx::env {

LogType::LogType(const char* name) : id_(rte_log_register_type_and_pick_level(name, RTE_LOG_NOTICE)), name_(name) {}

bool LogType::enabled(LogLevel level) const {
  return id_ >= 0 ? rte_log_can_log(static_cast<uint32_t>(id_), static_cast<uint32_t>(level))
                  : level <= LogLevel::kNotice;
}

void LogType::log(LogLevel level, const char* fmt, ...) const {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (id_ >= 0)
    rte_log(static_cast<uint32_t>(level), static_cast<uint32_t>(id_), "%s: %s\n", name_, buf);
  else
    std::fprintf(stderr, "%s: %s\n", name_, buf);
}

}  // namespace rdtx::env
