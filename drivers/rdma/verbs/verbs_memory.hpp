// Memory from VerbsDevice::alloc_memory(): an anonymous mapping, of 2 MiB
// huge pages when devargs allow and the system has them free (fewer TLB
// misses for the NIC and the CPU on a large store), else of normal pages.
// Freeing it deregisters the regions still inside it first, so the NIC
// never keeps a translation to unmapped memory.
// Memory from VerbsDevice::reserve_memory() is lazy: address space of normal
// pages (MAP_NORESERVE) that commit() backs piecewise. Its range is known to
// every Context while it lives, so regions over it are registered with
// on-demand paging rather than pinned.
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

  VerbsMemory(std::shared_ptr<Context> ctx, void* base, size_t mapped, size_t size, bool huge, bool lazy = false)
      : ctx_(std::move(ctx)), base_(base), mapped_(mapped), size_(size), huge_(huge), lazy_(lazy) {
    if (lazy_) Context::add_lazy_range(base_, mapped_);
  }
  ~VerbsMemory() override {
    ctx_->dereg_inside(base_, mapped_);
    if (lazy_) Context::remove_lazy_range(base_);
    munmap(base_, mapped_);
  }
  VerbsMemory(const VerbsMemory&) = delete;
  VerbsMemory& operator=(const VerbsMemory&) = delete;

  void* data() const override { return base_; }
  size_t size() const override { return size_; }
  bool huge() const { return huge_; }
  bool lazy() const { return lazy_; }
  // Lazy memory: pre-faults the pages of the range writable (as ODP would on
  // the NIC's first access), so the memory is taken now and an error says
  // so. Otherwise the default (a bounds check).
  Result<void> commit(size_t offset, size_t length) override;

 private:
  std::shared_ptr<Context> ctx_;
  void* base_;
  size_t mapped_;
  size_t size_;
  bool huge_;
  bool lazy_;
};

}  // namespace rdtx::rdma::verbs
