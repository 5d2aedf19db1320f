// FlatIndex: an open-addressing hash index from a key to a dense uint32
// value, for the checker's id -> transaction and (table, key) -> key maps.
// One flat array with linear probing: millions of lookups stay in cache
// lines instead of chasing std::unordered_map's per-node allocations.
// Thread-safety: none; one owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace rdtx::history {

// (table, key): the identity of a record.
struct TableKey {
  uint64_t key;
  uint32_t table;
  friend bool operator==(const TableKey&, const TableKey&) = default;
};

inline uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
inline uint64_t hash_of(uint64_t k) { return mix64(k); }
inline uint64_t hash_of(const TableKey& k) { return mix64(k.key ^ mix64(k.table + 0x9e3779b97f4a7c15ULL)); }

template <typename K>
class FlatIndex {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  explicit FlatIndex(size_t expected = 0) { rehash(capacity_for(expected)); }

  // The value of k; if absent, inserts `v` and returns it. second: inserted.
  std::pair<uint32_t, bool> insert(const K& k, uint32_t v) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
    size_t i = hash_of(k) & mask_;
    while (slots_[i].value != kNone) {
      if (slots_[i].key == k) return {slots_[i].value, false};
      i = (i + 1) & mask_;
    }
    slots_[i] = {k, v};
    ++size_;
    return {v, true};
  }

  // Sets the value of k, which must be present.
  void assign(const K& k, uint32_t v) {
    size_t i = hash_of(k) & mask_;
    while (!(slots_[i].key == k)) i = (i + 1) & mask_;
    slots_[i].value = v;
  }

  uint32_t find(const K& k) const {
    size_t i = hash_of(k) & mask_;
    while (slots_[i].value != kNone) {
      if (slots_[i].key == k) return slots_[i].value;
      i = (i + 1) & mask_;
    }
    return kNone;
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    K key{};
    uint32_t value = kNone;
  };

  static size_t capacity_for(size_t n) {
    size_t c = 16;
    while (c < n * 2) c *= 2;
    return c;
  }

  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.value != kNone) insert(s.key, s.value);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace rdtx::history
