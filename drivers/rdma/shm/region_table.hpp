// A view of a node's region table (segment.hpp) that checks keys, access
// rights and bounds: the protection check of every one-sided verb, every
// local key, and every receive buffer.
//
// lookup() is the fast path: O(1) by key index, lock-free, a consistent
// snapshot even while the owner re-registers the slot (seqlock). The owner
// writes through publish()/retire(), serialised by its Node mutex.
// Thread-safety: lookup() from any thread or process; writers serialised.
#pragma once

#include <atomic>
#include <cstdint>

#include "segment.hpp"
#include "shared_word.hpp"

namespace rdtx::rdma::shm {

struct Region {
  uint64_t base = 0;
  uint64_t length = 0;
  uint32_t access = 0;
  uint32_t mem_id = kNoMemFile;
  uint32_t mem_gen = 0;
  uint64_t mem_offset = 0;
  uint32_t pd = 0;  // the protection domain (device context) it was registered in

  // [addr, addr + len) lies inside the region (overflow-safe).
  bool covers(uint64_t addr, uint64_t len) const {
    return addr >= base && len <= length && addr - base <= length - len;
  }
};

class RegionTable {
 public:
  RegionTable() = default;
  explicit RegionTable(RegionEntry* entries) : entries_(entries) {}

  // The live region `key` names, if any: false for a free slot, a stale
  // generation, or a slot being rewritten right now.
  bool lookup(uint32_t key, Region* out) const {
    const RegionEntry& e = entries_[key & kRegionIndexMask];
    if (key == 0 || load_word(e.key, std::memory_order_acquire) != key) return false;
    out->access = load_word(e.access, std::memory_order_relaxed);
    out->base = load_word(e.base, std::memory_order_relaxed);
    out->length = load_word(e.length, std::memory_order_relaxed);
    out->mem_id = load_word(e.mem_id, std::memory_order_relaxed);
    out->mem_gen = load_word(e.mem_gen, std::memory_order_relaxed);
    out->mem_offset = load_word(e.mem_offset, std::memory_order_relaxed);
    out->pd = load_word(e.pd, std::memory_order_relaxed);
    // Seqlock read side: the fields above were read before the key is
    // checked again, so a concurrent rewrite shows up as a changed key.
    std::atomic_thread_fence(std::memory_order_acquire);
    return load_word(e.key, std::memory_order_relaxed) == key;
  }

  // Owner: fills a free slot (key 0) and makes it live under `key`.
  void publish(uint32_t key, const Region& r) {
    RegionEntry& e = entries_[key & kRegionIndexMask];
    store_word(e.access, r.access, std::memory_order_relaxed);
    store_word(e.base, r.base, std::memory_order_relaxed);
    store_word(e.length, r.length, std::memory_order_relaxed);
    store_word(e.mem_id, r.mem_id, std::memory_order_relaxed);
    store_word(e.mem_gen, r.mem_gen, std::memory_order_relaxed);
    store_word(e.mem_offset, r.mem_offset, std::memory_order_relaxed);
    store_word(e.pd, r.pd, std::memory_order_relaxed);
    // Release: a reader that sees the key sees the fields.
    store_word(e.key, key, std::memory_order_release);
  }

  // Owner: makes the slot of `key` free. The fence orders the cleared key
  // before the field stores of the slot's next publish() (seqlock write side).
  void retire(uint32_t key) {
    store_word(entries_[key & kRegionIndexMask].key, 0u, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }

 private:
  RegionEntry* entries_ = nullptr;
};

}  // namespace rdtx::rdma::shm
