// OCC as in RTX / DrTM+H, composed from the stage toolkit:
//   fetch     read_tuples (one-sided, RPC or hybrid), no locks
//   lock      lock_read of the write set: CAS lock + READ of the version and
//             header in one round trip; a read-write record whose version
//             or state changed fails validation there
//   validate  read_meta of the read-only set: unlocked, same version, same
//             incarnation
//   commit    write_back_unlock: body (checksum, record), then the version,
//             then the unlock
//   release   release_locks
//
// Tuple metadata: word 0 the lock (0, or the attempt id holding it), word 1
// the sequence number (version, bumped by every committed write), word 2 a
// checksum of (version, [history word], record).
//
// Consistent copies without relying on READ byte order: a lock-free READ may
// copy the tuple's words in any order while a commit installs them in any
// order. A copy whose version is older than the tuple's by the time of
// validation fails validation (the version is re-read under lock or by
// read_meta). The dangerous copy shows the NEW version with some OLD record
// words; its checksum, computed by the writer over the new version and
// record, does not match, and the copy is read again. Version 0 (the loaded
// record, never written) is never the new side of a torn copy, so a copy
// showing version 0 needs no checksum. Cost: one multiply-xor per record
// word at write-back and at fetch.
#include <algorithm>
#include <cstring>

#include "cc/occ/occ.hpp"
#include "store/tuple.hpp"
#include "txn/coordinator.hpp"
#include "txn/stages/copy_check.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::occ {

using namespace rdtx::txn;
using runtime::Task;

uint64_t checksum(const std::byte* tuple, uint64_t version, const store::TupleLayout& l) {
  uint64_t h = checksum_start(version);
  h = checksum_words(h, tuple, kMetaBytes, l.meta_bytes);  // history and hidden words
  return checksum_words(h, tuple, l.meta_bytes + 16, l.tuple_bytes());
}

namespace {

// A transaction whose only access is a read: what the broken variant
// occ-broken-staleread answers without looking at locks.
bool single_read(const Txn& t) { return t.size() == 1 && t.access(0).mode == AccessMode::kRead; }

// A fetched copy is usable if no commit held it and it is not torn.
template <bool kStaleSingleReads>
Verdict accept_copy(Coordinator& c, Txn& t, Access& a) {
  const auto& l = c.db().layout(a.table);
  if (copy_word(a.copy, kLockOff) != 0 && !(kStaleSingleReads && single_read(t))) {
    t.fail(kLockedAtRead);
    return Verdict::kAbort;
  }
  const uint64_t seq = copy_word(a.copy, kSeqOff);
  if (seq != 0 && copy_word(a.copy, kSumOff) != checksum(a.copy, seq, l)) return Verdict::kRetry;
  t.state<AccessState>(static_cast<uint32_t>(&a - &t.access(0))).version = seq;
  if (c.db().recording()) a.writer = a.replaced = copy_word(a.copy, c.db().history_word_offset());
  return Verdict::kAccept;
}

}  // namespace

// A plain function returning the toolkit's task: no coroutine frame of its own.
Task<bool> fetch_unlocked(Coordinator& c, Txn& t, Primitive p, uint32_t from) {
  return read_tuples(c, t, p, from, accept_copy<false>, kUnsettledRead);
}

Task<bool> validate_reads(Coordinator& c, Txn& t, Primitive p) {
  ItemList r;
  for (uint32_t i = 0; i < t.size(); ++i)
    if (t.access(i).mode == AccessMode::kRead) r.idx[r.n++] = i;
  if (r.empty()) co_return true;
  const uint32_t len = c.db().layout(t.access(r.idx[0]).table).record_offset();
  // Tables differ in metadata only by the history word: every table's
  // metadata and header must fit the one span read for all.
  for (uint32_t k = 0; k < r.n; ++k)
    if (c.db().layout(t.access(r.idx[k]).table).record_offset() != len) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
  // read_meta reads the lock word before the version (fenced).
  if (!co_await read_meta(c, t, p, r.span(), len)) co_return false;
  for (uint32_t k = 0; k < r.n; ++k) {
    const uint32_t i = r.idx[k];
    const Access& a = t.access(i);
    const std::byte* x = c.extra(i);
    if (copy_word(x, kLockOff) != 0 || copy_word(x, kSeqOff) != t.state<AccessState>(i).version ||
        copy_word(x, c.db().layout(a.table).state_offset()) != a.state) {
      t.fail(kValidation);
      co_return false;
    }
  }
  co_return true;
}

