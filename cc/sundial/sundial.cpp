// SUNDIAL (RCC section 4.5, after Yu et al., "Sundial", VLDB 2018), composed
// from the stage toolkit. Writes are locked at fetch as under WAITDIE; reads
// take no lock and carry a logical lease [wts, rts]; the commit timestamp
// tts is chosen late, from the leases seen, and a read whose lease does not
// reach tts is renewed before the commit.
//
// RCC numbers the steps of its Figure 9 (write) and Figure 10 (read)
// separately; below, "write a2" is step a2 of the write figure (RPC), "read
// b3" step b3 of the read figure (one-sided).
//
//   fetch     reads first, then writes (see fetch() for why), each round:
//             writes: lock_read, WAITDIE (write a1-a2 / b1): the lock word
//             takes the transaction's priority (Txn::timestamp()); an older
//             requester waits (one-sided: CAS+READ again after a yield; RPC:
//             the owner parks it in the toolkit's LockWaitList), a younger
//             one dies. The copy read under the lock gives the tuple's rts
//             (write a4 / b3: tts >= rts + 1).
//             reads: read_tuples (read a1-a2 / b1-b2), lock-free, one-sided,
//             RPC, or hybrid (READ on a location-cache hit, RPC on a miss);
//             the copy gives [wts, rts] (tts >= wts).
//   validate  tts = max(max over reads of wts, max over writes of rts + 1).
//             Every read whose lease does not cover tts (rts < tts) is
//             renewed (read a4 / b3): the owner (RPC) or the coordinator
//             (one-sided) takes the tuple's lock word for the extension
//             (CAS 0 -> our priority), checks that wts (and the store's
//             incarnation) did not change, sets rts = max(rts, tts) and a
//             new checksum, then unlocks. A renewal that finds a new wts
//             fails, and so does one that finds the tuple locked by
//             another transaction, unless its current rts already reaches
//             tts (Sundial's rule; covered_while_locked): the attempt
//             aborts (lease_renewal).
//   commit    write_back_unlock of the write set with wts = rts = tts
//             (write a5-a6 / b4): body (rts, checksum, history word, header,
//             record), then wts, then the unlock, in order per owner.
//   release   release_locks.
//
// Tuple metadata (RCC Figure 3: lock | rts | wts | record; the words are
// in a different order here so that one write-back span covers them):
//   word 0  lock: 0, or the holder's priority (Txn::timestamp(), WAITDIE)
//   word 1  wts: the commit timestamp of the version's writer (0: loaded)
//   word 2  rts: the end of the version's lease (>= wts)
//   word 3  checksum of (wts, rts, [history word], record); 0 on a tuple
//           loaded and never written or renewed
//
// Why renewal locks (RCC's one-sided b3 extends rts with a plain WRITE
// after a READ of the metadata): a writer W that took the lock and read rts
// = r before the extension installs its version at some ts > r, possibly
// <= the extended rts. A WRITE (or a CAS on rts alone) cannot see W's lock
// in the same step, so the extended lease would overlap W's version: a
// reader committing inside the overlap reads the old version at a
// timestamp where W's is current, and the history is not serializable. A
// failed extension is no better: other readers may see the extended rts
// before W's commit overwrites it. Here rts changes only under the lock
// word (commit or renewal), so whenever a tuple shows (wts = a, rts = r),
// the next version gets a wts > r: its writer reads rts under its lock, and
// no renewal can run while it holds it. That is also the original
// Sundial's rule (renewal refused while the tuple is locked). Renewal costs
// the same round trips as RCC's: one-sided CAS+READ (one doorbell), then
// WRITE(rts, checksum)+WRITE(unlock), which with passive ACK is not
// awaited; RPC one call, the owner doing it all in its handler.
//
// Consistent lock-free copies without a READ byte order: neither a READ
// nor a write-back promises an order among the words it copies, so a copy
// may mix two versions' words, or pair a version with an rts written by
// the next version's commit (a lease that version never had). The
// checksum covers wts, rts, the history word and the record; rts is in it
// because it is the part of the lease a reader trusts without asking the
// owner, and every change of rts (commit or renewal, both under the lock)
// writes a new checksum with it. A copy whose checksum does not match is
// read again. A copy with checksum 0 is a loaded tuple's (every written
// checksum is made non-zero): if its wts is not 0 it is torn and read
// again; if it is 0, it is accepted but must be renewed, whatever tts is.
// That renewal proves it: it sees wts still 0 under the lock, and a
// write-back ends by setting wts != 0 before unlocking, so no word of the
// tuple had changed since load. The renewal writes a checksum, so later
// readers need not renew it. The RPC read (the store's seqlock copy) is
// judged the same way: one-sided write-backs from other workers may land
// during it.
#include "cc/sundial/sundial.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "store/tuple.hpp"
#include "txn/coordinator.hpp"
#include "txn/item_batch.hpp"
#include "txn/locate.hpp"
#include "txn/stages/copy_check.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::sundial {

