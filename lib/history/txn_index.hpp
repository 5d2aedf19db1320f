// TxnIndex: attempt id -> index of the attempt in the History, for the
// checker. An id is (node, worker, coroutine, per-coordinator sequence), and
// each coordinator numbers its attempts 1, 2, 3, ...: so the index is a
// direct table, one uint32 per sequence number of each coordinator seen,
// found with a lookup in a small map of coordinators that stays in cache --
// 4 bytes per attempt instead of a hash slot of 16 that misses the cache on
// every lookup. Ids that are not dense that way (histories built by hand
// with arbitrary ids) fall back to an open-addressing hash of every id.
// With two attempts of one id, the first (lowest index) is found.
// Thread-safety: build() runs parallel phases on the caller's oneTBB arena;
// find() is const and may run concurrently.
#pragma once

#include <cstdint>
#include <vector>

#include "history/flat_index.hpp"
#include "history/history.hpp"

namespace rdtx::history {

class TxnIndex {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  void build(const History& h);

  // Brings find(id)'s memory towards the cache.
  void prefetch(TxnId id) const {
    if (!dense_) return;
    const uint32_t c = coordinator(id);
    if (c == kNone) return;
    const Coordinator& co = coord_[c];
    const uint64_t off = static_cast<uint32_t>(id) - uint64_t{co.min_seq};
    if (off < co.span) __builtin_prefetch(&slots_[co.base + off]);
  }

  // Whether two attempts have one id (then find() gives the first).
  bool has_duplicates() const { return duplicates_; }

  uint32_t find(TxnId id) const {
    if (!dense_) return hash_.find(id);
    const uint32_t c = coordinator(id);
    if (c == kNone) return kNone;
    const Coordinator& co = coord_[c];
    const uint64_t off = static_cast<uint32_t>(id) - uint64_t{co.min_seq};
    return off < co.span ? slots_[co.base + off] : kNone;
  }

 private:
  struct Coordinator {
    uint64_t base = 0;  // into slots_
    uint32_t min_seq = UINT32_MAX, max_seq = 0;
    uint64_t span = 0;  // max_seq - min_seq + 1
  };

  // The coordinator of id: a direct table over the span of the coordinator
  // keys (id >> 32) seen, when it is small (a lookup per version named; the
  // keys of a cluster's coordinators are a few runs), else the hash.
  uint32_t coordinator(TxnId id) const {
    const uint64_t k = (id >> 32) - coord_lo_;
    if (!coord_direct_.empty()) return k < coord_direct_.size() ? coord_direct_[k] : kNone;
    return coordinators_.find(id >> 32);
  }

  bool dense_ = false;
  bool duplicates_ = false;
  uint64_t coord_lo_ = 0;
  std::vector<uint32_t> coord_direct_;
  FlatIndex<uint64_t> coordinators_;  // id >> 32 -> index into coord_
  std::vector<Coordinator> coord_;
  std::vector<uint32_t> slots_;
  FlatIndex<uint64_t> hash_;  // when not dense
};

}  // namespace rdtx::history
