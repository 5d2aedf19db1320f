#include "store/hash_index.hpp"

#include <algorithm>

#include <cerrno>
#include <thread>

namespace rdtx::store {

ScanResult scan_bucket(const Bucket& b, uint64_t at, uint64_t key, const IndexGeometry& g, uint64_t* value,
                       uint64_t* next) {
  for (const IndexSlot& s : b.slots) {
    // acquire: pairs with publish()'s release store, so the slot's key and
    // the live tuple it names are visible once its value is.
    uint64_t v = load_word(&s.value, std::memory_order_acquire);
    if (v == 0 || load_word(&s.key, std::memory_order_relaxed) != key) continue;
    if (!g.valid_slot(v)) return ScanResult::kCorrupt;
    *value = v;
    return ScanResult::kFound;
  }
  // acquire: pairs with link_overflow()'s release, so the linked bucket is
  // seen zeroed rather than with whatever it held before.
  uint64_t n = load_word(&b.next, std::memory_order_acquire);
  if (n == 0) return ScanResult::kEnd;
  if (!g.valid_next(n, at)) return ScanResult::kCorrupt;
  *next = n;
  return ScanResult::kNext;
}

HashIndex::HashIndex(std::byte* base, const IndexGeometry& g, uint64_t overflow_limit)
    : base_(reinterpret_cast<Bucket*>(base)), g_(g), overflow_limit_(std::min(overflow_limit, g.overflow)) {}

void HashIndex::raise_overflow_limit(uint64_t limit) {
  limit = std::min(limit, g_.overflow);
  uint64_t cur = overflow_limit_.load(std::memory_order_relaxed);
  while (cur < limit &&
         !overflow_limit_.compare_exchange_weak(cur, limit, std::memory_order_release, std::memory_order_relaxed)) {
  }
}

int HashIndex::find(uint64_t key, uint64_t* value) const {
  uint64_t b = bucket_of(key, g_.buckets);
  for (;;) {
    uint64_t next = 0;
    switch (scan_bucket(base_[b], b, key, g_, value, &next)) {
      case ScanResult::kFound:
        return 0;
      case ScanResult::kEnd:
        return -ENOENT;
      case ScanResult::kCorrupt:
        return -EBADMSG;
      case ScanResult::kNext:
        break;
    }
    // Links strictly increase (scan_bucket checked): no cycle.
    b = next;
  }
}

HashIndex::ChainLock::ChainLock(HashIndex& index, uint64_t key)
    : head_(index.base_ + bucket_of(key, index.g_.buckets)) {
  std::atomic_ref<uint64_t> word(head_->lock);
  for (uint32_t spins = 0;; ++spins) {
    uint64_t expected = 0;
    // acquire: the previous holder's changes to the chain happen-before ours.
    if (word.load(std::memory_order_relaxed) == 0 &&
        word.compare_exchange_weak(expected, 1, std::memory_order_acquire, std::memory_order_relaxed))
      return;
    if (spins >= 64) std::this_thread::yield();
  }
}

HashIndex::ChainLock::~ChainLock() { store_word(&head_->lock, 0, std::memory_order_release); }

template <typename Fn>
int HashIndex::walk_locked(Bucket* head, Fn&& fn, Bucket** tail) {
  Bucket* b = head;
  for (;;) {
    for (IndexSlot& s : b->slots)
      if (fn(s)) return 1;
    uint64_t n = load_word(&b->next, std::memory_order_relaxed);
    if (n == 0) {
      *tail = b;
      return 0;
    }
    if (!g_.valid_next(n, static_cast<uint64_t>(b - base_))) return -EBADMSG;
    b = base_ + n;
  }
}

int HashIndex::reserve(const ChainLock& lock, uint64_t key, IndexSlot** slot) {
  IndexSlot* empty = nullptr;
  Bucket* tail = nullptr;
  int rc = walk_locked(
      lock.head_,
      [&](IndexSlot& s) {
        if (load_word(&s.value, std::memory_order_relaxed) == 0) {
          if (empty == nullptr) empty = &s;
          return false;
        }
        return load_word(&s.key, std::memory_order_relaxed) == key;
      },
      &tail);
  if (rc == 1) return -EEXIST;
  if (rc < 0) return rc;
  if (empty != nullptr) {
    *slot = empty;
    return 0;
  }
  return link_overflow(tail, slot);
}

int HashIndex::link_overflow(Bucket* tail, IndexSlot** slot) {
  // acquire: pairs with raise_overflow_limit(); buckets below it are committed.
  const uint64_t limit = overflow_limit_.load(std::memory_order_acquire);
  uint64_t used = overflow_used_.load(std::memory_order_relaxed);
  do {
    if (used >= limit) return -ENOSPC;
  } while (!overflow_used_.compare_exchange_weak(used, used + 1, std::memory_order_relaxed));
  uint64_t n = g_.buckets + used;
  Bucket* b = base_ + n;
  // Never used by the owner, but registered for remote writes: start clean.
  store_word(&b->next, 0, std::memory_order_relaxed);
  for (IndexSlot& s : b->slots) {
    store_word(&s.value, 0, std::memory_order_relaxed);
    store_word(&s.key, 0, std::memory_order_relaxed);
  }
  // release: readers that follow the link see the cleared bucket.
  store_word(&tail->next, n, std::memory_order_release);
  *slot = &b->slots[0];
  return 0;
}

void HashIndex::publish(IndexSlot* slot, uint64_t key, uint64_t value) {
  store_word(&slot->key, key, std::memory_order_relaxed);
  // release: pairs with scan_bucket()'s acquire; the key above and the
  // tuple made live before this call are visible to whoever sees the value.
  store_word(&slot->value, value, std::memory_order_release);
}

int HashIndex::locate(const ChainLock& lock, uint64_t key, IndexSlot** slot) {
  Bucket* tail = nullptr;
  IndexSlot* found = nullptr;
  int rc = walk_locked(
      lock.head_,
      [&](IndexSlot& s) {
        if (load_word(&s.value, std::memory_order_relaxed) == 0 || load_word(&s.key, std::memory_order_relaxed) != key)
          return false;
        found = &s;
        return true;
      },
      &tail);
  if (rc < 0) return rc;
  if (found == nullptr) return -ENOENT;
  if (!g_.valid_slot(load_word(&found->value, std::memory_order_relaxed))) return -EBADMSG;
  *slot = found;
  return 0;
}

void HashIndex::clear(IndexSlot* slot) {
  // No order needed: a reader that still sees the old value confirms it on
  // the tuple, which the caller marks dead afterwards.
  store_word(&slot->value, 0, std::memory_order_relaxed);
}

}  // namespace rdtx::store
