// write_back_unlock and release_locks, coordinator side, and the settling
// of a passively acknowledged one (retried until every owner answered).
#include <cstring>

#include "txn/coordinator.hpp"
#include "txn/fault.hpp"
#include "txn/item_batch.hpp"
#include "txn/stages/owner_status.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::txn {

using runtime::Task;

namespace {

// Adds the RPC items of a write-back (or, with !write, a release).
void add_unlock_items(Coordinator& c, Txn& t, ItemBatch& batch, WriteBackSpec spec, uint64_t value, bool write) {
  const uint32_t first = spec.version_offset != 0 ? spec.version_offset : spec.body_offset;
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (!a.locked) continue;
    if (a.shared) {
      // A shared holder: no value (the owner finds the grant by attempt).
      const uint64_t span = owner::span_word(spec.body_offset, spec.version_offset);
      batch.add(i, 0, t.id(), {}, 0, &span);
      a.locked = a.shared = false;
      continue;
    }
    std::span<const std::byte> data;
    if (write && a.mode == AccessMode::kWrite)
      data = std::span<const std::byte>(a.copy + first, c.db().tuple_bytes(a.table) - first);
    const uint64_t span = owner::span_word(spec.body_offset, spec.version_offset);
    batch.add(i, value, t.id(), data, 0, &span);
    a.locked = false;
  }
}

}  // namespace

void judge_unlocks(Coordinator& c, ItemBatch& batch, bool first) {
  WorkerStats& st = c.engine().stats();
  for (uint32_t k = 0; k < batch.calls(); ++k) {
    if (batch.judged(k) || batch.call_failed(k)) continue;
    batch.set_judged(k);
    const bool wellformed = batch.for_each_reply_of(k, [&](uint32_t, const ItemReply& r, std::span<const std::byte>) {
      // A re-sent copy finds the lock free (an earlier copy applied), or
      // the row gone (applied, then another transaction erased the row).
      if (r.status == owner::kOk || (!first && (r.status == owner::kNotHeld || r.status == -ENOENT))) return;
      ++st.commit_errors;  // the owner refused: the lock was not this attempt's
    });
    if (!wellformed) ++st.commit_errors;
  }
}

// Re-sends what got no answer until every owner answered. A re-sent message
// whose owner no longer sees the lock held was applied by an earlier copy.
Task<void> retry_unlocks(Coordinator& c, ItemBatch& batch) {
  // Unanswered write-backs and releases are re-sent until every owner
  // answered (a stalled owner answers when it resumes); only a stopping
  // worker gives up (StopBudget), and the run's checks report it.
  WorkerStats& st = c.engine().stats();
  for (StopBudget budget;;) {
    if (budget.spent()) {
      batch.for_each_failed_item([&](uint32_t) { ++st.commit_errors; });
      co_return;
    }
    ++st.commit_retries;
    c.lock_value_lingers();
    const bool sent_ok = co_await batch.retry_failed();
    judge_unlocks(c, batch, false);
    if (sent_ok) co_return;
  }
}

// The RPC form of both: a write-back (`write`) or a release, passive (left
// in flight, settled later) or awaited and settled now.
Task<bool> unlock_rpc(Coordinator& c, Txn& t, WriteBackSpec spec, uint64_t value, bool write) {
  if (c.commit_batch_in_flight()) co_await c.settle_commit_batch();
  const Toolkit::Handlers& h = c.engine().toolkit().handlers();
  ItemBatch& batch = c.commit_items(write ? h.write_back : h.release);
  add_unlock_items(c, t, batch, spec, value, write);
  if (batch.empty()) co_return true;
  if (c.engine().options().passive_ack) {
    batch.start(c.engine().options().piggyback_ack);
    if (!write) c.mark_release_in_flight();
    co_return true;
  }
  const bool ok = co_await batch.call();
  judge_unlocks(c, batch, true);
  if (!ok) co_await retry_unlocks(c, batch);
  co_return true;
}

namespace {

// Crash injection (fault.hpp, kCommit): the attempt's first written record
// written back and unlocked, the others left locked, then the process dies.
bool cut_here(const Txn& t) {
  if (!fault::armed_at(fault::KillPoint::kCommit)) [[likely]]
    return false;
  uint32_t writes = 0;
  for (uint32_t i = 0; i < t.size(); ++i)
    writes += t.access(i).locked && !t.access(i).shared && t.access(i).mode == AccessMode::kWrite;
  return writes >= 2;
}

Task<bool> write_back_onesided(Coordinator& c, Txn& t, WriteBackSpec spec) {
  const Options& o = c.engine().options();
  OneSidedBatch& batch = c.onesided();
  const bool cut = cut_here(t);
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (!a.locked) continue;
    if (cut && (a.shared || a.mode != AccessMode::kWrite || !batch.empty())) continue;
    if (a.mode == AccessMode::kWrite) {
      const uint32_t rkey = c.descriptor(a.node, a.table).rkey;
      batch.write({a.node, a.tuple_addr + spec.body_offset, rkey}, a.copy + spec.body_offset,
                  c.db().tuple_bytes(a.table) - spec.body_offset);
      if (spec.version_offset != 0) {
        // After the body, on the same QP: a copy showing the new version
        // was read after the body landed (see the protocol's consistency
        // proof for copies read while the body was landing).
        batch.write({a.node, a.tuple_addr + spec.version_offset, rkey}, a.copy + spec.version_offset, 8);
      }
    }
    if (a.shared)
      batch.add_read_unlock(a, read_unlock_sink(c, i));
    else
      batch.add_unlock(a);
    a.locked = a.shared = false;
  }
  if (batch.empty()) co_return true;
  if (cut) {
    co_await batch.execute();
    fault::die_at(fault::KillPoint::kCommit, t.id(), "one written record written back, the others still locked");
  }
  if (o.passive_ack && batch.fits_in_flight()) {
    if (!batch.post_only(c.pending_commit())) ++c.engine().stats().commit_errors;
    co_return true;
  }
  if (!co_await batch.execute()) ++c.engine().stats().commit_errors;
  co_return true;
}

Task<bool> release_onesided(Coordinator& c, Txn& t) {
  OneSidedBatch& batch = c.onesided();
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (!a.locked) continue;
    if (a.shared)
      batch.add_read_unlock(a, read_unlock_sink(c, i));
    else
      batch.add_unlock(a);
    a.locked = a.shared = false;
  }
  if (c.engine().options().passive_ack && batch.fits_in_flight()) {
    if (!batch.post_only(c.pending_commit())) ++c.engine().stats().commit_errors;
  } else if (!co_await batch.execute()) {
    ++c.engine().stats().commit_errors;
  }
  co_return true;
}

Task<bool> nothing_to_release() { co_return true; }

}  // namespace

std::byte* read_unlock_sink(Coordinator& c, uint32_t i) { return c.extra(i) + 8; }

// Plain functions returning the task of their primitive's form: no
// coroutine frame of their own on the commit path.
Task<bool> write_back_unlock(Coordinator& c, Txn& t, Primitive p, WriteBackSpec spec, uint64_t value) {
  if (p == Primitive::kRpc) return unlock_rpc(c, t, spec, value, true);
  return write_back_onesided(c, t, spec);
}

Task<bool> release_locks(Coordinator& c, Txn& t, Primitive p, uint64_t value) {
  bool any = false;
  for (uint32_t i = 0; i < t.size(); ++i) any |= t.access(i).locked;
  if (!any) return nothing_to_release();
  if (p == Primitive::kRpc) return unlock_rpc(c, t, WriteBackSpec{}, value, false);
  return release_onesided(c, t);
}

}  // namespace rdtx::txn
