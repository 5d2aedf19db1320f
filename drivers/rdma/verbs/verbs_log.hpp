// The verbs driver's log type, "rdtx.rdma.verbs" (set its level at run time
// with --log-level=rdtx.rdma.verbs:debug).
// Thread-safety: registered on first use (thread-safe static), then read-only.
#pragma once

#include "env/log.hpp"

namespace rdtx::rdma::verbs {

inline const env::LogType& verbs_log() {
  static const env::LogType type("rdtx.rdma.verbs");
  return type;
}

}  // namespace rdtx::rdma::verbs
