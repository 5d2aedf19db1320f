// HashIndex: the RDMA-friendly hash index of one table on its owner node,
// in the table's registered memory so that peers can walk it with one-sided
// READs (remote_lookup.hpp) while the owner's threads use it locally.
//
// Layout: an array of 128-byte buckets, cache-line aligned, each read with
// one READ. Buckets [0, buckets) are the primary buckets a key hashes to;
// buckets [buckets, buckets + overflow) are the overflow area. A bucket holds
// a lock word, the index of the next bucket of its chain (0 = end; 0 is never
// an overflow bucket) and 7 slots {key, value}; value = tuple index << 32 |
// low 32 bits of the tuple's state, and 0 means empty (a live state is odd,
// so a used slot is never 0). With the default sizing (4 keys per primary
// bucket on average) a lookup needs one READ in ~95% of cases.
//
// Concurrency. Lookups are lock-free and may run at any time, locally or by
// remote READs that copy a bucket with no atomicity beyond 8-byte words.
// Insert and erase of a key take the lock bit of the key's primary bucket,
// which serialises all changes to that chain. Three rules keep lookups
// correct without coordinating with them:
//   - a slot is filled (key, then value with release) only after its tuple
//     is live, and emptied by clearing its value; a live slot never moves;
//   - overflow buckets are only ever appended to a chain, never unlinked or
//     reused by another chain, so a chain a reader follows stays a chain;
//   - slots are hints: a reader confirms the tuple's header (key, live,
//     state) before using it, so a torn or stale slot costs a retry or a
//     miss, never a wrong tuple.
// So a key present for the whole lookup is always found; a key inserted or
// erased during it may or may not be.
//
// Overflow buckets are handed out in increasing order and only ever linked
// at a chain's end, so along a chain bucket numbers strictly increase.
// Every value read from the index (tuple index, next bucket) is checked
// against the geometry before use, and a link that does not increase is
// corrupt: a peer that scribbles on the index (it is registered for remote
// access like the tuples) causes -EBADMSG, never an out-of-bounds access or
// an endless walk.
//
// A growing table (TableSpec::grows) reserves overflow buckets for every
// tuple it may reach but commits them in steps: the index is told how many
// it may use (raise_overflow_limit()), and reserve() reports -ENOSPC at that
// limit so that the table can commit more and retry.
// Thread-safety: find() from any thread; the ChainLock-taking operations from
// any thread of the owner node.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "store/tuple.hpp"

namespace rdtx::store {

inline constexpr uint32_t kBucketBytes = 128;
inline constexpr uint32_t kSlotsPerBucket = 7;

struct IndexSlot {
  uint64_t key;
  uint64_t value;  // tuple index << 32 | state_low; 0 = empty
};

struct alignas(64) Bucket {
  uint64_t lock;  // bit 0: an insert/erase holds this chain (primary buckets only)
  uint64_t next;  // index of the chain's next bucket (an overflow bucket); 0 = end
  IndexSlot slots[kSlotsPerBucket];
};
static_assert(sizeof(Bucket) == kBucketBytes);

inline constexpr uint64_t slot_value(uint32_t tuple_index, uint64_t state) {
  return uint64_t{tuple_index} << 32 | state_low(state);
}
inline constexpr uint32_t slot_tuple(uint64_t value) { return static_cast<uint32_t>(value >> 32); }
inline constexpr uint32_t slot_state(uint64_t value) { return static_cast<uint32_t>(value); }

// The bucket hash (murmur3's 64-bit finalizer), scaled to [0, buckets) by a
// multiply-shift so that any bucket count works. Owner and peers must agree
// on it: it is part of the index format.
inline uint64_t index_hash(uint64_t key) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdull;
  key ^= key >> 33;
  key *= 0xc4ceb9fe1a85ec53ull;
  return key ^ (key >> 33);
}
inline uint64_t bucket_of(uint64_t key, uint64_t buckets) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(index_hash(key)) * buckets) >> 64);
}

// What a reader needs to check values read from an index.
struct IndexGeometry {
  uint64_t buckets = 0;   // primary
  uint64_t overflow = 0;  // overflow buckets
  uint64_t capacity = 0;  // tuples

