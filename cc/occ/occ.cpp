// OCC as in RTX / DrTM+H: read without locks, then at commit lock the write
// set (validating read-write records in the same round trip), validate the
// read-only set, and write back + unlock. Every stage has a one-sided and an
// RPC form; fetch also has the hybrid form (one READ on a location-cache
// hit, RPC on a miss).
//
// Tuple metadata: word 0 the lock (0, or the id of the attempt holding it),
// word 1 the sequence number (version), bumped by every committed write.
#include <atomic>
#include <cstring>

#include "cc/occ/occ.hpp"
#include "store/tuple.hpp"
#include "txn/engine.hpp"
#include "txn/item_batch.hpp"
#include "txn/locate.hpp"

namespace rdtx::cc::occ {

using namespace rdtx::txn;
using runtime::Task;

namespace {

constexpr uint32_t kLockOff = 0;
constexpr uint32_t kSeqOff = 8;
constexpr int kFetchAttempts = 4;

enum Handler : rpc::HandlerId { kFetchRpc = 10, kLockRpc, kValidateRpc, kCommitRpc, kReleaseRpc };
enum ItemStatus : int32_t { kOk = 0, kConflict = 1, kChanged = 2, kNotHeld = 3 };

uint64_t word(const std::byte* p, uint32_t off) {
  uint64_t v;
  std::memcpy(&v, p + off, 8);
  return v;
}
void set_word(std::byte* p, uint32_t off, uint64_t v) { std::memcpy(p + off, &v, 8); }
std::atomic_ref<uint64_t> tuple_word(std::byte* tuple, uint32_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(tuple + off));
}

class Occ final : public Protocol {
 public:
  Occ(WorkerEngine& e, bool validating) : e_(e), o_(e.options()), validating_(validating) { register_handlers(); }

  Task<bool> fetch(Coordinator& c, Txn& t, uint32_t from) override;
  Task<bool> commit(Coordinator& c, Txn& t) override;
  Task<void> abort(Coordinator& c, Txn& t) override {
    const uint64_t t0 = c.phase_clock();
    co_await release(c, t);
    c.add_phase(Phase::kRelease, t0);
  }

 private:
  Task<bool> fetch_rpc(Coordinator& c, Txn& t, uint32_t from, bool only_uncached);
  Task<bool> lock(Coordinator& c, Txn& t);
  Task<bool> validate(Coordinator& c, Txn& t);
  Task<bool> write_back(Coordinator& c, Txn& t);
  Task<void> release(Coordinator& c, Txn& t);
  bool accept_copy(Coordinator& c, Txn& t, Access& a);
  void register_handlers();

  WorkerEngine& e_;
  const Options& o_;
  const bool validating_;  // false only in the broken variant for tests
};

// A fetched copy is usable if no commit was in progress on it.
bool Occ::accept_copy(Coordinator& c, Txn& t, Access& a) {
  if (word(a.copy, kLockOff) != 0) {
    t.fail(AbortReason::kLockedAtRead);
    return false;
  }
  a.version = word(a.copy, kSeqOff);
  if (c.db().recording()) a.writer = a.replaced = word(a.copy, c.db().history_word_offset());
  a.fetched = true;
  return true;
}

Task<bool> Occ::fetch(Coordinator& c, Txn& t, uint32_t from) {
  const Primitive p = o_.stage(Stage::kFetch);
  const uint32_t to = t.size();
  if (p == Primitive::kRpc) co_return co_await fetch_rpc(c, t, from, false);
  for (int attempt = 0; attempt < kFetchAttempts; ++attempt) {
    if (p == Primitive::kHybrid) {
      // Cache hits are READ below; misses go to the owner by RPC, which
      // also refills the cache.
      store::LocationCache* cache = e_.cache();
      for (uint32_t i = from; i < to; ++i) {
        Access& a = t.access(i);
        store::CachedLocation loc;
        if (!a.located && cache && cache->find(a.table, a.key, &loc) && loc.node == a.node) {
          a.tuple_addr = loc.remote_addr;
          a.expect_state = loc.state;
          a.located = true;
        }
      }
      if (!co_await fetch_rpc(c, t, from, true)) co_return false;
    } else if (!co_await locate_onesided(c, t, from, to)) {
      co_return false;
    }
    OneSidedBatch& batch = c.onesided();
    for (uint32_t i = from; i < to; ++i) {
      Access& a = t.access(i);
      if (a.fetched) continue;
      rdma::WorkRequest* wr = batch.add(a.node);
      wr->opcode = rdma::Opcode::kRead;
      wr->local = a.copy;
      wr->length = c.db().tuple_bytes(a.table);
      wr->remote_addr = a.tuple_addr;
      wr->rkey = c.descriptor(a.node, a.table).rkey;
    }
    if (!co_await batch.execute()) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
    bool all = true;
    for (uint32_t i = from; i < to; ++i) {
      Access& a = t.access(i);
      if (a.fetched) continue;
      if (!check_fetched(c, a)) {
        all = false;  // a stale location: look it up again
        continue;
      }
      if (!accept_copy(c, t, a)) co_return false;
    }
    if (all) co_return true;
  }
  t.fail(AbortReason::kNotFound);
  co_return false;
}

Task<bool> Occ::fetch_rpc(Coordinator& c, Txn& t, uint32_t from, bool only_uncached) {
  ItemBatch& batch = c.items(kFetchRpc);
  for (uint32_t i = from; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (a.fetched || (only_uncached && a.located)) continue;
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
    if (r.status != kOk || data.size() != c.db().tuple_bytes(a.table)) {
      t.fail(r.status == -ENOENT ? AbortReason::kNotFound : AbortReason::kNetwork);
      ok = false;
      return;
    }
    std::memcpy(a.copy, data.data(), data.size());
    remember_location(c, a, r.tuple_index, r.state);
    ok = accept_copy(c, t, a);
  });
  if (!wellformed) t.fail(AbortReason::kNetwork);
  co_return ok && wellformed;
}

