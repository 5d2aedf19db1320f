#include "runtime/frame_pool.hpp"

#include <cassert>
#include <cstdlib>
#include <new>

namespace rdtx::runtime {

namespace {
// The header keeps user data 16-byte aligned, as operator new does.
struct alignas(16) Header {
  FramePool* pool;  // nullptr: heap block
  uint32_t cls;
};
static_assert(sizeof(Header) == 16);

thread_local FramePool* t_current = nullptr;
}  // namespace

FramePool* FramePool::current() { return t_current; }
void FramePool::set_current(FramePool* pool) { t_current = pool; }

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

void FramePool::give(void* block, size_t cls) {
  auto* b = static_cast<FreeBlock*>(block);
  b->next = free_[cls];
  free_[cls] = b;
}

void* FramePool::allocate_frame(size_t bytes) {
  size_t total = bytes + sizeof(Header);
  size_t cls = (total + kClassBytes - 1) / kClassBytes - 1;
  FramePool* pool = t_current;
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

void FramePool::deallocate_frame(void* frame) {
  Header* h = static_cast<Header*>(frame) - 1;
  if (h->pool != nullptr) {
    --h->pool->stats_.live_frames;
    h->pool->give(h, h->cls);
  } else {
    ::operator delete(h);
  }
}

}  // namespace rdtx::runtime