using namespace rdtx::txn;
using runtime::Task;

namespace {

constexpr uint32_t kLockOff = 0;
constexpr uint32_t kWtsOff = 8;
constexpr uint32_t kRtsOff = 16;
constexpr uint32_t kSumOff = 24;
constexpr uint32_t kMetaBytes = 32;

constexpr int kRelocateAttempts = 4;
constexpr uint32_t kWaitListCapacity = 256;

// The protocol's abort reasons, in the order of kDef.abort_reasons.
const AbortReason kWaitDie = protocol_reason(0);
const AbortReason kLeaseRenewal = protocol_reason(1);
const AbortReason kUnsettledRead = protocol_reason(2);

// The renewal handler's per-item statuses (negative: lookup errors).
enum RenewStatus : int32_t {
  kRenewed = 0,  // ItemReply::arg: the tuple's rts now
  kLocked = 1,   // held by another transaction: ItemReply::arg its value
  kChanged = 2,  // a new version (wts) or incarnation since the read
};

// Per access: the lease seen at fetch (writes: rts read under the lock).
struct AccessState {
  uint64_t wts;
  uint64_t rts;
  uint64_t must_renew;  // a loaded tuple's copy: unproven until renewed
};


uint64_t mix(uint64_t h, uint64_t w) { return checksum_words(h, reinterpret_cast<const std::byte*>(&w), 0, 8); }

// Checksum of a tuple's wts, rts, history word (if any) and record, each
// word given by load(offset); never 0 (0 marks a loaded tuple).
template <typename Load>
uint64_t checksum_of(const store::TupleLayout& l, Load load) {
  uint64_t h = mix(checksum_start(load(kWtsOff)), load(kRtsOff));
  for (uint32_t off = kMetaBytes; off < l.meta_bytes; off += 8) h = mix(h, load(off));  // history word
  for (uint32_t off = l.record_offset(); off < l.tuple_bytes(); off += 8) h = mix(h, load(off));
  return h != 0 ? h : 1;
}
uint64_t checksum(const std::byte* tuple, const store::TupleLayout& l) {
  return checksum_of(l, [tuple](uint32_t off) { return copy_word(tuple, off); });
}

// Sundial's renewal rule for a tuple locked by another transaction: the
// renewal still succeeds, with nothing to extend, if the tuple's current
// version is the one read and its lease already reaches tts (the holder
// read that rts under its lock and commits above it). (wts, rts) must be
// one state the tuple had, not words torn by the holder's write-back: the
// checksum read with them must match them and the version's history word
// and record (body(offset): from the reader's copy, or the tuple itself on
// its owner). `now`: the tuple's wts, rts, checksum as read (each once).
struct MetaNow {
  uint64_t wts, rts, sum;
};
template <typename Load>
bool covered_while_locked(const store::TupleLayout& l, const MetaNow& now, Load body, uint64_t wts, uint64_t tts) {
  if (now.wts != wts || now.rts < tts) return false;
  return now.sum == checksum_of(l, [&](uint32_t off) {
           return off == kWtsOff ? now.wts : off == kRtsOff ? now.rts : body(off);
         });
}

class Sundial final : public Protocol {
 public:
  Sundial(WorkerEngine& e, bool renewing) : o(e.options()), renewing(renewing) {}
  const Options& o;
  const bool renewing;  // false only in the broken variant for tests
  rpc::HandlerId renew = 0;
};

uint32_t index_of(const Txn& t, const Access& a) { return static_cast<uint32_t>(&a - &t.access(0)); }

// The commit timestamp the accesses allow (read a3 / b2: tts = max(tts,
// wts); write a4 / b3: tts >= rts + 1): Sundial's commit_ts.
uint64_t commit_ts(Txn& t) {
  uint64_t tts = 0;
  for (uint32_t i = 0; i < t.size(); ++i) {
    const AccessState& s = t.state<AccessState>(i);
    tts = std::max(tts, t.access(i).mode == AccessMode::kWrite ? s.rts + 1 : s.wts);
  }
  return tts;
}

// A lock-free copy (read a2 / b2): usable if it is one version's (checksum;
// over RPC this is read a2's re-check, the owner's copy not being taken
// under the lock), whatever the lock word says: a reader does not wait for
// a writer, its lease orders it before the writer's version.
Verdict accept_read(Coordinator& c, Txn& t, Access& a) {
  const auto& l = c.db().layout(a.table);
  const uint64_t wts = copy_word(a.copy, kWtsOff), sum = copy_word(a.copy, kSumOff);
  AccessState& s = t.state<AccessState>(index_of(t, a));
  if (sum == 0) {
    if (wts != 0) return Verdict::kRetry;  // a written version's words with a loaded checksum: torn
    s = {0, 0, 1};                         // loaded: proven by its renewal
  } else {
    if (sum != checksum(a.copy, l)) return Verdict::kRetry;
    s = {wts, copy_word(a.copy, kRtsOff), 0};
  }
  if (c.db().recording()) a.writer = copy_word(a.copy, c.db().history_word_offset());
  return Verdict::kAccept;
}

// Locks the write accesses `w` under WAITDIE and reads them whole (write
// a1-a2 / b1): older waits, younger dies.
Task<bool> lock_writes(Sundial& p, Coordinator& c, Txn& t, const ItemList& w) {
  const Primitive prim = p.o.stage(Stage::kFetch);
  const uint64_t mine = t.timestamp();
  const bool rec = c.db().recording();
  LockResult res[Txn::kMaxAccesses];
  uint64_t holders[Txn::kMaxAccesses];
  for (int relocations = 0; relocations < kRelocateAttempts;) {
    ItemList wanted;
    for (uint32_t k = 0; k < w.n; ++k)
      if (!t.access(w.idx[k]).fetched) wanted.idx[wanted.n++] = w.idx[k];
    if (wanted.empty()) co_return true;
    // Hybrid locks one-sided too: a lock has no lock-free form to mix in.
    if (prim != Primitive::kRpc && !co_await locate_onesided(c, t, wanted.span())) co_return false;
    const bool sent = co_await lock_read(c, t, prim, wanted.span(), mine, {0, 0, true}, res, holders);
    if (!sent) co_return false;
    bool waiting = false, relocate = false, dies = false, missing = false;
    for (uint32_t k = 0; k < wanted.n; ++k) {
      const uint32_t i = wanted.idx[k];
      Access& a = t.access(i);
      switch (res[k]) {
        case LockResult::kGranted: {
          // Under the lock: wts and rts are final until we unlock (write a4 / b3).
          t.state<AccessState>(i) = {copy_word(a.copy, kWtsOff), copy_word(a.copy, kRtsOff), 0};
          if (rec) a.writer = a.replaced = copy_word(a.copy, c.db().history_word_offset());
          a.fetched = true;
          break;
        }
        case LockResult::kStale: relocate = true; break;
        case LockResult::kConflict:
          if (wait_die(mine, holders[k]) == LockResult::kWait) waiting = true;  // one-sided: try again
          else dies = true;
          break;
        case LockResult::kWait: waiting = true; break;
        case LockResult::kDie:
        case LockResult::kNotAttempted: dies = true; break;
        case LockResult::kFailed: missing = true; break;
      }
    }
    if (missing || dies) {
      t.fail(missing ? AbortReason::kNotFound : kWaitDie);
      co_return false;
    }
    if (relocate) ++relocations;
    if (!waiting && !relocate) co_return true;
    if (waiting) co_await runtime::yield();  // older than every holder met: let them finish
  }
  t.fail(AbortReason::kNotFound);
  co_return false;
}

// Fetch: the reads lock-free, then the writes locked (WAITDIE). Reads go
// first so that write locks are held one round trip less (fewer younger
// transactions die on them); the reads' leases are then one round trip
// older, which renewal covers.
Task<bool> fetch(Sundial& p, Coordinator& c, Txn& t, uint32_t from) {
  ItemList w;
  bool reads = false;
  for (uint32_t i = from; i < t.size(); ++i) {
    if (t.access(i).fetched) continue;
    if (t.access(i).mode == AccessMode::kWrite) w.idx[w.n++] = i;
    else reads = true;
  }
  if (reads) {
    // read_tuples takes every access of the round not yet fetched: the
    // writes are marked fetched while it runs, so that it leaves them to
    // lock_read (their locations are still found, to be reused).
    for (uint32_t k = 0; k < w.n; ++k) t.access(w.idx[k]).fetched = true;
    const bool read = co_await read_tuples(c, t, p.o.stage(Stage::kFetch), from, accept_read, kUnsettledRead);
    for (uint32_t k = 0; k < w.n; ++k) t.access(w.idx[k]).fetched = false;
    if (!read) co_return false;
  }
  if (!w.empty() && !co_await lock_writes(p, c, t, w)) co_return false;
  co_return true;
}

// Read b3, one-sided: CAS the lock word + READ [wts .. header] in one
// doorbell per node; for each tuple still at the version read, WRITE the new
// rts and checksum, then WRITE 0 to the lock word (not awaited with passive
// ACK: a writer can only lock after the unlock, which lands after the rts).
Task<bool> renew_onesided(Sundial&, Coordinator& c, Txn& t, const ItemList& r, uint64_t tts) {
  LockResult res[Txn::kMaxAccesses];
  uint64_t holders[Txn::kMaxAccesses];
  // Every table has the same metadata, so one span fits all.
  const uint32_t header_end = c.db().layout(t.access(r.idx[0]).table).record_offset();
  const bool sent = co_await lock_read(c, t, Primitive::kOneSided, r.span(), t.timestamp(),
                                      {kWtsOff, header_end - kWtsOff, false}, res, holders);
  if (!sent) co_return false;  // kNetwork; what was locked is a.locked: the release frees it
  bool ok = true;
  OneSidedBatch& batch = c.onesided();
  for (uint32_t k = 0; k < r.n; ++k) {
    const uint32_t i = r.idx[k];
    Access& a = t.access(i);
    const std::byte* x = c.extra(i);
    const auto& l = c.db().layout(a.table);
    AccessState& s = t.state<AccessState>(i);
    if (res[k] != LockResult::kGranted) {
      // Locked by another transaction; the READ behind the failed CAS still
      // shows the tuple's words (any of them possibly being written).
      const MetaNow now{copy_word(x, kWtsOff), copy_word(x, kRtsOff), copy_word(x, kSumOff)};
      const std::byte* copy = a.copy;
      if (res[k] == LockResult::kConflict && copy_word(x, l.state_offset()) == a.state &&
          covered_while_locked(l, now, [copy](uint32_t off) { return copy_word(copy, off); }, s.wts, tts)) {
        s.rts = copy_word(x, kRtsOff);
        s.must_renew = 0;
      } else {
        ok = false;
      }
      continue;
    }
    if (copy_word(x, kWtsOff) != s.wts || copy_word(x, l.state_offset()) != a.state) {
      ok = false;  // a new version since the read
    } else {
      // Same version: the copy's history word and record are the tuple's
      // (for a loaded tuple: wts still 0 means never written, see above).
      s.rts = std::max(copy_word(x, kRtsOff), tts);
      s.must_renew = 0;
      set_copy_word(a.copy, kWtsOff, s.wts);
      set_copy_word(a.copy, kRtsOff, s.rts);
      set_copy_word(a.copy, kSumOff, checksum(a.copy, l));
      batch.write({a.node, a.tuple_addr + kRtsOff, c.descriptor(a.node, a.table).rkey}, a.copy + kRtsOff,
                  16);  // rts, checksum
    }
    batch.add_unlock(a);
    a.locked = false;
  }
  if (!batch.empty()) {
    if (c.engine().options().passive_ack && batch.fits_in_flight()) {
      if (!batch.post_only(c.pending_commit())) ++c.engine().stats().commit_errors;
    } else if (!co_await batch.execute()) {
      ++c.engine().stats().commit_errors;
    }
  }
  if (!ok) t.fail(kLeaseRenewal);
  co_return ok;
}

// Read a4, RPC: the owner renews (sundial.renew, below). It leaves no lock
// behind, so a lost, late or duplicated request needs no fence: applying it
// again only extends a lease, which is always safe under the lock.
Task<bool> renew_rpc(Sundial& p, Coordinator& c, Txn& t, const ItemList& r, uint64_t tts) {
  ItemBatch& batch = c.items(p.renew);
  for (uint32_t k = 0; k < r.n; ++k) {
    const uint32_t i = r.idx[k];
    const uint64_t data[2] = {t.timestamp(), t.access(i).state};
    if (!batch.add(i, tts, t.state<AccessState>(i).wts, std::as_bytes(std::span(data)), 0)) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
  }
  if (!co_await batch.call()) {
    t.fail(AbortReason::kNetwork);
    co_return false;
  }
  AbortReason verdict = AbortReason::kNone;
  const bool wellformed = batch.for_each_reply([&](uint32_t i, const ItemReply& rep, std::span<const std::byte>) {
    if (rep.status == kRenewed) {
      t.state<AccessState>(i).rts = rep.arg;
      t.state<AccessState>(i).must_renew = 0;
      return;
    }
    if (verdict != AbortReason::kNone) return;
    if (rep.status == kLocked || rep.status == kChanged) verdict = kLeaseRenewal;
    else if (rep.status == -ENOENT) verdict = AbortReason::kNotFound;
    else verdict = AbortReason::kNetwork;
  });
  if (!wellformed) verdict = AbortReason::kNetwork;
  if (verdict != AbortReason::kNone) {
    t.fail(verdict);
    co_return false;
  }
  co_return true;
}

// Validate = lease renewal (read a3-a4 / b3): every read whose lease does not
// reach tts, and every unproven copy of a loaded tuple.
Task<bool> validate(Sundial& p, Coordinator& c, Txn& t, uint32_t) {
  const uint64_t tts = commit_ts(t);
  // The serialisation order (read-only attempts too), one up: a reader of
  // loaded tuples only commits at 0, which the history takes for unknown.
  t.set_commit_timestamp(tts + 1);
  if (!p.renewing) co_return true;
  ItemList r;
  for (uint32_t i = 0; i < t.size(); ++i) {
    const AccessState& s = t.state<AccessState>(i);
    if (t.access(i).mode == AccessMode::kRead && (s.must_renew != 0 || s.rts < tts)) r.idx[r.n++] = i;
  }
  if (r.empty()) co_return true;
  if (p.o.stage(Stage::kValidate) == Primitive::kRpc) co_return co_await renew_rpc(p, c, t, r, tts);
  co_return co_await renew_onesided(p, c, t, r, tts);
}

// Write a5-a6 / b4: each written tuple gets wts = rts = tts, a checksum, the
// record; the body, then wts, then the unlock.
Task<bool> commit(Sundial& p, Coordinator& c, Txn& t, uint32_t) {
  const uint64_t tts = commit_ts(t);
  const bool rec = c.db().recording();
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (a.mode != AccessMode::kWrite) continue;
    set_copy_word(a.copy, kLockOff, 0);
    set_copy_word(a.copy, kWtsOff, tts);
    set_copy_word(a.copy, kRtsOff, tts);
    if (rec) set_copy_word(a.copy, c.db().history_word_offset(), t.id());
    set_copy_word(a.copy, kSumOff, checksum(a.copy, c.db().layout(a.table)));
  }
  return write_back_unlock(c, t, p.o.stage(Stage::kCommit), {kRtsOff, kWtsOff}, t.timestamp());
}

