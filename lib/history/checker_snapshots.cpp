// The checker's snapshot isolation on recorded snapshot vectors (the
// class: checker_impl.hpp): each committed attempt's vector checked
// (setup_snapshot_vectors) and closed over the transactions it holds: in
// a few sweeps when each slot's commits hold the one before
// (close_by_sweeps), else in Kahn's order (close_snapshots). emit()
// (checker_edges.cpp) checks each edge against the closed snapshots.
#include <algorithm>
#include <span>
#include <string>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>
#include <utility>
#include <vector>

#include "history/checker_impl.hpp"

namespace rdtx::history::detail {

void Checker::setup_snapshot_vectors() {
  if (o_.isolation != Isolation::kSnapshot || h_.sources.empty() || !h_.sources.front().snapshot_vectors) return;
  const uint32_t n = static_cast<uint32_t>(h_.size());
  uint32_t slots = 0;
  bool ok = true;
  for (uint32_t i = 0; i < n; ++i) {
    const TxnRecord& t = txn(i);
    if (!t.committed()) continue;
    if (slots == 0) slots = t.snapshot_words;
    if (t.snapshot_words != slots) {
      add(Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {t.id},
                       d_.txn(t.id) + "'s snapshot vector has " + std::to_string(t.snapshot_words) +
                           " slots, others have " + std::to_string(slots));
      });
      return;  // no exact check: G-SIb is searched as without timestamps
    }
    if (t.commit_ts != 0 && t.commit_slot >= slots) {
      add(Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {t.id},
                       d_.txn(t.id) + "'s commit slot " + std::to_string(t.commit_slot) + " is outside the " +
                           std::to_string(slots) + "-slot snapshot vectors");
      });
      return;
    }
    bool wrote = false;
    for (const AccessRecord& a : h_.accesses(i)) wrote = wrote || a.writes();
    if (wrote && t.commit_ts == 0) {
      ok = false;
      add(Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {t.id},
                       d_.txn(t.id) + " wrote, but has no commit timestamp in its snapshot vector's slots");
      });
    }
    if (t.commit_ts != 0 && t.commit_ts <= h_.snapshot(i)[t.commit_slot]) {
      ok = false;
      add(Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {t.id},
                       d_.txn(t.id) + "'s snapshot holds its own commit (slot " + std::to_string(t.commit_slot) +
                           ", ts " + std::to_string(t.commit_ts) + ")");
      });
    }
  }
  if (slots == 0 || !ok) return;
  si_vectors_ = true;
  r_.stats.snapshot_slots = slots;
  // Each slot's writers by commit timestamp, and per slot a rank table:
  // rank[j][t] = how many of slot j's writers committed at or below t
  // (timestamps of one slot are dense: a coordinator's counter, or a
  // node's clock with gaps where attempts gave theirs up).
  SlotWriters sw(slots);
  for (uint32_t i = 0; i < n; ++i)
    if (txn(i).committed() && txn(i).commit_ts != 0)
      sw.writers[txn(i).commit_slot].push_back({txn(i).commit_ts, i});
  for (uint32_t j = 0; j < slots; ++j) {
    auto& w = sw.writers[j];
    std::sort(w.begin(), w.end());
    sw.base[j + 1] = sw.base[j] + w.size();
    if (w.empty()) continue;
    if (w.back().first > 4 * (w.size() + (uint64_t{1} << 20))) {
      add(Anomaly::kInconclusive, [&] {
        return finding(Anomaly::kInconclusive, {},
                       "the commit timestamps of snapshot slot " + std::to_string(j) + " reach " +
                           std::to_string(w.back().first) + " for " + std::to_string(w.size()) +
                           " commits: too sparse to close the snapshots; G-SIb through chains of snapshots not "
                           "checked");
      });
      return;
    }
    std::vector<uint32_t>& r = sw.rank[j];
    r.assign(w.back().first + 1, 0);
    for (const auto& e : w) ++r[e.first];
    for (size_t t = 1; t < r.size(); ++t) r[t] += r[t - 1];
  }
  if (stopping()) return;
  // In a coordinator's slot (the basic vector), each commit's snapshot
  // holds the slot's commit before it: then the closure is found in a few
  // sweeps (close_by_sweeps); else (the compressed vector: a node's
  // coordinators share a slot, and its vectors are short) in one pass of
  // Kahn's order over every snapshot's slot prefixes (close_snapshots).
  bool chained = true;
  for (const auto& w : sw.writers)
    for (size_t k = 1; k < w.size() && chained; ++k)
      chained = h_.snapshot(w[k].second)[txn(w[k].second).commit_slot] >= w[k - 1].first;
  if (chained)
    close_by_sweeps(sw);
  else
    close_snapshots(sw);
  // The snapshots the closing added to.
  for (uint32_t z = 0; z < row_of_.size(); ++z)
    if (row_of_[z] != kNone) {
      const std::span<const uint64_t> raw = h_.snapshot(z);
      r_.stats.snapshots_widened += !std::equal(raw.begin(), raw.end(), closed_snapshot(z));
    }
}

