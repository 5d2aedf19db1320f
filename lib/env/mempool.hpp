// Fixed-size object pools (DPDK rte_mempool) with per-lcore caches. Needs
// rte_eal_init. For buffers handed between lcores; nothing in rdtx creates
// one (the engine's buffers come from the drivers' alloc_memory()), only
// test/env does.
// Thread-safety: get/put from any lcore thread.
#pragma once

#include <cstddef>

#include "base/result.hpp"

namespace rdtx::env {

class Mempool {
 public:
  Mempool() = default;
  Mempool(Mempool&& o) noexcept : mp_(o.mp_) { o.mp_ = nullptr; }
  Mempool& operator=(Mempool&& o) noexcept;
  Mempool(const Mempool&) = delete;
  Mempool& operator=(const Mempool&) = delete;
  ~Mempool();

  // n objects of elt_size bytes; cache_size objects cached per lcore (0: none).
  static Result<Mempool> create(const char* name, unsigned n, unsigned elt_size, unsigned cache_size);

  // Returns nullptr when the pool is empty.
  void* get();
  void put(void* obj);
  // All-or-nothing: returns false (and takes nothing) if fewer than n are free.
  bool get_bulk(void** objs, unsigned n);
  void put_bulk(void* const* objs, unsigned n);
  unsigned available() const;
  unsigned in_use() const;

 private:
  explicit Mempool(void* mp) : mp_(mp) {}
  void* mp_ = nullptr;
};

}  // namespace rdtx::env
