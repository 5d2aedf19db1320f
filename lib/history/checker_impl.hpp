// The serializability checker's internals (checker.hpp is its interface):
// the Checker class, the types its phases share (Meta, Event, Pos,
// Interval, WriteKey, Part), its tuning constants, and for_pieces() and
// huge_assign(), which more than one of its files uses. Its members are
// defined by concern:
//   checker.cpp            run(): the phases in order; the public functions
//   checker_edges.cpp      the dependency graph's edges: attempts scanned
//                          and ordered, each version named resolved at its
//                          writer, forks, anti-dependencies, the initial
//                          versions by key shard, the segments that can
//                          hold a cycle
//   checker_snapshots.cpp  snapshot isolation on recorded snapshot vectors:
//                          the vectors checked and closed
//   checker_cycles.cpp     the cycle search and its reports, and the
//                          real-time order of strict serializability
// The graph itself: dependency_graph.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <unordered_map>
#include <utility>
#include <vector>

#include "history/checker.hpp"
#include "history/describer.hpp"
#include "history/flat_index.hpp"
#include "history/txn_index.hpp"

namespace rdtx::history::detail {

constexpr uint32_t kNone = UINT32_MAX;
// The index standing for the writer of the initial version.
constexpr uint32_t kInitialIdx = UINT32_MAX - 1;

// What an access says about the initial version of one key. Events are
// grouped by key -- the writes that replaced its initial version, the reads
// that saw it -- and each group yields that version's anti-dependencies.
// Every other version is found straight from the access that names it: its
// writer's install of the key (the engine records the version each write
// replaced, so each key's version order is known without sorting).
enum EventType : uint8_t { kInstall = 0, kReplace = 1, kRead = 2 };

// The work is split into a fixed number of pieces, whatever the number of
// threads, so that the report is the same on any machine: attempts in
// kPieces ranges (reading records, checking each access alone, resolving the
// versions it names), then keys in kPieces shards by hash (the initial
// versions). Each piece writes only its own Part; the parts are merged in
// piece order.
constexpr size_t kPieces = 64;
// A transaction with more accesses than this has its writes found by hash
// instead of by scanning its accesses.
constexpr uint32_t kScanAccesses = 64;
// Attempts ahead of the one being processed whose memory is fetched: the
// versions an attempt names are at random places in the history, and a
// cache miss at a time would leave the core waiting on memory.
constexpr uint32_t kAhead = 8;
// resolve_txns() finds the writer of each version an attempt names once, 2 *
// kAhead attempts ahead, and keeps it in a ring of this many attempts.
constexpr size_t kRing = 32;
static_assert(kRing > 2 * kAhead);
// A writer not looked up yet.
constexpr uint32_t kUnknownIdx = UINT32_MAX - 2;

// What the resolve pass needs of a writer, in one 16-byte slot (one cache
// line) instead of its 48-byte record (which may straddle two) and the index
// of its first access: the chain of dependent cache misses per version named
// is id -> index slot -> Meta -> the writer's accesses.
struct Meta {
  uint64_t ord;    // its place in the order (Pos::ord)
  uint32_t first;  // index of its first access (History::kMaxAccesses < 2^31)
  uint32_t count;  // its access count, with kCommittedBit if committed
  static constexpr uint32_t kCommittedBit = uint32_t{1} << 31;
  bool committed() const { return (count & kCommittedBit) != 0; }
  uint32_t accesses() const { return count & ~kCommittedBit; }
};
static_assert(sizeof(Meta) == 16);


// A reference to the initial version of a key (carried along, so that the
// shards need not look the access up).
struct Event {
  uint64_t key;
  uint32_t table;
  uint32_t actor;   // index of the attempt that replaced or read it
  uint32_t access;  // global access index
  uint8_t type;
};

// A place in the order the checker looks for cycles against: the commit
// timestamp (or, without timestamps, the TSC at the outcome), then the
// index. Any total order will do -- a cycle needs an edge going backwards in
// it -- but one close to the real serialization order leaves few.
struct Pos {
  uint64_t ord;
  uint32_t idx;
  friend auto operator<=>(const Pos&, const Pos&) = default;
};
struct Interval {
  Pos lo, hi;  // a backward edge's target and source
};

// A transaction's write of one key, for transactions too large to scan.
struct WriteKey {
  uint64_t key;
  uint32_t table;
  uint32_t txn;
  uint32_t seq;  // the write sequence, or kNone for the key's last (final) write
  friend bool operator==(const WriteKey&, const WriteKey&) = default;
};
inline uint64_t hash_of(const WriteKey& k) {
  return mix64(k.key ^ mix64((uint64_t{k.table} << 32 | k.txn) + mix64(k.seq + 0x9e3779b97f4a7c15ULL)));
}

// What one piece of work found.
struct Part {
  std::array<uint64_t, kAnomalyKinds> counts{};
  std::vector<Finding> findings;
  CheckStats stats;
  bool all_timestamps = true;  // every committed attempt of the range has both
  std::vector<uint32_t> big;   // attempts with more than kScanAccesses accesses
  std::vector<uint32_t> forked;  // installs of versions replaced by more than one attempt
  bool keep_edges = false;  // else edges are only counted, and found again if in a segment
  std::vector<Edge> edges;
  std::vector<Interval> backward;  // edges against the order
  std::vector<Event> events;  // an attempt range's: of one key shard at a time (by_shard)
  std::vector<uint8_t> event_shard;
  std::vector<uint64_t> shard_begin;  // attempt ranges: per key shard, into events, plus an end
  std::vector<const Event*> replacers, readers;  // of the group being processed
  std::vector<std::pair<uint32_t, uint32_t>> forks;  // (install, writer) of the forks whose findings are kept
  std::vector<uint32_t> prev, next;  // per access of the attempt: the same key's previous and next
  std::vector<std::pair<TableKey, uint32_t>> sort_scratch;
  // resolve_txns(): the writers of the versions the attempt at place pos
  // names (2 per access, read then replaced) at ring[pos % kRing], found once
  // ahead of it; ring_pos says which place a ring entry holds.
  std::vector<uint32_t> ring;
  std::array<size_t, kRing> ring_pos{};
};

template <typename F>
void for_pieces(F&& f) {
  tbb::parallel_for(tbb::blocked_range<size_t>(0, kPieces, 1),
                    [&](const tbb::blocked_range<size_t>& r) {
                      for (size_t i = r.begin(); i < r.end(); ++i) f(i);
                    },
                    tbb::simple_partitioner());
}

class Checker {
 public:
  Checker(const History& h, const CheckOptions& o) : h_(h), o_(o), d_(h, index_) {}

