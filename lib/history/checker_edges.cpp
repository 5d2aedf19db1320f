// The checker's graph building (the class: checker_impl.hpp; the order of
// the phases: checker.cpp's run()): each attempt's outcome and timestamps
// checked (scan_txns) and the attempts put in one order (order_txns); each
// version an access names found at its writer's install, which emits the
// ww and wr edges (resolve_txns, prefetch_writers, resolve, find_install);
// versions replaced by more than one attempt (find_forks, fix_forks,
// describe_forks); the rw edges (anti_dependencies), those of the initial
// versions by key shard (bucket_events, process_shard, process_group);
// emit(), which counts an edge and checks it against timestamp order and
// snapshot isolation; and the segments of the order that can hold a cycle,
// with their edges (find_segments, segment_edges, merge).
#include <algorithm>
#include <atomic>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "history/checker_impl.hpp"

namespace rdtx::history::detail {

void Checker::scan_txns(size_t piece, Part& p) {
  // Outcomes, timestamps and ids alone.
  const auto [lo, hi] = range_of(h_.size(), piece);
  for (uint32_t i = static_cast<uint32_t>(lo); i < hi; ++i) {
    const TxnRecord& t = txn(i);
    (t.committed() ? p.stats.committed : p.stats.aborted)++;
    if (t.access_count > kScanAccesses) p.big.push_back(i);
    if (t.id == kInitialTxn)
      add(p, Anomaly::kInconsistent,
          [&] { return finding(Anomaly::kInconsistent, {}, "a transaction has id 0, the initial data's"); });
    if (!t.committed()) continue;
    if (real_time_ && t.begin_tsc > t.commit_tsc)
      add(p, Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {t.id},
                       d_.txn(t.id) + " began at tick " + std::to_string(t.begin_tsc) + ", after its commit at " +
                           std::to_string(t.commit_tsc));
      });
    if (timestamp_order_ && t.commit_ts == 0)
      add(p, Anomaly::kTimestampOrder, [&] {
        return finding(Anomaly::kTimestampOrder, {t.id},
                       d_.txn(t.id) + " committed without a commit timestamp, in a history that promises "
                                      "timestamp order");
      });
    if (t.start_ts == 0 || t.commit_ts == 0) {
      p.all_timestamps = false;
      continue;
    }
    if (t.commit_ts < t.start_ts)
      add(p, Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {t.id},
                       d_.txn(t.id) + " committed at timestamp " + std::to_string(t.commit_ts) +
                           ", before its start timestamp " + std::to_string(t.start_ts));
      });
  }
}

void Checker::order_txns() {
  // An aborted attempt has no edge: it keeps the place of the attempt before
  // it, so that a worker's attempts stay one sorted run.
  const uint32_t n = static_cast<uint32_t>(h_.size());
  uint64_t last = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const TxnRecord& t = txn(i);
    if (t.committed()) last = ord_of(i);
    ord_[i] = last;
  }
  // Each worker's attempts are in outcome order, so the history is a few
  // sorted runs: merged, the passes visit the attempts in about the order
  // they ran, and the versions an attempt names were mostly written by
  // attempts visited shortly before, still in cache.
  std::vector<uint32_t> runs;  // starts
  for (uint32_t i = 0; i < n; ++i)
    if (i == 0 || ord_[i] < ord_[i - 1]) runs.push_back(i);
  runs.push_back(n);
  order_.clear();
  order_.reserve(n);
  if (n == 0) return;
  if (runs.size() - 1 > 64) {
    for (uint32_t i = 0; i < n; ++i) order_.push_back(i);
    std::sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) { return Pos{ord_[a], a} < Pos{ord_[b], b}; });
    return;
  }
  // A k-way merge (a heap of the runs' heads) in kPieces pieces: piece k
  // merges, from every run, the attempts placed from the k-th splitter (an
  // evenly spaced attempt of the longest run) up to the next. The order is
  // the sorted order of the places, so it does not depend on the split.
  const size_t nruns = runs.size() - 1;
  size_t longest = 0;
  for (size_t r = 1; r < nruns; ++r)
    if (runs[r + 1] - runs[r] > runs[longest + 1] - runs[longest]) longest = r;
  // cut[k * nruns + r]: where piece k starts in run r.
  std::vector<uint32_t> cut((kPieces + 1) * nruns);
  for (size_t k = 0; k <= kPieces; ++k) {
    const uint64_t len = runs[longest + 1] - runs[longest];
    const bool end = k == kPieces;
    const uint32_t at = end ? 0 : static_cast<uint32_t>(runs[longest] + len * k / kPieces);
    const Pos split = end ? Pos{} : Pos{ord_[at], at};
    for (size_t r = 0; r < nruns; ++r) {
      if (k == 0 || end) {
        cut[k * nruns + r] = k == 0 ? runs[r] : runs[r + 1];
        continue;
      }
      uint32_t lo = runs[r], hi = runs[r + 1];
      while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (Pos{ord_[mid], mid} < split)
          lo = mid + 1;
        else
          hi = mid;
      }
      cut[k * nruns + r] = lo;
    }
  }
  order_.resize(n);
  for_pieces([&](size_t k) {
    uint64_t out = 0;
    for (size_t r = 0; r < nruns; ++r) out += cut[k * nruns + r] - runs[r];
    using Head = std::pair<Pos, uint32_t>;  // (place, run)
    std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
    std::vector<uint32_t> at(cut.begin() + static_cast<ptrdiff_t>(k * nruns),
                             cut.begin() + static_cast<ptrdiff_t>((k + 1) * nruns));
    const uint32_t* stop = cut.data() + (k + 1) * nruns;
    for (uint32_t r = 0; r < nruns; ++r)
      if (at[r] < stop[r]) heads.push({Pos{ord_[at[r]], at[r]}, r});
    while (!heads.empty()) {
      const uint32_t r = heads.top().second;
      heads.pop();
      order_[out++] = at[r]++;
      if (at[r] < stop[r]) heads.push({Pos{ord_[at[r]], at[r]}, r});
    }
  });
}

