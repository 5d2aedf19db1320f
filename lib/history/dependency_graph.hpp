// DependencyGraph: the direct serialization graph of a history (Adya): one
// node per transaction attempt, one edge per dependency, with its kind
//   ww  T1 installed a version, T2 installed the next one
//   wr  T2 read the version T1 installed
//   rw  T1 read a version, T2 installed the next one (anti-dependency)
//   rt  real-time order: T1 committed before T2 began (strict
//       serializability; the checker adds these through a chain of
//       auxiliary nodes, so that they cost O(n), not O(n^2))
// and the access it came from. Stored as compressed adjacency arrays so that
// graphs of tens of millions of edges fit and traverse quickly.
//
// Strongly connected components are found with an iterative Tarjan (no
// recursion, so a long dependency chain cannot overflow the stack), over any
// subset of the edge kinds and optionally only inside the components of a
// coarser pass. CycleSearch finds a shortest cycle through an edge of given
// kinds by breadth-first search inside one component.
// Thread-safety: a DependencyGraph is immutable after construction and its
// const methods may run concurrently; a CycleSearch has one user.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace rdtx::history {

enum class EdgeKind : uint8_t { kWW = 0, kWR = 1, kRW = 2, kRT = 3 };
const char* to_string(EdgeKind k);  // "ww", "wr", "rw", "rt"

// Sets of edge kinds.
inline constexpr uint8_t kind_bit(EdgeKind k) { return static_cast<uint8_t>(1u << static_cast<unsigned>(k)); }
inline constexpr uint8_t kWWOnly = kind_bit(EdgeKind::kWW);
inline constexpr uint8_t kDepKinds = kind_bit(EdgeKind::kWW) | kind_bit(EdgeKind::kWR);
inline constexpr uint8_t kAllKinds = kDepKinds | kind_bit(EdgeKind::kRW);  // the dependencies
inline constexpr uint8_t kRealTimeKinds = kAllKinds | kind_bit(EdgeKind::kRT);

struct Edge {
  uint32_t src;
  uint32_t dst;
  uint32_t tag;  // access index << 2 | kind

  static Edge make(uint32_t src, uint32_t dst, EdgeKind k, uint32_t access) {
    return {src, dst, access << 2 | static_cast<uint32_t>(k)};
  }
  EdgeKind kind() const { return static_cast<EdgeKind>(tag & 3); }
  uint32_t access() const { return tag >> 2; }
};

// The strongly connected components of one pass.
struct Components {
  std::vector<uint32_t> id;            // per node
  std::vector<uint32_t> cyclic;        // ids of the components of more than one node
  std::vector<uint32_t> member_begin;  // per cyclic component (index into members), plus an end
  std::vector<uint32_t> members;       // nodes of the cyclic components, grouped
  std::vector<uint32_t> cyclic_index;  // per component id: its index in `cyclic`, or UINT32_MAX

  std::span<const uint32_t> members_of(size_t cyclic_i) const {
    return {members.data() + member_begin[cyclic_i], member_begin[cyclic_i + 1] - member_begin[cyclic_i]};
  }
  bool is_cyclic(uint32_t node) const { return cyclic_index[id[node]] != UINT32_MAX; }
};

// A cycle: edge i goes from node i to node i + 1 (the last back to the
// first). CycleSearch starts it at its lowest node.
struct Cycle {
  std::vector<uint32_t> nodes;
  std::vector<Edge> edges;
  bool exact = true;  // false: the search budget ran out; shortest of those searched
};

class DependencyGraph {
 public:
  // Takes the edges (any order; self-loops must have been left out).
  DependencyGraph(uint32_t nodes, std::vector<Edge> edges);

  uint32_t nodes() const { return static_cast<uint32_t>(begin_.size() - 1); }
  uint64_t edges() const { return adj_.size(); }
  std::span<const Edge> out(uint32_t u) const { return {adj_.data() + begin_[u], begin_[u + 1] - begin_[u]}; }

  // The components of the subgraph made of the edges whose kind is in
  // `kinds` and, if `within` is given, whose ends are in the same component
  // of `within` (a finer pass inside a coarser one).
  Components components(uint8_t kinds, const Components* within) const;

 private:
  std::vector<uint64_t> begin_;  // per node, plus an end
  std::vector<Edge> adj_;        // sorted by src
};

class CycleSearch {
 public:
  // `stop` (may be empty) is polled every 2^20 edge visits: once true, the
  // search ends as if out of budget, and stopped() says so.
  explicit CycleSearch(const DependencyGraph& g, std::function<bool()> stop = {});

  // A shortest cycle, inside cyclic component `cyclic_i` of `comps`, that
  // contains an edge of `seed_kinds` and otherwise follows edges of
  // `path_kinds`; nullopt if there is none. One breadth-first search runs
  // per distinct target of such an edge; each edge visit costs one unit of
  // `budget`, except in the first search, which always completes. When the
  // budget runs out, the best cycle so far is returned with exact = false,
  // and *exhausted is set (so nullopt then means "none found", not "none").
  // Among parallel edges the weakest kind is shown (ww, then wr, then rw).
  std::optional<Cycle> shortest(const Components& comps, size_t cyclic_i, uint8_t seed_kinds, uint8_t path_kinds,
                                uint64_t& budget, bool* exhausted);
  bool stopped() const { return stopped_; }

 private:
  Edge weakest_edge(uint32_t from, uint32_t to, uint8_t kinds) const;

  const DependencyGraph& g_;
  // Per node, valid where the stamp equals epoch_: reused across searches so
  // that many small components cost nothing per node of the whole graph.
  std::vector<uint32_t> stamp_, target_stamp_, dist_;
  std::vector<Edge> parent_;
  uint32_t epoch_ = 0;
  std::function<bool()> stop_;
  uint64_t visits_ = 0;
  bool stopped_ = false;
};

}  // namespace rdtx::history
