#include "history/checker.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <utility>

#include "history/describer.hpp"
#include "history/flat_index.hpp"

namespace rdtx::history {

namespace {

constexpr uint32_t kNone = UINT32_MAX;
// The index standing for the writer of the initial version.
constexpr uint32_t kInitialIdx = UINT32_MAX - 1;

// What an access says about one version of one key. Events are grouped by
// (key, version) -- the writer's install, the writes that replaced it, the
// reads that saw it -- and each group yields that version's edges.
enum EventType : uint8_t { kInstall = 0, kReplace = 1, kRead = 2 };

// The work is split into a fixed number of pieces, whatever the number of
// threads, so that the report is the same on any machine: attempts in
// kPieces ranges (reading records, checking each access alone), then keys
// in kPieces shards by hash (grouping each key's events into versions and
// edges). Each piece writes only its own Part; the parts are merged in
// piece order.
constexpr size_t kPieces = 64;

struct Event {
  uint32_t key;     // dense key id
  uint32_t vtxn;    // index of the version's writer, or kInitialIdx
  uint32_t actor;   // index of the attempt that installed, replaced or read it
  uint32_t access;  // global access index
  uint16_t vseq;
  uint8_t type;
};

// What one piece of work found.
struct Part {
  std::array<uint64_t, kAnomalyKinds> counts{};
  std::vector<Finding> findings;
  CheckStats stats;
  std::vector<Edge> edges;
  std::vector<Event> events;  // an attempt range's: of one key shard at a time (by_shard)
  std::vector<uint64_t> shard_begin;  // attempt ranges: per key shard, into events, plus an end
  std::vector<const Event*> replacers, readers;  // of the group being processed
};

class Checker {
 public:
  Checker(const History& h, const CheckOptions& o) : h_(h), o_(o), d_(h, txn_index_) {}

  CheckReport run();

 private:
  void index_txns();
  void scan_timestamps();
  void build_events(size_t piece, Part& p);
  void process_shard(size_t shard, Part& p);
  void process_group(Part& p, const std::vector<Event>& ev, size_t gb, size_t ge, int final_seq);
  void emit(Part& p, uint32_t src, uint32_t dst, EdgeKind k, uint32_t access);
  void merge(std::vector<Part>& parts);
  void find_cycles();
  void report_cycles(Anomaly a, const DependencyGraph& g, const Components& c, uint8_t seed, uint8_t path,
                     CycleSearch& search);
  void search_gsib(const DependencyGraph& g, CycleSearch& search);
  void note_components(const Components& c);
  void unknown_version(Part& p, uint32_t actor, const AccessRecord& a, Version v, bool read);

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

  const TxnRecord& txn(uint32_t i) const { return h_.txn(i); }
  TxnId id(uint32_t i) const { return h_.txn(i).id; }
  const AccessRecord& access(uint32_t global) const { return h_.all_accesses()[global]; }
  uint32_t index_of(TxnId t) const { return t == kInitialTxn ? kInitialIdx : txn_index_.find(t); }

