// Parsed devargs of the verbs driver:
//   verbs[,dev=NAME][,port=N][,gid_index=N|auto][,huge=auto|on|off][,timeout=N][,retry_cnt=N]
// Thread-safety: a plain value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace rdtx::rdma::verbs {

enum class HugePages : uint8_t { kAuto, kOn, kOff };
const char* to_string(HugePages h);

struct VerbsConfig {
  static constexpr int kAutoGid = -1;

  std::string dev;                    // ibv device name; empty: the first device
  uint32_t port = 1;                  // port number on that device
  int gid_index = kAutoGid;           // RoCE source GID; auto: prefer RoCE v2 IPv4-mapped
  HugePages huge = HugePages::kAuto;  // alloc_memory() page size
  // RC transport: local ACK timeout 4.096 us * 2^timeout (14: ~67 ms) and
  // retransmissions before a request fails (7: the maximum).
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;

  // Errors name the devargs and the offending key or value.
  static Result<VerbsConfig> parse(std::string_view devargs);
};

// The one-line devargs summary shown by the driver registry (rdtx-bench --list).
inline constexpr const char* kVerbsDevargsHelp =
    "verbs[,dev=NAME][,port=N][,gid_index=N|auto][,huge=auto|on|off][,timeout=N][,retry_cnt=N]: rdma-core device "
    "(default: the first one), port (default 1), RoCE source GID index (default auto: a RoCE v2 IPv4 GID), huge "
    "pages for alloc_memory (default auto: when free), RC ack timeout 4.096us*2^N (default 14) and retries "
    "(default 7)";

}  // namespace rdtx::rdma::verbs