Task<bool> Occ::commit(Coordinator& c, Txn& t) {
  // (GCC 12 leaks the frame of a co_await operand inside || or ?:, so
  // each await is its own statement.)
  uint64_t t0 = c.phase_clock();
  bool ok = co_await lock(c, t);
  c.add_phase(Phase::kLock, t0);
  if (ok) {
    t0 = c.phase_clock();
    ok = co_await validate(c, t);
    c.add_phase(Phase::kValidate, t0);
  }
  if (!ok) {
    t0 = c.phase_clock();
    co_await release(c, t);
    c.add_phase(Phase::kRelease, t0);
    co_return false;
  }
  t0 = c.phase_clock();
  ok = co_await write_back(c, t);
  c.add_phase(Phase::kCommit, t0);
  co_return ok;
}

// Locks the write set; a read-write record is validated in the same round
// trip (its lock makes the version read with it final).
Task<bool> Occ::lock(Coordinator& c, Txn& t) {
  bool any = false;
  for (uint32_t i = 0; i < t.size(); ++i) any |= t.access(i).mode == AccessMode::kWrite;
  if (!any) co_return true;
  const bool rec = c.db().recording();
  if (o_.stage(Stage::kLock) == Primitive::kRpc) {
    ItemBatch& batch = c.items(kLockRpc);
    for (uint32_t i = 0; i < t.size(); ++i) {
      Access& a = t.access(i);
      if (a.mode != AccessMode::kWrite) continue;
      batch.add(i, t.id(), a.version, std::as_bytes(std::span(&a.state, 1)), rec ? 8 : 0);
    }
    bool ok = co_await batch.call();
    bool wellformed = batch.for_each_reply([&](uint32_t i, const ItemReply& r, std::span<const std::byte> data) {
      Access& a = t.access(i);
      if (r.status == kOk || r.status == kChanged) a.locked = true;
      // Recording: the version the write will replace, read under the lock.
      if (rec && a.locked && data.size() == 8) a.replaced = word(data.data(), 0);
      if (r.status == kConflict && t.abort_reason() == AbortReason::kNone) t.fail(AbortReason::kLockConflict);
      if (r.status == kChanged && validating_ && t.abort_reason() == AbortReason::kNone)
        t.fail(AbortReason::kValidation);
      if (r.status < 0 && t.abort_reason() == AbortReason::kNone) t.fail(AbortReason::kNetwork);
    });
    if (!ok || !wellformed) {
      if (t.abort_reason() == AbortReason::kNone) t.fail(AbortReason::kNetwork);
      co_return false;
    }
    co_return t.abort_reason() == AbortReason::kNone;
  }
  OneSidedBatch& batch = c.onesided();
  const uint32_t hdr_end_off = 8;  // extra(i): [CAS result][seq .. state]
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (a.mode != AccessMode::kWrite) continue;
    const auto& d = c.descriptor(a.node, a.table);
    std::byte* x = c.extra(i);
    set_word(x, 0, UINT64_MAX);  // stays if the CAS never executed
    rdma::WorkRequest* cas = batch.add(a.node);
    cas->opcode = rdma::Opcode::kCompareSwap;
    cas->local = x;
    cas->length = 8;
    cas->remote_addr = a.tuple_addr + kLockOff;
    cas->rkey = d.rkey;
    cas->compare_add = 0;
    cas->swap = t.id();
    rdma::WorkRequest* rd = batch.add(a.node);
    rd->opcode = rdma::Opcode::kRead;
    rd->local = x + hdr_end_off;
    rd->length = c.db().layout(a.table).record_offset() - kSeqOff;  // seq, [writer], key, state
    rd->remote_addr = a.tuple_addr + kSeqOff;
    rd->rkey = d.rkey;
  }
  bool posted = co_await batch.execute();
  bool ok = posted;
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (a.mode != AccessMode::kWrite) continue;
    const std::byte* x = c.extra(i);
    uint64_t old = word(x, 0);
    if (old == 0) a.locked = true;
    if (!posted) continue;
    if (old != 0) {
      if (ok) t.fail(AbortReason::kLockConflict);
      ok = false;
      continue;
    }
    const auto& l = c.db().layout(a.table);
    uint64_t seq = word(x, hdr_end_off);
    uint64_t state = word(x, hdr_end_off + l.state_offset() - kSeqOff);
    if (rec) a.replaced = word(x, hdr_end_off + c.db().history_word_offset() - kSeqOff);
    if (validating_ && (seq != a.version || state != a.state)) {
      if (ok) t.fail(AbortReason::kValidation);
      ok = false;
    }
  }
  if (!posted) t.fail(AbortReason::kNetwork);
  co_return ok;
}

