// FramePool: per-worker allocator for coroutine frames, so that starting a
// transaction coroutine does not call malloc once the pool is warm. Frames
// are rounded up to 64-byte size classes with one free list per class;
// memory comes from 64 KiB chunks freed with the pool. Each block starts with
// a header naming its pool, so a frame is always returned to the pool that
// gave it out.
// Thread-safety: a pool is used by one thread (its worker's lcore).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace rdtx::runtime {

class FramePool {
 public:
  FramePool() = default;
  FramePool(const FramePool&) = delete;
  FramePool& operator=(const FramePool&) = delete;
  ~FramePool();

  // The pool new coroutine frames on this thread come from (nullptr: the
  // global heap). Set by Worker while it runs and by Worker::spawn.
  static FramePool* current();
  static void set_current(FramePool* pool);

  // Frame allocation entry points used by Task's promise. Inline: a frame
  // of a class with a free block is a few instructions, and every stage of
  // every attempt starts coroutines.
  static void* allocate_frame(size_t bytes) {
    const size_t cls = (bytes + sizeof(Header) + kClassBytes - 1) / kClassBytes - 1;
    FramePool* pool = t_current_;
    if (pool != nullptr && cls < kClasses) {
      if (FreeBlock* b = pool->free_[cls]) {
        pool->free_[cls] = b->next;
        ++pool->stats_.live_frames;
        Header* h = reinterpret_cast<Header*>(b);
        h->pool = pool;
        h->cls = static_cast<uint32_t>(cls);
        return h + 1;
      }
    }
    return allocate_slow(bytes);
  }
  static void deallocate_frame(void* frame) {
    Header* h = static_cast<Header*>(frame) - 1;
    if (FramePool* pool = h->pool) {
      --pool->stats_.live_frames;
      auto* b = reinterpret_cast<FreeBlock*>(h);
      b->next = pool->free_[h->cls];
      pool->free_[h->cls] = b;
    } else {
      deallocate_heap(h);
    }
  }

  struct Stats {
    uint64_t chunk_allocs = 0;  // 64 KiB chunks taken from the heap
    uint64_t large_allocs = 0;  // frames above the largest class (heap)
    uint64_t live_frames = 0;
  };
  const Stats& stats() const { return stats_; }

  static constexpr size_t kClassBytes = 64;
  static constexpr size_t kClasses = 64;  // up to 4 KiB frames pooled
  static constexpr size_t kChunkBytes = 64 * 1024;

 private:
  // Each block starts with its header; user data stays 16-byte aligned, as
  // operator new keeps it.
  struct alignas(16) Header {
    FramePool* pool;  // nullptr: heap block
    uint32_t cls;
  };
  static_assert(sizeof(Header) == 16);
  struct FreeBlock {
    FreeBlock* next;
  };
  static void* allocate_slow(size_t bytes);
  static void deallocate_heap(Header* h);
  void* take(size_t cls);

  static constinit thread_local FramePool* t_current_;

  FreeBlock* free_[kClasses] = {};
  std::vector<std::unique_ptr<std::byte[]>> chunks_;
  std::byte* bump_ = nullptr;
  size_t bump_left_ = 0;
  Stats stats_;
};

}  // namespace rdtx::runtime
