// TupleAllocator: hands out tuple indexes [0, capacity) of one table to
// concurrent inserts and takes them back from erases, lock-free. Never-used
// tuples come from a bump counter (so loading a table does not first push
// every index); freed ones go on a Treiber stack whose head carries a tag
// against ABA. The links live in host memory, not in the registered tuples,
// so peers neither see nor can corrupt them.
// Thread-safety: allocate() and release() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace rdtx::store {

class TupleAllocator {
 public:
  explicit TupleAllocator(uint32_t capacity);

  // A free tuple index, or -1 when all `capacity` are in use. Taking a freed
  // tuple acquires what its release() published (the tuple's dead state).
  int64_t allocate();
  // Returns an index obtained from allocate().
  void release(uint32_t index);

  uint32_t capacity() const { return capacity_; }
  // Host memory held for the free list.
  uint64_t host_bytes() const { return uint64_t{capacity_} * sizeof(std::atomic<uint32_t>); }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  uint32_t capacity_;
  std::unique_ptr<std::atomic<uint32_t>[]> next_;  // free-list link per tuple
  std::atomic<uint64_t> head_;                     // tag << 32 | top index (kNone: empty)
  std::atomic<uint64_t> bump_{0};                  // tuples never handed out start here
};

}  // namespace rdtx::store