// Validates the read-only set: unlocked, same version, same incarnation.
Task<bool> Occ::validate(Coordinator& c, Txn& t) {
  bool any = false;
  for (uint32_t i = 0; i < t.size(); ++i) any |= t.access(i).mode == AccessMode::kRead;
  if (!any || !validating_) co_return true;
  if (o_.stage(Stage::kValidate) == Primitive::kRpc) {
    ItemBatch& batch = c.items(kValidateRpc);
    for (uint32_t i = 0; i < t.size(); ++i) {
      Access& a = t.access(i);
      if (a.mode == AccessMode::kRead) batch.add(i, a.version, 0, std::as_bytes(std::span(&a.state, 1)), 0);
    }
    bool ok = co_await batch.call();
    bool all = true;
    bool wellformed = batch.for_each_reply([&](uint32_t, const ItemReply& r, std::span<const std::byte>) {
      all &= r.status == kOk;
    });
    if (!ok || !wellformed) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
    if (!all) t.fail(AbortReason::kValidation);
    co_return all;
  }
  OneSidedBatch& batch = c.onesided();
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (a.mode != AccessMode::kRead) continue;
    rdma::WorkRequest* rd = batch.add(a.node);
    rd->opcode = rdma::Opcode::kRead;
    rd->local = c.extra(i);
    rd->length = c.db().layout(a.table).record_offset();  // lock, seq, [writer], key, state
    rd->remote_addr = a.tuple_addr;
    rd->rkey = c.descriptor(a.node, a.table).rkey;
  }
  if (!co_await batch.execute()) {
    t.fail(AbortReason::kNetwork);
    co_return false;
  }
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (a.mode != AccessMode::kRead) continue;
    const std::byte* x = c.extra(i);
    const auto& l = c.db().layout(a.table);
    if (word(x, kLockOff) != 0 || word(x, kSeqOff) != a.version || word(x, l.state_offset()) != a.state) {
      t.fail(AbortReason::kValidation);
      co_return false;
    }
  }
  co_return true;
}

