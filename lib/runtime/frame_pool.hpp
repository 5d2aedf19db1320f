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

  // Frame allocation entry points used by Task's promise.
  static void* allocate_frame(size_t bytes);
  static void deallocate_frame(void* frame);

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
  struct FreeBlock {
    FreeBlock* next;
  };
  void* take(size_t cls);
  void give(void* block, size_t cls);

  FreeBlock* free_[kClasses] = {};
  std::vector<std::unique_ptr<std::byte[]>> chunks_;
  std::byte* bump_ = nullptr;
  size_t bump_left_ = 0;
  Stats stats_;
};

}  // namespace rdtx::runtime