void Checker::index_big_txns(const std::vector<Part>& parts) {
  // Rare (the engine records at most 64 accesses per attempt): serial.
  for (const Part& p : parts)
    for (uint32_t i : p.big) {
      const uint64_t first = h_.first_access(i);
      std::span<const AccessRecord> acc = h_.accesses(i);
      for (uint32_t j = 0; j < acc.size(); ++j) {
        const AccessRecord& b = acc[j];
        if (!b.writes()) continue;
        big_writes_.insert({b.key, b.table, i, b.write_seq}, static_cast<uint32_t>(first + j));
        // The last write of the key: the highest sequence.
        const auto [slot, inserted] = big_writes_.insert({b.key, b.table, i, kNone}, b.write_seq);
        if (!inserted && slot < b.write_seq) big_writes_.assign({b.key, b.table, i, kNone}, b.write_seq);
      }
    }
}

// inline: called once, from resolve() on the hot path, where it was inlined
// while the class had internal linkage.
inline uint32_t Checker::find_install(uint32_t w, const AccessRecord& a, uint16_t seq, int& final_seq) const {
  const Meta& t = meta_[w];
  final_seq = -1;
  if (t.accesses() > kScanAccesses) {
    const uint32_t last = big_writes_.find({a.key, a.table, w, kNone});
    if (last == kNone) return kNone;
    final_seq = static_cast<int>(last);
    return big_writes_.find({a.key, a.table, w, seq});
  }
  const uint64_t first = t.first;
  const AccessRecord* acc = h_.all_accesses().data() + first;
  uint32_t install = kNone;
  const uint32_t count = t.accesses();
  for (uint32_t j = 0; j < count; ++j) {
    const AccessRecord& b = acc[j];
    if (b.key != a.key || b.table != a.table || !b.writes()) continue;
    final_seq = std::max(final_seq, int{b.write_seq});
    if (b.write_seq == seq && install == kNone) install = static_cast<uint32_t>(first + j);
  }
  return install;
}

// inline: called from this file only, as find_install().
inline void Checker::link_same_keys(Part& p, uint32_t i) {
  // prev[j], next[j]: the attempt's previous and next access of the same
  // key as its access j (kNone if none), so that an attempt naming one
  // version twice counts once.
  std::span<const AccessRecord> acc = h_.accesses(i);
  const uint32_t m = static_cast<uint32_t>(acc.size());
  p.prev.assign(m, kNone);
  p.next.assign(m, kNone);
  if (m <= kScanAccesses) {
    for (uint32_t j = 0; j < m; ++j)
      for (uint32_t k = j + 1; k < m; ++k)
        if (acc[j].key == acc[k].key && acc[j].table == acc[k].table) {
          if (p.next[j] == kNone) p.next[j] = k;
          p.prev[k] = j;
        }
    return;
  }
  p.sort_scratch.clear();
  for (uint32_t j = 0; j < m; ++j) p.sort_scratch.push_back({{acc[j].key, acc[j].table}, j});
  std::sort(p.sort_scratch.begin(), p.sort_scratch.end(), [](const auto& x, const auto& y) {
    if (x.first.table != y.first.table) return x.first.table < y.first.table;
    if (x.first.key != y.first.key) return x.first.key < y.first.key;
    return x.second < y.second;
  });
  for (size_t k = 1; k < p.sort_scratch.size(); ++k)
    if (p.sort_scratch[k].first == p.sort_scratch[k - 1].first) {
      p.prev[p.sort_scratch[k].second] = p.sort_scratch[k - 1].second;
      p.next[p.sort_scratch[k - 1].second] = p.sort_scratch[k].second;
    }
}

void Checker::find_forks(size_t piece, Part& p) {
  // Each write stored itself as its version's replacer, without a locked
  // instruction (which would stall the loads in flight): a write that does
  // not find itself there shares its version with another (a fork), whose
  // replacers are then found exactly by fix_forks().
  const auto [lo, hi] = range_of(h_.size(), piece);
  for (size_t pos = lo; pos < hi; ++pos) {
    if (pos + kAhead < hi) {
      const uint32_t k = order_[pos + kAhead];
      const uint64_t first = h_.first_access(k);
      for (uint64_t ai = first; ai < first + txn(k).access_count; ++ai)
        if (rep_of_[ai] != kNone) __builtin_prefetch(&replacers_[rep_of_[ai]]);
    }
    const uint32_t i = order_[pos];
    const uint64_t first = h_.first_access(i);
    for (uint64_t ai = first; ai < first + txn(i).access_count; ++ai) {
      const uint32_t x = rep_of_[ai];
      if (x != kNone &&
          static_cast<uint32_t>(std::atomic_ref<uint64_t>(replacers_[x]).load(std::memory_order_relaxed)) != i)
        p.forked.push_back(x);
    }
  }
}