Task<bool> release(Sundial& p, Coordinator& c, Txn& t, uint32_t) {
  return release_locks(c, t, p.o.stage(Stage::kCommit), t.timestamp());
}

std::atomic_ref<uint64_t> word_at(std::byte* tuple, uint32_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(tuple + off));
}

// The owner side of read a4: per item (arg0 = tts, arg1 = the wts read; data
// = the requester's lock value, the incarnation read), take the lock word
// for the extension (CAS through the owner atomics: atomic with a writer's
// lock, RPC or one-sided, on any device), check the version, extend rts,
// write the checksum, unlock. Never waits: a tuple locked by another
// transaction fails the renewal, as in Sundial.
void serve_renew(WorkerEngine& e, rpc::Request& r) {
  const Database& db = e.db();
  OwnerAtomics& atomics = e.owner_atomics();
  serve_items(r, db.store(e.node()),
              [&db, &atomics](const ItemHeader& h, std::span<const std::byte> data, int rc, store::Table*,
                              const store::TupleRef& ref, ItemWriter& out) {
                if (rc == 0 && data.size() != 16) rc = -EINVAL;
                if (rc != 0) {
                  out.add({rc, 0, 0, 0, 0});
                  return;
                }
                uint64_t value, state;
                std::memcpy(&value, data.data(), 8);
                std::memcpy(&state, data.data() + 8, 8);
                if (value == 0) {  // 0 is "free": it could not hold the lock
                  out.add({-EINVAL, 0, 0, 0, 0});
                  return;
                }
                const auto& l = db.layout(h.table);
                uint64_t holder = 0;
                if (!atomics.cas(h.table, ref.tuple + kLockOff, holder, value, std::memory_order_acquire)) {
                  // Its holder may be writing it back (one-sided, from
                  // another thread): words loaded one by one, checked by
                  // the checksum.
                  auto live = [&ref](uint32_t off) {
                    return store::load_word(reinterpret_cast<const uint64_t*>(ref.tuple + off),
                                            std::memory_order_acquire);
                  };
                  const MetaNow now{live(kWtsOff), live(kRtsOff), live(kSumOff)};
                  if (live(l.state_offset()) == state && covered_while_locked(l, now, live, h.arg1, h.arg0)) {
                    out.add({kRenewed, 0, 0, 0, now.rts});
                    return;
                  }
                  out.add({kLocked, 0, 0, 0, holder});
                  return;
                }
                int32_t status = kChanged;
                uint64_t rts = word_at(ref.tuple, kRtsOff).load(std::memory_order_relaxed);
                if (word_at(ref.tuple, kWtsOff).load(std::memory_order_relaxed) == h.arg1 &&
                    word_at(ref.tuple, l.state_offset()).load(std::memory_order_relaxed) == state) {
                  rts = std::max(rts, h.arg0);
                  word_at(ref.tuple, kRtsOff).store(rts, std::memory_order_relaxed);
                  // Under the lock nothing else writes the tuple: a plain read is consistent.
                  word_at(ref.tuple, kSumOff).store(checksum(ref.tuple, l), std::memory_order_relaxed);
                  status = kRenewed;
                }
                word_at(ref.tuple, kLockOff).store(0, std::memory_order_release);  // publishes rts, checksum
                out.add({status, 0, 0, 0, rts});
              });
}