  // ECANCELED once o_.stop asked to give up.
  Result<CheckReport> run();

 private:
  void scan_txns(size_t piece, Part& p);
  void order_txns();
  void index_big_txns(const std::vector<Part>& parts);
  void link_same_keys(Part& p, uint32_t i);
  void resolve_txns(size_t piece, Part& p);
  void prefetch_writers(Part& p, size_t pos, int stage) const;
  uint32_t resolve(Part& p, uint32_t actor, const AccessRecord& a, Version v, bool read, bool distinct,
                   uint32_t& writer, uint32_t known);
  uint32_t find_install(uint32_t w, const AccessRecord& a, uint16_t seq, int& final_seq) const;
  void find_forks(size_t piece, Part& p);
  void fix_forks(std::vector<Part>& parts);
  void anti_dependencies(size_t piece, Part& p);
  void describe_forks(std::vector<Part>& parts);
  void bucket_events(Part& p);
  void process_shard(size_t shard, Part& p);
  void process_group(Part& p, const std::vector<Event>& ev, size_t gb, size_t ge, int final_seq);
  void emit(Part& p, uint32_t src, uint32_t dst, EdgeKind k, uint32_t access, uint64_t src_ord, uint64_t dst_ord);
  void find_segments(std::vector<Part>& parts);
  void segment_edges(std::vector<Part>& parts);
  void merge(std::vector<Part>& parts);
  void find_cycles();
  // Strict serializability: whether real time can be checked, and how the
  // sources' clocks map onto one timeline (before order_txns()).
  void setup_real_time();
  // Snapshot isolation on recorded snapshot vectors: each committed
  // attempt's vector checked, and closed over the transactions it holds
  // (after scan_txns(), before any edge is emitted).
  void setup_snapshot_vectors();
  struct SlotWriters {
    explicit SlotWriters(uint32_t slots) : writers(slots), rank(slots), base(slots + 1, 0) {}
    std::vector<std::vector<std::pair<uint64_t, uint32_t>>> writers;  // per slot: (commit_ts, attempt), sorted
    std::vector<std::vector<uint32_t>> rank;  // per slot, per timestamp: writers at or below it
    std::vector<uint64_t> base;               // per slot: its first writer's index among all slots'
    // How many of slot j's writers a snapshot that shows t there holds.
    uint32_t held(uint32_t j, uint64_t t) const {
      if (t == 0 || rank[j].empty()) return 0;
      return rank[j][std::min<uint64_t>(t, rank[j].size() - 1)];
    }
  };
  void close_by_sweeps(const SlotWriters& sw);
  void close_snapshots(const SlotWriters& sw);
  // Attempt i's snapshot, closed (as recorded where closing added nothing).
  const uint64_t* closed_snapshot(uint32_t i) const {
    return row_of_.empty() || row_of_[i] == kNone ? h_.snapshot(i).data()
                                                  : rows_.data() + uint64_t{row_of_[i]} * txn(i).snapshot_words;
  }
  // Whether the committed writer w is in attempt r's snapshot (raw: as
  // recorded; else closed: also through the snapshots of what it holds).
  bool in_snapshot(uint32_t w, uint32_t r, bool raw) const {
    const TxnRecord& t = txn(w);
    if (t.commit_ts == 0) return false;
    const uint64_t held = raw ? h_.snapshot(r)[t.commit_slot] : closed_snapshot(r)[t.commit_slot];
    return t.commit_ts <= held;
  }
  // The real-time edges among the graph's nodes of each segment, through a
  // chain of auxiliary nodes numbered from `nodes` on (which grows).
  void real_time_edges(std::vector<Edge>& edges, uint32_t& nodes) const;
  void report_cycles(Anomaly a, const DependencyGraph& g, const Components& c, uint8_t seed, uint8_t path,
                     CycleSearch& search);
  void search_gsib(const DependencyGraph& g, CycleSearch& search);
  void note_components(const Components& c);
  // c with the graph's node numbers turned back into attempt indexes, and
  // each path through the real-time chain's auxiliary nodes as one rt edge.
  Cycle attempts(const Cycle& c) const {
    const uint32_t n = static_cast<uint32_t>(node_of_.size());
    const size_t m = c.nodes.size();
    Cycle out;
    out.exact = c.exact;
    size_t s = 0;
    while (s < m && c.nodes[s] >= n) ++s;
    for (size_t k = 0; k < m;) {
      const size_t at = (s + k) % m;
      size_t step = 1;
      while (c.nodes[(at + step) % m] >= n) ++step;
      const uint32_t u = node_of_[c.nodes[at]], v = node_of_[c.nodes[(at + step) % m]];
      out.nodes.push_back(u);
      out.edges.push_back(step > 1 ? Edge::make(u, v, EdgeKind::kRT, 0) : Edge{u, v, c.edges[at].tag});
      k += step;
    }
    return out;
  }
  // Attempt i's source's clock, and a tick of it on the check's timeline.
  struct SourceTime {
    uint32_t group = 0;  // attempts of different groups are never ordered in real time
    uint64_t tsc = 0, ns = 0, hz = 0;  // the clock's sample (Clock)
  };
  static constexpr uint32_t kNoClock = UINT32_MAX;  // SourceTime::group of an attempt without a source
  const SourceTime& time_of(uint32_t i) const {
    static constexpr SourceTime kNone{kNoClock, 0, 0, 0};
    const TxnId t = id(i);
    const auto it = source_time_.find(uint32_t{txn_node(t)} << 10 | txn_worker(t));
    return it == source_time_.end() ? kNone : it->second;
  }
  uint64_t timeline(const SourceTime& s, uint64_t tsc) const {
    if (raw_ticks_ || s.hz == 0) return tsc;
    const __int128 d = static_cast<__int128>(static_cast<int64_t>(tsc - s.tsc)) * 1'000'000'000 / s.hz;
    const __int128 t = static_cast<__int128>(s.ns) + d;
    return t < 1 ? 1 : static_cast<uint64_t>(t);
  }
  // The timeline's units in ns.
  double timeline_ns(uint64_t units, const SourceTime& s) const {
    return raw_ticks_ ? static_cast<double>(units) * 1e9 / static_cast<double>(s.hz) : static_cast<double>(units);
  }
  void unknown_version(Part& p, uint32_t actor, const AccessRecord& a, Version v, bool read);
  // Whether o_.stop asked to give up; once it did, always (the pieces of a
  // parallel phase ask it concurrently).
  bool stopping() {
    if (stopped_.load(std::memory_order_relaxed)) return true;
    if (!o_.stop || !o_.stop()) return false;
    stopped_.store(true, std::memory_order_relaxed);
    return true;
  }
  // A top-level parallel phase: its pieces are skipped once stopping()
  // (run() then returns before anything reads their results).
  template <typename F>
  void phase(F&& f) {
    for_pieces([&](size_t i) {
      if (!stopping()) f(i);
    });
  }

