// read_tuples and read_meta, coordinator side: copies without locks.
#include <cstring>

#include "txn/coordinator.hpp"
#include "txn/item_batch.hpp"
#include "txn/locate.hpp"
#include "txn/stages/owner_status.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::txn {

using runtime::Task;

namespace {

constexpr int kReadRounds = 4;

// RPC: the owners copy the tuples of the accesses not yet fetched (and,
// when `only_unlocated`, not found in the location cache).
Task<bool> read_rpc(Coordinator& c, Txn& t, uint32_t from, bool only_unlocated, AcceptFn accept,
                    bool* retry) {
  ItemBatch& batch = c.items(c.engine().toolkit().handlers().read);
  for (uint32_t i = from; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (a.fetched || (only_unlocated && a.located)) continue;
    if (!batch.add(i, 0, 0, {}, c.db().tuple_bytes(a.table))) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
  }
  if (batch.empty()) co_return true;
  if (!co_await batch.call()) {
    t.fail(AbortReason::kNetwork);
    co_return false;
  }
  bool ok = true;
  bool wellformed = batch.for_each_reply([&](uint32_t i, const ItemReply& r, std::span<const std::byte> data) {
    Access& a = t.access(i);
    if (!ok) return;
    if (r.status == -EAGAIN) {  // erased or reused during the owner's copy
      *retry = true;
      a.located = false;
      return;
    }
    if (r.status != owner::kOk || data.size() != c.db().tuple_bytes(a.table)) {
      t.fail(r.status == -ENOENT ? AbortReason::kNotFound : AbortReason::kNetwork);
      ok = false;
      return;
    }
    std::memcpy(a.copy, data.data(), data.size());
    remember_location(c, a, r.tuple_index, r.state);
    switch (accept(c, t, a)) {
      case Verdict::kAccept: a.fetched = true; break;
      case Verdict::kRetry: *retry = true; break;
      case Verdict::kAbort: ok = false; break;
    }
  });
  if (!wellformed) {
    t.fail(AbortReason::kNetwork);
    co_return false;
  }
  co_return ok;
}

}  // namespace

Task<bool> read_tuples(Coordinator& c, Txn& t, Primitive p, uint32_t from, AcceptFn accept,
                       AbortReason on_retries) {
  for (int round = 0; round < kReadRounds; ++round) {
    bool retry = false;
    if (p == Primitive::kRpc) {
      if (!co_await read_rpc(c, t, from, false, accept, &retry)) co_return false;
      if (!retry) co_return true;
      continue;
    }
    if (p == Primitive::kHybrid) {
      locate_from_cache(c, t, from);
      if (!co_await read_rpc(c, t, from, true, accept, &retry)) co_return false;
    } else if (!co_await locate_onesided(c, t, from, t.size())) {
      co_return false;
    }
    OneSidedBatch& batch = c.onesided();
    const uint32_t slots = c.engine().protocol_def().fetch_record_slots;
    for (uint32_t i = from; i < t.size(); ++i) {
      Access& a = t.access(i);
      if (a.fetched || !a.located) continue;
      batch.read({a.node, a.tuple_addr, c.descriptor(a.node, a.table).rkey}, a.copy,
                 slots == 0 ? c.db().tuple_bytes(a.table) : c.db().layout(a.table).slot_offset(slots));
    }
    if (!co_await batch.execute()) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
    for (uint32_t i = from; i < t.size(); ++i) {
      Access& a = t.access(i);
      if (a.fetched || !a.located) {
        retry |= !a.fetched;
        continue;
      }
      if (!check_fetched(c, a)) {
        retry = true;  // a stale location: look it up again
        continue;
      }
      switch (accept(c, t, a)) {
        case Verdict::kAccept: a.fetched = true; break;
        case Verdict::kRetry: retry = true; break;
        case Verdict::kAbort: co_return false;
      }
    }
    if (!retry) co_return true;
  }
  t.fail(on_retries);
  co_return false;
}

Task<bool> read_meta(Coordinator& c, Txn& t, Primitive p, std::span<const uint32_t> items, uint32_t length) {
  if (items.empty()) co_return true;
  if (p == Primitive::kRpc) {
    ItemBatch& batch = c.items(c.engine().toolkit().handlers().read_meta);
    for (uint32_t i : items) batch.add(i, length, 0, {}, length);
    bool ok = co_await batch.call();
    bool wellformed = batch.for_each_reply([&](uint32_t i, const ItemReply& r, std::span<const std::byte> data) {
      if (r.status == -ENOENT) {
        // Gone since it was read: words that validate nothing (a lock held).
        std::memset(c.extra(i), 0xff, length);
        return;
      }
      if (r.status != owner::kOk || data.size() != length) {
        ok = false;
        return;
      }
      std::memcpy(c.extra(i), data.data(), length);
    });
    if (!ok || !wellformed) t.fail(AbortReason::kNetwork);
    co_return ok && wellformed;
  }
  // The lock word first, then (fenced) the rest. One READ may copy its
  // words in any order, and then a whole commit (lock, version, unlock) can
  // fall between its load of the version (old) and of the lock (free): an
  // unlocked, unchanged record that was not (seen as write skew under shm
  // read_order=random). With the lock loaded strictly before the version,
  // "free, then unchanged" means no commit overlapped.
  OneSidedBatch& batch = c.onesided();
  for (uint32_t i : items) {
    Access& a = t.access(i);
    const uint32_t rkey = c.descriptor(a.node, a.table).rkey;
    batch.read({a.node, a.tuple_addr, rkey}, c.extra(i), 8);
    if (length <= 8) continue;
    batch.read({a.node, a.tuple_addr + 8, rkey}, c.extra(i) + 8, length - 8, rdma::kFence);  // after the lock word
  }
  if (!co_await batch.execute()) {
    t.fail(AbortReason::kNetwork);
    co_return false;
  }
  co_return true;
}

}  // namespace rdtx::txn
