// The contended run's checks that the generated protocol suites share:
// the fast suite's `protocols` (every protocol x primitive combination,
// test_protocols.cpp) and the `matrix` suite (every workload x protocol x
// primitive x optimisation set, test_matrix.cpp). One run of 0.25 s with
// seed 1 on the combination's contended workload (contention.hpp), then:
// the workload's invariants, no lock or task left, conflicts handled the
// protocol's way, no network abort or error, replicas equal to their
// primaries, and the recorded history complete and certified at the
// protocol's level.
#pragma once

#include <gtest/gtest.h>

#include "test/txn/contention.hpp"

namespace rdtx::testing_contention {

inline void expect_contended_run_ok(const Combo& cb) {
  auto out = run_contended(cb, 1, 0.25);
  ASSERT_TRUE(out.ok()) << out.error().message;
  const run::RunResult& r = out->run;
  SCOPED_TRACE(summary(r));
  EXPECT_TRUE(r.invariants.ok()) << r.invariants.error().message;
  EXPECT_EQ(r.locks_left, 0u) << "a lock was left held";
  EXPECT_EQ(r.tasks_left, 0u) << "coroutines were still running when the drain gave up";
  // Progress, not speed: sanitizer builds run ~10x slower.
  EXPECT_GT(r.total.commits, 20u);
  EXPECT_EQ(conflicts_unseen(r, cb.protocol), "");
  EXPECT_EQ(r.total.aborts[static_cast<int>(txn::AbortReason::kNetwork)], 0u);
  EXPECT_EQ(r.total.commit_errors, 0u);
  EXPECT_EQ(r.total.insert_errors, 0u) << "a row inserted twice, or a table full";
  // Replication: every backup equals its primary after the run, and the
  // log stage did work (entries sent, records applied on the backups).
  EXPECT_TRUE(r.replicas_equal.ok()) << r.replicas_equal.error().message;
  EXPECT_EQ(r.total.log_errors, 0u);
  if (cb.replicas > 1) {
    EXPECT_GT(r.total.log_entries, 0u);
    EXPECT_GT(r.total.log_applied, 0u);
  } else {
    EXPECT_EQ(r.total.log_entries, 0u);
  }
  EXPECT_EQ(r.rpc_malformed, 0u);
  EXPECT_EQ(r.rpc_timeouts, 0u);
  if (cb.protocol.rfind("waitdie", 0) == 0) {
    EXPECT_EQ(aborts_named(r, "lock_conflict"), 0u) << "WAITDIE aborts only by dying";
    EXPECT_GT(aborts_named(r, "wait_die"), 0u);
  }
  if (cb.protocol.rfind("nowait", 0) == 0) {
    EXPECT_EQ(aborts_named(r, "wait_die"), 0u);
  }
  // The history: every committed attempt recorded (none dropped), and
  // certified serializable.
  EXPECT_TRUE(out->check.certified) << out->check_text;
  EXPECT_FALSE(out->check.truncated);
  EXPECT_GE(out->check.stats.committed, r.total.commits);
  if (conflicts_abort(cb.protocol)) {
    EXPECT_GT(out->check.stats.aborted, 0u) << "aborted attempts are recorded too";
  }
}

}  // namespace rdtx::testing_contention
