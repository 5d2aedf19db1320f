// The shm Device: a software RNIC over shared memory, serving one node of a
// fabric (all nodes of a fabric on one host, in one process or several).
// See doc/drivers.md for devargs, semantics, the latency model and limits.
// Thread-safety: as Device (control-path calls from any thread of the node).
#pragma once

#include <memory>
#include <string>

#include "node.hpp"
#include "rdma/rdma.hpp"
#include "shm_config.hpp"

namespace rdtx::rdma::shm {

class ShmDevice final : public Device {
 public:
  static Result<std::unique_ptr<Device>> open(const ShmConfig& cfg, uint32_t node_id, const std::string& fabric);
  // One device context of `node`: its own protection domain `pd`.
  ShmDevice(std::shared_ptr<Node> node, DeviceCaps caps, uint32_t pd)
      : node_(std::move(node)), caps_(std::move(caps)), pd_(pd) {}

  const DeviceCaps& caps() const override { return caps_; }
  Result<std::unique_ptr<DeviceMemory>> alloc_memory(size_t bytes) override;
  Result<std::unique_ptr<DeviceMemory>> reserve_memory(size_t reserve, size_t commit) override;
  Result<MemoryRegion> reg_mr(void* addr, size_t length, uint32_t access) override;
  Result<void> dereg_mr(const MemoryRegion& mr) override;
  Result<std::unique_ptr<CompletionQueue>> create_cq(uint32_t depth) override;
  Result<std::unique_ptr<QueuePair>> create_qp(const QpInit& init) override;
  Result<std::unique_ptr<AddressHandle>> create_ah(const QpAddress& remote) override;
  Result<std::unique_ptr<Device>> open_context() override;
  ModelUnaccounted model_unaccounted() const override;

 private:
  std::shared_ptr<Node> node_;
  const DeviceCaps caps_;
  const uint32_t pd_;
};

}  // namespace rdtx::rdma::shm
