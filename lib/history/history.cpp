#include "history/history.hpp"

#include <algorithm>
#include <set>
#include <sys/mman.h>
#include <utility>

namespace rdtx::history {

Result<void> History::add_source(const Source& src, uint64_t src_run_id, uint16_t src_cluster_nodes,
                                 const NameTables& src_names) {
  const char* where = src.path.empty() ? "recorder" : src.path.c_str();
  if (src.node_workers > kMaxWorkers || src.worker >= kMaxWorkers)
    return make_error(EINVAL, "%s: worker %u of %u is past the limit of %u workers per node", where, src.worker,
                      src.node_workers, kMaxWorkers);
  if (src.node_workers != 0 && src.worker >= src.node_workers)
    return make_error(EINVAL, "%s: worker %u, but node %u has %u workers", where, src.worker, src.node,
                      src.node_workers);
  if (src_cluster_nodes != 0 && src.node >= src_cluster_nodes)
    return make_error(EINVAL, "%s: node %u, but the run has %u nodes", where, src.node, src_cluster_nodes);
  if (!sources.empty()) {
    const Source& first = sources.front();
    const char* first_where = first.path.empty() ? "recorder" : first.path.c_str();
    if (src_run_id != run_id)
      return make_error(EINVAL, "%s: run id %#llx differs from %s (%#llx): files of different runs", where,
                        static_cast<unsigned long long>(src_run_id), first_where,
                        static_cast<unsigned long long>(run_id));
    if (src_cluster_nodes != cluster_nodes)
      return make_error(EINVAL, "%s: %u nodes, but %s says %u", where, src_cluster_nodes, first_where, cluster_nodes);
    if (!(src_names == names))
      return make_error(EINVAL, "%s: table, type or abort reason names differ from %s", where, first_where);
    if (src.timestamp_order != first.timestamp_order)
      return make_error(EINVAL, "%s: %s timestamp order, but %s %s", where,
                        src.timestamp_order ? "promises" : "does not promise", first_where,
                        first.timestamp_order ? "does" : "does not");
    if (src.snapshot_vectors != first.snapshot_vectors)
      return make_error(EINVAL, "%s: %s snapshot vectors, but %s %s", where,
                        src.snapshot_vectors ? "records" : "does not record", first_where,
                        first.snapshot_vectors ? "does" : "does not");
    if (src.clock.recorded() != first.clock.recorded())
      return make_error(EINVAL, "%s: %s real time, but %s %s", where, src.clock.recorded() ? "records" : "does not record",
                        first_where, first.clock.recorded() ? "does" : "does not");
    for (const Source& s : sources) {
      const char* other = s.path.empty() ? "a recorder" : s.path.c_str();
      if (s.node == src.node && s.worker == src.worker)
        return make_error(EINVAL, "%s: a second history of n%u.w%u (the first is %s)", where, src.node, src.worker,
                          other);
      if (s.node == src.node && s.node_workers != src.node_workers)
        return make_error(EINVAL, "%s: node %u has %u workers, but %s says %u", where, src.node, src.node_workers,
                          other, s.node_workers);
    }
  } else {
    run_id = src_run_id;
    cluster_nodes = src_cluster_nodes;
    names = src_names;
  }
  sources.push_back(src);
  return {};
}

Result<void> History::check_complete() const {
  if (cluster_nodes == 0) return {};
  std::set<std::pair<uint16_t, uint16_t>> have;
  std::vector<uint16_t> workers(cluster_nodes, 0);
  std::vector<bool> node_seen(cluster_nodes, false);
  for (const Source& s : sources) {
    have.insert({s.node, s.worker});
    node_seen[s.node] = true;
    workers[s.node] = s.node_workers;
  }
  for (uint16_t n = 0; n < cluster_nodes; ++n) {
    if (!node_seen[n])
      return make_error(ENOENT, "incomplete history: no file of node %u (the run has %u nodes)", n, cluster_nodes);
    for (uint16_t w = 0; w < workers[n]; ++w)
      if (!have.count({n, w}))
        return make_error(ENOENT, "incomplete history: no file of n%u.w%u (node %u has %u workers)", n, w, n,
                          workers[n]);
  }
  return {};
}

bool History::truncated() const {
  return std::any_of(sources.begin(), sources.end(), [](const Source& s) { return s.truncated; });
}

void History::add(const TxnRecord& t, std::span<const AccessRecord> accesses, std::span<const uint64_t> snapshot) {
  TxnRecord r = t;
  r.access_count = static_cast<uint32_t>(accesses.size());
  r.snapshot_words = static_cast<uint16_t>(snapshot.size());
  std::span<AccessRecord> dst = add_uninitialized(r);
  std::copy(accesses.begin(), accesses.end(), dst.begin());
  std::copy(snapshot.begin(), snapshot.end(), snap_.end() - static_cast<ptrdiff_t>(snapshot.size()));
}

std::span<AccessRecord> History::add_uninitialized(const TxnRecord& t) {
  first_.push_back(acc_.size());
  snap_first_.push_back(snap_.size());
  txns_.push_back(t);
  acc_.resize(acc_.size() + t.access_count, AccessRecord{});
  snap_.resize(snap_.size() + t.snapshot_words, 0);
  return {acc_.data() + first_.back(), t.access_count};
}

void advise_huge_pages(const void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
}

void History::append_uninitialized(size_t txns, size_t accesses, size_t snapshot_words) {
  txns_.resize(txns_.size() + txns);
  first_.resize(first_.size() + txns);
  acc_.resize(acc_.size() + accesses);
  snap_first_.resize(snap_first_.size() + txns);
  snap_.resize(snap_.size() + snapshot_words);
}

void History::reserve(size_t txns, size_t accesses) {
  txns_.reserve(txns);
  first_.reserve(txns);
  snap_first_.reserve(txns);
  acc_.reserve(accesses);
}

}  // namespace rdtx::history
