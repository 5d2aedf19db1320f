// The pipeline driver: every attempt runs through here. begin (per attempt,
// Coordinator::run) -> fetch rounds -> lock -> validate -> log -> commit, and
// the protocol's release module on any failure. Phase timing is done here,
// once for every protocol; verbs are counted by the batches the stage
// modules use; history is recorded by Coordinator::run from the Txn.
#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"
#include "txn/item_batch.hpp"

namespace rdtx::txn {

namespace {
constexpr Stage kCommitPipeline[] = {Stage::kLock, Stage::kValidate, Stage::kLog, Stage::kCommit};
}

runtime::Task<bool> Coordinator::run_fetch(Txn& t, uint32_t from) {
  const uint64_t t0 = phase_clock();
  // One await per statement: GCC 12 leaks the frame of a co_await operand
  // inside ?: or ||.
  const bool ok = co_await e_.protocol().stage(Stage::kFetch)->run(*this, t, from);
  add_phase(Phase::kFetch, t0);
  if (!ok) co_await run_release(t);
  co_return ok;
}

runtime::Task<bool> Coordinator::run_commit(Txn& t) {
  for (Stage s : kCommitPipeline) {
    // Inserted rows go in once nothing before the commit can abort
    // (txn.hpp: a row is never visible before its guard's new value).
    const bool inserts = s == Stage::kCommit && t.inserts() != 0 && e_.protocol().inserts_here(*this, t);
    if (inserts) {
      const bool in = co_await apply_inserts(t);
      if (!in) {
        co_await run_release(t);
        co_return false;
      }
    }
    // Nothing can abort from here on (a commit stage does not fail: its
    // errors are counted and fail the run).
    if (s == Stage::kCommit && t.row_changes() != 0) co_await apply_row_changes(t);
    StageModule* m = e_.protocol().stage(s);
    if (m == nullptr) continue;
    const uint64_t t0 = phase_clock();
    const bool ok = co_await m->run(*this, t, 0);
    add_phase(static_cast<Phase>(s), t0);
    if (!ok) {
      if (inserts) co_await undo_inserts(t);
      co_await run_release(t);
      co_return false;
    }
  }
  co_return true;
}

runtime::Task<void> Coordinator::run_release(Txn& t) {
  const uint64_t t0 = phase_clock();
  co_await e_.protocol().release()->run(*this, t, 0);
  add_phase(Phase::kRelease, t0);
}

runtime::Task<void> Coordinator::settle_commit_batch() {
  release_in_flight_ = false;
  if (!commit_items_.in_flight()) co_return;
  const bool ok = co_await commit_items_.finish();
  commit_items_.end_flight();
  // Every owner answered (the common case): judged here, no retry task.
  judge_unlocks(*this, commit_items_, true);
  if (!ok) co_await retry_unlocks(*this, commit_items_);
}

}  // namespace rdtx::txn