  const History& h_;
  const CheckOptions o_;
  CheckReport r_;
  FlatIndex<uint64_t> txn_index_;
  std::vector<Edge> edges_;
  std::map<std::pair<uint16_t, uint16_t>, const Source*> sources_;
  bool si_timestamps_ = false;
  const std::vector<Part>* events_by_range_ = nullptr;
  Describer d_;
};

CheckReport Checker::run() {
  const auto t0 = std::chrono::steady_clock::now();
  r_.isolation = o_.isolation;
  r_.truncated = h_.truncated();
  r_.prefix_only = r_.truncated && o_.allow_truncated;
  for (const Source& s : h_.sources) sources_[{s.node, s.worker}] = &s;

  tbb::task_arena arena(o_.threads == 0 ? tbb::task_arena::automatic : static_cast<int>(o_.threads));
  arena.execute([&] {
    index_txns();
    scan_timestamps();
    std::vector<Part> ranges(kPieces), shards(kPieces);
    tbb::parallel_for(tbb::blocked_range<size_t>(0, kPieces, 1),
                      [&](const tbb::blocked_range<size_t>& r) {
                        for (size_t i = r.begin(); i < r.end(); ++i) build_events(i, ranges[i]);
                      },
                      tbb::simple_partitioner());
    events_by_range_ = &ranges;
    tbb::parallel_for(tbb::blocked_range<size_t>(0, kPieces, 1),
                      [&](const tbb::blocked_range<size_t>& r) {
                        for (size_t i = r.begin(); i < r.end(); ++i) process_shard(i, shards[i]);
                      },
                      tbb::simple_partitioner());
    for (Part& p : ranges) std::vector<Event>().swap(p.events);
    ranges.insert(ranges.end(), std::make_move_iterator(shards.begin()), std::make_move_iterator(shards.end()));
    merge(ranges);
  });
  find_cycles();

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

void Checker::index_txns() {
  txn_index_ = FlatIndex<uint64_t>(h_.size());
  for (uint32_t i = 0; i < h_.size(); ++i) {
    const TxnRecord& t = txn(i);
    (t.committed() ? r_.stats.committed : r_.stats.aborted)++;
    if (t.id == kInitialTxn) {
      add(Anomaly::kInconsistent,
          [&] { return finding(Anomaly::kInconsistent, {}, "a transaction has id 0, the initial data's"); });
      continue;
    }
    const auto [first, inserted] = txn_index_.insert(t.id, i);
    if (!inserted)
      add(Anomaly::kInconsistent, [&, first = first] {
        return finding(Anomaly::kInconsistent, {t.id},
                       "two attempts have id " + d_.txn(t.id) + " (attempts " + std::to_string(first) + " and " +
                           std::to_string(i) + "); the first is used");
      });
  }
}

void Checker::scan_timestamps() {
  bool all = r_.stats.committed > 0;
  for (uint32_t i = 0; i < h_.size(); ++i) {
    const TxnRecord& t = txn(i);
    if (!t.committed()) continue;
    if (t.start_ts == 0 || t.commit_ts == 0) {
      all = false;
      continue;
    }
    if (t.commit_ts < t.start_ts)
      add(Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {t.id},
                       d_.txn(t.id) + " committed at timestamp " + std::to_string(t.commit_ts) +
                           ", before its start timestamp " + std::to_string(t.start_ts));
      });
  }
  r_.stats.timestamps = all;
  si_timestamps_ = all && o_.isolation == Isolation::kSnapshot;
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

void Checker::build_events(size_t piece, Part& p) {
  // This piece's attempts; their events go to the key shards, by hash.
  const size_t n = h_.size();
  const uint32_t lo = static_cast<uint32_t>(n * piece / kPieces), hi = static_cast<uint32_t>(n * (piece + 1) / kPieces);
  std::vector<Event> raw;
  std::vector<uint8_t> shard;
  const uint64_t acc_lo = lo < n ? h_.first_access(lo) : h_.access_count();
  const uint64_t acc_hi = hi < n ? h_.first_access(hi) : h_.access_count();
  raw.reserve((acc_hi - acc_lo) * 2);
  shard.reserve((acc_hi - acc_lo) * 2);
  for (uint32_t i = lo; i < hi; ++i) {
    const TxnRecord& t = txn(i);
    if (t.id == kInitialTxn || txn_index_.find(t.id) != i) continue;  // reported in index_txns
    const bool committed = t.committed();
    const uint32_t first = static_cast<uint32_t>(h_.first_access(i));
    std::span<const AccessRecord> acc = h_.accesses(i);
    for (uint32_t j = 0; j < acc.size(); ++j) {
      const AccessRecord& a = acc[j];
      const uint32_t ai = first + j;
      const uint8_t sh = static_cast<uint8_t>(shard_of(a));
      if (committed) {
        p.stats.accesses++;
        p.stats.reads += a.reads();
        p.stats.writes += a.writes();
      }
      if (committed && a.reads()) {
        const uint32_t w = index_of(a.read_txn);
        if (w == kNone) {
          unknown_version(p, i, a, a.read_version(), true);
        } else {
          raw.push_back({0, w, i, ai, a.read_seq, kRead});
          shard.push_back(sh);
        }
      }
      if (!a.writes()) continue;
      raw.push_back({0, i, i, ai, a.write_seq, kInstall});
      shard.push_back(sh);
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
      const uint32_t w = index_of(replaced.txn);
      if (w == kNone) {
        unknown_version(p, i, a, replaced, false);
      } else {
        raw.push_back({0, w, i, ai, replaced.seq, kReplace});
        shard.push_back(sh);
      }
    }
  }
  // Grouped by shard (a counting sort), each shard's in attempt order.
  p.shard_begin.assign(kPieces + 1, 0);
  for (uint8_t sh : shard) ++p.shard_begin[sh + 1];
  for (size_t k = 0; k < kPieces; ++k) p.shard_begin[k + 1] += p.shard_begin[k];
  p.events.resize(raw.size());
  std::vector<uint64_t> next(p.shard_begin.begin(), p.shard_begin.end() - 1);
  for (size_t e = 0; e < raw.size(); ++e) p.events[next[shard[e]]++] = raw[e];
}

void Checker::process_shard(size_t sh, Part& p) {
  // The shard's events from every attempt range, in range order.
  const std::vector<Part>& ranges = *events_by_range_;
  size_t total = 0;
  for (const Part& r : ranges) total += r.shard_begin[sh + 1] - r.shard_begin[sh];
  std::vector<Event> events;
  events.reserve(total);
  for (const Part& r : ranges)
    events.insert(events.end(), r.events.begin() + static_cast<ptrdiff_t>(r.shard_begin[sh]),
                  r.events.begin() + static_cast<ptrdiff_t>(r.shard_begin[sh + 1]));
  // Dense key ids of the shard, then a counting sort by key and each key's
  // events by (version, type, actor): linear but for the per-key sorts,
  // which are short except on hot keys.
  FlatIndex<TableKey> keys(total / 4);
  for (Event& e : events) {
    const AccessRecord& a = access(e.access);
    e.key = keys.insert({a.key, a.table}, static_cast<uint32_t>(keys.size())).first;
  }
  const size_t nkeys = keys.size();
  p.stats.keys = nkeys;
  std::vector<uint64_t> key_begin(nkeys + 1, 0);
  for (const Event& e : events) ++key_begin[e.key + 1];
  for (size_t k = 0; k < nkeys; ++k) key_begin[k + 1] += key_begin[k];
  std::vector<Event> sorted(events.size());
  {
    std::vector<uint64_t> next(key_begin.begin(), key_begin.end() - 1);
    for (const Event& e : events) sorted[next[e.key]++] = e;
  }
  std::vector<Event>().swap(events);
  auto by_version = [](const Event& a, const Event& b) {
    if (a.vtxn != b.vtxn) return a.vtxn < b.vtxn;
    if (a.vseq != b.vseq) return a.vseq < b.vseq;
    if (a.type != b.type) return a.type < b.type;
    return a.actor < b.actor;
  };
  for (size_t k = 0; k < nkeys; ++k)
    std::sort(sorted.begin() + static_cast<ptrdiff_t>(key_begin[k]),
              sorted.begin() + static_cast<ptrdiff_t>(key_begin[k + 1]), by_version);

  // About one ww or wr edge per access, and an rw edge per overwritten read.
  p.edges.reserve(sorted.size() * 3 / 4);
  for (size_t k = 0; k < nkeys; ++k) {
    const size_t ke = key_begin[k + 1];
    for (size_t rb = key_begin[k]; rb < ke;) {
      // One writer's versions of this key: the last one it installed is
      // final, the others are intermediate.
      size_t re = rb;
      int final_seq = -1;
      for (; re < ke && sorted[re].vtxn == sorted[rb].vtxn; ++re)
        if (sorted[re].type == kInstall) final_seq = std::max(final_seq, int{sorted[re].vseq});
      for (size_t gb = rb; gb < re;) {
        size_t ge = gb;
        while (ge < re && sorted[ge].vseq == sorted[gb].vseq) ++ge;
        process_group(p, sorted, gb, ge, final_seq);
        gb = ge;
      }
      rb = re;
    }
  }
}

void Checker::merge(std::vector<Part>& parts) {
  size_t edges = 0;
  for (const Part& p : parts) edges += p.edges.size();
  edges_.reserve(edges);
  for (Part& p : parts) {
    for (size_t k = 0; k < kAnomalyKinds; ++k) r_.counts[k] += p.counts[k];
    r_.findings.insert(r_.findings.end(), std::make_move_iterator(p.findings.begin()),
                       std::make_move_iterator(p.findings.end()));
    edges_.insert(edges_.end(), p.edges.begin(), p.edges.end());
    std::vector<Edge>().swap(p.edges);
    CheckStats& s = r_.stats;
    s.committed += p.stats.committed;
    s.aborted += p.stats.aborted;
    s.accesses += p.stats.accesses;
    s.reads += p.stats.reads;
    s.writes += p.stats.writes;
    s.keys += p.stats.keys;
    for (size_t k = 0; k < s.edges.size(); ++k) s.edges[k] += p.stats.edges[k];
    s.unrecorded_refs += p.stats.unrecorded_refs;
  }
}

void Checker::process_group(Part& p, const std::vector<Event>& ev, size_t gb, size_t ge, int final_seq) {
  const Event& g = ev[gb];
  const bool initial = g.vtxn == kInitialIdx;
  const Version v{initial ? kInitialTxn : id(g.vtxn), g.vseq};
  size_t rep = gb;
  while (rep < ge && ev[rep].type == kInstall) ++rep;
  size_t rd = rep;
  while (rd < ge && ev[rd].type == kReplace) ++rd;
  const size_t installs = rep - gb;

  if ((initial && v.seq != 0) || (!initial && installs == 0)) {
    for (size_t i = rep; i < ge; ++i)
      unknown_version(p, ev[i].actor, access(ev[i].access), v, ev[i].type == kRead);
    return;
  }
  // Distinct replacing and reading attempts (a group is sorted by actor);
  // the writer reading its own version is no dependency.
  std::vector<const Event*>& replacers = p.replacers;
  std::vector<const Event*>& readers = p.readers;
  replacers.clear();
  readers.clear();
  for (size_t i = rep; i < rd; ++i)
    if (replacers.empty() || replacers.back()->actor != ev[i].actor) replacers.push_back(&ev[i]);
  for (size_t i = rd; i < ge; ++i)
    if ((readers.empty() || readers.back()->actor != ev[i].actor) && ev[i].actor != g.vtxn)
      readers.push_back(&ev[i]);

  const AccessRecord& key_access = access(g.access);
  if (installs > 1)
    add(p, Anomaly::kInconsistent, [&] {
      return finding(Anomaly::kInconsistent, {v.txn},
                     d_.txn(v.txn) + " installed " + d_.key_of(key_access) + " v=" + d_.version(v) + " " +
                         std::to_string(installs) + " times");
    });
  if (!initial && !txn(g.vtxn).committed()) {
    const uint16_t reason = txn(g.vtxn).abort_reason;
    for (const Event* e : readers)
      add(p, Anomaly::kG1a, [&] {
        return finding(Anomaly::kG1a, {id(e->actor), v.txn},
                       "G1a (aborted read): " + d_.txn(id(e->actor)) + " read " + d_.key_of(key_access) +
                           " v=" + d_.version(v) + ", written by " + d_.txn(v.txn) + ", which aborted ('" +
                           h_.names.abort_reason(reason) + "')");
      });
    for (const Event* e : replacers)
      add(p, Anomaly::kInconsistent, [&] {
        return finding(Anomaly::kInconsistent, {id(e->actor), v.txn},
                       d_.txn(id(e->actor)) + " replaced " + d_.key_of(key_access) + " v=" + d_.version(v) +
                           ", written by " + d_.txn(v.txn) + ", which aborted");
      });
    return;
  }
  if (!initial && int{v.seq} < final_seq) {
    const Version last{v.txn, static_cast<uint16_t>(final_seq)};
    for (const Event* e : readers)
      add(p, Anomaly::kG1b, [&] {
        return finding(Anomaly::kG1b, {id(e->actor), v.txn},
                       "G1b (intermediate read): " + d_.txn(id(e->actor)) + " read " + d_.key_of(key_access) +
                           " v=" + d_.version(v) + ", which its writer " + d_.txn(v.txn) +
                           " overwrote itself before committing v=" + d_.version(last));
      });
    for (const Event* e : replacers)
      if (e->actor != g.vtxn)
        add(p, Anomaly::kInconsistent, [&] {
          return finding(Anomaly::kInconsistent, {id(e->actor), v.txn},
                         d_.txn(id(e->actor)) + " replaced " + d_.key_of(key_access) + " v=" + d_.version(v) +
                             ", an intermediate version (" + d_.txn(v.txn) + " committed v=" + d_.version(last) + ")");
        });
    return;
  }

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
  for (const Event* q : replacers)
    if (!initial) emit(p, g.vtxn, q->actor, EdgeKind::kWW, q->access);
  // A reader's anti-dependency goes to the version's replacer. A forked
  // version has several; its readers get an edge to the first one (not the
  // reader itself) only, so that the graph stays linear in the history's
  // size however broken it is (a lock that never locks forks every hot
  // version, and readers x replacers edges ran tests out of memory). The
  // fork itself is reported, so the history is not certified either way.
  for (const Event* r : readers) {
    if (!initial) emit(p, g.vtxn, r->actor, EdgeKind::kWR, r->access);
    for (const Event* q : replacers)
      if (q->actor != r->actor) {
        emit(p, r->actor, q->actor, EdgeKind::kRW, r->access);
        break;
      }
  }
}

void Checker::emit(Part& p, uint32_t src, uint32_t dst, EdgeKind k, uint32_t access_index) {
  p.edges.push_back(Edge::make(src, dst, k, access_index));
  ++p.stats.edges[static_cast<size_t>(k)];
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

void Checker::note_components(const Components& c) {
  r_.stats.cyclic_components = c.cyclic.size();
  for (size_t i = 0; i < c.cyclic.size(); ++i)
    r_.stats.largest_component = std::max<uint64_t>(r_.stats.largest_component, c.members_of(i).size());
}

void Checker::find_cycles() {
  const DependencyGraph g(static_cast<uint32_t>(h_.size()), std::move(edges_));
  CycleSearch search(g);
  if (o_.isolation == Isolation::kSerializable) {
    // Coarse to fine: most histories are acyclic and stop after one pass.
    const Components full = g.components(kAllKinds, nullptr);
    note_components(full);
    if (full.cyclic.empty()) return;
    const Components dep = g.components(kDepKinds, &full);
    const Components ww = g.components(kWWOnly, &dep);
    report_cycles(Anomaly::kG0, g, ww, kWWOnly, kWWOnly, search);
    report_cycles(Anomaly::kG1c, g, dep, kind_bit(EdgeKind::kWR), kDepKinds, search);
    report_cycles(Anomaly::kG2Item, g, full, kind_bit(EdgeKind::kRW), kAllKinds, search);
    return;
  }
  const Components dep = g.components(kDepKinds, nullptr);
  note_components(dep);
  if (!dep.cyclic.empty()) {
    const Components ww = g.components(kWWOnly, &dep);
    report_cycles(Anomaly::kG0, g, ww, kWWOnly, kWWOnly, search);
    report_cycles(Anomaly::kG1c, g, dep, kind_bit(EdgeKind::kWR), kDepKinds, search);
  }
  if (o_.isolation == Isolation::kSnapshot && !si_timestamps_) search_gsib(g, search);
}

void Checker::report_cycles(Anomaly a, const DependencyGraph& g, const Components& c, uint8_t seed, uint8_t path,
                            CycleSearch& search) {
  const size_t k = static_cast<size_t>(a);
  uint64_t budget = o_.search_budget;
  for (size_t i = 0; i < c.cyclic.size(); ++i) {
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
    if (cyc) add(a, [&] { return d_.cycle(a, *cyc, members.size()); });
  }
}

void Checker::search_gsib(const DependencyGraph& g, CycleSearch& search) {
  // Without timestamps, G-SIb is a cycle with exactly one anti-dependency:
  // searched from each rw edge along ww and wr edges, inside the components
  // of the whole graph.
  const Components full = g.components(kAllKinds, nullptr);
  note_components(full);
  uint64_t budget = o_.search_budget;
  for (size_t i = 0; i < full.cyclic.size(); ++i) {
    bool exhausted = false;
    const std::optional<Cycle> cyc = search.shortest(full, i, kind_bit(EdgeKind::kRW), kDepKinds, budget, &exhausted);
    const size_t size = full.members_of(i).size();
    if (cyc) {
      add(Anomaly::kGSIb, [&] { return d_.cycle(Anomaly::kGSIb, *cyc, size); });
    } else if (exhausted) {
      add(Anomaly::kInconclusive, [&] {
        return finding(Anomaly::kInconclusive, {id(full.members_of(i)[0])},
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
  }
  return "?";
}

Result<Isolation> parse_isolation(std::string_view s) {
  if (s == "serializable") return Isolation::kSerializable;
  if (s == "si" || s == "snapshot") return Isolation::kSnapshot;
  if (s == "rc" || s == "read-committed") return Isolation::kReadCommitted;
  return make_error(EINVAL, "isolation level '%.*s' is not one of serializable, si, rc", static_cast<int>(s.size()),
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
      return level == Isolation::kSerializable;
    case Anomaly::kLostUpdate:
      return level != Isolation::kReadCommitted;
    case Anomaly::kGSIa:
    case Anomaly::kGSIb:
    case Anomaly::kInconclusive:
      return level == Isolation::kSnapshot;
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