  // Counts an anomaly the level forbids, and keeps its finding (built only
  // then) while fewer than max_findings of its kind are kept.
  template <typename F>
  void add(Part& p, Anomaly a, F&& make) {
    if (!forbidden(o_.isolation, a)) return;
    if (p.counts[static_cast<size_t>(a)]++ < o_.max_findings) p.findings.push_back(make());
  }
  // The serial phases' findings go straight to the report.
  template <typename F>
  void add(Anomaly a, F&& make) {
    if (!forbidden(o_.isolation, a)) return;
    if (r_.counts[static_cast<size_t>(a)]++ < o_.max_findings) r_.findings.push_back(make());
  }
  static size_t shard_of(const AccessRecord& a) { return hash_of(TableKey{a.key, a.table}) % kPieces; }
  static Finding finding(Anomaly a, std::vector<TxnId> txns, std::string text) {
    return Finding{a, "", std::move(txns), {}, std::move(text)};
  }
  static std::pair<size_t, size_t> range_of(size_t n, size_t piece) {
    return {n * piece / kPieces, n * (piece + 1) / kPieces};
  }
  // With real time, the place is the outcome's time on the timeline, so
  // that every real-time edge goes forward.
  uint64_t ord_of(uint32_t i) const {
    const TxnRecord& t = txn(i);
    if (order_by_commit_ts_) return t.commit_ts;
    return real_time_ && !raw_ticks_ ? timeline(time_of(i), t.commit_tsc) : t.commit_tsc;
  }