void Checker::fix_forks(std::vector<Part>& parts) {
  // Every replacer of each forked version; the two lowest become its
  // replacers, whatever the threads' order.
  FlatIndex<uint64_t> wanted;
  for (Part& p : parts) {
    for (uint32_t x : p.forked) wanted.insert(x, 0);
    std::vector<uint32_t>().swap(p.forked);
  }
  if (wanted.size() == 0) return;
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> found(kPieces);
  for_pieces([&](size_t piece) {
    const auto [lo, hi] = range_of(h_.size(), piece);
    for (uint32_t i = static_cast<uint32_t>(lo); i < hi; ++i) {
      const uint64_t first = h_.first_access(i);
      for (uint64_t ai = first; ai < first + txn(i).access_count; ++ai)
        if (const uint32_t x = rep_of_[ai]; x != kNone && wanted.find(x) != kNone) found[piece].push_back({x, i});
    }
  });
  for (auto& f : found) fork_replacers_.insert(fork_replacers_.end(), f.begin(), f.end());
  std::sort(fork_replacers_.begin(), fork_replacers_.end());
  fork_replacers_.erase(std::unique(fork_replacers_.begin(), fork_replacers_.end()), fork_replacers_.end());
  for (size_t k = 0; k < fork_replacers_.size();) {
    const uint32_t x = fork_replacers_[k].first;
    const uint64_t second = k + 1 < fork_replacers_.size() && fork_replacers_[k + 1].first == x
                                ? fork_replacers_[k + 1].second
                                : kNone;
    replacers_[x] = second << 32 | fork_replacers_[k].second;
    while (k < fork_replacers_.size() && fork_replacers_[k].first == x) ++k;
  }
}

void Checker::unknown_version(Part& p, uint32_t actor, const AccessRecord& a, Version v, bool read) {
  std::string why;
  if (v.txn == kInitialTxn) {
    why = "the initial version has no write " + std::to_string(v.seq);
  } else if (index_of(v.txn) != kNone) {
    why = d_.txn(v.txn) + " did not write it";
  } else {
    const auto src = sources_.find({txn_node(v.txn), static_cast<uint16_t>(txn_worker(v.txn))});
    if (src != sources_.end() && src->second->truncated) {
      // Written after that worker stopped recording: not an anomaly, but
      // the prefix check cannot see what the write ordered.
      ++p.stats.unrecorded_refs;
      return;
    }
    why = "no attempt with that id is in the history";
    if (src == sources_.end() && !h_.sources.empty())
      why += " (no history of that worker was loaded)";
    else if (src != sources_.end() && !src->second->aborts_recorded)
      why += " (an aborted attempt, if aborts were not recorded)";
  }
  add(p, Anomaly::kUnknownVersion, [&] {
    return finding(Anomaly::kUnknownVersion, {id(actor), v.txn},
                   d_.txn(id(actor)) + (read ? " read " : " replaced ") + d_.key_of(a) + " v=" + d_.version(v) +
                       ", a version nobody wrote: " + why);
  });
}

uint32_t Checker::resolve(Part& p, uint32_t actor, const AccessRecord& a, Version v, bool read, bool distinct,
                          uint32_t& writer, uint32_t known) {
  // The install of version v (not the initial one) of a's key, if it is a
  // committed final version; else kNone, with what is wrong reported (once
  // per attempt and version when `distinct`). `known`: v's writer if looked
  // up already, else kUnknownIdx.
  const uint32_t w = known != kUnknownIdx ? known : index_of(v.txn);
  writer = w;
  int final_seq;
  const uint32_t x = w == kNone ? kNone : find_install(w, a, v.seq, final_seq);
  if (x == kNone) {
    unknown_version(p, actor, a, v, read);
    return kNone;
  }
  if (!distinct) return x;
  if (!meta_[w].committed()) {
    const TxnRecord& wt = txn(w);
    if (read)
      add(p, Anomaly::kG1a, [&] {
        return finding(Anomaly::kG1a, {id(actor), v.txn},
                       "G1a (aborted read): " + d_.txn(id(actor)) + " read " + d_.key_of(a) + " v=" + d_.version(v) +
                           ", written by " + d_.txn(v.txn) + ", which aborted ('" +
                           h_.names.abort_reason(wt.abort_reason) + "')");
      });
    else
      add(p, Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {id(actor), v.txn},
                       d_.txn(id(actor)) + " replaced " + d_.key_of(a) + " v=" + d_.version(v) + ", written by " +
                           d_.txn(v.txn) + ", which aborted");
      });
    return kNone;
  }
  if (int{v.seq} < final_seq) {
    if (actor == w) return kNone;
    const Version last{v.txn, static_cast<uint16_t>(final_seq)};
    if (read)
      add(p, Anomaly::kG1b, [&] {
        return finding(Anomaly::kG1b, {id(actor), v.txn},
                       "G1b (intermediate read): " + d_.txn(id(actor)) + " read " + d_.key_of(a) + " v=" +
                           d_.version(v) + ", which its writer " + d_.txn(v.txn) +
                           " overwrote itself before committing v=" + d_.version(last));
      });
    else
      add(p, Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {id(actor), v.txn},
                       d_.txn(id(actor)) + " replaced " + d_.key_of(a) + " v=" + d_.version(v) +
                           ", an intermediate version (" + d_.txn(v.txn) + " committed v=" + d_.version(last) + ")");
      });
    return kNone;
  }
  return x;
}

