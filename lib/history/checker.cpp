#include "history/checker.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <unordered_map>
#include <queue>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>
#include <tbb/task_arena.h>
#include <tuple>
#include <utility>

#include "history/describer.hpp"
#include "history/flat_index.hpp"
#include "history/txn_index.hpp"

namespace rdtx::history {

namespace {

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

uint32_t Checker::find_install(uint32_t w, const AccessRecord& a, uint16_t seq, int& final_seq) const {
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

void Checker::link_same_keys(Part& p, uint32_t i) {
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

void Checker::bucket_events(Part& p) {
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

void Checker::process_group(Part& p, const std::vector<Event>& ev, size_t gb, size_t ge, int /*final_seq*/) {
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
      const uint64_t* x = h_.snapshot(by_sum[k].second).data();
      for (uint32_t j = 0; j < slots; ++j) m[j] = std::min(m[j], x[j]);
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

void Checker::note_components(const Components& c) {
  r_.stats.cyclic_components = c.cyclic.size();
  for (size_t i = 0; i < c.cyclic.size(); ++i)
    r_.stats.largest_component = std::max<uint64_t>(r_.stats.largest_component, c.members_of(i).size());
}

void Checker::setup_real_time() {
  if (h_.sources.empty() || !h_.sources.front().clock.recorded()) {
    add(Anomaly::kRealTime, [&] {
      return finding(Anomaly::kRealTime, {},
                     "strict serializability cannot be checked: the history records no real time (recorded by an "
                     "rdtx run on the hardware clock, not in virtual time)");
    });
    return;
  }
  std::map<uint64_t, uint32_t> domains;
  for (const Source& src : h_.sources) domains.emplace(src.clock.domain, static_cast<uint32_t>(domains.size()));
  raw_ticks_ = domains.size() == 1;
  // Across hosts, ticks compare through the wall clocks, and only beyond
  // their bound of disagreement; without one, not at all.
  const bool across = !raw_ticks_ && o_.clock_skew_ns > 0;
  margin_ = across ? o_.clock_skew_ns : 0;
  for (const Source& src : h_.sources)
    source_time_[uint32_t{src.node} << 10 | src.worker] =
        SourceTime{across ? 0 : domains[src.clock.domain], src.clock.tsc, src.clock.unix_ns, src.clock.tsc_hz};
  d_.real_time_gap_ns = [this](uint32_t src, uint32_t dst) {
    const SourceTime &a = time_of(src), &b = time_of(dst);
    const uint64_t end = timeline(a, txn(src).commit_tsc), begin = timeline(b, txn(dst).begin_tsc);
    return begin > end ? timeline_ns(begin - end, a) : 0.0;
  };
  real_time_ = true;
  r_.stats.real_time = true;
  r_.stats.clock_domains = static_cast<uint32_t>(domains.size());
}

void Checker::real_time_edges(std::vector<Edge>& edges, uint32_t& nodes) const {
  // Within each segment and clock group, T1 -> T2 when T1's end (commit_tsc)
  // is more than margin_ before T2's begin. Sorted by end, the attempts
  // each get an auxiliary node, chained in that order: T -> A(T), A(k) ->
  // A(k+1), and A(last end before T2's begin) -> T2. So T1 reaches T2
  // through the chain exactly when T1 precedes it, with O(n) edges.
  struct Item {
    uint32_t seg, group;
    uint64_t end, begin;  // begin 0: unknown
    uint32_t node;
  };
  std::vector<Item> items;
  for (uint32_t u = 0; u < node_of_.size(); ++u) {
    const uint32_t i = node_of_[u];
    const TxnRecord& t = txn(i);
    if (!t.committed()) continue;
    const Pos x{ord_[i], i};
    auto it = std::upper_bound(segments_.begin(), segments_.end(), x,
                               [](const Pos& v, const Interval& sg) { return v < sg.lo; });
    const SourceTime& st = time_of(i);
    if (st.group == kNoClock) continue;  // a hand-built history's attempt of no source
    const uint64_t begin = t.begin_tsc == 0 || t.begin_tsc > t.commit_tsc ? 0 : timeline(st, t.begin_tsc);
    items.push_back(Item{static_cast<uint32_t>(it - 1 - segments_.begin()), st.group, timeline(st, t.commit_tsc), begin, u});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return std::tie(a.seg, a.group, a.end, a.node) < std::tie(b.seg, b.group, b.end, b.node);
  });
  std::vector<uint64_t> ends;
  for (size_t lo = 0; lo < items.size();) {
    size_t hi = lo;
    while (hi < items.size() && items[hi].seg == items[lo].seg && items[hi].group == items[lo].group) ++hi;
    const uint32_t aux = nodes;
    nodes += static_cast<uint32_t>(hi - lo);
    ends.clear();
    for (size_t k = lo; k < hi; ++k) {
      ends.push_back(items[k].end);
      const uint32_t a = aux + static_cast<uint32_t>(k - lo);
      edges.push_back(Edge::make(items[k].node, a, EdgeKind::kRT, 0));
      if (k + 1 < hi) edges.push_back(Edge::make(a, a + 1, EdgeKind::kRT, 0));
    }
    for (size_t k = lo; k < hi; ++k) {
      const uint64_t b = items[k].begin;
      if (b <= margin_) continue;  // unknown, or no end can precede it
      // The last end below b - margin_.
      const size_t j = static_cast<size_t>(std::lower_bound(ends.begin(), ends.end(), b - margin_) - ends.begin());
      if (j > 0) edges.push_back(Edge::make(aux + static_cast<uint32_t>(j - 1), items[k].node, EdgeKind::kRT, 0));
    }
    lo = hi;
  }
}

void Checker::find_cycles() {
  if (edges_.empty()) return;  // no segments: no cycle
  // The graph of the attempts in segments, numbered 0.. in index order.
  for (Edge& e : edges_) {
    e.src = static_cast<uint32_t>(std::lower_bound(node_of_.begin(), node_of_.end(), e.src) - node_of_.begin());
    e.dst = static_cast<uint32_t>(std::lower_bound(node_of_.begin(), node_of_.end(), e.dst) - node_of_.begin());
  }
  uint32_t nodes = static_cast<uint32_t>(node_of_.size());
  if (real_time_) real_time_edges(edges_, nodes);
  const DependencyGraph g(nodes, std::move(edges_));
  CycleSearch search(g, [this] { return stopping(); });
  if (forbidden(o_.isolation, Anomaly::kG2Item)) {  // (strict) serializable, repeatable read
    // Coarse to fine: most histories are acyclic and stop after one pass.
    const Components full = g.components(kAllKinds, nullptr);
    note_components(full);
    if (!full.cyclic.empty()) {
      const Components dep = g.components(kDepKinds, &full);
      const Components ww = g.components(kWWOnly, &dep);
      report_cycles(Anomaly::kG0, g, ww, kWWOnly, kWWOnly, search);
      report_cycles(Anomaly::kG1c, g, dep, kind_bit(EdgeKind::kWR), kDepKinds, search);
      report_cycles(Anomaly::kG2Item, g, full, kind_bit(EdgeKind::kRW), kAllKinds, search);
    }
    if (real_time_) {
      // A cycle that needs real-time order: serializable, but only in an
      // order that contradicts real time.
      const Components rt = g.components(kRealTimeKinds, nullptr);
      report_cycles(Anomaly::kRealTime, g, rt, kind_bit(EdgeKind::kRT), kRealTimeKinds, search);
    }
    return;
  }
  const Components dep = g.components(kDepKinds, nullptr);
  note_components(dep);
  if (!dep.cyclic.empty()) {
    const Components ww = g.components(kWWOnly, &dep);
    report_cycles(Anomaly::kG0, g, ww, kWWOnly, kWWOnly, search);
    report_cycles(Anomaly::kG1c, g, dep, kind_bit(EdgeKind::kWR), kDepKinds, search);
  }
  if (o_.isolation == Isolation::kSnapshot && !si_timestamps_ && !si_vectors_) search_gsib(g, search);
}

void Checker::report_cycles(Anomaly a, const DependencyGraph& g, const Components& c, uint8_t seed, uint8_t path,
                            CycleSearch& search) {
  const size_t k = static_cast<size_t>(a);
  uint64_t budget = o_.search_budget;
  for (size_t i = 0; i < c.cyclic.size() && !search.stopped(); ++i) {
    const std::span<const uint32_t> members = c.members_of(i);
    if (r_.counts[k] >= o_.max_findings) {
      // Only counted: an edge of the seed kind inside the component lies on
      // a cycle, by strong connectivity.
      const uint32_t comp = c.cyclic[i];
      bool has_seed = false;
      for (size_t m = 0; m < members.size() && !has_seed; ++m)
        for (const Edge& e : g.out(members[m]))
          if ((seed & kind_bit(e.kind())) && c.id[e.dst] == comp) {
            has_seed = true;
            break;
          }
      if (has_seed) ++r_.counts[k];
      continue;
    }
    const std::optional<Cycle> cyc = search.shortest(c, i, seed, path, budget, nullptr);
    const uint64_t size = static_cast<uint64_t>(
        std::count_if(members.begin(), members.end(), [&](uint32_t u) { return u < node_of_.size(); }));
    if (cyc) add(a, [&] { return d_.cycle(a, attempts(*cyc), size); });
  }
}

void Checker::search_gsib(const DependencyGraph& g, CycleSearch& search) {
  // Without timestamps, G-SIb is a cycle with exactly one anti-dependency:
  // searched from each rw edge along ww and wr edges, inside the components
  // of the whole graph.
  const Components full = g.components(kAllKinds, nullptr);
  note_components(full);
  uint64_t budget = o_.search_budget;
  for (size_t i = 0; i < full.cyclic.size() && !search.stopped(); ++i) {
    bool exhausted = false;
    const std::optional<Cycle> cyc = search.shortest(full, i, kind_bit(EdgeKind::kRW), kDepKinds, budget, &exhausted);
    const size_t size = full.members_of(i).size();
    if (cyc) {
      add(Anomaly::kGSIb, [&] { return d_.cycle(Anomaly::kGSIb, attempts(*cyc), size); });
    } else if (exhausted) {
      add(Anomaly::kInconclusive, [&] {
        return finding(Anomaly::kInconclusive, {id(node_of_[full.members_of(i)[0]])},
                       "a strongly connected component of " + std::to_string(size) +
                           " transactions is too large to search for cycles with one anti-dependency within the "
                           "search budget; record start and commit timestamps to check snapshot isolation exactly");
      });
    }
  }
}

}  // namespace

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
  return Checker(h, options).run();
}

}  // namespace rdtx::history