  const TxnRecord& txn(uint32_t i) const { return h_.txn(i); }
  // A commit's place in timestamp order: "ts", or "ts (epoch e)".
  static std::string order_text(const TxnRecord& t) {
    return std::to_string(t.commit_ts) + (t.commit_slot != 0 ? " (epoch " + std::to_string(t.commit_slot) + ")" : "");
  }
  TxnId id(uint32_t i) const { return h_.txn(i).id; }
  const AccessRecord& access(uint32_t global) const { return h_.all_accesses()[global]; }
  uint32_t index_of(TxnId t) const { return t == kInitialTxn ? kInitialIdx : index_.find(t); }

  const History& h_;
  const CheckOptions o_;
  CheckReport r_;
  TxnIndex index_;
  FlatIndex<WriteKey> big_writes_;  // writes of attempts with more than kScanAccesses accesses
  LoadVector<uint64_t> ord_;       // per attempt: its place in the order (Pos::ord)
  LoadVector<Meta> meta_;          // per attempt: what resolving a version needs of its writer
  std::vector<uint32_t> order_;     // the attempts in that order: how the passes visit them
  LoadVector<uint32_t> read_of_;   // per access: the install of the version it read, when it yields an rw edge
  LoadVector<uint32_t> rep_of_;    // per access: the install of the version it replaced, when it yields a ww edge
  LoadVector<uint64_t> replacers_;  // per install: the two lowest distinct replacing attempts (low word first)
  std::vector<std::pair<uint32_t, uint32_t>> fork_replacers_;  // (install, attempt) of every forked version, sorted
  std::vector<Edge> edges_;
  std::vector<Interval> segments_;  // disjoint, sorted: every cycle lies inside one
  LoadVector<uint32_t> segment_;   // per attempt: the segment it is in, or kNone
  std::vector<uint32_t> node_of_;   // the graph's nodes: the attempts in segments, by index
  std::map<std::pair<uint16_t, uint16_t>, const Source*> sources_;
  bool si_timestamps_ = false;
  bool si_vectors_ = false;       // snapshot isolation decided on snapshot vectors
  // Closed snapshot vectors where closing added to them: attempt i's at
  // row row_of_[i] of rows_ (kNone: as recorded).
  std::vector<uint32_t> row_of_;
  std::vector<uint64_t> rows_;
  bool timestamp_order_ = false;  // every source promises it (History::add_source: all or none)
  bool order_by_commit_ts_ = false;
  bool real_time_ = false;  // strict: real-time edges join the graph
  bool raw_ticks_ = true;   // one clock: the timeline is its ticks; else ns on the wall clock
  uint64_t margin_ = 0;     // timeline units an end must precede a begin by (clock_skew_ns)
  std::unordered_map<uint32_t, SourceTime> source_time_;  // by node << 10 | worker
  const std::vector<Part>* events_by_range_ = nullptr;
  std::atomic<bool> stopped_{false};
  Describer d_;
};

// v = n copies of x, in transparent huge pages where the kernel allows:
// these arrays are read at random. Filled in pieces on the arena's threads
// (their pages are faulted in, and zeroed by the kernel, in parallel).
template <typename T>
void huge_assign(LoadVector<T>& v, size_t n, T x) {
  LoadVector<T>().swap(v);
  v.reserve(n);
  advise_huge_pages(v.data(), n * sizeof(T));
  v.resize(n);
  for_pieces([&](size_t piece) { std::fill(v.data() + n * piece / kPieces, v.data() + n * (piece + 1) / kPieces, x); });
}

}  // namespace rdtx::history::detail