void Checker::prefetch_writers(Part& p, size_t pos, int stage) const {
  // Stage 0: the index slots of the writers of the versions the attempt at
  // place pos names; 1: the writers found (kept in the ring) and their Meta;
  // 2: their accesses and replacers.
  const uint32_t i = order_[pos];
  const TxnRecord& t = txn(i);
  if (!t.committed()) return;
  const AccessRecord* acc = h_.all_accesses().data() + h_.first_access(i);
  const uint32_t m = std::min(t.access_count, kScanAccesses);
  uint32_t* ring = p.ring.data() + (pos % kRing) * 2 * kScanAccesses;
  if (stage == 1) p.ring_pos[pos % kRing] = pos;
  if (stage == 2 && p.ring_pos[pos % kRing] != pos) return;  // at a piece's start: not looked up
  for (uint32_t j = 0; j < m; ++j) {
    const AccessRecord& a = acc[j];
    for (int which = 0; which < 2; ++which) {
      const TxnId v = which == 0 ? (a.reads() ? a.read_txn : kInitialTxn) : (a.writes() ? a.replaced_txn : kInitialTxn);
      if (v == kInitialTxn) continue;
      if (stage == 0) {
        index_.prefetch(v);
        continue;
      }
      uint32_t& w = ring[2 * j + which];
      if (stage == 1) {
        w = index_.find(v);
        if (w != kNone) __builtin_prefetch(&meta_[w]);
        continue;
      }
      if (w == kNone) continue;
      const Meta& mw = meta_[w];
      const uint64_t f = mw.first;
      const uint32_t n = std::min(mw.accesses(), 4u);
      if (n == 0) continue;
      const char* wa = reinterpret_cast<const char*>(h_.all_accesses().data() + f);
      for (uint32_t off = 0; off < n * sizeof(AccessRecord); off += 64) __builtin_prefetch(wa + off);
      __builtin_prefetch(wa + n * sizeof(AccessRecord) - 1);
      __builtin_prefetch(&replacers_[f]);
    }
  }
}

void Checker::resolve_txns(size_t piece, Part& p) {
  // This piece's attempts: each access checked alone, each version it names
  // found at its writer (ww and wr edges, replacers registered), and the
  // initial versions it names sent to their key's shard.
  const auto [lo, hi] = range_of(h_.size(), piece);
  p.ring.assign(kRing * 2 * kScanAccesses, kUnknownIdx);
  p.ring_pos.fill(SIZE_MAX);
  for (size_t pos = lo; pos < hi; ++pos) {
    if (pos + 3 * kAhead < hi) prefetch_writers(p, pos + 3 * kAhead, 0);
    if (pos + 2 * kAhead < hi) prefetch_writers(p, pos + 2 * kAhead, 1);
    if (pos + kAhead < hi) prefetch_writers(p, pos + kAhead, 2);
    const uint32_t i = order_[pos];
    const TxnRecord& t = txn(i);
    if (t.id == kInitialTxn) continue;  // reported in scan_txns
    if (const uint32_t first = index_.has_duplicates() ? index_.find(t.id) : i; first != i) {
      add(p, Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {t.id},
                       "two attempts have id " + d_.txn(t.id) + " (attempts " + std::to_string(first) + " and " +
                           std::to_string(i) + "); the first is used");
      });
      continue;
    }
    const bool committed = t.committed();
    const uint64_t t_ord = ord_[i];
    const uint32_t first = static_cast<uint32_t>(h_.first_access(i));
    std::span<const AccessRecord> acc = h_.accesses(i);
    const bool alone = acc.size() <= 1;
    if (!alone) link_same_keys(p, i);
    auto prev = [&](uint32_t j) { return alone ? kNone : p.prev[j]; };
    // The writers found ahead (prefetch_writers), if they were.
    const uint32_t* ring =
        p.ring_pos[pos % kRing] == pos ? p.ring.data() + (pos % kRing) * 2 * kScanAccesses : nullptr;
    auto known = [&](uint32_t j, int which) {
      return ring != nullptr && j < kScanAccesses ? ring[2 * j + which] : kUnknownIdx;
    };
    for (uint32_t j = 0; j < acc.size(); ++j) {
      const AccessRecord& a = acc[j];
      const uint32_t ai = first + j;
      if (committed) {
        p.stats.accesses++;
        p.stats.reads += a.reads();
        p.stats.writes += a.writes();
      }
      if (committed && a.reads()) {
        const Version v = a.read_version();
        bool distinct = true;
        for (uint32_t k = prev(j); k != kNone && distinct; k = p.prev[k])
          distinct = !(acc[k].reads() && acc[k].read_version() == v);
        if (v.txn == kInitialTxn) {
          if (v.seq != 0) {
            unknown_version(p, i, a, v, true);
          } else {
            p.events.push_back({a.key, a.table, i, ai, kRead});
            p.event_shard.push_back(static_cast<uint8_t>(shard_of(a)));
          }
        } else {
          uint32_t w;
          const uint32_t x = resolve(p, i, a, v, true, distinct, w, known(j, 0));
          if (x != kNone && distinct && w != i) {
            emit(p, w, i, EdgeKind::kWR, ai, meta_[w].ord, t_ord);
            read_of_[ai] = x;
          }
        }
      }
      if (!a.writes()) continue;
      // The version this write installs: installed once only.
      bool first_install = true;
      for (uint32_t k = prev(j); k != kNone && first_install; k = p.prev[k])
        first_install = !(acc[k].writes() && acc[k].write_seq == a.write_seq);
      if (first_install && !alone) {
        size_t installs = 1;
        for (uint32_t k = p.next[j]; k != kNone; k = p.next[k]) installs += acc[k].writes() && acc[k].write_seq == a.write_seq;
        if (installs > 1)
          add(p, Anomaly::kInconsistent, [&] {
            const Version v{t.id, a.write_seq};
            return finding(Anomaly::kInconsistent, {v.txn},
                           d_.txn(v.txn) + " installed " + d_.key_of(a) + " v=" + d_.version(v) + " " +
                               std::to_string(installs) + " times");
          });
      }
      if (!committed) continue;
      const Version replaced = a.replaced_version();
      // A transaction's writes of one key chain from its first (seq 0),
      // which replaces someone else's version, through its own.
      const bool chained =
          a.write_seq == 0 ? replaced.txn != t.id : replaced == Version{t.id, static_cast<uint16_t>(a.write_seq - 1)};
      if (!chained)
        add(p, Anomaly::kInconsistent, [&] {
          return finding(
              Anomaly::kInconsistent, {t.id},
              d_.txn(t.id) + " wrote " + d_.key_of(a) + " as its write " + std::to_string(a.write_seq) +
                  " but replaced v=" + d_.version(replaced) +
                  (a.write_seq == 0 ? ", its own version" : ", not its own write " + std::to_string(a.write_seq - 1)));
        });
      if (a.reads() && a.read_version() != replaced && a.read_txn != t.id)
        add(p, Anomaly::kLostUpdate, [&] {
          return finding(Anomaly::kLostUpdate, {t.id, replaced.txn},
                         "lost update: " + d_.txn(t.id) + " read " + d_.key_of(a) +
                             " v=" + d_.version(a.read_version()) + " but replaced v=" + d_.version(replaced) +
                             ": it overwrote " +
                             (replaced.txn == kInitialTxn ? std::string("the initial version")
                                                          : d_.txn(replaced.txn) + "'s write") +
                             " without seeing it");
        });
      bool distinct = true;
      for (uint32_t k = prev(j); k != kNone && distinct; k = p.prev[k])
        distinct = !(acc[k].writes() && acc[k].replaced_version() == replaced);
      if (replaced.txn == kInitialTxn) {
        if (replaced.seq != 0) {
          unknown_version(p, i, a, replaced, false);
        } else {
          p.events.push_back({a.key, a.table, i, ai, kReplace});
          p.event_shard.push_back(static_cast<uint8_t>(shard_of(a)));
        }
        continue;
      }
      uint32_t w;
      const uint32_t x = resolve(p, i, a, replaced, false, distinct, w, known(j, 1));
      if (x != kNone && distinct) {
        emit(p, w, i, EdgeKind::kWW, ai, meta_[w].ord, t_ord);
        rep_of_[ai] = x;
        std::atomic_ref<uint64_t>(replacers_[x]).store(uint64_t{kNone} << 32 | i, std::memory_order_relaxed);
      }
    }
  }
  std::vector<uint32_t>().swap(p.ring);
  bucket_events(p);
}

