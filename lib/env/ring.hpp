// Lock-free FIFO rings of fixed-size elements (DPDK rte_ring).
// A Ring either owns its memory (create(): EAL memory, needs rte_eal_init)
// or lives in memory the caller provides (init_in()/attach()): the ring holds
// no pointers, so it may sit in shared memory mapped at different addresses by
// several processes. Producer/consumer sync is chosen per ring.
// Thread-safety: as chosen by Sync (kMulti: any thread; kSingle: one thread).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/result.hpp"

namespace rdtx::env {

enum class Sync { kSingle, kMulti };

class Ring {
 public:
  Ring() = default;
  Ring(Ring&& o) noexcept : r_(o.r_), esize_(o.esize_), owned_(o.owned_) { o.r_ = nullptr; }
  Ring& operator=(Ring&& o) noexcept;
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  ~Ring();

  // count must be a power of two; the ring holds count-1 elements.
  // esize is the element size in bytes, a multiple of 4.
  static Result<Ring> create(const char* name, unsigned count, unsigned esize, Sync prod, Sync cons);
  static size_t memsize(unsigned count, unsigned esize);
  // Initialises an empty ring in `mem` (64-byte aligned, memsize() bytes).
  static Result<Ring> init_in(void* mem, unsigned count, unsigned esize, Sync prod, Sync cons);
  // Uses a ring another thread or process initialised in `mem`.
  static Ring attach(void* mem, unsigned esize);

  // Bursts: move up to n elements; return how many moved.
  unsigned enqueue_burst(const void* objs, unsigned n);
  unsigned dequeue_burst(void* objs, unsigned n);
  // Single-consumer rings: copy up to n elements out without removing them,
  // then remove the first k <= n of them with peek_finish(k).
  unsigned peek_start(void* objs, unsigned n);
  void peek_finish(unsigned k);

  unsigned count() const;
  unsigned free_count() const;
  bool valid() const { return r_ != nullptr; }

 private:
  Ring(void* r, unsigned esize, bool owned) : r_(r), esize_(esize), owned_(owned) {}
  void* r_ = nullptr;
  unsigned esize_ = 0;
  bool owned_ = false;
};

}  // namespace rdtx::env
