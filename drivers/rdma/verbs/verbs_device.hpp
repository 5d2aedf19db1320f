// The verbs Device: one rdma-core device port serving one node. Workers of
// the node share it (control-path calls); each worker makes its own CQ and
// QPs. See doc/drivers.md for devargs, capabilities, semantics and limits.
// Thread-safety: as Device (control-path calls from any thread of the node).
#pragma once

#include <memory>
#include <string>

#include "rdma/rdma.hpp"
#include "verbs_config.hpp"
#include "verbs_context.hpp"

namespace rdtx::rdma::verbs {

class VerbsDevice final : public Device {
 public:
  static Result<std::unique_ptr<Device>> open(const VerbsConfig& cfg, uint32_t node_id, const std::string& fabric);
  VerbsDevice(std::shared_ptr<Context> ctx, DeviceCaps caps, std::string fabric)
      : ctx_(std::move(ctx)), caps_(std::move(caps)), fabric_(std::move(fabric)) {}

  const DeviceCaps& caps() const override { return caps_; }
  Result<std::unique_ptr<DeviceMemory>> alloc_memory(size_t bytes) override;
  // Anonymous address space of normal pages, registered with on-demand
  // paging; ENOTSUP unless the device pages RC READ, WRITE and ATOMIC on
  // demand (caps().lazy_memory).
  Result<std::unique_ptr<DeviceMemory>> reserve_memory(size_t reserve, size_t commit) override;
  Result<MemoryRegion> reg_mr(void* addr, size_t length, uint32_t access) override;
  Result<void> dereg_mr(const MemoryRegion& mr) override;
  Result<std::unique_ptr<CompletionQueue>> create_cq(uint32_t depth) override;
  Result<std::unique_ptr<QueuePair>> create_qp(const QpInit& init) override;
  Result<std::unique_ptr<AddressHandle>> create_ah(const QpAddress& remote) override;
  // A new ibv_context and protection domain on the same device and port.
  Result<std::unique_ptr<Device>> open_context() override;

 private:
  std::shared_ptr<Context> ctx_;
  const DeviceCaps caps_;
  const std::string fabric_;
};

}  // namespace rdtx::rdma::verbs
