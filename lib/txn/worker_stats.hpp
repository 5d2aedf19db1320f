// A worker's figures: WorkerStats (what its coordinators count, read after
// the run) and LiveStats (what it publishes for readers on other threads
// while it runs), and the table that describes WorkerStats' scalar counters.
//
// The counter table (kWorkerCounters) is the one place a scalar counter is
// declared: merge(), rdtx-bench's text report, JSON and CSV, the run's
// telemetry (/rdtx/stats) and the encoding between node processes all
// iterate it. Adding a counter is a member of WorkerStats, a line in the
// table, and the increment where it happens. The increment stays a plain
// field increment: nothing on the hot path goes through the table.
//
// Thread-safety: WorkerStats belongs to its worker's thread until the run
// ends; LiveStats reaches other threads only through stats::Published.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <vector>

#include "stats/histogram.hpp"
#include "stats/verbs.hpp"
#include "txn/types.hpp"

namespace rdtx::txn {

// A worker's figures over the measured window (committed_delta: the whole
// run). Merged across workers after the run by adding (merge()).
struct WorkerStats {
  uint64_t commits = 0;
  uint64_t attempts = 0;
  uint64_t aborts[kMaxAbortReasons] = {};
  std::vector<uint64_t> commits_by_type;
  std::vector<uint64_t> attempts_by_type;
  // First attempts per type: the mix as generated, beside the committed mix
  // (a user abort is not retried, so the two differ; SmallBank hstore).
  std::vector<uint64_t> issued_by_type;
  std::vector<stats::Histogram> latency_by_type;  // first attempt start -> commit, per type
  stats::Histogram latency_tsc;                   // first attempt start -> commit
  int64_t committed_delta = 0;                    // workload invariant (SmallBank: money)
  uint64_t commit_errors = 0;                     // commits/releases an owner refused or never answered
  uint64_t commit_retries = 0;                    // commit/release messages sent again (no answer in time)
  uint64_t commit_probes = 0;                     // unsignaled commits confirmed by a READ of their own (no later signaled request)
  uint64_t cancel_failures = 0;                   // attempts that could not be cancelled at an owner
  uint64_t insert_errors = 0;                     // inserts that failed (Txn::insert: full table, duplicate key)
  // A lock table's shard on this worker (protocol 2pl), measured window:
  // lock requests it served, and those that waited (were not granted or
  // refused at once).
  uint64_t lock_requests = 0;
  uint64_t lock_waits = 0;
  // 2PC votes this worker's coordinators ran (protocol 2pl: committing
  // transactions that wrote at more than one shard), measured window.
  uint64_t votes = 0;
  // Replication (replication.hpp): entries and bytes logged by committed
  // transactions (measured window), waits for a full ring, entries a backup
  // refused or that never got an answer, records the appliers installed.
  uint64_t log_entries = 0;
  uint64_t log_bytes = 0;
  uint64_t log_full_waits = 0;
  uint64_t log_errors = 0;
  uint64_t log_applied = 0;
  // The breakdown (options.breakdown): time in each phase of the sampled
  // committed attempts (release: of the sampled aborted attempts), recorded
  // when the phase ran, with its sum for the mean per committed transaction
  // (phase_sum_tsc / sampled_commits).
  stats::Histogram phase_tsc[kPhases];
  uint64_t phase_sum_tsc[kPhases] = {};
  uint64_t sampled_commits = 0, sampled_aborts = 0;
  // Commits per timeline_bin_ms of the measured window, from its start
  // (1 ms unless the window is longer than kMaxTimelineBins ms: the
  // timeline of a recovery experiment, as FaRM and Motor plot it, where a
  // stall or a failure shows as the bins it emptied). Sized before the run
  // (WorkerEngine::set_timeline); a commit past the last bin counts in it.
  static constexpr size_t kMaxTimelineBins = 1'000'000;
  std::vector<uint32_t> timeline;
  uint32_t timeline_bin_ms = 1;
  stats::VerbCounts net_committed;  // verbs, round trips etc. of the committed attempts
  stats::VerbCounts net_all;        // of every attempt: message rates
  uint64_t aborts_total() const;
  void merge(const WorkerStats& o);
};

// One scalar counter of WorkerStats. Every counter merges by adding (a
// counter that needs another rule, a high-water mark say, would add a merge
// kind here). Values travel as 64 raw bits: a signed counter in two's
// complement, so that adding the bits adds the values.
struct WorkerCounter {
  const char* key;                       // JSON, CSV and telemetry: [a-z0-9_], unique
  const char* text;                      // the text report
  uint64_t WorkerStats::*u64 = nullptr;  // the member, unsigned ...
  int64_t WorkerStats::*i64 = nullptr;   // ... or signed

  bool is_signed() const { return i64 != nullptr; }
  int64_t value(const WorkerStats& s) const { return i64 ? s.*i64 : static_cast<int64_t>(s.*u64); }
  uint64_t bits(const WorkerStats& s) const { return i64 ? static_cast<uint64_t>(s.*i64) : s.*u64; }
  void set_bits(WorkerStats& s, uint64_t v) const {
    if (i64)
      s.*i64 = static_cast<int64_t>(v);
    else
      s.*u64 = v;
  }
};

inline constexpr WorkerCounter kWorkerCounters[] = {
    {"commits", "commits", &WorkerStats::commits},
    {"attempts", "attempts", &WorkerStats::attempts},
    {"commit_errors", "commit errors", &WorkerStats::commit_errors},
    {"commit_retries", "commit retries", &WorkerStats::commit_retries},
    {"commit_probes", "commit probes", &WorkerStats::commit_probes},
    {"cancel_failures", "cancels unanswered", &WorkerStats::cancel_failures},
    {"insert_errors", "insert errors", &WorkerStats::insert_errors},
    {"lock_requests", "lock requests served", &WorkerStats::lock_requests},
    {"lock_waits", "lock requests that waited", &WorkerStats::lock_waits},
    {"votes", "2PC votes", &WorkerStats::votes},
    {"log_entries", "log entries", &WorkerStats::log_entries},
    {"log_bytes", "log bytes", &WorkerStats::log_bytes},
    {"log_full_waits", "log ring full waits", &WorkerStats::log_full_waits},
    {"log_errors", "log errors", &WorkerStats::log_errors},
    {"log_applied", "log records applied", &WorkerStats::log_applied},
    {"committed_delta", "committed delta", nullptr, &WorkerStats::committed_delta},
    {"sampled_commits", "sampled commits", &WorkerStats::sampled_commits},
    {"sampled_aborts", "sampled aborts", &WorkerStats::sampled_aborts},
};
inline constexpr size_t kWorkerCounterCount = std::size(kWorkerCounters);

// What a worker publishes for readers on other threads (progress line,
// telemetry): counters since the run started, the latency histogram of the
// measured window, and a copy of WorkerStats' counters (kWorkerCounters
// order, raw bits) as of the last publication.
struct LiveStats {
  uint64_t commits = 0;   // whole run, warm-up included
  uint64_t attempts = 0;  // whole run
  uint64_t aborts[kMaxAbortReasons] = {};
  uint64_t measuring = 0;
  uint64_t measured_commits = 0;
  uint64_t counters[kWorkerCounterCount] = {};
  stats::Histogram latency_tsc;  // measured window
};

}  // namespace rdtx::txn
