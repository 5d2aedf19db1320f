// What the shm driver offers beyond the rdma API: statistics a test or a
// tool may read from a QueuePair made by an shm Device.
// Thread-safety: reads shared counters; callable from any thread while the
// QP exists.
#pragma once

#include <cstdint>

#include "base/result.hpp"
#include "rdma/rdma.hpp"

namespace rdtx::rdma::shm {

struct UdQpStats {
  // Messages sent to this QP that found no posted receive buffer and were
  // dropped (UD semantics: the sender is not told).
  uint64_t recv_dropped = 0;
  // Faults the driver injected into messages sent to this QP (devargs
  // ud_drop, ud_dup, ud_delay): messages lost, messages delivered twice, and
  // copies held back by ud_delay_ns (a duplicate counts once more if it is
  // held back too). An injected loss is not in recv_dropped; a duplicate
  // that finds no buffer is.
  uint64_t injected_drop = 0;
  uint64_t injected_dup = 0;
  uint64_t injected_delay = 0;
};

// Fails (EINVAL) unless `qp` is a UD QP of an shm device.
Result<UdQpStats> ud_qp_stats(const QueuePair& qp);

// Removes the /dev/shm files of the nodes, of any fabric, whose owners died
// (a run killed outright leaves them there). Opening a node does it too; a
// tool that checks the memory free before it opens any calls it first.
// Thread-safety: any thread; safe against live nodes and peers (it only
// takes segments nobody holds).
void reclaim_dead_nodes();

}  // namespace rdtx::rdma::shm