// Installs the write set (new version) and unlocks: WRITE record+seq, then
// WRITE the lock word, in order on each QP.
Task<bool> Occ::write_back(Coordinator& c, Txn& t) {
  const bool rec = c.db().recording();
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (a.mode != AccessMode::kWrite) continue;
    set_word(a.copy, kSeqOff, a.version + 1);
    if (rec) set_word(a.copy, c.db().history_word_offset(), t.id());
  }
  if (o_.stage(Stage::kCommit) == Primitive::kRpc) {
    ItemBatch& batch = c.items(kCommitRpc);
    for (uint32_t i = 0; i < t.size(); ++i) {
      Access& a = t.access(i);
      if (a.mode != AccessMode::kWrite) continue;
      const auto& l = c.db().layout(a.table);
      // Everything after the lock word: seq, [writer], header, record.
      batch.add(i, t.id(), 0, std::span<const std::byte>(a.copy + kSeqOff, l.tuple_bytes() - kSeqOff), 0);
    }
    if (batch.empty()) co_return true;
    if (o_.passive_ack) co_return batch.send_passive(false);
    bool ok = co_await batch.call();
    batch.for_each_reply([&](uint32_t, const ItemReply& r, std::span<const std::byte>) { ok &= r.status == kOk; });
    if (!ok) ++e_.stats().commit_errors;
    co_return true;  // committed: validation passed; a failed write-back is counted, not retried
  }
  OneSidedBatch& batch = c.onesided();
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (a.mode != AccessMode::kWrite) continue;
    const auto& l = c.db().layout(a.table);
    uint32_t rkey = c.descriptor(a.node, a.table).rkey;
    // The record (and writer id) first, the new version after it, then the
    // unlock, in order on the QP: a reader whose copy shows the new version
    // has the new record too (RDMA writes land in order, ascending).
    rdma::WorkRequest* wr = batch.add(a.node);
    wr->opcode = rdma::Opcode::kWrite;
    wr->local = a.copy + kSeqOff + 8;
    wr->length = l.tuple_bytes() - kSeqOff - 8;
    wr->remote_addr = a.tuple_addr + kSeqOff + 8;
    wr->rkey = rkey;
    rdma::WorkRequest* seq = batch.add(a.node);
    seq->opcode = rdma::Opcode::kWrite;
    seq->local = a.copy + kSeqOff;
    seq->length = 8;
    seq->remote_addr = a.tuple_addr + kSeqOff;
    seq->rkey = rkey;
    batch.add_unlock(a);
    a.locked = false;
  }
  if (batch.empty()) co_return true;
  if (o_.passive_ack) {
    if (!batch.post_only(c.pending_commit())) ++e_.stats().commit_errors;
    co_return true;
  }
  if (!co_await batch.execute()) ++e_.stats().commit_errors;
  co_return true;
}

Task<void> Occ::release(Coordinator& c, Txn& t) {
  bool any = false;
  for (uint32_t i = 0; i < t.size(); ++i) any |= t.access(i).locked;
  if (!any) co_return;
  if (o_.stage(Stage::kCommit) == Primitive::kRpc) {
    ItemBatch& batch = c.items(kReleaseRpc);
    for (uint32_t i = 0; i < t.size(); ++i)
      if (t.access(i).locked) batch.add(i, t.id(), 0, {}, 0);
    if (o_.passive_ack) {
      batch.send_passive(false);
    } else {
      co_await batch.call();
    }
  } else {
    OneSidedBatch& batch = c.onesided();
    for (uint32_t i = 0; i < t.size(); ++i) {
      Access& a = t.access(i);
      if (!a.locked) continue;
      batch.add_unlock(a);
    }
    if (o_.passive_ack) {
      batch.post_only(c.pending_commit());
    } else {
      co_await batch.execute();
    }
  }
  for (uint32_t i = 0; i < t.size(); ++i) t.access(i).locked = false;
}

