// Memory from ShmDevice::alloc_memory(): a file in /dev/shm that peers in
// other processes map to reach the regions registered in it. Freeing it
// deregisters any region still inside it, so a late verb fails instead of
// touching unmapped memory.
// Thread-safety: data()/size() from any thread.
#pragma once

#include <memory>

#include "node.hpp"
#include "rdma/rdma.hpp"

namespace rdtx::rdma::shm {

class ShmMemory final : public DeviceMemory {
 public:
  ShmMemory(std::shared_ptr<Node> node, Node::MemFile mem, bool sparse)
      : node_(std::move(node)), mem_(std::move(mem)), sparse_(sparse) {}
  ~ShmMemory() override { node_->free_memory(mem_.id, mem_.gen, mem_.file.data(), mem_.file.size()); }

  void* data() const override { return mem_.file.data(); }
  size_t size() const override { return mem_.file.size(); }
  Result<void> commit(size_t offset, size_t length) override {
    if (!sparse_) return DeviceMemory::commit(offset, length);
    return mem_.file.commit(offset, length);
  }

 private:
  std::shared_ptr<Node> node_;
  Node::MemFile mem_;
  bool sparse_;
};

}  // namespace rdtx::rdma::shm
