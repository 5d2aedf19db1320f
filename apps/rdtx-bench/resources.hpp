// What a run will allocate, computed from its configuration before anything
// is allocated, and compared with what this host has: memory (MemAvailable,
// or the cgroup's limit if lower), /dev/shm (where the shm driver keeps every
// node's registered memory) and the device's queue limits. A configuration
// that cannot fit is refused at start-up with the keys and the sizes,
// instead of growing until the OOM killer ends it or dying of SIGBUS.
// Thread-safety: plain functions; setup code for the main thread.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.hpp"
#include "config/config.hpp"
#include "rdma/rdma.hpp"
#include "run/runner.hpp"

namespace rdtx::bench {

// Bytes a run allocates on this host, by kind (estimates from the same
// formulas the store, engine and endpoints use; rounding and bookkeeping
// aside).
struct Footprint {
  uint32_t nodes = 0;        // nodes whose memory is on this host
  uint32_t workers = 0;      // their workers
  uint64_t tables = 0;       // tuples and hash indexes (registered memory)
  uint64_t scratch = 0;      // per-worker registered READ destinations
  uint64_t rpc = 0;          // RPC receive and send buffers
  uint64_t cqs = 0;          // completion queue entries (worker and endpoint CQs)
  uint64_t caches = 0;       // location caches
  uint64_t history = 0;      // history buffers (history.record)
  uint64_t log = 0;          // replication: log rings (and one-sided staging)
  uint64_t regions = 0;      // protocol regions (ProtocolDef::region_bytes, registered)
  uint64_t cq_depth = 0;     // entries of one worker's CQ
  // Of those, in the shm driver's files under /dev/shm.
  uint64_t shm_bytes = 0;
  uint64_t total() const { return tables + scratch + rpc + cqs + caches + history + log + regions; }
};

// `local_nodes`: nodes of the cluster whose memory lives on this host (all
// of them inproc; in process mode, the node processes on this host).
Footprint footprint(const run::RunConfig& run, const rdma::DeviceCaps& caps, uint32_t local_nodes);

struct HostLimits {
  uint64_t memory = 0;           // bytes a run may use (0: unknown)
  std::string memory_source;     // "MemAvailable" or the cgroup file
  uint64_t shm_free = 0;         // bytes free in /dev/shm (0: unknown)
  std::string shm_path = "/dev/shm";
};
HostLimits host_limits();

// EINVAL naming the keys and sizes if `fp` exceeds a limit or the device's
// queue depths.
Result<void> check_resources(const config::Config& cfg, const run::RunConfig& run, const rdma::DeviceCaps& caps,
                             const Footprint& fp, const HostLimits& limits);

// "1.5 GiB"-style size.
std::string human_bytes(uint64_t bytes);

}  // namespace rdtx::bench