void Checker::anti_dependencies(size_t piece, Part& p) {
  // Once every replacer is known: each read's anti-dependency on the first
  // attempt (other than the reader) that replaced what it read, and each
  // forked version -- several attempts replaced it -- reported once, at its
  // install. A forked version's readers get an edge to its first replacer
  // only, so that the graph stays linear in the history's size however
  // broken it is (a lock that never locks forks every hot version, and
  // readers x replacers edges ran tests out of memory). The fork itself is
  // reported, so the history is not certified either way.
  const auto [lo, hi] = range_of(h_.size(), piece);
  auto ahead = [&](uint32_t i, int stage) {
    const uint64_t first = h_.first_access(i);
    for (uint64_t ai = first; ai < first + txn(i).access_count; ++ai)
      if (const uint32_t x = read_of_[ai]; x != kNone) {
        if (stage == 0) {
          __builtin_prefetch(&replacers_[x]);
        } else {
          const uint64_t rep = std::atomic_ref<uint64_t>(replacers_[x]).load(std::memory_order_relaxed);
          if (static_cast<uint32_t>(rep) != kNone) __builtin_prefetch(&ord_[static_cast<uint32_t>(rep)]);
        }
      }
  };
  for (size_t pos = lo; pos < hi; ++pos) {
    if (pos + 2 * kAhead < hi) ahead(order_[pos + 2 * kAhead], 0);
    if (pos + kAhead < hi) ahead(order_[pos + kAhead], 1);
    const uint32_t i = order_[pos];
    const TxnRecord& t = txn(i);
    const uint64_t first = h_.first_access(i);
    for (uint64_t ai = first; ai < first + t.access_count; ++ai) {
      if (const uint32_t x = read_of_[ai]; x != kNone) {
        const uint64_t rep = std::atomic_ref<uint64_t>(replacers_[x]).load(std::memory_order_relaxed);
        const uint32_t q = static_cast<uint32_t>(rep) != i ? static_cast<uint32_t>(rep) : static_cast<uint32_t>(rep >> 32);
        if (q != kNone) emit(p, i, q, EdgeKind::kRW, static_cast<uint32_t>(ai), ord_[i], ord_[q]);
      }
      if (replacers_[ai] >> 32 != kNone && p.counts[static_cast<size_t>(Anomaly::kVersionFork)]++ < o_.max_findings)
        p.forks.push_back({static_cast<uint32_t>(ai), i});
    }
  }
}