  // `next` read from bucket `from` of a chain.
  bool valid_next(uint64_t next, uint64_t from) const {
    return next > from && next >= buckets && next - buckets < overflow;
  }
  // A used slot names an existing tuple and a live state.
  bool valid_slot(uint64_t value) const { return slot_tuple(value) < capacity && is_live(slot_state(value)); }
};

enum class ScanResult : uint8_t {
  kFound,    // *value is the key's slot value (checked against the geometry)
  kNext,     // not in this bucket; the chain continues at *next (checked)
  kEnd,      // not in this bucket, which ends the chain
  kCorrupt,  // a value that cannot have been written by the owner
};

// Scans bucket number `at`, in place or as copied by a READ, for a used
// slot with `key`. Loads are atomic per word (acquire on slot values,
// pairing with publish()), so the owner's threads may scan while it is
// modified.
ScanResult scan_bucket(const Bucket& b, uint64_t at, uint64_t key, const IndexGeometry& g, uint64_t* value,
                       uint64_t* next);

class HashIndex {
 public:
  // `base` holds (buckets + overflow) 64-byte aligned buckets, of which the
  // first buckets + overflow_limit are committed and zeroed.
  HashIndex(std::byte* base, const IndexGeometry& g, uint64_t overflow_limit);
  HashIndex(const HashIndex&) = delete;
  HashIndex& operator=(const HashIndex&) = delete;

  // Lock-free lookup: 0 with *value = the key's slot value, -ENOENT, or
  // -EBADMSG (corrupt index). The value is a hint to confirm on the tuple.
  int find(uint64_t key, uint64_t* value) const;

  // Holds the lock bit of a key's primary bucket for its scope. Spins, then
  // yields: holders only run short critical sections, but may be descheduled
  // when threads outnumber cores.
  class ChainLock {
   public:
    ChainLock(HashIndex& index, uint64_t key);
    ~ChainLock();
    ChainLock(const ChainLock&) = delete;
    ChainLock& operator=(const ChainLock&) = delete;

   private:
    friend class HashIndex;
    Bucket* head_;
  };

  // Under `lock` (taken for `key`): finds an empty slot of the chain, linking
  // a fresh overflow bucket at its end when every slot is used. Returns 0
  // and *slot, -EEXIST if the key has a used slot, -ENOSPC if the overflow
  // buckets allowed now are used up, -EBADMSG if the chain is corrupt. Nothing needs to be
  // undone if the caller then abandons the slot.
  int reserve(const ChainLock& lock, uint64_t key, IndexSlot** slot);
  // Under the lock: makes a reserved slot map key -> value for readers.
  static void publish(IndexSlot* slot, uint64_t key, uint64_t value);
  // Under the lock: finds the key's used slot without changing it; 0 with
  // *slot, -ENOENT or -EBADMSG.
  int locate(const ChainLock& lock, uint64_t key, IndexSlot** slot);
  // Under the lock: empties a slot found by locate().
  static void clear(IndexSlot* slot);

  const IndexGeometry& geometry() const { return g_; }
  uint64_t overflow_used() const { return overflow_used_.load(std::memory_order_relaxed); }
  uint64_t overflow_limit() const { return overflow_limit_.load(std::memory_order_acquire); }
  // Lets reserve() use overflow buckets [0, limit) (<= geometry().overflow;
  // never lowers it). Release: they were committed and zeroed before.
  void raise_overflow_limit(uint64_t limit);
  // Raw bucket access for diagnostics and tests (i < buckets + overflow).
  Bucket* bucket(uint64_t i) { return base_ + i; }

 private:
  // Walks the chain under the lock; `fn(slot)` returns true to stop.
  template <typename Fn>
  int walk_locked(Bucket* head, Fn&& fn, Bucket** tail);
  int link_overflow(Bucket* tail, IndexSlot** slot);

  Bucket* base_;
  IndexGeometry g_;
  std::atomic<uint64_t> overflow_used_{0};
  std::atomic<uint64_t> overflow_limit_;
};

}  // namespace rdtx::store
