// The stage toolkit: the building blocks protocols compose their stage
// modules from, each in its one-sided and RPC form, with the owner-side
// handlers beside them (owner_rpc.cpp).
//
//   lock_read          take each access's lock word (CAS 0 -> value) and read
//                      a span of its tuple in the same round trip: one
//                      doorbell of CAS+READ per node, or one RPC per node
//   read_tuples        fetch tuple copies without locks (one-sided through the
//                      location cache and index, RPC, or hybrid)
//   read_meta          read the leading words of tuples (lock, versions,
//                      header) to validate them
//   write_back_unlock  install written records (body, then a version word),
//                      then unlock, in that order on each QP or owner
//   release            unlock what a failed attempt holds
//
// Messages are fenced by attempt: every lock request carries the attempt id;
// when a lock request's call fails (timeout), the coordinator cancels the
// attempt at that owner (the owner fences every older request of the
// coordinator and frees the locks held by the attempt) before it goes on, so a
// late lock request is refused, never granted to a caller that gave up.
// Commit and release messages are retried until the owner answered
// (idempotent: the owner applies only while the lock word holds the value).
//
// Thread-safety: the coordinator's coroutine (coordinator side); the owner
// worker's thread (handlers).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/result.hpp"
#include "env/tsc.hpp"
#include "runtime/worker.hpp"
#include "runtime/task.hpp"
#include "rpc/endpoint.hpp"
#include "txn/types.hpp"

namespace rdtx::txn {

class Coordinator;
class Txn;
struct Access;
class WorkerEngine;
class LockWaitList;
class OwnerAtomics;

// The bytes [offset, offset + length) of a tuple (length 0: to the end of
// each access's tuple), copied to the access's copy (into_copy) or to its
// extra scratch (c.extra(i)), at the same offset.
struct TupleSpan {
  uint32_t offset = 0;
  uint32_t length = 0;
  bool into_copy = true;
};

// What a lock request found.
enum class LockResult : uint8_t {
  kGranted,       // this attempt holds the lock (a.locked)
  kConflict,      // held by another transaction: holders[k] has its value
  kWait,          // held by a younger one and the protocol waits (one-sided)
  kDie,           // refused by the owner's rule: WAITDIE, held by an older one (the
                  // requester dies); a lock check (set_lock_check), holders[k] is what it saw
  kNotAttempted,  // the owner stopped at an earlier item of the request
  kStale,         // the location was stale (one-sided): locate again
  kFailed,        // lookup or network failure
};

// A protocol's condition for granting a lock on the owner (RPC), checked
// before the CAS and again after it (the lock taken, so that a concurrent
// change between the check and the CAS is seen): true to grant. `seen` gets
// what the refusal is about (MVCC: the largest timestamp in the tuple),
// returned to the requester (LockResult::kDie, holders[k] = seen). Reads the
// tuple's words with atomics.
using LockCheck = bool (*)(const std::byte* tuple, uint64_t value, uint64_t* seen);

// How an owner resolves a lock conflict (set by the protocol once).
enum class ConflictRule : uint8_t { kAbort, kWaitDie };
// WAITDIE's rule: a requester with lock value `mine` waits for a holder with
// `holder` if it is older (smaller timestamp), else it dies.
inline LockResult wait_die(uint64_t mine, uint64_t holder) {
  return mine < holder ? LockResult::kWait : LockResult::kDie;
}

// Owner-side state shared by every protocol's handlers on one worker: the
// handler ids (allocated at registration), the fences, the conflict rule,
// the waiting list.
class Toolkit {
 public:
  // Registers the owner-side handlers on the worker's endpoint.
  static Result<std::unique_ptr<Toolkit>> create(WorkerEngine& e);
  ~Toolkit();

  struct Handlers {
    rpc::HandlerId read = 0, read_meta = 0, lock_read = 0, write_back = 0, release = 0, cancel = 0;
  };
  const Handlers& handlers() const { return h_; }
  void set_conflict_rule(ConflictRule r) { rule_ = r; }
  // MVCC's timestamp rule (RCC 4.4 a2/a3): see LockCheck.
  void set_lock_check(LockCheck f) { check_ = f; }
  ConflictRule conflict_rule() const { return rule_; }
  // WAITDIE over RPC: requests that must wait park here (a service polled
  // by the worker); created by the protocol that needs it.
  Result<void> enable_waiting(uint32_t capacity);
  LockWaitList* waiting() { return wait_; }
  // Shared read locks (txn.options.read_locks = shared): from now on a
  // lock request whose value has kExclusiveBit takes the word exclusively
  // (from 0), one without it joins the shared holders (count + 1, unless an
  // exclusive holder has it). Every grant to a shared holder is remembered
  // (attempt, tuple) in a table of `capacity` entries (rounded up to a power
  // of two; full: the request is refused as a conflict), which alone lets a
  // release or cancel item (arg0 0 for a release) take back exactly the
  // count that attempt added, once: a count names no holder, and a release
  // is re-sent when its reply is lost.
  Result<void> enable_shared_reads(uint32_t capacity);
  bool shared_reads() const { return shared_; }