// Owner side. serve_items looks each item's key up in this node's store;
// ids and lengths from the message are checked before use.
void Occ::register_handlers() {
  rpc::Endpoint& ep = *e_.ctx().rpc;
  const store::Store& st = e_.db().store(e_.node());
  using Data = std::span<const std::byte>;
  auto word_arg = [](Data d) {
    uint64_t v;
    std::memcpy(&v, d.data(), 8);
    return v;
  };
  (void)ep.register_handler(kFetchRpc, "occ.fetch", [&st](rpc::Request& r) {
    serve_items(r, st, [](const ItemHeader&, Data, int rc, store::Table* tab, const store::TupleRef& ref,
                          ItemWriter& out) {
      if (rc != 0) {
        out.add({rc, 0, 0, 0, 0});
        return;
      }
      std::byte* dst = out.add_reserved({0, 0, ref.index, ref.state, 0}, tab->tuple_bytes());
      // Erased or reused during the copy: the bytes are not the key's.
      if (dst != nullptr && !tab->copy_tuple(ref, dst)) out.set_last_status(-EAGAIN);
    });
  });
  const uint32_t history_word = e_.db().recording() ? e_.db().history_word_offset() : 0;
  (void)ep.register_handler(kLockRpc, "occ.lock", [&st, word_arg, history_word](rpc::Request& r) {
    serve_items(r, st, [&](const ItemHeader& h, Data data, int rc, store::Table* tab, const store::TupleRef& ref,
                           ItemWriter& out) {
      if (rc != 0 || data.size() != 8) {
        out.add({rc != 0 ? rc : -EINVAL, 0, 0, 0, 0});
        return;
      }
      uint64_t expect = 0;
      if (!tuple_word(ref.tuple, kLockOff).compare_exchange_strong(expect, h.arg0, std::memory_order_acquire)) {
        out.add({kConflict, 0, 0, 0, 0});
        return;
      }
      uint64_t seq = tuple_word(ref.tuple, kSeqOff).load(std::memory_order_acquire);
      uint64_t state = tuple_word(ref.tuple, tab->layout().state_offset()).load(std::memory_order_acquire);
      const ItemReply reply{seq == h.arg1 && state == word_arg(data) ? kOk : kChanged, 0, ref.index, state, seq};
      if (history_word == 0) {
        out.add(reply);
        return;
      }
      // Recording: the writer id of the version the lock holder will replace.
      const uint64_t writer = tuple_word(ref.tuple, history_word).load(std::memory_order_acquire);
      out.add(reply, std::as_bytes(std::span(&writer, 1)));
    });
  });
  (void)ep.register_handler(kValidateRpc, "occ.validate", [&st, word_arg](rpc::Request& r) {
    serve_items(r, st, [&](const ItemHeader& h, Data data, int rc, store::Table* tab, const store::TupleRef& ref,
                           ItemWriter& out) {
      bool ok = rc == 0 && data.size() == 8 &&
                tuple_word(ref.tuple, kLockOff).load(std::memory_order_acquire) == 0 &&
                tuple_word(ref.tuple, kSeqOff).load(std::memory_order_acquire) == h.arg0 &&
                tuple_word(ref.tuple, tab->layout().state_offset()).load(std::memory_order_acquire) ==
                    word_arg(data);
      out.add({ok ? kOk : kChanged, 0, 0, 0, 0});
    });
  });
  (void)ep.register_handler(kCommitRpc, "occ.commit", [&st](rpc::Request& r) {
    serve_items(r, st, [](const ItemHeader& h, Data data, int rc, store::Table* tab, const store::TupleRef& ref,
                          ItemWriter& out) {
      if (rc != 0 || data.size() != tab->tuple_bytes() - kSeqOff || data.size() % 8 != 0 ||
          tuple_word(ref.tuple, kLockOff).load(std::memory_order_acquire) != h.arg0) {
        out.add({kNotHeld, 0, 0, 0, 0});
        return;
      }
      // Record first, then the version, then the unlock that publishes
      // them (as the one-sided commit orders its WRITEs).
      const auto* words = reinterpret_cast<const uint64_t*>(data.data());
      store::store_words(reinterpret_cast<uint64_t*>(ref.tuple + kSeqOff + 8), words + 1, data.size() / 8 - 1);
      tuple_word(ref.tuple, kSeqOff).store(words[0], std::memory_order_release);
      tuple_word(ref.tuple, kLockOff).store(0, std::memory_order_release);
      out.add({kOk, 0, 0, 0, 0});
    });
  });
  (void)ep.register_handler(kReleaseRpc, "occ.release", [&st](rpc::Request& r) {
    serve_items(r, st, [](const ItemHeader& h, Data, int rc, store::Table*, const store::TupleRef& ref,
                          ItemWriter& out) {
      uint64_t holder = h.arg0;
      bool ok = rc == 0 &&
                tuple_word(ref.tuple, kLockOff).compare_exchange_strong(holder, 0, std::memory_order_release);
      out.add({ok ? kOk : kNotHeld, 0, 0, 0, 0});
    });
  });
}

std::unique_ptr<Protocol> create(WorkerEngine& e) { return std::make_unique<Occ>(e, true); }
std::unique_ptr<Protocol> create_unvalidated(WorkerEngine& e) { return std::make_unique<Occ>(e, false); }

}  // namespace

const ProtocolDef kDef = {
    "occ",
    "optimistic: read without locks; at commit lock writes, validate reads, write back (RTX / DrTM+H)",
    16,
    {
        {Primitive::kOneSided, Primitive::kRpc, Primitive::kHybrid},  // fetch
        {Primitive::kOneSided, Primitive::kRpc},                      // lock
        {Primitive::kOneSided, Primitive::kRpc},                      // validate
        {},                                                           // log
        {Primitive::kOneSided, Primitive::kRpc},                      // commit
    },
    create,
};

const ProtocolDef kUnvalidatedForTests = {
    "occ-unvalidated",
    "BROKEN, tests only: OCC that validates neither its reads nor its read-write records",
    kDef.meta_bytes,
    {kDef.allowed[0], kDef.allowed[1], kDef.allowed[2], kDef.allowed[3], kDef.allowed[4]},
    create_unvalidated,
};

}  // namespace rdtx::cc::occ
