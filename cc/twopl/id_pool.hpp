// The server shards' tables' building blocks (LockTable, TsTable):
//
// IdPool: a fixed pool of T, found by a 64-bit id through a chained hash
// (locks or items, and transactions). T has `uint64_t id` and `uint32_t
// next` (the hash chain, or the free list). Sized once; nothing is
// allocated after init().
//
// EventRing: the waiters a table granted or denied after their request
// returned kWaiting, in order, for its server to answer (pop()). One event
// per waiting request at most, so a ring of `requests` entries cannot
// overflow if the server drains it after each call; if it ever did, the
// oldest would be lost and lost() says so (the tables' check()).
// Thread-safety: none (one shard per thread).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

namespace rdtx::cc::twopl {

inline constexpr uint32_t kNoIndex = UINT32_MAX;

inline uint64_t id_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

template <typename T>
struct IdPool {
  std::vector<T> items;
  std::vector<uint32_t> buckets;
  uint32_t free = kNoIndex, free_count = 0;

  void init(uint32_t n) {
    items.assign(n, T{});
    buckets.assign(std::bit_ceil(uint64_t{2} * std::max(n, 1u)), kNoIndex);
    for (uint32_t i = n; i-- > 0;) {
      items[i].next = free;
      free = i;
    }
    free_count = n;
  }
  uint32_t find(uint64_t id) const {
    for (uint32_t i = *bucket(id); i != kNoIndex; i = items[i].next)
      if (items[i].id == id) return i;
    return kNoIndex;
  }
  // A fresh T{} with `id`; kNoIndex if the pool is empty.
  uint32_t add(uint64_t id) {
    const uint32_t i = free;
    if (i == kNoIndex) return kNoIndex;
    free = items[i].next;
    --free_count;
    items[i] = T{};
    items[i].id = id;
    uint32_t* b = bucket(id);
    items[i].next = *b;
    *b = i;
    return i;
  }
  void drop(uint32_t i) {
    for (uint32_t* p = bucket(items[i].id); *p != kNoIndex; p = &items[*p].next)
      if (*p == i) {
        *p = items[i].next;
        break;
      }
    items[i].next = free;
    free = i;
    ++free_count;
  }
  uint32_t* bucket(uint64_t id) { return &buckets[id_mix(id) & (buckets.size() - 1)]; }
  const uint32_t* bucket(uint64_t id) const { return &buckets[id_mix(id) & (buckets.size() - 1)]; }
};

template <typename E>
class EventRing {
 public:
  void init(uint32_t n) { items_.assign(std::max(n, 1u), E{}); }
  void push(const E& e) {
    const uint32_t cap = static_cast<uint32_t>(items_.size());
    if (count_ == cap) {
      head_ = (head_ + 1) % cap;
      --count_;
      ++lost_;
    }
    items_[(head_ + count_) % cap] = e;
    ++count_;
  }
  bool pop(E* e) {
    if (count_ == 0) return false;
    *e = items_[head_];
    head_ = (head_ + 1) % static_cast<uint32_t>(items_.size());
    --count_;
    return true;
  }
  uint64_t lost() const { return lost_; }
  // "" if no event was lost, else how many (for the tables' check()).
  std::string check() const {
    return lost_ == 0 ? std::string() : std::to_string(lost_) + " events were lost (not drained)";
  }

 private:
  std::vector<E> items_;
  uint32_t head_ = 0, count_ = 0;
  uint64_t lost_ = 0;
};

}  // namespace rdtx::cc::twopl
