// NOWAIT and WAITDIE (RCC sections 4.2 and 4.3), composed from the stage
// toolkit:
//   fetch    lock_read of every access (CAS lock + READ of the tuple in one
//            doorbell per node, or the owner's lock_read handler). On a
//            conflict NOWAIT aborts; WAITDIE waits if it is older than the
//            holder (one-sided: retries the CAS+READ after yielding; RPC: the
//            owner parks the request in its lock wait list, a service
//            polled by the worker, never blocking the loop) and dies
//            otherwise.
//   commit   write_back_unlock: WRITE record, then WRITE lock = 0, in order
//            per owner; with passive ACK nobody waits for it.
//   release  release_locks.
//
// Tuple metadata: word 0 is the lock: 0 when free, else the holder's lock
// value — its attempt id (NOWAIT) or its timestamp (WAITDIE, so that a
// requester can compare priorities with the holder it finds there).
//
// With txn.options.read_locks = shared (doc/txn.md "Shared read locks"),
// reads share: word 0 holds kExclusiveBit | the lock value for a writer,
// the number of readers otherwise. A reader joins readers (CAS count ->
// count + 1, a few tries one-sided) and meets a writer as above; a writer
// meeting readers cannot tell their ages: NOWAIT aborts, WAITDIE dies. A
// reader gives its lock back with FAA -1 (one-sided) or through the owner,
// which remembers its RPC grants by attempt (Toolkit::enable_shared_reads).
#include <cstring>

#include "cc/twopl/twopl.hpp"
#include "txn/coordinator.hpp"
#include "txn/locate.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::twopl {

using namespace rdtx::txn;
using runtime::Task;

