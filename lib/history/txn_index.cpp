#include "history/txn_index.hpp"

#include <algorithm>
#include <atomic>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace rdtx::history {

namespace {
constexpr size_t kPieces = 64;
// Past this many coordinators in one piece of the history, or sequence
// numbers spread over more than kMaxSpread times the attempts, ids are not
// dense. Aborted attempts use sequence numbers too, and are not recorded
// unless asked: a run that aborts half its attempts (YCSB's hot records)
// spreads them over twice the attempts recorded. kMaxSpread slots of 4 bytes
// per attempt are no more than the fallback hash takes (16-byte slots, at
// most half full).
constexpr uint64_t kMaxSpread = 8;
constexpr size_t kMaxCoordinators = size_t{1} << 16;
// The direct coordinator table spans at most this many keys (4 MiB; only
// the lines of the coordinators in use are ever touched).
constexpr uint64_t kMaxDirectSpan = uint64_t{1} << 20;
}  // namespace

void TxnIndex::build(const History& h) {
  const size_t n = h.size();
  struct Local {
    FlatIndex<uint64_t> index;
    std::vector<Coordinator> coord;
    std::vector<uint64_t> keys;  // per coord: id >> 32
    bool overflow = false;
  };
  std::vector<Local> local(kPieces);
  tbb::parallel_for(tbb::blocked_range<size_t>(0, kPieces, 1), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t piece = r.begin(); piece < r.end(); ++piece) {
      Local& l = local[piece];
      uint64_t last = UINT64_MAX;
      uint32_t ci = 0;
      for (size_t i = n * piece / kPieces; i < n * (piece + 1) / kPieces && !l.overflow; ++i) {
        const TxnId id = h.txn(i).id;
        if (id == kInitialTxn) continue;
        if (id >> 32 != last) {
          last = id >> 32;
          const auto [c, inserted] = l.index.insert(last, static_cast<uint32_t>(l.coord.size()));
          if (inserted) {
            l.coord.emplace_back();
            l.keys.push_back(last);
          }
          ci = c;
          l.overflow = l.coord.size() > kMaxCoordinators;
        }
        Coordinator& co = l.coord[ci];
        co.min_seq = std::min(co.min_seq, static_cast<uint32_t>(id));
        co.max_seq = std::max(co.max_seq, static_cast<uint32_t>(id));
      }
    }
  });

  dense_ = true;
  coordinators_ = FlatIndex<uint64_t>();
  coord_.clear();
  coord_direct_.clear();
  coord_lo_ = 0;
  for (size_t piece = 0; piece < kPieces && dense_; ++piece) {
    const Local& l = local[piece];
    if (l.overflow) dense_ = false;
    for (size_t lc = 0; lc < l.coord.size() && dense_; ++lc) {
      const auto [c, inserted] = coordinators_.insert(l.keys[lc], static_cast<uint32_t>(coord_.size()));
      if (inserted) coord_.emplace_back();
      Coordinator& co = coord_[c];
      co.min_seq = std::min(co.min_seq, l.coord[lc].min_seq);
      co.max_seq = std::max(co.max_seq, l.coord[lc].max_seq);
      dense_ = coord_.size() <= kMaxCoordinators;
    }
  }
  uint64_t total = 0;
  for (Coordinator& co : coord_) {
    co.base = total;
    co.span = uint64_t{co.max_seq} - co.min_seq + 1;
    total += co.span;
  }
  if (dense_ && total > kMaxSpread * uint64_t{n} + 4096) dense_ = false;
  if (dense_ && !coord_.empty()) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const Local& l : local)
      for (uint64_t k : l.keys) {
        lo = std::min(lo, k);
        hi = std::max(hi, k);
      }
    if (hi - lo < kMaxDirectSpan) {
      coord_lo_ = lo;
      coord_direct_.assign(hi - lo + 1, kNone);
      for (const Local& l : local)
        for (uint64_t k : l.keys) coord_direct_[k - lo] = coordinators_.find(k);
    }
  }

  if (!dense_) {
    coordinators_ = FlatIndex<uint64_t>();
    coord_.clear();
    hash_ = FlatIndex<uint64_t>(n);
    duplicates_ = false;
    for (uint32_t i = 0; i < n; ++i)
      if (h.txn(i).id != kInitialTxn && !hash_.insert(h.txn(i).id, i).second) duplicates_ = true;
    return;
  }
  slots_.reserve(total);
  advise_huge_pages(slots_.data(), total * sizeof(uint32_t));
  slots_.assign(total, kNone);
  std::atomic<bool> duplicates{false};
  tbb::parallel_for(tbb::blocked_range<size_t>(0, kPieces, 1), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t piece = r.begin(); piece < r.end(); ++piece)
      for (size_t i = n * piece / kPieces; i < n * (piece + 1) / kPieces; ++i) {
        const TxnId id = h.txn(i).id;
        if (id == kInitialTxn) continue;
        const Coordinator& co = coord_[coordinator(id)];
        std::atomic_ref<uint32_t> slot(slots_[co.base + (static_cast<uint32_t>(id) - co.min_seq)]);
        // The lowest index of an id wins, whatever the threads' order.
        uint32_t cur = slot.load(std::memory_order_relaxed);
        while (i < cur && !slot.compare_exchange_weak(cur, static_cast<uint32_t>(i), std::memory_order_relaxed)) {
        }
        if (cur != kNone && cur != i) duplicates.store(true, std::memory_order_relaxed);
      }
  });
  duplicates_ = duplicates.load();
}

}  // namespace rdtx::history
