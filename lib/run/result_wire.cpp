#include "run/result_wire.hpp"

#include "txn/replication.hpp"

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

namespace rdtx::run {

using Writer = cluster::WireWriter;
using Reader = cluster::WireReader;

void put_worker_stats(Writer& w, const txn::WorkerStats& s) {
  w.put<uint64_t>(txn::kWorkerCounterCount);
  for (const txn::WorkerCounter& c : txn::kWorkerCounters) w.put(c.bits(s));
  w.put(s.aborts);
  w.put_vector(s.commits_by_type);
  w.put_vector(s.attempts_by_type);
  w.put_vector(s.issued_by_type);
  w.put_vector(s.latency_by_type);
  w.put(s.latency_tsc);
  w.put(s.phase_tsc);
  w.put(s.phase_sum_tsc);
  w.put(s.net_committed);
  w.put(s.net_all);
  w.put(s.timeline_bin_ms);
  w.put_vector(s.timeline);
}

bool get_worker_stats(Reader& r, txn::WorkerStats* s) {
  uint64_t counters = 0;
  if (!r.get(&counters) || counters != txn::kWorkerCounterCount) return false;
  for (const txn::WorkerCounter& c : txn::kWorkerCounters) {
    uint64_t v = 0;
    if (!r.get(&v)) return false;
    c.set_bits(*s, v);
  }
  return r.get(&s->aborts) && r.get_vector(&s->commits_by_type) && r.get_vector(&s->attempts_by_type) &&
         r.get_vector(&s->issued_by_type) &&
         r.get_vector(&s->latency_by_type) && r.get(&s->latency_tsc) && r.get(&s->phase_tsc) &&
         r.get(&s->phase_sum_tsc) && r.get(&s->net_committed) && r.get(&s->net_all) &&
         r.get(&s->timeline_bin_ms) && r.get_vector(&s->timeline, txn::WorkerStats::kMaxTimelineBins + 1);
}

namespace {

// The nodes of `mask` (Bootstrap::excluded()) added to `removed`, sorted.
void add_removed(std::vector<uint32_t>& removed, uint64_t mask) {
  for (uint32_t n = 0; n < 64; ++n)
    if ((mask >> n & 1) && std::find(removed.begin(), removed.end(), n) == removed.end()) removed.push_back(n);
  std::sort(removed.begin(), removed.end());
}

std::string node_list(const std::vector<uint32_t>& nodes) {
  std::string s;
  for (size_t k = 0; k < nodes.size(); ++k)
    s += (k == 0 ? "" : k + 1 == nodes.size() ? " and " : ", ") + std::to_string(nodes[k]);
  return (nodes.size() == 1 ? "node " : "nodes ") + s;
}

}  // namespace

std::string removed_text(const std::vector<uint32_t>& removed) {
  return removed.empty() ? std::string() : node_list(removed);
}

Result<void> exchange_results(cluster::Bootstrap& boot, txn::Database& db, const txn::Workload& wl, RunResult& res) {
  const uint32_t self = boot.self();
  // Nodes removed during the run (Bootstrap::exclude()): node 0 leaves their
  // slots empty in every result, which is what every node goes by (node 0
  // decides the collectives); what this node excluded itself is added.
  add_removed(res.removed, boot.excluded());
  // A compute node holds no partition: its share is 0.
  Result<int64_t> part = int64_t{0};
  if (db.holds_data(self)) part = wl.check_node(db, self);
  Writer cw;
  cw.put<int64_t>(part.ok() ? *part : 0);
  cw.put<int64_t>(res.total.committed_delta);
  cw.put<uint64_t>(res.locks_left);
  cw.put<uint64_t>(res.tasks_left);
  std::string err = part.ok() ? "" : part.error().message;
  std::vector<char> err_bytes(err.begin(), err.end());
  cw.put_vector(err_bytes);
  cw.put_vector(txn::replica_digests(db));
  auto checks = boot.all_gather(cw.view(), "checks");
  if (!checks.ok()) return checks.error();
  int64_t sum = 0, delta = 0;
  uint64_t locks = 0, tasks = 0;
  std::string first_error;
  std::vector<txn::ReplicaDigest> digests;
  std::vector<uint32_t> without_share;  // removed nodes that held data: their share is missing
  bool coordinator_removed = false;      // a removed node's committed deltas are missing
  for (uint32_t n = 0; n < checks->size(); ++n) {
    // A removed node's slot is empty (a node's checks never are).
    if ((*checks)[n].empty()) {
      add_removed(res.removed, uint64_t{1} << n);
      if (db.holds_data(n))
        without_share.push_back(n);
      else
        coordinator_removed = true;
      continue;
    }
    Reader r((*checks)[n]);
    int64_t s = 0, d = 0;
    uint64_t l = 0, tl = 0;
    std::vector<char> e;
    std::vector<txn::ReplicaDigest> dg;
    if (!r.get(&s) || !r.get(&d) || !r.get(&l) || !r.get(&tl) || !r.get_vector(&e) || !r.get_vector(&dg) ||
        !r.done())
      return make_error(EPROTO, "node %u sent malformed checks", n);
    digests.insert(digests.end(), dg.begin(), dg.end());
    sum = txn::Workload::add_shares(sum, s);
    delta += d;
    locks += l;
    tasks += tl;
    if (!e.empty() && first_error.empty())
      first_error = "node " + std::to_string(n) + ": " + std::string(e.begin(), e.end());
  }
  res.locks_left = locks;
  res.tasks_left = tasks;
  if (!without_share.empty()) {
    // A removed node that held data took its partition (and its copies of
    // others) with it: nothing proves the data whole. A compute node, which
    // holds none, leaves the survivors every share and digest.
    const std::string who = node_list(without_share);
    res.invariants = make_error(EIO, "%s held data and %s removed during the run: %s share of the invariant went "
                                     "with %s", who.c_str(), without_share.size() == 1 ? "was" : "were",
                                without_share.size() == 1 ? "its" : "their",
                                without_share.size() == 1 ? "it" : "them");
    res.replicas_equal = db.replicas() <= 1
                             ? Result<void>()
                             : Result<void>(make_error(EIO, "not compared: %s held copies and %s removed during the "
                                                            "run", who.c_str(),
                                                       without_share.size() == 1 ? "was" : "were"));
  } else {
    res.replicas_equal = txn::compare_replicas(db, digests);
    res.invariants = first_error.empty() ? wl.check_total(sum, db.data_nodes(), delta)
                                         : Result<void>(make_error(EIO, "%s", first_error.c_str()));
    // The sum is every partition's, but the committed deltas are the
    // survivors': those of the transactions a removed coordinator committed
    // went with it. A sum that matches proves the data (a workload whose
    // check ignores the deltas, TPC-C's, or a removed node that committed
    // none); one that does not may be off by exactly those: not checked.
    if (!res.invariants.ok() && first_error.empty() && coordinator_removed) {
      const bool one = res.removed.size() == 1;
      res.invariants = make_error(ENODATA,
                                  "%s %s removed during the run, and the deltas of the transactions %s committed "
                                  "went with %s (the survivors' check: %s)",
                                  removed_text(res.removed).c_str(), one ? "was" : "were", one ? "it" : "they",
                                  one ? "it" : "them", res.invariants.error().message.c_str());
    }
  }
  // Figures: node 0 gathers the others'.
  Writer w;
  w.put<uint64_t>(res.per_worker.size());
  for (const txn::WorkerStats& s : res.per_worker) put_worker_stats(w, s);
  w.put(res.rpc_malformed);
  w.put(res.rpc_timeouts);
  w.put(res.rpc_passive_timeouts);
  w.put(res.rpc_passive_failures);
  w.put(res.rpc_timeout_settled_ns);
  w.put(res.rpc_timeout_max_ns);
  w.put(res.rpc_longest_reply_ns);
  w.put(res.cache);
  w.put<uint8_t>(res.nic_model ? 1 : 0);
  w.put(res.nic_stale);
  w.put(res.nic_overflow);
  // Every node runs as many workers as this one: a removed node's stand
  // empty below, so that per_worker stays indexed by node (worker / per node).
  const size_t workers_per_node = res.per_worker.size();
  auto all = boot.gather(w.view(), "results");
  if (!all.ok()) return all.error();
  res.aggregate = self == 0;
  if (self != 0) return {};
  res.per_worker.clear();
  res.total = txn::WorkerStats{};
  res.rpc_malformed = res.rpc_timeouts = res.rpc_passive_timeouts = res.rpc_passive_failures = 0;
  res.rpc_timeout_settled_ns = res.rpc_timeout_max_ns = res.rpc_longest_reply_ns = 0;
  res.cache = {};
  res.nic_model = false;
  res.nic_stale = res.nic_overflow = 0;
  for (uint32_t n = 0; n < all->size(); ++n) {
    // A removed node's figures (up to its removal) went with it; an empty
    // slot is one (a node's results never are), also one node 0 excluded
    // after the checks.
    if ((*all)[n].empty() && (n < 64 && (boot.excluded() >> n & 1))) {
      add_removed(res.removed, uint64_t{1} << n);
      res.per_worker.resize(res.per_worker.size() + workers_per_node);
      continue;
    }
    Reader r((*all)[n]);
    uint64_t workers = 0;
    if (!r.get(&workers) || workers > 4096) return make_error(EPROTO, "node %u sent malformed results", n);
    for (uint64_t k = 0; k < workers; ++k) {
      txn::WorkerStats s;
      if (!get_worker_stats(r, &s))
        return make_error(EPROTO, "node %u sent malformed results (worker %llu)", n,
                          static_cast<unsigned long long>(k));
      res.total.merge(s);
      res.per_worker.push_back(std::move(s));
    }
    uint64_t malformed = 0, timeouts = 0, passive_timeouts = 0, passive_failures = 0;
    uint64_t timeout_settled = 0, timeout_max = 0, longest_reply = 0;
    store::LocationCacheStats cache;
    uint8_t nic_model = 0;
    uint64_t nic_stale = 0, nic_overflow = 0;
    if (!r.get(&malformed) || !r.get(&timeouts) || !r.get(&passive_timeouts) || !r.get(&passive_failures) ||
        !r.get(&timeout_settled) || !r.get(&timeout_max) || !r.get(&longest_reply) ||
        !r.get(&cache) || !r.get(&nic_model) || !r.get(&nic_stale) || !r.get(&nic_overflow) ||
        !r.done())
      return make_error(EPROTO, "node %u sent malformed results", n);
    res.nic_model = res.nic_model || nic_model != 0;
    res.nic_stale += nic_stale;
    res.nic_overflow += nic_overflow;
    res.rpc_malformed += malformed;
    res.rpc_timeouts += timeouts;
    res.rpc_passive_timeouts += passive_timeouts;
    res.rpc_passive_failures += passive_failures;
    res.rpc_timeout_settled_ns = std::max(res.rpc_timeout_settled_ns, timeout_settled);
    res.rpc_timeout_max_ns = std::max(res.rpc_timeout_max_ns, timeout_max);
    res.rpc_longest_reply_ns = std::max(res.rpc_longest_reply_ns, longest_reply);
    res.cache.hits += cache.hits;
    res.cache.misses += cache.misses;
    res.cache.stale += cache.stale;
  }
  return {};
}

}  // namespace rdtx::run