void Checker::describe_forks(std::vector<Part>& parts) {
  // The findings of the forks kept: every attempt that replaced each.
  for (Part& p : parts)
    for (const auto& [x, writer] : p.forks) {
      std::vector<TxnId> ids;
      std::string who;
      for (auto it = std::lower_bound(fork_replacers_.begin(), fork_replacers_.end(), std::pair{x, 0u});
           it != fork_replacers_.end() && it->first == x; ++it) {
        ids.push_back(id(it->second));
        who += (who.empty() ? "" : " and ") + d_.txn(id(it->second));
      }
      const AccessRecord& a = access(x);
      const Version v{id(writer), a.write_seq};
      p.findings.push_back(finding(Anomaly::kVersionFork, std::move(ids),
                                   "version fork (lost update): the versions of " + d_.key_of(a) +
                                       " do not form one chain: " + who + " all replaced v=" + d_.version(v)));
    }
}

// inline: called from this file only, as find_install().
inline void Checker::bucket_events(Part& p) {
  // Grouped by shard (a counting sort), each shard's in attempt order.
  std::vector<Event> raw = std::move(p.events);
  p.shard_begin.assign(kPieces + 1, 0);
  for (uint8_t sh : p.event_shard) ++p.shard_begin[sh + 1];
  for (size_t k = 0; k < kPieces; ++k) p.shard_begin[k + 1] += p.shard_begin[k];
  p.events.resize(raw.size());
  std::vector<uint64_t> next(p.shard_begin.begin(), p.shard_begin.end() - 1);
  for (size_t e = 0; e < raw.size(); ++e) p.events[next[p.event_shard[e]]++] = raw[e];
  std::vector<uint8_t>().swap(p.event_shard);
}

void Checker::process_shard(size_t sh, Part& p) {
  // The shard's events (initial versions) from every attempt range, in
  // range order.
  const std::vector<Part>& ranges = *events_by_range_;
  size_t total = 0;
  for (const Part& r : ranges) total += r.shard_begin[sh + 1] - r.shard_begin[sh];
  std::vector<Event> events;
  events.reserve(total);
  for (const Part& r : ranges)
    events.insert(events.end(), r.events.begin() + static_cast<ptrdiff_t>(r.shard_begin[sh]),
                  r.events.begin() + static_cast<ptrdiff_t>(r.shard_begin[sh + 1]));
  // Dense key ids of the shard, then a counting sort by key and each key's
  // events by (type, actor): linear but for the per-key sorts, which are
  // short (a key's initial version has one reader or replacer per attempt
  // that saw the key first).
  FlatIndex<TableKey> keys(total / 2);
  std::vector<uint32_t> kid(events.size());
  for (size_t e = 0; e < events.size(); ++e)
    kid[e] = keys.insert({events[e].key, events[e].table}, static_cast<uint32_t>(keys.size())).first;
  const size_t nkeys = keys.size();
  p.stats.keys = nkeys;
  std::vector<uint64_t> key_begin(nkeys + 1, 0);
  for (uint32_t k : kid) ++key_begin[k + 1];
  for (size_t k = 0; k < nkeys; ++k) key_begin[k + 1] += key_begin[k];
  std::vector<Event> sorted(events.size());
  {
    std::vector<uint64_t> next(key_begin.begin(), key_begin.end() - 1);
    for (size_t e = 0; e < events.size(); ++e) sorted[next[kid[e]]++] = events[e];
  }
  std::vector<Event>().swap(events);
  auto by_type = [](const Event& a, const Event& b) {
    if (a.type != b.type) return a.type < b.type;
    if (a.actor != b.actor) return a.actor < b.actor;
    return a.access < b.access;
  };
  for (size_t k = 0; k < nkeys; ++k) {
    if (key_begin[k + 1] - key_begin[k] > 1)
      std::sort(sorted.begin() + static_cast<ptrdiff_t>(key_begin[k]),
                sorted.begin() + static_cast<ptrdiff_t>(key_begin[k + 1]), by_type);
    process_group(p, sorted, key_begin[k], key_begin[k + 1], 0);
  }
}

void Checker::segment_edges(std::vector<Part>& parts) {
  // The edges that can lie on a cycle: those inside one segment. The
  // attempt passes only counted theirs; they are found again here for the
  // attempts in segments, from what the passes kept per access.
  if (segments_.empty()) {
    for (Part& p : parts) std::vector<Edge>().swap(p.edges);
    return;
  }
  huge_assign(segment_, h_.size(), kNone);
  for_pieces([&](size_t piece) {
    const auto [lo, hi] = range_of(h_.size(), piece);
    for (size_t pos = lo; pos < hi; ++pos) {
      const uint32_t i = order_[pos];
      const Pos x{ord_[i], i};
      auto it = std::upper_bound(segments_.begin(), segments_.end(), x,
                                 [](const Pos& v, const Interval& sg) { return v < sg.lo; });
      if (it != segments_.begin() && x <= (it - 1)->hi) segment_[i] = static_cast<uint32_t>(it - 1 - segments_.begin());
    }
  });
  for_pieces([&](size_t piece) {
    Part& p = parts[piece];
    const auto [lo, hi] = range_of(h_.size(), piece);
    auto keep = [&](uint32_t src, uint32_t dst, EdgeKind k, uint64_t ai) {
      if (segment_[src] == segment_[dst]) p.edges.push_back(Edge::make(src, dst, k, static_cast<uint32_t>(ai)));
    };
    for (size_t pos = lo; pos < hi; ++pos) {
      const uint32_t i = order_[pos];
      if (segment_[i] == kNone) continue;
      const uint64_t first = h_.first_access(i);
      for (uint64_t ai = first; ai < first + txn(i).access_count; ++ai) {
        const AccessRecord& a = access(static_cast<uint32_t>(ai));
        if (rep_of_[ai] != kNone) keep(index_.find(a.replaced_txn), i, EdgeKind::kWW, ai);
        if (const uint32_t x = read_of_[ai]; x != kNone) {
          keep(index_.find(a.read_txn), i, EdgeKind::kWR, ai);
          const uint64_t rep = replacers_[x];
          const uint32_t q = static_cast<uint32_t>(rep) != i ? static_cast<uint32_t>(rep) : static_cast<uint32_t>(rep >> 32);
          if (q != kNone) keep(i, q, EdgeKind::kRW, ai);
        }
      }
    }
  });
  for (size_t k = kPieces; k < parts.size(); ++k)  // the shards' edges
    std::erase_if(parts[k].edges, [&](const Edge& e) {
      return segment_[e.src] == kNone || segment_[e.src] != segment_[e.dst];
    });
  // The graph's nodes, numbered in index order (so a cycle still starts
  // at the attempt loaded first).
  for (uint32_t i = 0; i < h_.size(); ++i)
    if (segment_[i] != kNone) node_of_.push_back(i);
  LoadVector<uint32_t>().swap(segment_);
}

