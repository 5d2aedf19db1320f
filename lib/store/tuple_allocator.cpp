#include "store/tuple_allocator.hpp"

namespace rdtx::store {

TupleAllocator::TupleAllocator(uint32_t capacity)
    : capacity_(capacity), next_(std::make_unique<std::atomic<uint32_t>[]>(capacity)), head_(kNone) {}

int64_t TupleAllocator::allocate() {
  // acquire (also on failure, which reloads the head): the popped tuple's
  // release() happens-before our use of it, and its link is current.
  uint64_t head = head_.load(std::memory_order_acquire);
  while (static_cast<uint32_t>(head) != kNone) {
    uint32_t top = static_cast<uint32_t>(head);
    uint64_t tag = (head >> 32) + 1;
    // The link may be stale if another thread popped `top` meanwhile; the
    // tag then makes the CAS fail.
    uint64_t next = next_[top].load(std::memory_order_relaxed);
    if (head_.compare_exchange_weak(head, tag << 32 | next, std::memory_order_acquire, std::memory_order_acquire))
      return top;
  }
  uint64_t fresh = bump_.load(std::memory_order_relaxed);
  do {
    if (fresh >= capacity_) return -1;
  } while (!bump_.compare_exchange_weak(fresh, fresh + 1, std::memory_order_relaxed));
  return static_cast<int64_t>(fresh);
}

void TupleAllocator::release(uint32_t index) {
  uint64_t head = head_.load(std::memory_order_relaxed);
  uint64_t desired;
  do {
    next_[index].store(static_cast<uint32_t>(head), std::memory_order_relaxed);
    desired = ((head >> 32) + 1) << 32 | index;
    // release: publishes the link above and the caller's last writes to the
    // tuple to the thread that allocates it next.
  } while (!head_.compare_exchange_weak(head, desired, std::memory_order_release, std::memory_order_relaxed));
}

}  // namespace rdtx::store
