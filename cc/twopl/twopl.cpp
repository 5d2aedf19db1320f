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
#include <cstring>

#include "cc/twopl/twopl.hpp"
#include "txn/engine.hpp"
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

class TwoPl final : public Protocol {
 public:
  TwoPl(WorkerEngine& e, Policy policy) : o(e.options()), policy(policy) {}
  const Options& o;
  const Policy policy;
  uint64_t lock_value(const Txn& t) const { return policy == Policy::kWaitDie ? t.timestamp() : t.id(); }

};

Task<bool> fetch(TwoPl& p, Coordinator& c, Txn& t, uint32_t from) {
  const Primitive prim = p.o.stage(Stage::kFetch);
  const uint64_t mine = p.lock_value(t);
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
    const bool sent = co_await lock_read(c, t, prim, wanted.span(), mine, {0, 0, true}, res, holders);
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

Result<std::unique_ptr<Protocol>> make(WorkerEngine& e, Policy policy) {
  auto p = std::make_unique<TwoPl>(e, policy);
  if (policy == Policy::kWaitDie) {
    e.toolkit().set_conflict_rule(ConflictRule::kWaitDie);
    RDTX_TRY(e.toolkit().enable_waiting(kWaitListCapacity));
  }
  p->set_stage(Stage::kFetch, *p, fetch);
  p->set_stage(Stage::kCommit, *p, commit);
  p->set_release(*p, release);
  return std::unique_ptr<Protocol>(std::move(p));
}
Result<std::unique_ptr<Protocol>> create_nowait(WorkerEngine& e) { return make(e, Policy::kNoWait); }
Result<std::unique_ptr<Protocol>> create_waitdie(WorkerEngine& e) { return make(e, Policy::kWaitDie); }

}  // namespace

const ProtocolDef kNoWait = {
    "nowait",
    "2PL, exclusive locks at fetch, abort on any conflict (RCC 4.2)",
    8,
    0,
    Isolation::kSerializable,
    {{Primitive::kOneSided, Primitive::kRpc}, {}, {}, {}, {Primitive::kOneSided, Primitive::kRpc}},
    {{"lock_conflict", "lock conflict"}},
    Stage::kFetch,
    lock_word0_held,
    create_nowait,
};

const ProtocolDef kWaitDie = {
    "waitdie",
    "2PL, exclusive locks at fetch, older waits for younger, younger dies (RCC 4.3)",
    8,
    0,
    Isolation::kSerializable,
    {{Primitive::kOneSided, Primitive::kRpc}, {}, {}, {}, {Primitive::kOneSided, Primitive::kRpc}},
    {{"wait_die", "wait-die (younger dies)"}},
    Stage::kFetch,
    lock_word0_held,
    create_waitdie,
};

RDTX_REGISTER_PROTOCOL(kNoWait)
RDTX_REGISTER_PROTOCOL(kWaitDie)

}  // namespace rdtx::cc::twopl