Result<std::unique_ptr<Protocol>> make(WorkerEngine& e, bool renewing) {
  auto p = std::make_unique<Sundial>(e, renewing);
  // The fetch's write locks and the validate stage's lease renewals take
  // lock words (NIC CAS one-sided, and for a hybrid fetch's writes; the
  // owner's CAS over RPC: owner_atomics.hpp); commit stores.
  e.set_atomic_stages(stage_bit(Stage::kFetch) | stage_bit(Stage::kValidate));
  e.toolkit().set_conflict_rule(ConflictRule::kWaitDie);
  RDTX_TRY(e.toolkit().enable_waiting(kWaitListCapacity));
  auto id = e.register_handler("sundial.renew", [&e](rpc::Request& r) { serve_renew(e, r); });
  if (!id.ok()) return id.error();
  p->renew = *id;
  p->set_stage(Stage::kFetch, *p, fetch);
  p->set_stage(Stage::kValidate, *p, validate);
  p->set_stage(Stage::kCommit, *p, commit);
  p->set_release(*p, release);
  return std::unique_ptr<Protocol>(std::move(p));
}
Result<std::unique_ptr<Protocol>> create(WorkerEngine& e) { return make(e, true); }
Result<std::unique_ptr<Protocol>> create_unrenewed(WorkerEngine& e) { return make(e, false); }

}  // namespace

