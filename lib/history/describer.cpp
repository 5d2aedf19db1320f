#include "history/describer.hpp"

#include <cstdio>

namespace rdtx::history {

namespace {
// A cycle longer than this is shown by its first and last edges.
constexpr size_t kMaxCycleLines = 40;

std::string id_text(TxnId id) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "n%u.w%u.c%u#%u", txn_node(id), txn_worker(id), txn_coroutine(id), txn_seq(id));
  return buf;
}
}  // namespace

std::string Describer::txn(TxnId id) const {
  const uint32_t i = index_.find(id);
  if (i == TxnIndex::kNone) return "T(" + id_text(id) + ", not in the history)";
  return "T(" + id_text(id) + " '" + h_.names.type(h_.txn(i).type) + "')";
}

std::string Describer::version(Version v) const {
  std::string s = v.txn == kInitialTxn ? "init" : id_text(v.txn);
  if (v.seq != 0) s += ":" + std::to_string(v.seq);
  return s;
}

std::string Describer::key(uint32_t table, uint64_t key) const {
  return h_.names.table(table) + "[" + std::to_string(key) + "]";
}

CycleEdge Describer::edge(const Edge& e) const {
  if (e.kind() == EdgeKind::kRT) {
    CycleEdge c{EdgeKind::kRT, 0, 0, {}, {}};
    if (real_time_gap_ns) c.gap_ns = static_cast<uint64_t>(real_time_gap_ns(e.src, e.dst));
    return c;
  }
  const AccessRecord& a = h_.all_accesses()[e.access()];
  CycleEdge c{e.kind(), a.table, a.key, {}, {}};
  switch (e.kind()) {
    case EdgeKind::kWW:  // a is the target's write
      c.seen = a.replaced_version();
      c.installed = {id_at(e.dst), a.write_seq};
      break;
    case EdgeKind::kWR:  // a is the target's read
      c.seen = c.installed = a.read_version();
      break;
    case EdgeKind::kRW:  // a is the source's read; the target replaced what it read
      c.seen = a.read_version();
      c.installed = {id_at(e.dst), 0};
      for (const AccessRecord& w : h_.accesses(e.dst))
        if (w.writes() && w.table == a.table && w.key == a.key && w.replaced_version() == c.seen)
          c.installed.seq = w.write_seq;
      break;
    case EdgeKind::kRT:
      break;
  }
  return c;
}

std::string Describer::edge_text(const CycleEdge& e) const {
  if (e.kind == EdgeKind::kRT) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "rt: committed %.1f us before the next began", static_cast<double>(e.gap_ns) / 1e3);
    return buf;
  }
  const std::string s = std::string(to_string(e.kind)) + " " + key(e.table, e.key) + ": ";
  switch (e.kind) {
    case EdgeKind::kWW:
      return s + "v=" + version(e.seen) + " -> v=" + version(e.installed);
    case EdgeKind::kWR:
      return s + "read v=" + version(e.seen);
    case EdgeKind::kRW:
      return s + "read v=" + version(e.seen) + ", replaced by v=" + version(e.installed);
    case EdgeKind::kRT:
      break;
  }
  return s;
}

std::string classify_g2(const std::vector<CycleEdge>& edges) {
  size_t rw = 0;
  bool one_key = true;
  for (const CycleEdge& e : edges) {
    rw += e.kind == EdgeKind::kRW;
    one_key = one_key && e.table == edges[0].table && e.key == edges[0].key;
  }
  if (edges.size() == 2 && rw == 2 && !one_key) return "write skew";
  if (rw == 1 && one_key) return "lost update";
  if (rw == 1) return "G-single";
  return "";
}

Finding Describer::cycle(Anomaly kind, const Cycle& c, uint64_t component_size) const {
  Finding f;
  f.kind = kind;
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    f.txns.push_back(id_at(c.nodes[i]));
    f.cycle.push_back(edge(c.edges[i]));
  }
  if (kind == Anomaly::kG2Item) f.classification = classify_g2(f.cycle);
  f.text = to_string(kind);
  if (!f.classification.empty()) f.text += " (" + f.classification + ")";
  f.text += ": a cycle of " + std::to_string(c.nodes.size()) + " transactions";
  if (component_size > c.nodes.size())
    f.text += ", in a strongly connected component of " + std::to_string(component_size);
  if (!c.exact) f.text += " (the shortest found within the search budget)";
  const size_t n = c.nodes.size();
  for (size_t i = 0; i < n; ++i) {
    if (n > kMaxCycleLines && i == kMaxCycleLines - 2) {
      f.text += "\n  ... " + std::to_string(n - kMaxCycleLines + 1) + " more edges ...";
      i = n - 2;
      continue;
    }
    f.text += "\n  " + txn(f.txns[i]) + " --" + edge_text(f.cycle[i]) + "--> " + txn(f.txns[(i + 1) % n]);
  }
  return f;
}

}  // namespace rdtx::history
