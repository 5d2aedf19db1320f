// lock_read, coordinator side: CAS+READ in one doorbell per node, or one RPC
// per owner; cancels the attempt at an owner whose call failed.
#include <cstring>
#include <utility>

#include "txn/coordinator.hpp"
#include "txn/item_batch.hpp"
#include "txn/locate.hpp"
#include "txn/stages/owner_status.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::txn {

using runtime::Task;

namespace {

uint64_t load8(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::byte* span_base(Coordinator& c, Access& a, uint32_t i, const TupleSpan& s) {
  return s.into_copy ? a.copy : c.extra(i);
}

uint32_t span_length(Coordinator& c, const Access& a, const TupleSpan& s) {
  return s.length != 0 ? s.length : c.db().tuple_bytes(a.table) - s.offset;
}

// False if the span READ under the lock covers the tuple's header and
// shows another key's tuple or a dead one.
bool holds_key(Coordinator& c, const Access& a, uint32_t i, const TupleSpan& s) {
  const store::TupleLayout& l = c.db().layout(a.table);
  const uint32_t len = span_length(c, a, s);
  if (s.offset > l.key_offset() || s.offset + len < l.state_offset() + 8) return true;  // cannot tell: the protocol checks
  const std::byte* x = span_base(c, const_cast<Access&>(a), i, s);
  return load8(x + l.key_offset()) == a.key && store::is_live(load8(x + l.state_offset()));
}

Task<bool> lock_read_onesided(Coordinator& c, Txn& t, std::span<const uint32_t> items, uint64_t value,
                              TupleSpan span, LockResult* results, uint64_t* holders) {
  if (items.empty()) co_return true;
  OneSidedBatch& batch = c.onesided();
  for (uint32_t i : items) {
    Access& a = t.access(i);
    const auto& d = c.descriptor(a.node, a.table);
    std::byte* x = c.extra(i);
    const uint64_t never = UINT64_MAX;  // stays if the CAS never executed
    std::memcpy(x, &never, 8);
    batch.cas({a.node, a.tuple_addr, d.rkey}, x, 0, value);
    // Fenced after the CAS: the version read under the lock.
    batch.read({a.node, a.tuple_addr + span.offset, d.rkey}, span_base(c, a, i, span) + span.offset,
               span_length(c, a, span), rdma::kFence);
  }
  const bool posted = co_await batch.execute();
  bool stale_locked = false;
  for (uint32_t k = 0; k < items.size(); ++k) {
    Access& a = t.access(items[k]);
    const uint64_t old = load8(c.extra(items[k]));
    holders[k] = old;
    if (old == 0) a.locked = true;
    if (!posted) {
      results[k] = LockResult::kFailed;
      continue;
    }
    if (span.into_copy && !check_fetched(c, a)) {
      results[k] = LockResult::kStale;
      stale_locked |= a.locked;
      continue;
    }
    if (!span.into_copy && a.locked && !holds_key(c, a, items[k], span)) {
      // Locked a tuple that has since become another key's (or none's): the
      // row moved or went. Given back here, by address: a release by key
      // (RPC) would look for the row where it is now.
      results[k] = LockResult::kStale;
      stale_locked = true;
      continue;
    }
    results[k] = old == 0 ? LockResult::kGranted : LockResult::kConflict;
  }
  if (stale_locked) {
    // A lock on a tuple that is no longer the key's: give it back now.
    OneSidedBatch& un = c.onesided();
    for (uint32_t k = 0; k < items.size(); ++k) {
      Access& a = t.access(items[k]);
      if (results[k] != LockResult::kStale || !a.locked) continue;
      un.add_unlock(a);
      a.locked = false;
    }
    co_await un.execute();
  }
  if (!posted) t.fail(AbortReason::kNetwork);
  co_return posted;
}

// Rounds a shared reader gets to add itself to a count that other readers
// keep changing under it (each a CAS from the count it last saw); then it
// treats the record as contended (a conflict).
constexpr int kShareRounds = 4;

// lock_read_onesided with shared read locks (txn.options.read_locks =
// shared): a read CASes the word from the count it expects (0 first) to
// one more, a write from 0 to `value` (kExclusiveBit | the caller's lock
// value). A reader finding other readers tries again from their count, up
// to kShareRounds round trips in all. A separate coroutine: the exclusive
// form, which every other protocol uses, keeps its frame and its path.
Task<bool> lock_read_onesided_shared(Coordinator& c, Txn& t, std::span<const uint32_t> items, uint64_t value,
                                     TupleSpan span, LockResult* results, uint64_t* holders) {
  if (items.empty()) co_return true;
  uint64_t expect[Txn::kMaxAccesses];             // per position in items: the word the CAS expects
  uint32_t again[Txn::kMaxAccesses], nagain = 0;  // positions of readers that found readers
  auto add = [&](OneSidedBatch& batch, uint32_t k) {
    const uint32_t i = items[k];
    Access& a = t.access(i);
    const auto& d = c.descriptor(a.node, a.table);
    std::byte* x = c.extra(i);
    const uint64_t never = UINT64_MAX;  // stays if the CAS never executed
    std::memcpy(x, &never, 8);
    batch.cas({a.node, a.tuple_addr, d.rkey}, x, expect[k], a.mode == AccessMode::kRead ? expect[k] + 1 : value);
    // Fenced after the CAS: the version read under the lock.
    batch.read({a.node, a.tuple_addr + span.offset, d.rkey}, span_base(c, a, i, span) + span.offset,
               span_length(c, a, span), rdma::kFence);
  };
  bool stale_locked = false;
  bool posted = true;
  auto judge = [&](uint32_t k) {
    Access& a = t.access(items[k]);
    const uint64_t old = load8(c.extra(items[k]));
    const bool reader = a.mode == AccessMode::kRead;
    if (old == expect[k]) {
      a.locked = true;
      a.shared = reader;
    }
    if (!posted) {
      results[k] = LockResult::kFailed;
      return;
    }
    if (span.into_copy && !check_fetched(c, a)) {
      results[k] = LockResult::kStale;
      stale_locked |= a.locked;
      return;
    }
    if (!span.into_copy && a.locked && !holds_key(c, a, items[k], span)) {
      results[k] = LockResult::kStale;  // as in lock_read_onesided
      stale_locked = true;
      return;
    }
    if (a.locked) {
      results[k] = LockResult::kGranted;
      holders[k] = 0;
      return;
    }
    // An exclusive holder's value without the bit (WAITDIE compares it);
    // shared holders have none: 0 (a writer finding them dies).
    results[k] = LockResult::kConflict;
    holders[k] = old & kExclusiveBit ? old & ~kExclusiveBit : 0;
    if (reader && !(old & kExclusiveBit)) {  // readers only, or free again: join them
      expect[k] = old;
      again[nagain++] = k;
    }
  };
  OneSidedBatch& batch = c.onesided();
  for (uint32_t k = 0; k < items.size(); ++k) {
    expect[k] = 0;
    add(batch, k);
  }
  posted = co_await batch.execute();
  for (uint32_t k = 0; k < items.size(); ++k) judge(k);
  for (int round = 1; nagain > 0 && posted && round < kShareRounds; ++round) {
    OneSidedBatch& more = c.onesided();
    for (uint32_t j = 0; j < nagain; ++j) add(more, again[j]);
    posted = co_await more.execute();
    const uint32_t n = std::exchange(nagain, 0);
    // judge() appends to `again` what must try once more: in place, as it
    // never gets ahead of the entry being judged.
    for (uint32_t j = 0; j < n; ++j) judge(again[j]);
  }
  if (stale_locked) {
    // A lock on a tuple that is no longer the key's: give it back now.
    OneSidedBatch& un = c.onesided();
    for (uint32_t k = 0; k < items.size(); ++k) {
      Access& a = t.access(items[k]);
      if (results[k] != LockResult::kStale || !a.locked) continue;
      if (a.shared)
        un.add_read_unlock(a, read_unlock_sink(c, items[k]));
      else
        un.add_unlock(a);
      a.locked = a.shared = false;
    }
    co_await un.execute();
  }
  if (!posted) t.fail(AbortReason::kNetwork);
  co_return posted;
}

// Cancels the attempt at the owners of `batch`'s failed calls: each owner
// fences the attempt (a lock request of it arriving later is refused) and
// frees what the attempt holds there. Retried until every owner answered.
Task<bool> cancel_failed(Coordinator& c, Txn& t, const ItemBatch& failed, uint64_t value, bool all) {
  ItemBatch& cancel = c.aux_items(c.engine().toolkit().handlers().cancel);
  auto add = [&](uint32_t i) { cancel.add(i, value, t.id(), {}, 0); };
  if (all) failed.for_each_item(add);
  else failed.for_each_failed_item(add);
  bool ok = co_await cancel.call();
  if (!ok) c.lock_value_lingers();  // a copy of the cancel may still arrive
  // Re-sent until its owner answers (a stalled owner answers when it
  // resumes); only a stopping worker gives up (StopBudget), and the run's
  // checks then report it.
  for (StopBudget budget; !ok && !budget.spent();) ok = co_await cancel.retry_failed();
  if (!ok) ++c.engine().stats().cancel_failures;  // a lock may be left: the run's check says so
  auto unheld = [&](uint32_t i) { t.access(i).locked = t.access(i).shared = false; };
  if (all) failed.for_each_item(unheld);
  else failed.for_each_failed_item(unheld);
  co_return ok;
}

Task<bool> lock_read_rpc(Coordinator& c, Txn& t, std::span<const uint32_t> items, uint64_t value, TupleSpan span,
                         bool shared_reads, LockResult* results, uint64_t* holders) {
  if (items.empty()) co_return true;
  ItemBatch& batch = c.items(c.engine().toolkit().handlers().lock_read);
  const uint64_t sw = owner::span_word(span.offset, span.length);
  uint32_t pos[Txn::kMaxAccesses];  // access index -> position in items
  for (uint32_t k = 0; k < items.size(); ++k) {
    pos[items[k]] = k;
    results[k] = LockResult::kFailed;
    holders[k] = 0;
    // Shared read locks: a read asks with its lock value alone, a write
    // with kExclusiveBit | it (the value given), and the owner tells them
    // apart by the bit.
    const bool reader = shared_reads && t.access(items[k]).mode == AccessMode::kRead;
    const uint64_t asked = reader ? value & ~kExclusiveBit : value;
    if (!batch.add(items[k], asked, t.id(), std::as_bytes(std::span(&sw, 1)),
                   span_length(c, t.access(items[k]), span))) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
  }
  const bool ok = co_await batch.call();
  bool wellformed = batch.for_each_reply([&](uint32_t i, const ItemReply& r, std::span<const std::byte> data) {
    Access& a = t.access(i);
    const uint32_t k = pos[i];
    switch (r.status) {
      case owner::kOk: {
        a.locked = true;
        a.shared = shared_reads && a.mode == AccessMode::kRead;
        // The lock is in the tuple the owner found now, which a one-sided
        // release or write-back must reach: the row may have moved since
        // the fetch (Txn::relocate). Its state stays the one fetched, so a
        // protocol comparing it sees the move.
        const store::TableDescriptor& d = c.descriptor(a.node, a.table);
        if (r.tuple_index < d.capacity) a.tuple_addr = d.tuple_addr(static_cast<uint32_t>(r.tuple_index));
        if (data.size() != span_length(c, a, span)) break;  // locked, but the reply is malformed: kFailed
        std::memcpy(span_base(c, a, i, span) + span.offset, data.data(), data.size());
        if (span.into_copy) remember_location(c, a, r.tuple_index, r.state);
        results[k] = LockResult::kGranted;
        break;
      }
      case owner::kConflict:
        results[k] = LockResult::kConflict;
        holders[k] = r.arg;
        break;
      case owner::kDie: results[k] = LockResult::kDie; break;
      case owner::kRefused:  // the protocol's lock check: the requester dies too
        results[k] = LockResult::kDie;
        holders[k] = r.arg;
        break;
      case owner::kNotAttempted: results[k] = LockResult::kNotAttempted; break;
      default: break;  // kFailed (lookup error, fenced)
    }
  });
  if (ok && wellformed) co_return true;
  // Some owner did not answer (or answered garbage): it may hold locks for
  // this attempt, or grant them when the request arrives late.
  co_await cancel_failed(c, t, batch, value, !wellformed);
  t.fail(AbortReason::kNetwork);
  co_return false;
}

}  // namespace

// Not a coroutine itself: the caller awaits the primitive's own frame.
Task<bool> lock_read(Coordinator& c, Txn& t, Primitive p, std::span<const uint32_t> items, uint64_t value,
                     TupleSpan span, LockResult* results, uint64_t* holders, bool shared_reads) {
  if (p == Primitive::kRpc) return lock_read_rpc(c, t, items, value, span, shared_reads, results, holders);
  if (shared_reads) return lock_read_onesided_shared(c, t, items, value, span, results, holders);
  return lock_read_onesided(c, t, items, value, span, results, holders);
}

}  // namespace rdtx::txn