constexpr AbortReasonName kReasons[] = {{"wait_die", "wait-die (younger dies)"},
                                        {"lease_renewal", "lease renewal failed"},
                                        {"unsettled_read", "copy torn or moved on every read"}};

constexpr ProtocolDef kDef = {
    .name = "sundial",
    .summary = "leases: writes locked at fetch (WAITDIE), reads lock-free with [wts, rts] leases renewed at "
               "validation (RCC 4.5)",
    .meta_bytes = kMetaBytes,
    .access_state_bytes = sizeof(AccessState),
    .isolation = Isolation::kSerializable,
    .strict = false,  // reads pass a committer's lock: logical time, not real time, orders them (doc/txn.md)
    .timestamp_order = true,  // commit_ts: within every read's lease, above every overwritten one
    .allowed = {.fetch = {Primitive::kOneSided, Primitive::kRpc, Primitive::kHybrid},
                // lock: writes lock at fetch
                .validate = {Primitive::kOneSided, Primitive::kRpc},  // lease renewal
                .commit = {Primitive::kOneSided, Primitive::kRpc}},
    .abort_reasons = kReasons,
    .lock_held = lock_word0_held,
    .create = create,
    .relocates_rows = false,  // a moved row would start with an empty lease [0, 0]
};

constexpr ProtocolDef kUnrenewedForTests =
    broken_variant(kDef, "sundial-unrenewed",
                   "BROKEN, tests only: SUNDIAL that accepts expired leases (never renews a read)", create_unrenewed);

RDTX_REGISTER_PROTOCOL(kDef)
RDTX_REGISTER_PROTOCOL(kUnrenewedForTests)

}  // namespace rdtx::cc::sundial
