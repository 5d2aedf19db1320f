// The serializability checker (checker.hpp): run(), which runs its phases
// in order on a task arena, and the public functions: check(), the names
// of the isolation levels and anomalies, and which anomalies a level
// forbids. The Checker class and what its phases share: checker_impl.hpp;
// the phases: checker_edges.cpp (the graph's edges), checker_snapshots.cpp
// (snapshot vectors), checker_cycles.cpp (the cycle search, real time).
#include "history/checker.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <tbb/task_arena.h>
#include <utility>
#include <vector>

#include "history/checker_impl.hpp"

namespace rdtx::history {

namespace detail {

Result<CheckReport> Checker::run() {
  const auto t0 = std::chrono::steady_clock::now();
  r_.isolation = o_.isolation;
  r_.clock_skew_ns = o_.clock_skew_ns;
  r_.truncated = h_.truncated();
  r_.prefix_only = r_.truncated && o_.allow_truncated;
  for (const Source& s : h_.sources) sources_[{s.node, s.worker}] = &s;

  const bool trace = std::getenv("RDTX_CHECK_TRACE") != nullptr;
  auto tp = std::chrono::steady_clock::now();
  auto lap = [&](const char* what) {
    if (!trace) return;
    const auto now = std::chrono::steady_clock::now();
    std::fprintf(stderr, "  %-12s %.3f s\n", what, std::chrono::duration<double>(now - tp).count());
    tp = now;
  };
  // Each phase reads what the ones before it built: once stopping(), none
  // runs (a phase whose pieces were skipped is never read).
  tbb::task_arena arena(o_.threads == 0 ? tbb::task_arena::automatic : static_cast<int>(o_.threads));
  arena.execute([&] {
    std::vector<Part> ranges(kPieces), shards(kPieces);
    const size_t n = h_.size();
    huge_assign(ord_, n, uint64_t{0});
    timestamp_order_ = !h_.sources.empty() && h_.sources.front().timestamp_order;
    if (o_.isolation == Isolation::kStrictSerializable) setup_real_time();
    phase([&](size_t i) { scan_txns(i, ranges[i]); });
    if (stopping()) return;
    bool all = true;
    for (const Part& p : ranges) {
      all = all && p.all_timestamps;
      r_.stats.committed += p.stats.committed;
      r_.stats.aborted += p.stats.aborted;
    }
    all = all && r_.stats.committed > 0;
    r_.stats.timestamps = all;
    si_timestamps_ = all && o_.isolation == Isolation::kSnapshot;
    setup_snapshot_vectors();
    if (stopping()) return;
    lap("snapshots");
    order_by_commit_ts_ = all && !real_time_;
    order_txns();
    huge_assign(meta_, n, Meta{});
    phase([&](size_t piece) {
      const auto [lo, hi] = range_of(n, piece);
      for (size_t i = lo; i < hi; ++i) {
        const TxnRecord& t = txn(static_cast<uint32_t>(i));
        meta_[i] = Meta{ord_[i], static_cast<uint32_t>(h_.first_access(i)),
                        t.access_count | (t.committed() ? Meta::kCommittedBit : 0)};
      }
    });
    if (stopping()) return;
    lap("scan");
    index_.build(h_);
    lap("index");
    if (stopping()) return;
    index_big_txns(ranges);
    huge_assign(read_of_, h_.access_count(), kNone);
    huge_assign(rep_of_, h_.access_count(), kNone);
    huge_assign(replacers_, h_.access_count(), ~uint64_t{0});
    lap("alloc");
    if (stopping()) return;
    phase([&](size_t i) { resolve_txns(i, ranges[i]); });
    if (stopping()) return;
    LoadVector<Meta>().swap(meta_);
    lap("resolve");
    phase([&](size_t i) { find_forks(i, ranges[i]); });
    if (stopping()) return;
    fix_forks(ranges);
    lap("forks");
    phase([&](size_t i) { anti_dependencies(i, ranges[i]); });
    if (stopping()) return;
    lap("rw");
    describe_forks(ranges);
    events_by_range_ = &ranges;
    for (Part& p : shards) p.keep_edges = true;  // few: the initial versions' anti-dependencies
    phase([&](size_t i) { process_shard(i, shards[i]); });
    if (stopping()) return;
    lap("shards");
    for (Part& p : ranges) std::vector<Event>().swap(p.events);
    ranges.insert(ranges.end(), std::make_move_iterator(shards.begin()), std::make_move_iterator(shards.end()));
    find_segments(ranges);
    lap("segments");
    if (trace) std::fprintf(stderr, "  %zu segments\n", segments_.size());
    segment_edges(ranges);
    LoadVector<uint32_t>().swap(read_of_);
    LoadVector<uint32_t>().swap(rep_of_);
    LoadVector<uint64_t>().swap(replacers_);
    merge(ranges);
    lap("merge");
    if (trace) std::fprintf(stderr, "  %zu edges kept\n", edges_.size());
  });
  if (!stopping()) find_cycles();
  lap("cycles");
  if (stopping()) return make_error(ECANCELED, "history check stopped");

  // Every piece kept its own first findings of each kind; keep the first
  // max_findings of each, in piece order.
  std::stable_sort(r_.findings.begin(), r_.findings.end(),
                   [](const Finding& a, const Finding& b) { return a.kind < b.kind; });
  std::array<size_t, kAnomalyKinds> kept{};
  std::erase_if(r_.findings, [&](const Finding& f) { return kept[static_cast<size_t>(f.kind)]++ >= o_.max_findings; });
  r_.certified = r_.anomalies() == 0 && (!r_.truncated || o_.allow_truncated);
  r_.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::move(r_);
}

}  // namespace detail

const char* to_string(Isolation i) {
  switch (i) {
    case Isolation::kSerializable:
      return "serializable";
    case Isolation::kSnapshot:
      return "snapshot isolation";
    case Isolation::kReadCommitted:
      return "read committed";
    case Isolation::kRepeatableRead:
      return "repeatable read";
    case Isolation::kStrictSerializable:
      return "strict serializable";
  }
  return "?";
}

Result<Isolation> parse_isolation(std::string_view s) {
  if (s == "serializable") return Isolation::kSerializable;
  if (s == "si" || s == "snapshot") return Isolation::kSnapshot;
  if (s == "rc" || s == "read-committed") return Isolation::kReadCommitted;
  if (s == "rr" || s == "repeatable-read") return Isolation::kRepeatableRead;
  if (s == "strict" || s == "strict-serializable") return Isolation::kStrictSerializable;
  return make_error(EINVAL, "isolation level '%.*s' is not one of strict, serializable, si, rc, rr", static_cast<int>(s.size()),
                    s.data());
}

const char* to_string(Anomaly a) {
  switch (a) {
    case Anomaly::kG0:
      return "G0";
    case Anomaly::kG1a:
      return "G1a";
    case Anomaly::kG1b:
      return "G1b";
    case Anomaly::kG1c:
      return "G1c";
    case Anomaly::kG2Item:
      return "G2-item";
    case Anomaly::kGSIa:
      return "G-SIa";
    case Anomaly::kGSIb:
      return "G-SIb";
    case Anomaly::kLostUpdate:
      return "lost update";
    case Anomaly::kVersionFork:
      return "version fork";
    case Anomaly::kUnknownVersion:
      return "unknown version";
    case Anomaly::kInconsistent:
      return "inconsistent";
    case Anomaly::kInconclusive:
      return "inconclusive";
    case Anomaly::kTimestampOrder:
      return "timestamp order";
    case Anomaly::kRealTime:
      return "real time";
    case Anomaly::kCount_:
      break;
  }
  return "?";
}

bool forbidden(Isolation level, Anomaly a) {
  switch (a) {
    case Anomaly::kG0:
    case Anomaly::kG1a:
    case Anomaly::kG1b:
    case Anomaly::kG1c:
    case Anomaly::kVersionFork:
    case Anomaly::kUnknownVersion:
    case Anomaly::kInconsistent:
      return true;
    case Anomaly::kG2Item:
      // PL-2.99 forbids G2-item; PL-3 adds predicate cycles, which item
      // histories cannot show.
      return level == Isolation::kSerializable || level == Isolation::kRepeatableRead ||
             level == Isolation::kStrictSerializable;
    case Anomaly::kLostUpdate:
      return level != Isolation::kReadCommitted;
    case Anomaly::kGSIa:
    case Anomaly::kGSIb:
    case Anomaly::kInconclusive:
      return level == Isolation::kSnapshot;
    case Anomaly::kTimestampOrder:
      return true;  // found only in histories that promise timestamp order
    case Anomaly::kRealTime:
      return level == Isolation::kStrictSerializable;
    case Anomaly::kCount_:
      break;
  }
  return false;
}

uint64_t CheckReport::anomalies() const {
  uint64_t n = 0;
  for (uint64_t c : counts) n += c;
  return n;
}

Result<CheckReport> check(const History& h, const CheckOptions& options) {
  if (h.size() > History::kMaxTxns || h.access_count() > History::kMaxAccesses)
    return make_error(EFBIG, "a history of %zu transactions and %zu accesses is past the checker's limits", h.size(),
                      h.access_count());
  return detail::Checker(h, options).run();
}

}  // namespace rdtx::history
