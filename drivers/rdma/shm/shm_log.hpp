// The shm driver's log type, "rdtx.rdma.shm" (set its level at run time with
// --log-level=rdtx.rdma.shm:debug).
// Thread-safety: registered on first use (thread-safe static), then read-only.
#pragma once

#include "env/log.hpp"

namespace rdtx::rdma::shm {

inline const env::LogType& shm_log() {
  static const env::LogType type("rdtx.rdma.shm");
  return type;
}

}  // namespace rdtx::rdma::shm
