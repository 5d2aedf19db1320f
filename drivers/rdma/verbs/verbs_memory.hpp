// Memory from VerbsDevice::alloc_memory(): an anonymous mapping, of 2 MiB
// huge pages when devargs allow and the system has them free (fewer TLB
// misses for the NIC and the CPU on a large store), else of normal pages.
// Freeing it deregisters the regions still inside it first, so the NIC
// never keeps a translation to unmapped memory.
// Thread-safety: data()/size() from any thread.
#pragma once

#include <sys/mman.h>

#include <memory>

#include "rdma/rdma.hpp"
#include "verbs_context.hpp"

namespace rdtx::rdma::verbs {

class VerbsMemory final : public DeviceMemory {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kSmallPage = 4096;

  VerbsMemory(std::shared_ptr<Context> ctx, void* base, size_t mapped, size_t size, bool huge)
      : ctx_(std::move(ctx)), base_(base), mapped_(mapped), size_(size), huge_(huge) {}
  ~VerbsMemory() override {
    ctx_->dereg_inside(base_, mapped_);
    munmap(base_, mapped_);
  }
  VerbsMemory(const VerbsMemory&) = delete;
  VerbsMemory& operator=(const VerbsMemory&) = delete;

  void* data() const override { return base_; }
  size_t size() const override { return size_; }
  bool huge() const { return huge_; }

 private:
  std::shared_ptr<Context> ctx_;
  void* base_;
  size_t mapped_;
  size_t size_;
  bool huge_;
};

}  // namespace rdtx::rdma::verbs