// The closure when each slot's commits hold the one before: the closure
// of a snapshot is then its own joined with the closures of the last
// writer it holds in each slot (which hold the earlier ones'), the least
// fixed point of that rule, reached by sweeps over the attempts. The first
// sweep finds the snapshots that do not hold their last writers' (most do:
// with the attempts sorted by the sum of their vectors and the minimum of
// every vector from a checkpoint on, one per 64 places, a writer's
// snapshot below the minimum from a checkpoint is below that of every
// attempt placed after it, settled in O(1); the rest are compared word by
// word); each later sweep looks only at the slots with a writer whose
// closure grew in the sweep before. O(n slots) for the first sweep (in
// parallel), and O(slots^2) for each closure that grows.
void Checker::close_by_sweeps(const SlotWriters& sw) {
  const uint32_t slots = static_cast<uint32_t>(sw.writers.size());
  const uint32_t n = static_cast<uint32_t>(h_.size());
  auto parallel = [&](size_t count, auto&& f) {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, count, 4096), [&](const tbb::blocked_range<size_t>& r) {
      if (stopping()) return;
      for (size_t i = r.begin(); i < r.end(); ++i) f(i);
    });
  };
  std::vector<std::pair<uint64_t, uint32_t>> by_sum(n);
  parallel(n, [&](size_t i) {
    uint64_t sum = 0;
    if (txn(static_cast<uint32_t>(i)).committed())
      for (uint64_t w : h_.snapshot(i)) sum += w;
    by_sum[i] = {sum, static_cast<uint32_t>(i)};
  });
  tbb::parallel_sort(by_sum.begin(), by_sum.end());
  std::vector<uint32_t> place(n, 0);
  parallel(n, [&](size_t k) { place[by_sum[k].second] = static_cast<uint32_t>(k); });
  constexpr uint32_t kStride = 64;
  const size_t checkpoints = (by_sum.size() + kStride - 1) / kStride;
  std::vector<uint64_t> suffix_min((checkpoints + 1) * slots, ~uint64_t{0});
  parallel(checkpoints, [&](size_t c) {  // each checkpoint's own block, then the suffix
    uint64_t* m = suffix_min.data() + c * slots;
    for (size_t k = c * kStride; k < std::min<size_t>(by_sum.size(), (c + 1) * kStride); ++k) {
      // Only the snapshots the sweeps test: committed ones, whole (an
      // aborted attempt may have none, and reading `slots` words there
      // read past the history's words).
      const uint32_t id = by_sum[k].second;
      const std::span<const uint64_t> snap = h_.snapshot(id);
      if (!txn(id).committed() || snap.size() < slots) continue;
      for (uint32_t j = 0; j < slots; ++j) m[j] = std::min(m[j], snap[j]);
    }
  });
  for (size_t c = checkpoints; c-- > 1;)
    for (uint32_t j = 0; j < slots; ++j)
      suffix_min[(c - 1) * slots + j] = std::min(suffix_min[(c - 1) * slots + j], suffix_min[c * slots + j]);
  // Per writer: the first checkpoint from which every snapshot is above
  // its own, galloping from its own place, or from where the slot's writer
  // before it reached if that is later (a later start only makes the
  // answer later: more snapshots are then compared word by word).
  auto below_from = [&](const uint64_t* x, size_t c) {
    const uint64_t* m = suffix_min.data() + c * slots;
    for (uint32_t j = 0; j < slots; ++j)
      if (x[j] > m[j]) return false;
    return true;
  };
  // bound[c * slots + j]: the commit timestamp up to which every writer of
  // slot j reached by checkpoint c (0: none). A snapshot placed at or past
  // checkpoint c that shows at most bound[c] holds only writers whose
  // snapshots are below its own.
  std::vector<uint64_t> bound((checkpoints + 1) * slots, 0);
  parallel(slots, [&](size_t j) {
    const auto& w = sw.writers[j];
    size_t c = 0;  // the checkpoint this slot's writers have reached so far
    for (size_t k = 0; k < w.size(); ++k) {
      const uint64_t* x = h_.snapshot(w[k].second).data();
      size_t lo = std::max<size_t>(c, place[w[k].second] / kStride), hi = lo, step = 1;
      while (hi < checkpoints && !below_from(x, hi)) {
        lo = hi + 1;
        hi = std::min(checkpoints, hi + step);
        step *= 2;
      }
      while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (below_from(x, mid))
          hi = mid;
        else
          lo = mid + 1;
      }
      // Writers 0..k all reached by checkpoint lo: from there on the bound
      // is at least w[k]'s timestamp.
      c = lo;
      bound[c * slots + j] = w[k].first;
    }
    for (size_t d = 1; d <= checkpoints; ++d)
      bound[d * slots + j] = std::max(bound[d * slots + j], bound[(d - 1) * slots + j]);
  });
  // The first sweep's test, in parallel: a snapshot that does not hold the
  // snapshot of the last writer it holds in some slot.
  std::vector<uint8_t> open(n, 0);
  parallel(n, [&](size_t z) {
    if (!txn(static_cast<uint32_t>(z)).committed()) return;
    const uint64_t* sz = h_.snapshot(z).data();
    const uint64_t* bz = bound.data() + (place[z] / kStride) * slots;
    bool settled = true;
    for (uint32_t j = 0; j < slots; ++j) settled = settled && sz[j] <= bz[j];
    if (settled) return;
    for (uint32_t j = 0; j < slots; ++j) {
      const uint32_t k = sw.held(j, sz[j]);
      if (k == 0) continue;
      const uint64_t* x = h_.snapshot(sw.writers[j][k - 1].second).data();
      for (uint32_t q = 0; q < slots; ++q)
        if (x[q] > sz[q]) {
          open[z] = 1;
          return;
        }
    }
  });
  if (stopping()) return;

  row_of_.assign(n, kNone);
  std::vector<uint32_t> grew_in(n, 0);  // the sweep (from 1) in which its closure last grew; 0: never
  std::vector<uint64_t> cur(slots);
  // Closes z over the current closures of the last writers it holds;
  // whether its closure grew.
  auto reclose = [&](uint32_t z) {
    const uint64_t* old = closed_snapshot(z);
    std::copy(old, old + slots, cur.begin());
    for (bool more = true; more;) {
      more = false;
      for (uint32_t j = 0; j < slots; ++j) {
        const uint32_t k = sw.held(j, cur[j]);
        if (k == 0) continue;
        const uint64_t* cw = closed_snapshot(sw.writers[j][k - 1].second);
        for (uint32_t q = 0; q < slots; ++q)
          if (cw[q] > cur[q]) cur[q] = cw[q], more = true;
      }
    }
    if (std::equal(cur.begin(), cur.end(), closed_snapshot(z))) return false;
    if (row_of_[z] == kNone) {
      row_of_[z] = static_cast<uint32_t>(rows_.size() / slots);
      rows_.resize(rows_.size() + slots);
    }
    std::copy(cur.begin(), cur.end(), rows_.begin() + static_cast<ptrdiff_t>(uint64_t{row_of_[z]} * slots));
    return true;
  };
  // Later sweeps: in each slot with writers whose closure grew in the
  // sweep before, from the first such writer's position on (grown_from).
  std::vector<uint32_t> grown_from(slots, kNone), next_grown(slots, kNone);
  for (uint32_t sweep = 1;; ++sweep) {
    if (sweep > 1) {
      std::fill(open.begin(), open.end(), 0);
      parallel(n, [&](size_t z) {
        if (!txn(static_cast<uint32_t>(z)).committed()) return;
        const uint64_t* sz = closed_snapshot(static_cast<uint32_t>(z));
        for (uint32_t j = 0; j < slots; ++j) {
          if (grown_from[j] == kNone) continue;
          const uint32_t k = sw.held(j, sz[j]);
          if (k != 0 && k - 1 >= grown_from[j] && grew_in[sw.writers[j][k - 1].second] + 1 >= sweep) {
            open[z] = 1;
            return;
          }
        }
      });
      if (stopping()) return;
    }
    std::fill(next_grown.begin(), next_grown.end(), kNone);
    bool grew = false;
    for (uint32_t z = 0; z < n; ++z) {
      if (!open[z] || !reclose(z)) continue;
      grew_in[z] = sweep;
      grew = true;
      if (txn(z).commit_ts != 0) {  // z's position among its slot's writers
        const uint32_t j = txn(z).commit_slot;
        const auto& w = sw.writers[j];
        const size_t at = static_cast<size_t>(
            std::lower_bound(w.begin(), w.end(), std::pair<uint64_t, uint32_t>{txn(z).commit_ts, z}) - w.begin());
        next_grown[j] = std::min(next_grown[j], static_cast<uint32_t>(at));
      }
    }
    if (!grew) break;
    grown_from.swap(next_grown);
  }
  for (uint32_t z = 0; z < n; ++z)
    if (row_of_[z] != kNone && txn(z).commit_ts != 0 && closed_snapshot(z)[txn(z).commit_slot] >= txn(z).commit_ts) {
      add(Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {txn(z).id},
                       "snapshot vectors in a cycle: " + d_.txn(txn(z).id) +
                           "'s snapshot holds, through the snapshots of the transactions it holds, its own commit");
      });
      break;
    }
}