void Checker::merge(std::vector<Part>& parts) {
  size_t edges = 0;
  for (const Part& p : parts) edges += p.edges.size();
  edges_.reserve(edges);
  for (Part& p : parts) edges_.insert(edges_.end(), p.edges.begin(), p.edges.end());
  for (Part& p : parts) {
    for (size_t k = 0; k < kAnomalyKinds; ++k) r_.counts[k] += p.counts[k];
    r_.findings.insert(r_.findings.end(), std::make_move_iterator(p.findings.begin()),
                       std::make_move_iterator(p.findings.end()));
    std::vector<Edge>().swap(p.edges);
    CheckStats& s = r_.stats;
    s.accesses += p.stats.accesses;
    s.reads += p.stats.reads;
    s.writes += p.stats.writes;
    s.keys += p.stats.keys;
    for (size_t k = 0; k < s.edges.size(); ++k) s.edges[k] += p.stats.edges[k];
    s.unrecorded_refs += p.stats.unrecorded_refs;
  }
}

void Checker::find_segments(std::vector<Part>& parts) {
  // Every cycle has an edge against the order (a backward edge), and lies
  // inside the span its backward edges cover: between the lowest and the
  // highest of its places, every gap is crossed backwards by one of them.
  // So the spans of the backward edges, merged where they overlap, are
  // segments that hold every cycle; edges between segments, or outside
  // them, are on none. With an order close to the serialization order
  // (commit timestamps or TSCs) the segments are few and small, and an
  // acyclic history has none to search.
  std::vector<Interval> all;
  size_t n = 0;
  for (const Part& p : parts) n += p.backward.size();
  all.reserve(n);
  for (Part& p : parts) {
    all.insert(all.end(), p.backward.begin(), p.backward.end());
    std::vector<Interval>().swap(p.backward);
  }
  std::sort(all.begin(), all.end(), [](const Interval& a, const Interval& b) { return a.lo < b.lo; });
  for (const Interval& iv : all) {
    if (!segments_.empty() && iv.lo <= segments_.back().hi)
      segments_.back().hi = std::max(segments_.back().hi, iv.hi);
    else
      segments_.push_back(iv);
  }
}

// inline: called from this file only, as find_install().
inline void Checker::process_group(Part& p, const std::vector<Event>& ev, size_t gb, size_t ge, int /*final_seq*/) {
  // The initial version of one key: its replacers, then its readers, each
  // by attempt.
  const Event& g = ev[gb];
  const Version v = kInitialVersion;
  size_t rd = gb;
  while (rd < ge && ev[rd].type == kReplace) ++rd;
  // Distinct replacing and reading attempts.
  std::vector<const Event*>& replacers = p.replacers;
  std::vector<const Event*>& readers = p.readers;
  replacers.clear();
  readers.clear();
  for (size_t i = gb; i < rd; ++i)
    if (replacers.empty() || replacers.back()->actor != ev[i].actor) replacers.push_back(&ev[i]);
  for (size_t i = rd; i < ge; ++i)
    if (readers.empty() || readers.back()->actor != ev[i].actor) readers.push_back(&ev[i]);

  const AccessRecord& key_access = access(g.access);
  if (replacers.size() > 1)
    add(p, Anomaly::kVersionFork, [&] {
      std::vector<TxnId> ids;
      std::string who;
      for (const Event* e : replacers) {
        ids.push_back(id(e->actor));
        who += (who.empty() ? "" : " and ") + d_.txn(id(e->actor));
      }
      return finding(Anomaly::kVersionFork, std::move(ids),
                     "version fork (lost update): the versions of " + d_.key_of(key_access) +
                         " do not form one chain: " + who + " all replaced v=" + d_.version(v));
    });
  // A reader's anti-dependency goes to the first replacer that is not the
  // reader itself (see anti_dependencies()).
  for (const Event* r : readers)
    for (const Event* q : replacers)
      if (q->actor != r->actor) {
        emit(p, r->actor, q->actor, EdgeKind::kRW, r->access, ord_[r->actor], ord_[q->actor]);
        break;
      }
}

