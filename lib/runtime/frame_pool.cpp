#include "runtime/frame_pool.hpp"

#include <cassert>
#include <cstdlib>
#include <new>

namespace rdtx::runtime {

constinit thread_local FramePool* FramePool::t_current_ = nullptr;

FramePool* FramePool::current() { return t_current_; }
void FramePool::set_current(FramePool* pool) { t_current_ = pool; }

FramePool::~FramePool() { assert(stats_.live_frames == 0 && "coroutine frames outlive their worker"); }

void* FramePool::take(size_t cls) {
  if (FreeBlock* b = free_[cls]) {
    free_[cls] = b->next;
    return b;
  }
  size_t bytes = (cls + 1) * kClassBytes;
  if (bump_left_ < bytes) {
    chunks_.push_back(std::make_unique<std::byte[]>(kChunkBytes));
    ++stats_.chunk_allocs;
    bump_ = chunks_.back().get();
    bump_left_ = kChunkBytes;
  }
  void* p = bump_;
  bump_ += bytes;
  bump_left_ -= bytes;
  return p;
}

// A class with no free block (bump a chunk), a frame too large to pool, or
// no pool on this thread (the heap).
void* FramePool::allocate_slow(size_t bytes) {
  size_t total = bytes + sizeof(Header);
  size_t cls = (total + kClassBytes - 1) / kClassBytes - 1;
  FramePool* pool = t_current_;
  Header* h;
  if (pool != nullptr && cls < kClasses) {
    h = static_cast<Header*>(pool->take(cls));
    ++pool->stats_.live_frames;
  } else {
    // Outside any worker, or a frame too large to pool: the heap.
    h = static_cast<Header*>(::operator new(total));
    if (pool != nullptr) ++pool->stats_.large_allocs;
    pool = nullptr;
  }
  h->pool = pool;
  h->cls = static_cast<uint32_t>(cls);
  return h + 1;
}

void FramePool::deallocate_heap(Header* h) { ::operator delete(h); }

}  // namespace rdtx::runtime
