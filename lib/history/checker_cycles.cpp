// The checker's cycle search (the class: checker_impl.hpp; the graph and
// the search itself: dependency_graph.hpp): the graph of the attempts in
// segments searched, coarse to fine, for G0, G1c, G2-item and, without
// timestamps, G-SIb (find_cycles, report_cycles, search_gsib,
// note_components); and strict serializability's real-time order, set up
// before the attempts are ordered (setup_real_time) and added to the graph
// as a chain of auxiliary nodes (real_time_edges).
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "history/checker_impl.hpp"

namespace rdtx::history::detail {

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
  // Each host's clock (domain): its group, and the (ticks, wall clock) pair
  // of its first source, through which every source of that host maps its
  // ticks: they read one counter, so they must compare by it. Each
  // process's own pair was read at another moment, its two clocks perhaps
  // microseconds apart (milliseconds in an emulated guest), which would
  // misplace one process's ticks against another's.
  struct Domain {
    uint32_t group;
    const Clock* ref;
  };
  std::map<uint64_t, Domain> domains;
  for (const Source& src : h_.sources)
    domains.emplace(src.clock.domain, Domain{static_cast<uint32_t>(domains.size()), &src.clock});
  raw_ticks_ = domains.size() == 1;
  // Across hosts, ticks compare through the wall clocks, and only beyond
  // their bound of disagreement; without one, not at all.
  const bool across = !raw_ticks_ && o_.clock_skew_ns > 0;
  margin_ = across ? o_.clock_skew_ns : 0;
  for (const Source& src : h_.sources) {
    const Domain& d = domains[src.clock.domain];
    source_time_[uint32_t{src.node} << 10 | src.worker] =
        SourceTime{across ? 0 : d.group, d.ref->tsc, d.ref->unix_ns, d.ref->tsc_hz};
  }
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

}  // namespace rdtx::history::detail
