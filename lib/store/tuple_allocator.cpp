#include "store/tuple_allocator.hpp"

#include <sys/mman.h>

#include <new>

namespace rdtx::store {

namespace {
size_t links_bytes(uint32_t capacity) { return (size_t{capacity} * sizeof(std::atomic<uint32_t>) + 4095) & ~size_t{4095}; }
}  // namespace

TupleAllocator::TupleAllocator(uint32_t capacity, uint32_t limit)
    : capacity_(capacity), head_(kNone), limit_(limit < capacity ? limit : capacity) {
  // Address space for every link; the kernel backs (zeroed) pages as
  // release() first writes them. A link is only read after it was written.
  void* p = mmap(nullptr, links_bytes(capacity), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  next_ = static_cast<std::atomic<uint32_t>*>(p);
}

TupleAllocator::~TupleAllocator() { munmap(next_, links_bytes(capacity_)); }

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
  // acquire: pairs with raise_limit(); the tuples below the limit are committed.
  const uint64_t limit = limit_.load(std::memory_order_acquire);
  uint64_t fresh = bump_.load(std::memory_order_relaxed);
  do {
    if (fresh >= limit) return -1;
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

void TupleAllocator::raise_limit(uint32_t limit) {
  if (limit > capacity_) limit = capacity_;
  uint32_t cur = limit_.load(std::memory_order_relaxed);
  while (cur < limit && !limit_.compare_exchange_weak(cur, limit, std::memory_order_release, std::memory_order_relaxed)) {
  }
}

}  // namespace rdtx::store