namespace {

Task<bool> nothing_to_validate() { co_return true; }

struct Occ final : public Protocol {
  Occ(WorkerEngine& e, bool validating, bool stale_single_reads)
      : o(e.options()), validating(validating), stale_single_reads(stale_single_reads) {}
  const Options& o;
  const bool validating;  // false only in the broken variant for tests
  // The broken variant occ-broken-staleread: a transaction of one read
  // takes the record's installed version even while a commit holds it, and
  // is not validated. One committed version, read atomically: still
  // serializable; but a commit its coordinator already acknowledged may
  // not be installed yet, so the read can miss it (not strict).
  const bool stale_single_reads;
};

// The stage modules below that only hand over to a shared piece are plain
// functions returning its task: no coroutine frame of their own.
Task<bool> fetch(Occ& p, Coordinator& c, Txn& t, uint32_t from) {
  if (p.stale_single_reads)
    return read_tuples(c, t, p.o.stage(Stage::kFetch), from, accept_copy<true>, kUnsettledRead);
  return fetch_unlocked(c, t, p.o.stage(Stage::kFetch), from);
}

// Locks the write set; a read-write record is validated in the same round
// trip (its lock makes the version read with it final).
Task<bool> lock(Occ& p, Coordinator& c, Txn& t, uint32_t) {
  ItemList w;
  for (uint32_t i = 0; i < t.size(); ++i)
    if (t.access(i).mode == AccessMode::kWrite) w.idx[w.n++] = i;
  if (w.empty()) co_return true;
  // [version .. state]: the span is copied into extra(i) at its offsets.
  const uint32_t header_end = c.db().layout(t.access(w.idx[0]).table).record_offset();
  LockResult res[Txn::kMaxAccesses];
  uint64_t holders[Txn::kMaxAccesses];
  bool ok = true;
  // Tables differ in metadata only by the history word: one span per table.
  for (uint32_t k = 0; k < w.n; ++k)
    if (c.db().layout(t.access(w.idx[k]).table).record_offset() != header_end) ok = false;
  if (!ok) {
    t.fail(AbortReason::kNetwork);
    co_return false;
  }
  const bool sent = co_await lock_read(c, t, p.o.stage(Stage::kLock), w.span(), t.id(),
                                      {kSeqOff, header_end - kSeqOff, false}, res, holders);
  if (!sent) co_return false;
  const bool rec = c.db().recording();
  for (uint32_t k = 0; k < w.n; ++k) {
    const uint32_t i = w.idx[k];
    Access& a = t.access(i);
    if (res[k] != LockResult::kGranted) {
      if (t.abort_reason() == AbortReason::kNone)
        t.fail(res[k] == LockResult::kConflict || res[k] == LockResult::kNotAttempted ? kLockConflict
               : res[k] == LockResult::kStale                                          ? kValidation
                                                                                        : AbortReason::kNetwork);
      ok = false;
      continue;
    }
    const std::byte* x = c.extra(i);
    const auto& l = c.db().layout(a.table);
    if (rec) a.replaced = copy_word(x, c.db().history_word_offset());
    if (p.validating && (copy_word(x, kSeqOff) != t.state<AccessState>(i).version || copy_word(x, l.state_offset()) != a.state)) {
      if (t.abort_reason() == AbortReason::kNone) t.fail(kValidation);
      ok = false;
    }
  }
  co_return ok;
}

// Validates the read-only set: unlocked, same version, same incarnation.
Task<bool> validate(Occ& p, Coordinator& c, Txn& t, uint32_t) {
  if (!p.validating || (p.stale_single_reads && single_read(t))) return nothing_to_validate();
  return validate_reads(c, t, p.o.stage(Stage::kValidate));
}

// Installs the write set (new version, checksum) and unlocks.
Task<bool> commit(Occ& p, Coordinator& c, Txn& t, uint32_t) {
  const bool rec = c.db().recording();
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (a.mode != AccessMode::kWrite) continue;
    const auto& l = c.db().layout(a.table);
    set_copy_word(a.copy, kLockOff, 0);
    set_copy_word(a.copy, kSeqOff, t.state<AccessState>(i).version + 1);
    if (rec) set_copy_word(a.copy, c.db().history_word_offset(), t.id());
    set_copy_word(a.copy, kSumOff, checksum(a.copy, t.state<AccessState>(i).version + 1, l));
  }
  // Validated: committed; a failed write-back is a commit error (a failed check).
  return write_back_unlock(c, t, p.o.stage(Stage::kCommit), {kSumOff, kSeqOff}, t.id());
}

Task<bool> release(Occ& p, Coordinator& c, Txn& t, uint32_t) {
  return release_locks(c, t, p.o.stage(Stage::kCommit), t.id());
}

