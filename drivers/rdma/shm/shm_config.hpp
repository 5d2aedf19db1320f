// Parsed devargs of the shm driver:
//   shm[,latency_ns=N][,bw_gbps=X][,mtu=B]
// Thread-safety: a plain value type.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/result.hpp"

namespace rdtx::rdma::shm {

struct ShmConfig {
  uint64_t latency_ns = 0;  // one-way delay
  double bw_gbps = 0;       // 0: infinite
  uint32_t mtu = 4096;      // UD message size limit

  // Errors name the devargs and the offending key or value.
  static Result<ShmConfig> parse(std::string_view devargs);
};

// The one-line devargs summary shown by the driver registry.
inline constexpr const char* kShmDevargsHelp =
    "shm[,latency_ns=N][,bw_gbps=X][,mtu=B]: software RNIC over shared memory; one-way latency in ns (default "
    "0), per-QP bandwidth in Gbit/s (default 0 = infinite), UD message size limit in bytes (default 4096)";

}  // namespace rdtx::rdma::shm
