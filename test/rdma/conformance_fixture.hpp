// The fixture of the driver conformance suite: a fresh topology per test
// (topology.hpp), local registered memory on node 0, and helpers to connect
// RC QPs to node 1 and run verbs synchronously. Written only against the
// rdma API, so every driver with a topology runs the same tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "rdma/rdma.hpp"
#include "test_util.hpp"
#include "topology.hpp"

namespace rdtx::rdma::test {

// An RC QP of node 0 connected to one of node 1.
struct RcLink {
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<QueuePair> qp;
  int remote_id = -1;
  QpAddress remote;
};

class ConformanceTest : public ::testing::TestWithParam<TopologySpec> {
 protected:
  static constexpr size_t kLocalBytes = 1 << 20;

  void SetUp() override;
  void TearDown() override;

  Topology& topo() { return *topo_; }
  Device& dev() { return topo_->local(); }
  uint8_t* local_buf(size_t offset = 0) { return static_cast<uint8_t*>(lmr_.addr) + offset; }
  const MemoryRegion& lmr() const { return lmr_; }

  RcLink connect_rc(uint32_t max_send_wr = 64);
  // Brings both ends of the link back from the error state.
  void reconnect(RcLink& link);

  // Builders for a single work request on local_buf(local_off).
  WorkRequest read_wr(size_t local_off, uint64_t raddr, uint32_t rkey, uint32_t len, uint64_t wr_id = 0) const;
  WorkRequest write_wr(size_t local_off, uint64_t raddr, uint32_t rkey, uint32_t len, uint64_t wr_id = 0) const;
  WorkRequest faa_wr(size_t local_off, uint64_t raddr, uint32_t rkey, uint64_t add, uint64_t wr_id = 0) const;
  WorkRequest cas_wr(size_t local_off, uint64_t raddr, uint32_t rkey, uint64_t cmp, uint64_t swp,
                     uint64_t wr_id = 0) const;

  // Posts one signaled request and returns its completion's status.
  Status run(RcLink& link, WorkRequest wr);
  // As run(), but a request the device refuses at post is not a failure of
  // the test: returns post_send's code (0 if posted) and, when posted, the
  // completion's status.
  struct Outcome {
    int post_rc = 0;
    Status status = Status::kGeneralError;
  };
  Outcome try_run(RcLink& link, WorkRequest wr);
  // Reads or writes node 1's memory through a healthy link.
  std::vector<uint8_t> remote_read(RcLink& link, uint64_t raddr, uint32_t rkey, uint32_t len);
  void remote_write(RcLink& link, uint64_t raddr, uint32_t rkey, const std::vector<uint8_t>& bytes);
  uint64_t remote_u64(RcLink& link, uint64_t raddr);

  // No completion shows up within `quiet` (the CQ stays empty).
  static bool stays_empty(CompletionQueue& cq, std::chrono::milliseconds quiet = std::chrono::milliseconds(50));

  std::unique_ptr<Topology> topo_;
  std::unique_ptr<DeviceMemory> lmem_;
  MemoryRegion lmr_{};
};

// gtest parameter names.
inline std::string topology_name(const ::testing::TestParamInfo<TopologySpec>& info) { return info.param.name; }

}  // namespace rdtx::rdma::test