Result<std::unique_ptr<Protocol>> make(WorkerEngine& e, bool validating, bool stale_single_reads = false) {
  auto p = std::make_unique<Occ>(e, validating, stale_single_reads);
  // The lock stage takes lock words (NIC CAS one-sided, the owner's CAS
  // over RPC: owner_atomics.hpp); fetch and validate read, commit and
  // release store (the holder's WRITE or store: no RMW).
  e.set_atomic_stages(stage_bit(Stage::kLock));
  p->set_stage(Stage::kFetch, *p, fetch);
  p->set_stage(Stage::kLock, *p, lock);
  p->set_stage(Stage::kValidate, *p, validate);
  p->set_stage(Stage::kCommit, *p, commit);
  p->set_release(*p, release);
  return std::unique_ptr<Protocol>(std::move(p));
}
Result<std::unique_ptr<Protocol>> create(WorkerEngine& e) { return make(e, true); }
Result<std::unique_ptr<Protocol>> create_unvalidated(WorkerEngine& e) { return make(e, false); }
Result<std::unique_ptr<Protocol>> create_stale_reads(WorkerEngine& e) { return make(e, true, true); }

}  // namespace

// Recovery of a removed coordinator's transactions (txn/recovery.hpp):
// the lock word holds the attempt id; a committed write is installed as
// commit() writes it back (body and checksum, then the version; the unlock
// comes with release()), so that lock-free readers see it as any other
// commit.
namespace {
uint64_t recovery_holder(const std::byte* tuple, const store::TupleLayout&) {
  return store::load_word(reinterpret_cast<const uint64_t*>(tuple + kLockOff), std::memory_order_acquire);
}
void recovery_release(std::byte* tuple, const store::TupleLayout&) {
  store::store_word(reinterpret_cast<uint64_t*>(tuple + kLockOff), 0, std::memory_order_release);
}
void recovery_install(std::byte* tuple, const store::TupleLayout& l, const Database& db,
                      std::span<const std::byte> record, uint64_t seq, uint64_t writer) {
  auto word = [tuple](uint32_t off) { return reinterpret_cast<uint64_t*>(tuple + off); };
  const uint64_t version = store::load_word(word(kSeqOff), std::memory_order_acquire) + 1;
  // Word by word (lock-free readers load words): the last word keeps the
  // slot's bytes past the record.
  uint64_t* dst = word(l.record_offset());
  const size_t n = record.size();
  for (size_t off = 0; off < n; off += 8) {
    uint64_t w = off + 8 <= n ? 0 : store::load_word(dst + off / 8, std::memory_order_relaxed);
    std::memcpy(&w, record.data() + off, std::min<size_t>(8, n - off));
    store::store_word(dst + off / 8, w, std::memory_order_relaxed);
  }
  store::store_word(word(db.replication_word_offset()), seq, std::memory_order_relaxed);
  if (db.recording()) store::store_word(word(db.history_word_offset()), writer, std::memory_order_relaxed);
  store::store_word(word(kSumOff), checksum(tuple, version, l), std::memory_order_relaxed);
  store::store_word(word(kSeqOff), version, std::memory_order_release);
}
}  // namespace

constexpr RecoveryHooks kRecovery = {recovery_holder, recovery_install, recovery_release};
constexpr ProtocolDef kDef = {
    .name = "occ",
    .summary = "optimistic: read without locks; at commit lock writes, validate reads, write back (RTX / DrTM+H)",
    .meta_bytes = kMetaBytes,
    .access_state_bytes = sizeof(AccessState),
    .isolation = Isolation::kSerializable,
    .strict = true,  // a read of a record a commit still holds aborts (doc/txn.md)
    .allowed = {.fetch = {Primitive::kOneSided, Primitive::kRpc, Primitive::kHybrid},
                .lock = {Primitive::kOneSided, Primitive::kRpc},
                .validate = {Primitive::kOneSided, Primitive::kRpc},
                .commit = {Primitive::kOneSided, Primitive::kRpc}},
    .abort_reasons = kReasons,
    .lock_held = lock_word0_held,
    .recovery = &kRecovery,
    .create = create,
};

constexpr ProtocolDef kUnvalidatedForTests =
    broken_variant(kDef, "occ-unvalidated",
                   "BROKEN, tests only: OCC that validates neither its reads nor its read-write records",
                   create_unvalidated);

// Serializable, but not strictly: caught by real-time order alone
// (BrokenProtocol.OccStaleSingleReadsAreCaughtByRealTime).
constexpr ProtocolDef kStaleReadForTests =
    broken_variant(kDef, "occ-broken-staleread",
                   "BROKEN, tests only: OCC whose one-read transactions read past a committer's lock, unvalidated",
                   create_stale_reads);

RDTX_REGISTER_PROTOCOL(kDef)
RDTX_REGISTER_PROTOCOL(kUnvalidatedForTests)
RDTX_REGISTER_PROTOCOL(kStaleReadForTests)

}  // namespace rdtx::cc::occ