void Checker::emit(Part& p, uint32_t src, uint32_t dst, EdgeKind k, uint32_t access_index, uint64_t src_ord,
                   uint64_t dst_ord) {
  if (p.keep_edges) p.edges.push_back(Edge::make(src, dst, k, access_index));
  ++p.stats.edges[static_cast<size_t>(k)];
  if (Pos{dst_ord, dst} < Pos{src_ord, src}) p.backward.push_back({{dst_ord, dst}, {src_ord, src}});
  if (timestamp_order_) {
    // ww and rw strictly forward in (epoch, commit timestamp), wr not
    // backward.
    const TxnRecord &s = txn(src), &t = txn(dst);
    const std::pair<uint32_t, uint64_t> so{s.commit_slot, s.commit_ts}, to{t.commit_slot, t.commit_ts};
    const bool ok = s.commit_ts == 0 || t.commit_ts == 0 || (k == EdgeKind::kWR ? so <= to : so < to);
    if (!ok)
      add(p, Anomaly::kTimestampOrder, [&] {
        const CycleEdge e = d_.edge(Edge::make(src, dst, k, access_index));
        return finding(Anomaly::kTimestampOrder, {s.id, t.id},
                       "timestamp order: " + d_.txn(s.id) + " --" + d_.edge_text(e) + "--> " + d_.txn(t.id) +
                           ", but " + d_.txn(s.id) + "'s commit timestamp " + order_text(s) +
                           (k == EdgeKind::kWR ? " is above " : " is not below ") + d_.txn(t.id) + "'s " +
                           order_text(t));
      });
  }
  if (si_vectors_) {
    // A dependency's source must be in its target's snapshot as recorded
    // (else G-SIa); an anti-dependency's target must not be in its
    // source's snapshot, closed (else G-SIb: a path of snapshot inclusions
    // leads from the target back to the source).
    const TxnRecord &s = txn(src), &t = txn(dst);
    if (s.snapshot_words == 0 || t.snapshot_words == 0) return;
    if (k != EdgeKind::kRW && !in_snapshot(src, dst, true))
      add(p, Anomaly::kGSIa, [&] {
        const CycleEdge e = d_.edge(Edge::make(src, dst, k, access_index));
        return finding(Anomaly::kGSIa, {s.id, t.id},
                       "G-SIa (interference): " + d_.txn(s.id) + " --" + d_.edge_text(e) + "--> " + d_.txn(t.id) +
                           ", but " + d_.txn(s.id) + "'s commit (slot " + std::to_string(s.commit_slot) + ", ts " +
                           std::to_string(s.commit_ts) + ") is not in " + d_.txn(t.id) + "'s snapshot (slot " +
                           std::to_string(s.commit_slot) + " at " +
                           std::to_string(h_.snapshot(dst)[s.commit_slot]) + ")");
      });
    if (k == EdgeKind::kRW && in_snapshot(dst, src, false))
      add(p, Anomaly::kGSIb, [&] {
        const CycleEdge e = d_.edge(Edge::make(src, dst, k, access_index));
        const bool raw = in_snapshot(dst, src, true);
        return finding(Anomaly::kGSIb, {s.id, t.id},
                       "G-SIb (missed effect): " + d_.txn(s.id) + " --" + d_.edge_text(e) + "--> " + d_.txn(t.id) +
                           ", but " + d_.txn(t.id) + "'s commit (slot " + std::to_string(t.commit_slot) + ", ts " +
                           std::to_string(t.commit_ts) + ") is in " + d_.txn(s.id) + "'s snapshot" +
                           (raw ? " (slot " + std::to_string(t.commit_slot) + " at " +
                                      std::to_string(h_.snapshot(src)[t.commit_slot]) + ")"
                                : ", through the snapshots of the transactions it holds (slot " +
                                      std::to_string(t.commit_slot) + " at " +
                                      std::to_string(h_.snapshot(src)[t.commit_slot]) + " as recorded)"));
      });
    return;
  }
  if (!si_timestamps_) return;
  // A snapshot taken at start_ts holds exactly the commits at or before it.
  // So a dependency (ww, wr) needs its source committed by the target's
  // start (else G-SIa), and an anti-dependency needs its target committed
  // after the source's start (else the source missed it: G-SIb). Together
  // these exclude every cycle with fewer than two anti-dependencies.
  const TxnRecord &s = txn(src), &t = txn(dst);
  if (k != EdgeKind::kRW && s.commit_ts > t.start_ts)
    add(p, Anomaly::kGSIa, [&] {
      const CycleEdge e = d_.edge(Edge::make(src, dst, k, access_index));
      return finding(Anomaly::kGSIa, {s.id, t.id},
                     "G-SIa (interference): " + d_.txn(s.id) + " --" + d_.edge_text(e) + "--> " + d_.txn(t.id) +
                         ", but " + d_.txn(s.id) + " committed at ts " + std::to_string(s.commit_ts) + ", after " +
                         d_.txn(t.id) + " started at ts " + std::to_string(t.start_ts));
    });
  if (k == EdgeKind::kRW && t.commit_ts <= s.start_ts)
    add(p, Anomaly::kGSIb, [&] {
      const CycleEdge e = d_.edge(Edge::make(src, dst, k, access_index));
      return finding(Anomaly::kGSIb, {s.id, t.id},
                     "G-SIb (missed effect): " + d_.txn(s.id) + " --" + d_.edge_text(e) + "--> " + d_.txn(t.id) +
                         ", but " + d_.txn(t.id) + " committed at ts " + std::to_string(t.commit_ts) + ", not after " +
                         d_.txn(s.id) + " started at ts " + std::to_string(s.start_ts));
    });
}

}  // namespace rdtx::history::detail