  // Fences: true if a lock request of attempt `id` must be refused because
  // the attempt (or a later one of its coordinator) was cancelled here.
  // (Inline: checked for every item of every lock and unlock request.)
  bool fenced(uint64_t id) const {
    const uint32_t c = coordinator_of(id);
    return c < fence_.size() && static_cast<uint32_t>(id) < fence_[c];
  }
  void fence(uint64_t id) {
    const uint32_t c = coordinator_of(id);
    if (c < fence_.size() && static_cast<uint32_t>(id) + 1 > fence_[c]) fence_[c] = static_cast<uint32_t>(id) + 1;
  }
  // Lock requests seen per coordinator: a release of an attempt older than
  // the newest that asked for locks is a stale copy (superseded).
  void asked(uint64_t id) {
    const uint32_t c = coordinator_of(id);
    if (c < asked_.size() && static_cast<uint32_t>(id) > asked_[c]) asked_[c] = static_cast<uint32_t>(id);
  }
  bool superseded(uint64_t id) const {
    const uint32_t c = coordinator_of(id);
    return c < asked_.size() && static_cast<uint32_t>(id) < asked_[c];
  }

  // Owner side of lock_read from item `first`: see owner_rpc.cpp. Returns
  // the index of an item that must wait, or -1 when every item is answered.
  int serve_lock_read(std::span<const std::byte> payload, uint32_t first, std::span<std::byte> out,
                      uint32_t* out_len, bool can_wait, const std::byte** wait_tuple);
  WorkerEngine& engine() { return e_; }

