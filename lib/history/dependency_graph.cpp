#include "history/dependency_graph.hpp"

#include <algorithm>
#include <utility>

namespace rdtx::history {

namespace {
constexpr uint32_t kNone = UINT32_MAX;

bool has_kind(uint8_t kinds, EdgeKind k) { return (kinds & kind_bit(k)) != 0; }
}  // namespace

const char* to_string(EdgeKind k) {
  switch (k) {
    case EdgeKind::kWW:
      return "ww";
    case EdgeKind::kWR:
      return "wr";
    case EdgeKind::kRW:
      return "rw";
    case EdgeKind::kRT:
      return "rt";
  }
  return "?";
}

DependencyGraph::DependencyGraph(uint32_t nodes, std::vector<Edge> edges) : begin_(size_t{nodes} + 1, 0) {
  // Counting sort by source: linear, and keeps each node's edges in the
  // order they were found, so reports are deterministic.
  for (const Edge& e : edges) ++begin_[e.src + 1];
  for (uint32_t u = 0; u < nodes; ++u) begin_[u + 1] += begin_[u];
  adj_.resize(edges.size());
  std::vector<uint64_t> next(begin_.begin(), begin_.end() - 1);
  for (const Edge& e : edges) adj_[next[e.src]++] = e;
}

Components DependencyGraph::components(uint8_t kinds, const Components* within) const {
  const uint32_t n = nodes();
  Components c;
  c.id.assign(n, kNone);
  std::vector<uint32_t> index(n, kNone), low(n, 0), comp_size;
  std::vector<uint8_t> on_stack(n, 0);
  std::vector<uint32_t> stack;
  struct Frame {
    uint32_t node;
    uint64_t pos;  // the next of node's edges to look at
  };
  std::vector<Frame> frames;
  uint32_t next_index = 0;

  auto visit = [&](uint32_t v) {
    index[v] = low[v] = next_index++;
    stack.push_back(v);
    on_stack[v] = 1;
    frames.push_back({v, begin_[v]});
  };
  for (uint32_t s = 0; s < n; ++s) {
    if (index[s] != kNone) continue;
    if (within && !within->is_cyclic(s)) {
      // Alone in the coarser pass, so alone here too.
      index[s] = next_index++;
      c.id[s] = static_cast<uint32_t>(comp_size.size());
      comp_size.push_back(1);
      continue;
    }
    visit(s);
    while (!frames.empty()) {
      Frame& f = frames.back();
      const uint32_t u = f.node;
      if (f.pos < begin_[u + 1]) {
        const Edge& e = adj_[f.pos++];
        if (!has_kind(kinds, e.kind())) continue;
        if (within && within->id[e.dst] != within->id[u]) continue;
        if (index[e.dst] == kNone) {
          visit(e.dst);  // invalidates f
        } else if (on_stack[e.dst]) {
          low[u] = std::min(low[u], index[e.dst]);
        }
        continue;
      }
      frames.pop_back();
      if (!frames.empty()) {
        const uint32_t parent = frames.back().node;
        low[parent] = std::min(low[parent], low[u]);
      }
      if (low[u] == index[u]) {
        const uint32_t id = static_cast<uint32_t>(comp_size.size());
        uint32_t size = 0, v;
        do {
          v = stack.back();
          stack.pop_back();
          on_stack[v] = 0;
          c.id[v] = id;
          ++size;
        } while (v != u);
        comp_size.push_back(size);
      }
    }
  }

  c.cyclic_index.assign(comp_size.size(), kNone);
  for (uint32_t id = 0; id < comp_size.size(); ++id)
    if (comp_size[id] > 1) {
      c.cyclic_index[id] = static_cast<uint32_t>(c.cyclic.size());
      c.cyclic.push_back(id);
    }
  c.member_begin.assign(c.cyclic.size() + 1, 0);
  for (size_t i = 0; i < c.cyclic.size(); ++i) c.member_begin[i + 1] = c.member_begin[i] + comp_size[c.cyclic[i]];
  c.members.resize(c.member_begin.back());
  std::vector<uint32_t> fill(c.member_begin.begin(), c.member_begin.end() - 1);
  for (uint32_t v = 0; v < n; ++v)
    if (const uint32_t ci = c.cyclic_index[c.id[v]]; ci != kNone) c.members[fill[ci]++] = v;
  return c;
}

CycleSearch::CycleSearch(const DependencyGraph& g, std::function<bool()> stop)
    : g_(g),
      stamp_(g.nodes(), 0),
      target_stamp_(g.nodes(), 0),
      dist_(g.nodes(), 0),
      parent_(g.nodes()),
      stop_(std::move(stop)) {}

Edge CycleSearch::weakest_edge(uint32_t from, uint32_t to, uint8_t kinds) const {
  Edge best{};
  bool found = false;
  for (const Edge& e : g_.out(from))
    if (e.dst == to && has_kind(kinds, e.kind()) && (!found || e.kind() < best.kind())) {
      best = e;
      found = true;
    }
  return best;
}

std::optional<Cycle> CycleSearch::shortest(const Components& comps, size_t cyclic_i, uint8_t seed_kinds,
                                           uint8_t path_kinds, uint64_t& budget, bool* exhausted) {
  const uint32_t comp = comps.cyclic[cyclic_i];
  struct Seed {
    uint32_t dst, src;
  };
  std::vector<Seed> seeds;
  for (uint32_t u : comps.members_of(cyclic_i))
    for (const Edge& e : g_.out(u))
      if (has_kind(seed_kinds, e.kind()) && comps.id[e.dst] == comp) seeds.push_back({e.dst, u});
  if (seeds.empty()) return std::nullopt;
  std::sort(seeds.begin(), seeds.end(),
            [](const Seed& a, const Seed& b) { return a.dst != b.dst ? a.dst < b.dst : a.src < b.src; });

  std::optional<Cycle> best;
  uint32_t best_len = UINT32_MAX;
  bool first = true, out_of_budget = false;
  std::vector<uint32_t> queue;
  for (size_t gb = 0; gb < seeds.size() && !out_of_budget;) {
    size_t ge = gb;
    while (ge < seeds.size() && seeds[ge].dst == seeds[gb].dst) ++ge;
    const uint32_t v = seeds[gb].dst;
    if (++epoch_ == 0) {  // wrapped: forget all stamps
      std::fill(stamp_.begin(), stamp_.end(), 0);
      std::fill(target_stamp_.begin(), target_stamp_.end(), 0);
      epoch_ = 1;
    }
    for (size_t i = gb; i < ge; ++i) target_stamp_[seeds[i].src] = epoch_;
    gb = ge;

    // Breadth-first from v: the first seed source reached closes the
    // shortest cycle through this group's edges.
    queue.clear();
    queue.push_back(v);
    stamp_[v] = epoch_;
    dist_[v] = 0;
    uint32_t found = kNone;
    for (size_t head = 0; head < queue.size() && found == kNone && !out_of_budget; ++head) {
      const uint32_t x = queue[head];
      if (dist_[x] + 2 >= best_len) break;  // cannot beat the best cycle
      for (const Edge& e : g_.out(x)) {
        if ((++visits_ & 0xfffff) == 0 && stop_ && stop_()) stopped_ = true;
        if (stopped_) {
          out_of_budget = true;
          break;
        }
        if (!first) {
          if (budget == 0) {
            out_of_budget = true;
            break;
          }
          --budget;
        }
        if (!has_kind(path_kinds, e.kind()) || comps.id[e.dst] != comp || stamp_[e.dst] == epoch_) continue;
        stamp_[e.dst] = epoch_;
        dist_[e.dst] = dist_[x] + 1;
        parent_[e.dst] = e;
        queue.push_back(e.dst);
        if (target_stamp_[e.dst] == epoch_) {
          found = e.dst;
          break;
        }
      }
    }
    first = false;
    if (found == kNone) continue;

    // The cycle: found -> v by a seed edge, then the path v -> found.
    Cycle c;
    std::vector<uint32_t> path;  // found, ..., v (backwards)
    for (uint32_t x = found; x != v; x = parent_[x].src) path.push_back(x);
    path.push_back(v);
    c.nodes.push_back(found);
    c.edges.push_back(weakest_edge(found, v, seed_kinds));
    for (size_t i = path.size() - 1; i > 0; --i) {
      c.nodes.push_back(path[i]);
      c.edges.push_back(weakest_edge(path[i], path[i - 1], path_kinds));
    }
    best_len = dist_[found] + 1;
    best = std::move(c);
  }
  if (out_of_budget) {
    if (exhausted) *exhausted = true;
    if (best) best->exact = false;
  }
  if (best) {
    // Start at the attempt loaded first, so the same cycle reads the same
    // whichever edge the search closed it with.
    const auto first_node = std::min_element(best->nodes.begin(), best->nodes.end()) - best->nodes.begin();
    std::rotate(best->nodes.begin(), best->nodes.begin() + first_node, best->nodes.end());
    std::rotate(best->edges.begin(), best->edges.begin() + first_node, best->edges.end());
  }
  return best;
}

}  // namespace rdtx::history