namespace {

constexpr int kRelocateAttempts = 4;
constexpr uint32_t kWaitListCapacity = 256;

// Each policy declares one reason (NOWAIT: lock_conflict, WAITDIE: wait_die).
const AbortReason kConflictAbort = protocol_reason(0);
const AbortReason kWaitDieAbort = protocol_reason(0);

enum class Policy { kNoWait, kWaitDie };

// Entries per coordinator of the cluster in an owner's table of RPC shared
// holders: an attempt holding more read locks at one owner than its share
// is refused (a conflict) once the table is full, which the average
// attempt (YCSB: 10 accesses; TPC-C's Stock-Level: a few hundred, rare)
// never makes it.
constexpr uint32_t kSharedHoldsPerCoordinator = 64;

class TwoPl final : public Protocol {
 public:
  TwoPl(WorkerEngine& e, Policy policy, bool broken_readers)
      : o(e.options()),
        policy(policy),
        shared(o.read_locks == ReadLocks::kShared || broken_readers),
        broken_readers(broken_readers) {}
  const Options& o;
  const Policy policy;
  const bool shared;  // txn.options.read_locks = shared
  // BROKEN, tests only (nowait-broken-readers): a read that finds a writer
  // holding the record takes the copy READ beside the refused CAS as if
  // it held a shared lock.
  const bool broken_readers;
  // What the transaction is known by: attempt id or timestamp.
  uint64_t priority(const Txn& t) const { return policy == Policy::kWaitDie ? t.timestamp() : t.id(); }
  // What its exclusive locks hold in the word.
  uint64_t lock_value(const Txn& t) const { return shared ? kExclusiveBit | priority(t) : priority(t); }
};

Task<bool> fetch(TwoPl& p, Coordinator& c, Txn& t, uint32_t from) {
  const Primitive prim = p.o.stage(Stage::kFetch);
  const uint64_t mine = p.priority(t);
  const bool rec = c.db().recording();
  LockResult res[Txn::kMaxAccesses];
  uint64_t holders[Txn::kMaxAccesses];
  for (int relocations = 0; relocations < kRelocateAttempts;) {
    if (prim == Primitive::kOneSided) {
      const bool located = co_await locate_onesided(c, t, from, t.size());
      if (!located) co_return false;
    }
    ItemList wanted;
    for (uint32_t i = from; i < t.size(); ++i)
      if (!t.access(i).fetched) wanted.idx[wanted.n++] = i;
    if (wanted.empty()) co_return true;
    // The whole tuple of each access (length 0: to the tuple's end).
    const bool sent =
        co_await lock_read(c, t, prim, wanted.span(), p.lock_value(t), {0, 0, true}, res, holders, p.shared);
    if (!sent) co_return false;
    bool waiting = false, relocate = false;
    AbortReason verdict = AbortReason::kNone;
    for (uint32_t k = 0; k < wanted.n; ++k) {
      Access& a = t.access(wanted.idx[k]);
      switch (res[k]) {
        case LockResult::kGranted:
          if (rec) a.writer = a.replaced = [&] {
            uint64_t v;
            std::memcpy(&v, a.copy + c.db().history_word_offset(), 8);
            return v;
          }();
          a.fetched = true;
          break;
        case LockResult::kStale: relocate = true; break;
        case LockResult::kConflict: {
          if (p.broken_readers && a.mode == AccessMode::kRead && holders[k] != 0) {
            if (rec) std::memcpy(&a.writer, a.copy + c.db().history_word_offset(), 8);
            a.replaced = a.writer;
            a.fetched = true;  // unlocked: nothing to release
            break;
          }
          if (p.policy == Policy::kNoWait) {
            if (verdict == AbortReason::kNone) verdict = kConflictAbort;
          } else if (wait_die(mine, holders[k]) == LockResult::kWait) {
            waiting = true;  // one-sided: older than the holder, try again
          } else if (verdict == AbortReason::kNone) {
            verdict = kWaitDieAbort;
          }
          break;
        }
        case LockResult::kDie:
          if (verdict == AbortReason::kNone) verdict = kWaitDieAbort;
          break;
        case LockResult::kNotAttempted:
          if (verdict == AbortReason::kNone) verdict = p.policy == Policy::kNoWait ? kConflictAbort : kWaitDieAbort;
          break;
        case LockResult::kWait: waiting = true; break;
        case LockResult::kFailed:
          if (verdict == AbortReason::kNone) verdict = AbortReason::kNotFound;
          break;
      }
    }
    if (verdict != AbortReason::kNone) {
      t.fail(verdict);
      co_return false;
    }
    if (relocate) ++relocations;
    if (!waiting && !relocate) co_return true;
    // Older than every holder we met: let them finish, then try again.
    if (waiting) co_await runtime::yield();
  }
  t.fail(AbortReason::kNotFound);
  co_return false;
}

Task<bool> commit(TwoPl& p, Coordinator& c, Txn& t, uint32_t) {
  if (c.db().recording()) {
    const uint64_t id = t.id();
    for (uint32_t i = 0; i < t.size(); ++i)
      if (t.access(i).mode == AccessMode::kWrite) std::memcpy(t.access(i).copy + c.db().history_word_offset(), &id, 8);
  }
  // Every lock was held: the transaction is serialized.
  return write_back_unlock(c, t, p.o.stage(Stage::kCommit), {8, 0}, p.lock_value(t));
}

Task<bool> release(TwoPl& p, Coordinator& c, Txn& t, uint32_t) {
  return release_locks(c, t, p.o.stage(Stage::kCommit), p.lock_value(t));
}

Result<std::unique_ptr<Protocol>> make(WorkerEngine& e, Policy policy, bool broken_readers = false) {
  auto p = std::make_unique<TwoPl>(e, policy, broken_readers);
  // The fetch takes lock words (NIC CAS one-sided, the owner's CAS over
  // RPC: owner_atomics.hpp); the commit and release give shared read locks
  // back with FAA -1 (exclusive ones with a WRITE or a store: no RMW).
  e.set_atomic_stages(p->shared ? stage_bit(Stage::kFetch) | stage_bit(Stage::kCommit) : stage_bit(Stage::kFetch));
  if (policy == Policy::kWaitDie) {
    e.toolkit().set_conflict_rule(ConflictRule::kWaitDie);
    RDTX_TRY(e.toolkit().enable_waiting(kWaitListCapacity));
  }
  if (p->shared) {
    // A read lock goes back the way it was taken (options.cpp refuses the
    // configuration; this is for runs built without one).
    const Primitive fetch = p->o.stage(Stage::kFetch), commit = p->o.stage(Stage::kCommit);
    if (fetch != commit)
      return make_error(EINVAL,
                        "shared read locks need txn.pipeline.fetch (%s) and txn.pipeline.commit (%s) to be the same "
                        "primitive: a read lock is released the way it was taken",
                        to_string(fetch), to_string(commit));
    // Every worker serves RPC lock requests of every coordinator.
    if (fetch == Primitive::kRpc)
      RDTX_TRY(e.toolkit().enable_shared_reads(e.db().nodes() * e.workers_per_node() * p->o.coroutines *
                                               kSharedHoldsPerCoordinator));
  }
  p->set_stage(Stage::kFetch, *p, fetch);
  p->set_stage(Stage::kCommit, *p, commit);
  p->set_release(*p, release);
  return std::unique_ptr<Protocol>(std::move(p));
}
Result<std::unique_ptr<Protocol>> create_nowait(WorkerEngine& e) { return make(e, Policy::kNoWait); }
Result<std::unique_ptr<Protocol>> create_waitdie(WorkerEngine& e) { return make(e, Policy::kWaitDie); }
Result<std::unique_ptr<Protocol>> create_nowait_broken_readers(WorkerEngine& e) {
  return make(e, Policy::kNoWait, true);
}

// The generated suites run each policy with its default (exclusive) read
// locks under its own name, and with shared ones ("<name>/shared").
constexpr ProtocolSetting kSharedReads[] = {{"txn.options.read_locks", "shared"}};
constexpr ProtocolVariant kReadLockVariants[] = {{"", {}}, {"shared", kSharedReads}};

constexpr AbortReasonName kNoWaitReasons[] = {{"lock_conflict", "lock conflict"}};
constexpr AbortReasonName kWaitDieReasons[] = {{"wait_die", "wait-die (younger dies)"}};

}  // namespace

