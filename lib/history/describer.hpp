// Describer: how the checker names transactions, versions, keys and edges in
// its reports, so that a person can follow an anomaly back to the workload:
//   T(n1.w0.c3#17 'Amalgamate')   a transaction: node, worker, coroutine,
//                                 sequence, and its type's name
//   v=n0.w1.c0#9                  a version: the id of its writer; ":2" is
//                                 appended for the writer's write 2 of the
//                                 key; v=init is the initially loaded data
//   checking[42]                  a key: table name [key]
// and a cycle as one line per edge:
//   T(a) --rw checking[42]: read v=init, replaced by v=n0.w0.c2#6--> T(b)
// Internal to the checker.
// Thread-safety: const methods only; reads the History.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "history/checker.hpp"
#include "history/dependency_graph.hpp"
#include "history/history.hpp"
#include "history/txn_index.hpp"

namespace rdtx::history {

class Describer {
 public:
  Describer(const History& h, const TxnIndex& txn_index) : h_(h), index_(txn_index) {}

  std::string txn(TxnId id) const;
  std::string version(Version v) const;
  std::string key(uint32_t table, uint64_t key) const;
  std::string key_of(const AccessRecord& a) const { return key(a.table, a.key); }

  // The structured form of graph edge e (whose access is a global access
  // index) and its text between the arrows ("rw checking[42]: read v=...").
  CycleEdge edge(const Edge& e) const;
  std::string edge_text(const CycleEdge& e) const;
  // A cycle finding: a header line ("G2-item (write skew): a cycle of 2
  // transactions"), then one line per edge.
  Finding cycle(Anomaly kind, const Cycle& c, uint64_t component_size) const;

  // For rt edges: how long (ns) before attempt dst began attempt src
  // committed (the checker's timeline).
  std::function<double(uint32_t src, uint32_t dst)> real_time_gap_ns;

 private:
  TxnId id_at(uint32_t idx) const { return h_.txn(idx).id; }

  const History& h_;
  const TxnIndex& index_;
};

// "write skew", "lost update", "G-single" or "" for a G2-item cycle.
std::string classify_g2(const std::vector<CycleEdge>& edges);

}  // namespace rdtx::history
