#include "random_history.hpp"

#include <algorithm>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "history/txn_trace.hpp"

namespace rdtx::history::test {

History random_serial_history(const RandomHistoryOptions& o) {
  std::mt19937_64 rng(o.seed);
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };

  History h;
  for (uint32_t t = 0; t < o.tables; ++t) h.names.tables.push_back("t" + std::to_string(t));
  h.names.types = {"NewOrder", "Payment", "Audit"};
  h.names.abort_reasons = {"conflict", "user"};
  h.run_id = o.seed;
  h.cluster_nodes = o.nodes;
  for (uint16_t n = 0; n < o.nodes; ++n)
    for (uint16_t w = 0; w < o.workers; ++w) {
      Source s;
      s.node = n;
      s.worker = w;
      s.node_workers = o.workers;
      s.aborts_recorded = true;
      h.sources.push_back(s);
    }
  h.reserve(o.txns, uint64_t{o.txns} * o.accesses);

  const uint64_t all_keys = uint64_t{o.tables} * o.keys;
  std::vector<Version> current(all_keys, kInitialVersion);
  std::vector<uint32_t> next_seq(size_t{o.nodes} * o.workers * o.coroutines, 1);
  std::vector<uint64_t> keys;
  TxnTrace trace(o.accesses);
  for (uint32_t i = 0; i < o.txns; ++i) {
    const uint16_t node = static_cast<uint16_t>(pick(o.nodes));
    const uint32_t worker = static_cast<uint32_t>(pick(o.workers));
    const uint32_t coroutine = static_cast<uint32_t>(pick(o.coroutines));
    uint32_t& seq = next_seq[(size_t{node} * o.workers + worker) * o.coroutines + coroutine];
    const TxnId id = make_txn_id(node, worker, coroutine, seq++);
    const bool aborts = chance(o.aborts);
    const bool read_only = chance(o.read_only);
    // Serial timestamps: attempt i runs alone in [2i+1, 2i+2].
    trace.begin(id, static_cast<uint16_t>(pick(h.names.types.size())), o.timestamps ? 2 * uint64_t{i} + 1 : 0);

    keys.clear();
    while (keys.size() < std::min<uint64_t>(o.accesses, all_keys)) {
      const uint64_t k = pick(all_keys);
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
    for (uint64_t k : keys) {
      const uint32_t table = static_cast<uint32_t>(k / o.keys);
      const uint64_t key = k % o.keys;
      const Version now = current[k];
      if (read_only || !chance(o.writes)) {
        trace.read(table, key, now);
        continue;
      }
      if (chance(o.blind))
        trace.write(table, key, now);
      else
        trace.read_modify_write(table, key, now, now);
      // An aborted attempt's writes are never installed: nobody sees them.
      if (!aborts) current[k] = {id, 0};
    }
    TxnRecord r = trace.record();
    r.outcome = static_cast<uint8_t>(aborts ? Outcome::kAborted : Outcome::kCommitted);
    r.abort_reason = aborts ? static_cast<uint16_t>(pick(2)) : 0;
    r.commit_ts = o.timestamps && !aborts ? 2 * uint64_t{i} + 2 : 0;
    h.add(r, trace.accesses());
  }
  for (size_t i = 0; i < h.size(); ++i) ++h.sources[txn_node(h.txn(i).id) * o.workers + txn_worker(h.txn(i).id)].txns;
  return h;
}

namespace {

std::unordered_map<TxnId, size_t> index_by_id(const History& h) {
  std::unordered_map<TxnId, size_t> m;
  for (size_t i = 0; i < h.size(); ++i) m[h.txn(i).id] = i;
  return m;
}

const AccessRecord* write_of(const History& h, size_t txn, uint32_t table, uint64_t key) {
  for (const AccessRecord& a : h.accesses(txn))
    if (a.writes() && a.table == table && a.key == key) return &a;
  return nullptr;
}

}  // namespace

std::optional<std::pair<TxnId, TxnId>> plant_lost_update(History& h, uint64_t seed) {
  const auto by_id = index_by_id(h);
  struct Candidate {
    size_t txn, access;
    Version before;
  };
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < h.size(); ++i) {
    if (!h.txn(i).committed()) continue;
    std::span<const AccessRecord> acc = h.accesses(i);
    for (size_t j = 0; j < acc.size(); ++j) {
      const AccessRecord& a = acc[j];
      if (!a.writes() || !a.reads() || a.replaced_txn == kInitialTxn) continue;
      const AccessRecord* w = write_of(h, by_id.at(a.replaced_txn), a.table, a.key);
      candidates.push_back({i, j, w->replaced_version()});
    }
  }
  if (candidates.empty()) return std::nullopt;
  const Candidate& c = candidates[seed % candidates.size()];
  AccessRecord& a = h.mutable_accesses(c.txn)[c.access];
  a.read_txn = c.before.txn;
  a.read_seq = c.before.seq;
  return std::pair{h.txn(c.txn).id, a.replaced_txn};
}

std::optional<std::pair<TxnId, TxnId>> plant_future_read(History& h, uint64_t seed) {
  const auto by_id = index_by_id(h);
  struct Candidate {
    size_t a, a_read, b;
    const AccessRecord* b_write;
  };
  std::vector<Candidate> candidates;
  for (size_t b = 0; b < h.size(); ++b) {
    if (!h.txn(b).committed()) continue;
    for (const AccessRecord& r : h.accesses(b)) {
      if (!r.reads() || r.read_txn == kInitialTxn) continue;
      const size_t a = by_id.at(r.read_txn);
      std::span<const AccessRecord> a_acc = h.accesses(a);
      for (const AccessRecord& w : h.accesses(b)) {
        if (!w.writes()) continue;
        const bool a_touches = std::any_of(a_acc.begin(), a_acc.end(),
                                           [&](const AccessRecord& x) { return x.table == w.table && x.key == w.key; });
        if (a_touches) continue;
        for (size_t j = 0; j < a_acc.size(); ++j)
          if (!a_acc[j].writes()) candidates.push_back({a, j, b, &w});
      }
    }
  }
  if (candidates.empty()) return std::nullopt;
  const Candidate& c = candidates[seed % candidates.size()];
  AccessRecord& r = h.mutable_accesses(c.a)[c.a_read];
  r.table = c.b_write->table;
  r.key = c.b_write->key;
  r.read_txn = h.txn(c.b).id;
  r.read_seq = c.b_write->write_seq;
  return std::pair{h.txn(c.a).id, h.txn(c.b).id};
}

}  // namespace rdtx::history::test