 private:
  explicit Toolkit(WorkerEngine& e);
  // The coordinator an attempt id belongs to (types.hpp's id layout), as
  // an index into fence_ and asked_.
  uint32_t coordinator_of(uint64_t id) const {
    const uint32_t node = txn::txn_node(id), worker = txn::txn_worker(id), co = txn::txn_coroutine(id);
    return (node * workers_per_node_ + worker) * kMaxCoroutines + co;
  }
  Result<void> register_handlers();
  WorkerEngine& e_;
  // Every read-modify-write of a lock word goes through here: a NIC may
  // CAS or FAA the same word (owner_atomics.hpp).
  OwnerAtomics& atomics_;
  Handlers h_;
  ConflictRule rule_ = ConflictRule::kAbort;
  LockCheck check_ = nullptr;
  LockWaitList* wait_ = nullptr;  // a service of the engine (it owns it)
  // The shared holders granted here over RPC, by (attempt id, tuple): open
  // addressing with linear probing, deleted entries shifted back (no
  // tombstones); id 0 marks a free slot (ids are never 0).
  class SharedHolds {
   public:
    void init(uint32_t capacity);
    bool insert(uint64_t id, const std::byte* tuple);  // false when full
    bool erase(uint64_t id, const std::byte* tuple);   // false when absent
   private:
    struct Entry {
      uint64_t id = 0;
      const std::byte* tuple = nullptr;
    };
    uint32_t home(uint64_t id, const std::byte* tuple) const;
    std::vector<Entry> e_;
    uint32_t mask_ = 0, used_ = 0, limit_ = 0;
  };
  bool shared_ = false;
  SharedHolds holds_;
  std::vector<uint32_t> fence_;  // per coordinator of the cluster: highest finished sequence + 1
  std::vector<uint32_t> asked_;  // per coordinator: highest sequence that asked for a lock
  uint32_t workers_per_node_ = 1;
};

// Takes the lock word of accesses `items` (CAS 0 -> value; RPC: the owner
// CASes) and reads `span` of each tuple in the same round trip. Per item k:
// results[k], holders[k] (the value found; 0 when granted). Sets a.locked
// for every lock the attempt holds. False: the request failed (reason
// kNetwork set); locks possibly taken on a failed owner are cancelled first.
// `shared_reads` (txn.options.read_locks = shared; RPC: the owners' toolkits
// enable_shared_reads()): `value` has kExclusiveBit, read accesses join the
// word's shared holders instead (a.shared), and holders[k] of a conflict is
// an exclusive holder's value without the bit, or 0 for shared holders.
runtime::Task<bool> lock_read(Coordinator& c, Txn& t, Primitive p, std::span<const uint32_t> items, uint64_t value,
                              TupleSpan span, LockResult* results, uint64_t* holders, bool shared_reads = false);

// Fetches the copies of accesses [from, t.size()) not yet fetched, without
// locks: one-sided (location cache, index walk, READ; stale locations are
// looked up again), RPC (the owner copies), or hybrid (READ on a cache hit,
// RPC on a miss). `accept(a)` judges each copy: kAccept (a.fetched is set),
// kRetry (re-read it: e.g. torn or locked copy), or kAbort (t's reason set).
enum class Verdict : uint8_t { kAccept, kRetry, kAbort };
// The protocol's judgement of a fetched copy (a plain function: the fetch
// path stores no closure).
using AcceptFn = Verdict (*)(Coordinator& c, Txn& t, Access& a);
// `on_retries`: the reason when copies still need re-reading after a few
// rounds.
runtime::Task<bool> read_tuples(Coordinator& c, Txn& t, Primitive p, uint32_t from, AcceptFn accept,
                                AbortReason on_retries);

// Reads the leading `length` bytes (metadata and header) of accesses
// `items` into c.extra(i). False: failed (kNetwork set).
runtime::Task<bool> read_meta(Coordinator& c, Txn& t, Primitive p, std::span<const uint32_t> items,
                              uint32_t length);

// Installs each locked write access's copy and unlocks every locked access,
// in order per owner: the body [body_offset, tuple end), then the 8-byte
// version word at version_offset (if not 0), then lock word 0 (meta word 0)
// released. With passive_ack nobody waits now: the coordinator settles it
// before its next attempt (retrying RPCs until answered). Failures are
// counted as commit errors, which fail the run: the transaction committed.
struct WriteBackSpec {
  uint32_t body_offset = 8;
  uint32_t version_offset = 0;
};
// Yields true (the transaction committed whatever the messages' fate).
runtime::Task<bool> write_back_unlock(Coordinator& c, Txn& t, Primitive p, WriteBackSpec spec, uint64_t value);

// How long a coordinator keeps re-sending what must reach its owner (a
// write-back, a release, a cancel, a log entry) after its worker was asked
// to stop: 1 s, half the in-process run's drain (and a fifth of a process
// run's), many RPC timeouts even at the default 100 ms. Then it gives up
// and the run's checks count what was not answered (commit_errors,
// cancel_failures, log_errors). A count of tries instead gave up within
// microseconds when sends failed at once for want of buffers (the chaos
// suite on TPC-C).
class StopBudget {
 public:
  static constexpr uint64_t kStopRetryNs = 1'000'000'000;
  // True once the calling worker has been stopping for kStopRetryNs.
  bool spent() {
    if (!runtime::Worker::current()->stopping()) return false;
    const uint64_t now = env::tsc();
    if (deadline_ == 0) deadline_ = now + env::ns_to_tsc(kStopRetryNs);
    return now >= deadline_;
  }

 private:
  uint64_t deadline_ = 0;
};

// Settling a write-back/release batch: judge_unlocks() checks the owners'
// answers of the calls not judged yet (ItemBatch::judged) and marks them
// judged; `first`: these are the first copies (a re-sent
// copy may find the lock already freed by an earlier one). Unless every
// call was answered, retry_unlocks() then re-sends the unanswered calls
// until all are answered.
class ItemBatch;
void judge_unlocks(Coordinator& c, ItemBatch& batch, bool first);
runtime::Task<void> retry_unlocks(Coordinator& c, ItemBatch& batch);

// Unlocks every access the attempt holds (RPC: owner-checked, retried).
// Yields true (a release module's result: nothing more to do).
runtime::Task<bool> release_locks(Coordinator& c, Txn& t, Primitive p, uint64_t value);

// Where the old value of a shared holder's FAA -1 (a one-sided read-lock
// release) lands: the second word of the access's scratch, which nothing
// reads while locks are shared (the lock CAS's result is the first). A
// passively acknowledged release may land it after the coordinator moved
// on to its next transaction, harmlessly.
std::byte* read_unlock_sink(Coordinator& c, uint32_t i);

// The accesses [from, to) matching `pred`, as an index list.
struct ItemList {
  uint32_t n = 0;
  uint32_t idx[640];  // Txn::kMaxAccesses (txn.hpp is not included here)
  std::span<const uint32_t> span() const { return {idx, n}; }
  bool empty() const { return n == 0; }
};

}  // namespace rdtx::txn
