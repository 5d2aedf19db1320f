// write_back_unlock and release_locks, coordinator side, and the settling
// of a passively acknowledged one (retried until every owner answered).
#include <cstring>

#include "txn/engine.hpp"
#include "txn/item_batch.hpp"
#include "txn/stages/owner_status.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::txn {

using runtime::Task;

namespace {

// Unanswered write-backs and releases are re-sent until every owner
// answered (a stalled owner answers when it resumes); only a stopping worker
// gives up, after this many more tries, and the run's checks report it.
constexpr int kTriesWhenStopping = 3;

// Adds the RPC items of a write-back (or, with !write, a release).
void add_unlock_items(Coordinator& c, Txn& t, ItemBatch& batch, WriteBackSpec spec, uint64_t value, bool write) {
  const uint32_t first = spec.version_offset != 0 ? spec.version_offset : spec.body_offset;
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (!a.locked) continue;
    std::span<const std::byte> data;
    if (write && a.mode == AccessMode::kWrite)
      data = std::span<const std::byte>(a.copy + first, c.db().tuple_bytes(a.table) - first);
    const uint64_t span = owner::span_word(spec.body_offset, spec.version_offset);
    batch.add(i, value, t.id(), data, 0, &span);
    a.locked = false;
  }
}

}  // namespace

// Checks the owners' answers to a write-back or release batch and re-sends
// what got no answer until every owner answered. A re-sent message whose
// owner no longer sees the lock held was applied by an earlier copy.
Task<void> settle_unlocks(Coordinator& c, ItemBatch& batch, bool sent_ok) {
  WorkerStats& st = c.engine().stats();
  uint32_t judged = 0;  // calls whose answers were counted (bit per call)
  for (int tries = 1, late = 0;; ++tries) {
    for (uint32_t k = 0; k < batch.calls(); ++k) {
      if ((judged >> k & 1) || batch.call_failed(k)) continue;
      judged |= 1u << k;
      const bool first = tries == 1;
      const bool wellformed = batch.for_each_reply_of(k, [&](uint32_t, const ItemReply& r, std::span<const std::byte>) {
        if (r.status == owner::kOk || (!first && r.status == owner::kNotHeld)) return;
        ++st.commit_errors;  // the owner refused: the lock was not this attempt's
      });
      if (!wellformed) ++st.commit_errors;
    }
    if (sent_ok) co_return;
    late += runtime::Worker::current()->stopping();
    if (late > kTriesWhenStopping) {
      batch.for_each_failed_item([&](uint32_t) { ++st.commit_errors; });
      co_return;
    }
    ++st.commit_retries;
    c.lock_value_lingers();
    sent_ok = co_await batch.retry_failed();
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
    batch.start();
    if (!write) c.mark_release_in_flight();
    co_return true;
  }
  const bool ok = co_await batch.call();
  co_await settle_unlocks(c, batch, ok);
  co_return true;
}

Task<bool> write_back_unlock(Coordinator& c, Txn& t, Primitive p, WriteBackSpec spec, uint64_t value) {
  const Options& o = c.engine().options();
  if (p == Primitive::kRpc) co_return co_await unlock_rpc(c, t, spec, value, true);
  OneSidedBatch& batch = c.onesided();
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (!a.locked) continue;
    if (a.mode == AccessMode::kWrite) {
      const uint32_t rkey = c.descriptor(a.node, a.table).rkey;
      rdma::WorkRequest* body = batch.add(a.node);
      body->opcode = rdma::Opcode::kWrite;
      body->local = a.copy + spec.body_offset;
      body->length = c.db().tuple_bytes(a.table) - spec.body_offset;
      body->remote_addr = a.tuple_addr + spec.body_offset;
      body->rkey = rkey;
      if (spec.version_offset != 0) {
        // After the body, on the same QP: a copy showing the new version
        // was read after the body landed (see the protocol's consistency
        // proof for copies read while the body was landing).
        rdma::WorkRequest* ver = batch.add(a.node);
        ver->opcode = rdma::Opcode::kWrite;
        ver->local = a.copy + spec.version_offset;
        ver->length = 8;
        ver->remote_addr = a.tuple_addr + spec.version_offset;
        ver->rkey = rkey;
      }
    }
    batch.add_unlock(a);
    a.locked = false;
  }
  if (batch.empty()) co_return true;
  if (o.passive_ack) {
    if (!batch.post_only(c.pending_commit())) ++c.engine().stats().commit_errors;
    co_return true;
  }
  if (!co_await batch.execute()) ++c.engine().stats().commit_errors;
  co_return true;
}

Task<bool> release_locks(Coordinator& c, Txn& t, Primitive p, uint64_t value) {
  bool any = false;
  for (uint32_t i = 0; i < t.size(); ++i) any |= t.access(i).locked;
  if (!any) co_return true;
  if (p == Primitive::kRpc) co_return co_await unlock_rpc(c, t, WriteBackSpec{}, value, false);
  OneSidedBatch& batch = c.onesided();
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (!a.locked) continue;
    batch.add_unlock(a);
    a.locked = false;
  }
  if (c.engine().options().passive_ack) {
    if (!batch.post_only(c.pending_commit())) ++c.engine().stats().commit_errors;
  } else if (!co_await batch.execute()) {
    ++c.engine().stats().commit_errors;
  }
  co_return true;
}

}  // namespace rdtx::txn
