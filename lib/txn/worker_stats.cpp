#include "txn/worker_stats.hpp"

namespace rdtx::txn {

uint64_t WorkerStats::aborts_total() const {
  uint64_t n = 0;
  for (uint64_t a : aborts) n += a;
  return n;
}

void WorkerStats::merge(const WorkerStats& s) {
  for (const WorkerCounter& c : kWorkerCounters) c.set_bits(*this, c.bits(*this) + c.bits(s));
  for (int r = 0; r < kMaxAbortReasons; ++r) aborts[r] += s.aborts[r];
  if (commits_by_type.size() < s.commits_by_type.size()) commits_by_type.resize(s.commits_by_type.size());
  for (size_t k = 0; k < s.commits_by_type.size(); ++k) commits_by_type[k] += s.commits_by_type[k];
  if (attempts_by_type.size() < s.attempts_by_type.size()) attempts_by_type.resize(s.attempts_by_type.size());
  for (size_t k = 0; k < s.attempts_by_type.size(); ++k) attempts_by_type[k] += s.attempts_by_type[k];
  if (issued_by_type.size() < s.issued_by_type.size()) issued_by_type.resize(s.issued_by_type.size());
  for (size_t k = 0; k < s.issued_by_type.size(); ++k) issued_by_type[k] += s.issued_by_type[k];
  if (latency_by_type.size() < s.latency_by_type.size()) latency_by_type.resize(s.latency_by_type.size());
  for (size_t k = 0; k < s.latency_by_type.size(); ++k) latency_by_type[k].merge(s.latency_by_type[k]);
  latency_tsc.merge(s.latency_tsc);
  for (int p = 0; p < kPhases; ++p) {
    phase_tsc[p].merge(s.phase_tsc[p]);
    phase_sum_tsc[p] += s.phase_sum_tsc[p];
  }
  // (Every worker of a run has the same bins.)
  if (!s.timeline.empty()) timeline_bin_ms = s.timeline_bin_ms;
  if (timeline.size() < s.timeline.size()) timeline.resize(s.timeline.size());
  for (size_t k = 0; k < s.timeline.size(); ++k) timeline[k] += s.timeline[k];
  net_committed.add(s.net_committed);
  net_all.add(s.net_all);
}

}  // namespace rdtx::txn
