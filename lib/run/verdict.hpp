// The verdict on a run: every check that decides whether a finished run was
// correct and its figures can be trusted, in one place. rdtx-bench reports
// them (apps/rdtx-bench/report.hpp) and every test suite that runs the
// engine asserts them (test/txn/contention.hpp: verdict_failures), so a new
// check is added here once and holds everywhere.
// Thread-safety: plain functions over finished results.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "run/runner.hpp"

namespace rdtx::run {

// One check. `key` names it in rdtx-bench's JSON.
struct Check {
  const char* key;
  const char* label;
  uint64_t value = 0;  // what was counted (0 for the invariant check)
  bool ok = true;
  std::string message;  // why it failed, or a note; else ""
  // Not done to the end: SIGINT or SIGTERM came and its grace ran out
  // (runtime::stop_grace_over()). Not ok either: nothing was proven.
  bool not_checked = false;
};

// What the history checker said about the run's recorded history.
struct HistoryVerdict {
  bool certified = false;  // at the run's isolation level (a truncated history never is)
  uint64_t anomalies = 0;
  std::string message;  // the checker's verdict line, or why it could not check
  bool stopped = false;  // a stop request ended the writing or the check
  // Committed attempts the history holds, if counted: it must hold every
  // commit the run counted (~0: not counted).
  uint64_t committed = ~uint64_t{0};
};

struct VerdictOptions {
  // Stopped early by a signal: tasks left and no commit are then expected.
  bool interrupted = false;
  // Timed-out calls: allowed (rdtx-bench, chaos: the attempt they aborted
  // was retried, or the call re-sent; the other checks decide), or none may
  // time out and no attempt may abort on the network (the generated suites,
  // on a fault-free fabric).
  bool timeouts_allowed = true;
  // The steady-state check: a measured window of at least ten median
  // latencies and (warmup_s > 0) a warm-up of at least two. Off for tests'
  // short runs.
  bool steady_state = true;
  double warmup_s = 0;
  const HistoryVerdict* history = nullptr;  // recorded and checked (or failed to be)
};

// The checks: the workload's invariants, no lock and no task left, replicas
// equal to their primaries and no log error (replicated), no malformed RPC,
// RPC timeouts as `timeouts_allowed` says, no passive request timed out or
// failed, no commit, cancel or insert error, the NIC model's accounting, no
// network abort other than a timed-out call's, at least one commit (unless
// interrupted, or the result is a memory node's), the steady state, and the
// history certified.
std::vector<Check> verdict(const RunResult& r, const VerdictOptions& o = {});

bool passed(const std::vector<Check>& checks);
// The failed checks, one line each ("locks left: 1"; with their message),
// "" if every check passed.
std::string failures(const std::vector<Check>& checks);

}  // namespace rdtx::run