namespace {
// to[s] = max(to[s], from[s]): the loop the closure spends its time in.
void join(uint64_t* __restrict to, const uint64_t* __restrict from, uint32_t n) {
  for (uint32_t s = 0; s < n; ++s) to[s] = to[s] < from[s] ? from[s] : to[s];
}
}  // namespace

// Closes every committed attempt's snapshot: S*(Z) = S(Z) joined with S*(Y)
// of every Y in S(Z), so that Y in S*(Z) exactly when a chain of snapshot
// inclusions leads from Y to Z. Kahn's order over the slots' prefixes: Z is
// closed once, in every slot j, the writers up to S(Z)[j] are; a slot's
// running join R[j] then is the closure of that prefix. O(n slots^2).
void Checker::close_snapshots(const SlotWriters& sw) {
  const uint32_t n = static_cast<uint32_t>(h_.size());
  const uint32_t slots = static_cast<uint32_t>(sw.writers.size());
  const auto& writers = sw.writers;
  const auto& base = sw.base;
  if (uint64_t{slots} * slots > (uint64_t{1} << 25)) {
    add(Anomaly::kInconclusive, [&] {
      return finding(Anomaly::kInconclusive, {},
                     "the snapshot vectors (" + std::to_string(slots) +
                         " slots) are not closed, and too long to close: G-SIb through chains of snapshots not "
                         "checked");
    });
    return;
  }
  // Waits: (slot j, prefix position) -> the attempts that wait for it.
  std::vector<uint32_t> pending(n, 0);
  std::vector<uint64_t> wait_first(base[slots] + 1, 0);
  auto for_each_wait = [&](uint32_t z, auto&& f) {
    const std::span<const uint64_t> sz = h_.snapshot(z);
    for (uint32_t j = 0; j < slots; ++j)
      if (const uint32_t k = sw.held(j, sz[j]); k != 0) f(base[j] + k - 1);
  };
  for (uint32_t z = 0; z < n; ++z)
    if (txn(z).committed()) for_each_wait(z, [&](uint64_t pos) { ++wait_first[pos + 1], ++pending[z]; });
  for (size_t k = 1; k < wait_first.size(); ++k) wait_first[k] += wait_first[k - 1];
  std::vector<uint32_t> waiters(wait_first.back());
  {
    std::vector<uint64_t> at(wait_first.begin(), wait_first.end() - 1);
    for (uint32_t z = 0; z < n; ++z)
      if (txn(z).committed()) for_each_wait(z, [&](uint64_t pos) { waiters[at[pos]++] = z; });
  }
  row_of_.assign(n, kNone);
  for (uint32_t z = 0; z < n; ++z) {
    if (!txn(z).committed()) continue;
    const std::span<const uint64_t> sz = h_.snapshot(z);
    row_of_[z] = static_cast<uint32_t>(rows_.size() / slots);
    rows_.insert(rows_.end(), sz.begin(), sz.end());
  }
  std::vector<uint64_t> running(uint64_t{slots} * slots, 0);
  std::vector<uint32_t> next(slots, 0);  // per slot: its writers closed, as a prefix
  std::vector<uint8_t> done(n, 0);
  std::vector<uint32_t> ready;
  for (uint32_t z = 0; z < n; ++z)
    if (txn(z).committed() && pending[z] == 0) ready.push_back(z);
  uint32_t closed = 0;
  while (!ready.empty()) {
    if ((closed & 0xffff) == 0 && stopping()) return;
    const uint32_t z = ready.back();
    ready.pop_back();
    done[z] = 1;
    ++closed;
    if (txn(z).commit_ts == 0) continue;
    const uint32_t j = txn(z).commit_slot;
    uint64_t* r = running.data() + uint64_t{j} * slots;
    while (next[j] < writers[j].size() && done[writers[j][next[j]].second]) {
      const auto [ts, w] = writers[j][next[j]];
      join(r, rows_.data() + uint64_t{row_of_[w]} * slots, slots);
      r[j] = std::max(r[j], ts);
      const uint64_t pos = base[j] + next[j];
      for (uint64_t k = wait_first[pos]; k < wait_first[pos + 1]; ++k) {
        const uint32_t y = waiters[k];
        join(rows_.data() + uint64_t{row_of_[y]} * slots, r, slots);
        if (--pending[y] == 0) ready.push_back(y);
      }
      ++next[j];
    }
  }
  for (uint32_t z = 0; z < n; ++z)
    if (txn(z).committed() && !done[z]) {
      add(Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {txn(z).id},
                       "snapshot vectors in a cycle: " + d_.txn(txn(z).id) +
                           "'s snapshot holds, through the snapshots of the transactions it holds, a transaction "
                           "that held it");
      });
      break;
    }
}

}  // namespace rdtx::history::detail
