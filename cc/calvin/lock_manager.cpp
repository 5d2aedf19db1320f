#include "cc/calvin/lock_manager.hpp"

#include <algorithm>
#include <atomic>
#include <bit>

#include "env/tsc.hpp"

namespace rdtx::cc::calvin {

namespace {
// The lock word of a tuple: its metadata word 0 (8-aligned in the store).
std::atomic_ref<uint64_t> lock_word(uintptr_t rec) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(rec));
}
}  // namespace

LockManager::LockManager(uint32_t groups, uint32_t per_epoch, uint32_t max_records, GrantBoard& board)
    : groups_(groups),
      per_epoch_(per_epoch),
      max_records_(max_records),
      board_(board),
      group_(groups),
      requests_(size_t{groups} * 2 * per_epoch),
      records_(size_t{groups} * 2 * per_epoch * max_records) {
  pending_.reserve(size_t{groups} * 2 * per_epoch);
  // At most one epoch of every group is pending, each request with up to
  // max_records records: a table twice that keeps probes short.
  blocked_.resize(std::bit_ceil(size_t{2} * groups * per_epoch * max_records + 16));
}

LockManager::Request& LockManager::request(uint32_t group, uint64_t epoch, uint32_t i) {
  Request& r = slot(group, epoch, i);
  r.nrec = 0;
  return r;
}

void LockManager::add_record(uint32_t group, uint64_t epoch, uint32_t i, std::byte* tuple) {
  Request& r = slot(group, epoch, i);
  const size_t s = (size_t{group} * 2 + (epoch & 1)) * per_epoch_ + i;
  records_of(s)[r.nrec++] = reinterpret_cast<uintptr_t>(tuple);
}

void LockManager::publish(uint32_t group, uint64_t epoch, uint32_t count, bool last) {
  Group& g = group_[group];
  g.count[epoch & 1].store(count, std::memory_order_relaxed);
  if (last) g.last.store(epoch, std::memory_order_relaxed);
  // release: the requests and the count above before the epoch that makes
  // the manager read them.
  g.published.store(epoch, std::memory_order_release);
}

void LockManager::release(uint32_t group, uint64_t epoch, uint32_t i) {
  Request& r = slot(group, epoch, i);
  const size_t s = (size_t{group} * 2 + (epoch & 1)) * per_epoch_ + i;
  const uintptr_t* recs = records_of(s);
  for (uint32_t j = 0; j < r.nrec; ++j)
    // release: the record installed in place before the word that lets
    // the next holder read it.
    lock_word(recs[j]).store(0, std::memory_order_release);
  // release: the cleared words before the count that makes poll() walk again.
  releases_.fetch_add(1, std::memory_order_release);
}

void LockManager::leave(uint32_t group) {
  Group& g = group_[group];
  g.last.store(g.published.load(std::memory_order_relaxed), std::memory_order_release);
}

bool LockManager::finished() const {
  if (!pending_.empty()) return false;
  for (const Group& g : group_) {
    const uint64_t last = g.last.load(std::memory_order_acquire);
    // Still to publish, or published and not merged yet.
    if (last == UINT64_MAX || last >= merging_) return false;
  }
  return true;
}

bool LockManager::blocked(uintptr_t rec) const {
  const size_t mask = blocked_.size() - 1;
  for (size_t h = (rec * 0x9e3779b97f4a7c15ull) >> 20 & mask;; h = (h + 1) & mask) {
    const BlockedSlot& b = blocked_[h];
    if (b.gen != gen_) return false;
    if (b.rec == rec) return true;
  }
}

void LockManager::block(uintptr_t rec) {
  const size_t mask = blocked_.size() - 1;
  for (size_t h = (rec * 0x9e3779b97f4a7c15ull) >> 20 & mask;; h = (h + 1) & mask) {
    BlockedSlot& b = blocked_[h];
    if (b.gen != gen_) {
      b = {rec, gen_};
      return;
    }
    if (b.rec == rec) return;
  }
}

int LockManager::poll() {
  int work = 0;
  // Merge: epoch `merging_` once every group has published it or left
  // before it. (One epoch at a time is pending: a group publishes e+1 only
  // after all its requests of e were granted, so when every group has
  // published e+1 nothing of e is left.)
  for (;;) {
    bool complete = true, any = false;
    for (const Group& g : group_) {
      // acquire: the requests published with this epoch.
      if (g.published.load(std::memory_order_acquire) >= merging_) {
        any = true;
      } else if (g.last.load(std::memory_order_acquire) >= merging_) {
        complete = false;
        break;
      }
    }
    if (!complete || !any) break;
    const size_t first = pending_.size();
    for (uint32_t g = 0; g < groups_; ++g) {
      if (group_[g].published.load(std::memory_order_acquire) < merging_) continue;
      const uint32_t n = group_[g].count[merging_ & 1].load(std::memory_order_relaxed);
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t s = static_cast<uint32_t>((size_t{g} * 2 + (merging_ & 1)) * per_epoch_ + i);
        pending_.push_back({requests_[s].ts, merging_, s});
      }
    }
    // The global order within the epoch: by timestamp (unique per
    // coordinator, so no ties), as on every other node.
    std::sort(pending_.begin() + static_cast<std::ptrdiff_t>(first), pending_.end(),
              [](const Pending& a, const Pending& b) { return a.ts < b.ts; });
    merged_tsc_[merging_ & 1].store(env::tsc(), std::memory_order_relaxed);
    ++merging_;
    ++work;
  }
  if (pending_.empty()) return work;
  // Nothing merged and nothing released since the last walk: it would
  // grant nothing more (acquire: the words cleared before the count).
  const uint64_t releases = releases_.load(std::memory_order_acquire);
  if (work == 0 && releases == walked_releases_) return 0;
  walked_releases_ = releases;
  // Grant in order: a request waits if one of its records is locked or
  // wanted by an earlier waiting request (then its records are wanted too).
  ++gen_;
  size_t out = 0;
  for (size_t k = 0; k < pending_.size(); ++k) {
    const Pending p = pending_[k];
    Request& r = requests_[p.slot];
    const uintptr_t* recs = records_of(p.slot);
    bool free = true;
    for (uint32_t j = 0; j < r.nrec && free; ++j)
      // acquire: a holder's release store (its writes before it).
      free = lock_word(recs[j]).load(std::memory_order_acquire) == 0 && !blocked(recs[j]);
    if (free) {
      for (uint32_t j = 0; j < r.nrec; ++j) lock_word(recs[j]).store(r.id, std::memory_order_relaxed);
      // release: the lock words above before the tag the holder polls.
      r.granted.store(p.epoch, std::memory_order_release);
      // After the tag: a group that reads the count it makes finds the tag.
      board_.add(p.slot / (2 * per_epoch_));
      ++work;
      continue;
    }
    for (uint32_t j = 0; j < r.nrec; ++j) block(recs[j]);
    pending_[out++] = p;
  }
  pending_.resize(out);
  return work;
}

}  // namespace rdtx::cc::calvin