constexpr ProtocolDef kNoWait = {
    .name = "nowait",
    .summary = "2PL, locks at fetch (reads exclusive, or shared: txn.options.read_locks), abort on any conflict "
               "(RCC 4.2)",
    .meta_bytes = 8,
    .access_state_bytes = 0,
    .isolation = Isolation::kSerializable,
    .strict = true,  // locks: a read never misses a commit its coordinator knew of (doc/txn.md)
    .allowed = {.fetch = {Primitive::kOneSided, Primitive::kRpc}, .commit = {Primitive::kOneSided, Primitive::kRpc}},
    .abort_reasons = kNoWaitReasons,
    .lock_held = lock_word0_held,
    .create = create_nowait,
    .variants = kReadLockVariants,
    .shared_read_locks = true,
};

constexpr ProtocolDef kWaitDie = [] {
  ProtocolDef d = kNoWait;
  d.name = "waitdie";
  d.summary =
      "2PL, locks at fetch (reads exclusive, or shared: txn.options.read_locks), older waits for younger, "
      "younger dies (RCC 4.3)";
  d.abort_reasons = kWaitDieReasons;
  d.create = create_waitdie;
  return d;
}();

// Broken on purpose (tests only): NOWAIT with shared read locks whose
// readers ignore a writer holding the record (taking the copy read beside
// the refused CAS): they read what is being written, which the history
// check catches (BrokenProtocol.ReadersIgnoringAWriterAreCaught). One-sided
// only: over RPC a refused request carries no copy; the suites run it with
// its defaults only.
constexpr ProtocolDef kNoWaitBrokenReaders = [] {
  ProtocolDef d = broken_variant(
      kNoWait, "nowait-broken-readers",
      "NOWAIT with shared read locks that readers take past a writer (broken on purpose: tests only)",
      create_nowait_broken_readers);
  d.allowed = {.fetch = {Primitive::kOneSided}, .commit = {Primitive::kOneSided}};
  d.variants = {};
  d.shared_read_locks = false;
  return d;
}();

RDTX_REGISTER_PROTOCOL(kNoWait)
RDTX_REGISTER_PROTOCOL(kNoWaitBrokenReaders)
RDTX_REGISTER_PROTOCOL(kWaitDie)

}  // namespace rdtx::cc::twopl
