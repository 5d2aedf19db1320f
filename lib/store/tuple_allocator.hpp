// TupleAllocator: hands out tuple indexes [0, limit) of one table to
// concurrent inserts and takes them back from erases, lock-free. Never-used
// tuples come from a bump counter (so loading a table does not first push
// every index); freed ones go on a Treiber stack whose head carries a tag
// against ABA. The links live in host memory, not in the registered tuples,
// so peers neither see nor can corrupt them.
//
// A growing table (TableSpec::grows) raises the limit as it commits more
// tuples (raise_limit()), up to the capacity the allocator was made for;
// the links are reserved address space for all of them, backed by the
// kernel only as tuples are freed.
// Thread-safety: allocate(), release() and raise_limit() from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace rdtx::store {

class TupleAllocator {
 public:
  // Indexes [0, limit) may be handed out now; at most `capacity` ever.
  TupleAllocator(uint32_t capacity, uint32_t limit);
  ~TupleAllocator();
  TupleAllocator(const TupleAllocator&) = delete;
  TupleAllocator& operator=(const TupleAllocator&) = delete;

  // A free tuple index, or -1 when all `limit()` are in use. Taking a freed
  // tuple acquires what its release() published (the tuple's dead state).
  int64_t allocate();
  // Returns an index obtained from allocate().
  void release(uint32_t index);
  // Lets allocate() hand out [0, limit) (limit <= capacity; never lowers
  // it). Release: the tuples' memory, committed before, is seen by whoever
  // is handed one of them.
  void raise_limit(uint32_t limit);

  uint32_t capacity() const { return capacity_; }
  uint32_t limit() const { return limit_.load(std::memory_order_acquire); }
  // Tuples handed out at least once: [0, high_water()) is every tuple that
  // may ever have been live.
  uint32_t high_water() const {
    uint64_t b = bump_.load(std::memory_order_acquire);
    return static_cast<uint32_t>(b < capacity_ ? b : capacity_);
  }
  // Host memory the free list may hold for the tuples allowed now.
  uint64_t host_bytes() const { return uint64_t{limit()} * sizeof(std::atomic<uint32_t>); }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  uint32_t capacity_;
  std::atomic<uint32_t>* next_;                    // free-list link per tuple (capacity_ of them, mmap'ed)
  std::atomic<uint64_t> head_;                     // tag << 32 | top index (kNone: empty)
  std::atomic<uint64_t> bump_{0};                  // tuples never handed out start here
  std::atomic<uint32_t> limit_;
};

}  // namespace rdtx::store
