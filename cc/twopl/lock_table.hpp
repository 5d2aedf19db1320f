// LockTable: the lock table of one 2PL server shard, as "Strong consistency
// is not hard to get" (section 3.2.1) lays it out:
//
//   - per lock a granted group, one counter per mode (the lock's mode follows
//     from them), and a FIFO waiting group of which only the head is tested
//     against the granted group;
//   - per transaction the (lock, mode) pairs it holds or waits for, so that
//     commit and abort release everything with one call (release_all), never
//     one message per lock (strict 2PL: no shrinking phase);
//   - the locks with waiters, which Bounded Wait walks (expire()).
//
// Modes NL, IS, IX, S, SIX, X with the standard compatibility matrix (the
// paper's Table 1). Multi-granularity is the caller's protocol: it takes the
// intention modes on the parents (table, then partition or warehouse) before
// a child, so a scan can take one S lock on a partition. A lock is any
// 64-bit name.
//
// Deadlock policies (the paper's three):
//   kNoWait       a request not grantable at once is denied;
//   kWaitDie      it waits iff its transaction is older (smaller timestamp)
//                 than every transaction holding or waiting for the lock, so
//                 that a transaction only ever waits for younger ones (the
//                 paper: older than the holders; the waiters ahead are
//                 included because the queue is FIFO, so a waiter waits for
//                 them too); otherwise it dies (denied);
//   kBoundedWait  it always waits, stamped with the time it arrived; a
//                 request still waiting `wait_limit` after that is denied
//                 and leaves the queue (expire(), called by the server's
//                 poll loop). The paper's limit: 100 ms.
// A request also waits (never barges) while others wait ahead of it, even if
// its mode is compatible with the granted group: FIFO, no starvation.
//
// A transaction's second request for a lock it holds converts its mode to
// the supremum of both (S + IX = SIX): granted at once if the new mode is
// compatible with every other holder, else denied under every policy (two
// S holders that both wait to upgrade would deadlock, and the paper is
// silent on conversions; the requester aborts and retries). A request for a
// lock the transaction already waits for is denied.
//
// Waiters granted or denied later (release_all, expire, a withdrawn head)
// are reported as events, in order, through pop_event(): the server answers
// each with the reply it deferred (Request::tag names it).
//
// Memory: fixed pools sized at construction (locks, requests, transactions);
// nothing is allocated after it. A request that finds a pool empty is kFull
// (the caller fails it as it would a denied one, and counts it).
// Thread-safety: none; one shard per thread (the paper's server agent).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/twopl/id_pool.hpp"

namespace rdtx::cc::twopl {

enum class LockMode : uint8_t { kNL, kIS, kIX, kS, kSIX, kX };
inline constexpr int kLockModes = 6;
const char* to_string(LockMode m);
// The paper's Table 1.
bool compatible(LockMode a, LockMode b);
// The weakest mode that covers both (the conversion of a held lock).
LockMode supremum(LockMode a, LockMode b);

enum class DeadlockPolicy : uint8_t { kNoWait, kWaitDie, kBoundedWait };

class LockTable {
 public:
  struct Limits {
    uint32_t locks = 1024;         // locks with a holder or waiter at once
    uint32_t requests = 4096;      // held + waiting requests at once
    uint32_t transactions = 1024;  // transactions with a request at once
  };
  // `wait_limit`: kBoundedWait's bound, in the unit of the `now` arguments.
  // Under kWaitDie it caps a wait too (a server must answer a waiter before
  // its caller's RPC timeout; the policy itself never needs it).
  LockTable(const Limits& limits, DeadlockPolicy policy, uint64_t wait_limit);

  struct Request {
    uint64_t txn = 0;  // the transaction's id
    uint64_t ts = 0;   // its priority for kWaitDie: smaller is older
    LockMode mode = LockMode::kS;
    uint64_t tag = 0;  // the caller's handle for a deferred reply
  };
  enum class Outcome : uint8_t { kGranted, kWaiting, kDenied, kFull };
  Outcome acquire(uint64_t lock, const Request& r, uint64_t now);

  // Releases every lock `txn` holds and withdraws every request it has
  // waiting; waiters that can now be granted are, in FIFO order per lock.
  // Returns how many requests the transaction had.
  uint32_t release_all(uint64_t txn);
  // Releases (or withdraws) `txn`'s request for one lock, before the end of
  // the transaction (read committed's short read locks); waiters that can
  // now be granted are. False if it had none.
  bool release(uint64_t lock, uint64_t txn);
  // kBoundedWait and kWaitDie: denies every request waiting since before now - wait_limit
  // (each queue's head first: a FIFO queue's arrival times increase).
  // Returns how many it denied.
  uint32_t expire(uint64_t now);

  // A waiter granted or denied after its acquire() returned kWaiting.
  struct Event {
    uint64_t txn;
    uint64_t lock;
    uint64_t tag;
    LockMode mode;
    bool granted;
  };
  bool pop_event(Event* e);

  // The mode `txn` holds `lock` in (kNL: none; a waiting request is none).
  LockMode held(uint64_t lock, uint64_t txn) const;
  bool known(uint64_t txn) const { return find_txn(txn) != kNone; }

  // Introspection (tests, diagnostics).
  uint32_t granted_count(uint64_t lock, LockMode m) const;
  uint32_t waiting(uint64_t lock) const;
  uint32_t locks_in_use() const { return limits_.locks - locks_.free_count; }
  uint32_t requests_in_use() const { return limits_.requests - free_reqs_; }
  uint32_t transactions_in_use() const { return limits_.transactions - txns_.free_count; }
  // Checks every lock's invariants: holders pairwise compatible (across
  // transactions), counters equal to the holders, no waiting head that
  // could be granted, waiters in arrival order. "" if they hold, else what
  // is wrong.
  std::string check() const;

 private:
  static constexpr uint32_t kNone = kNoIndex;
  struct Lock {
    uint64_t id = 0;
    uint32_t next = kNone;  // hash chain, or free list
    uint32_t granted[kLockModes] = {};
    uint32_t holders = 0;                               // requests granted (list: holder_head)
    uint32_t holder_head = kNone;                       // granted requests, doubly linked
    uint32_t wait_head = kNone, wait_tail = kNone;      // waiting requests, FIFO, doubly linked
    uint32_t pending_prev = kNone, pending_next = kNone;  // in the list of locks with waiters
    bool pending = false;
  };
  struct Req {
    uint64_t txn, ts, tag, since;
    uint32_t lock;
    uint32_t prev, next;  // in the lock's holder list or waiting queue
    uint32_t txn_next;    // the transaction's requests (or the free list)
    LockMode mode;
    bool granted;
  };
  struct Txn {
    uint64_t id = 0;
    uint32_t next = kNone;  // hash chain, or free list
    uint32_t head = kNone;  // its requests
  };

  uint32_t find_lock(uint64_t id) const { return locks_.find(id); }
  uint32_t find_txn(uint64_t id) const { return txns_.find(id); }
  void drop_lock_if_idle(uint32_t l);
  // Takes request q (off its transaction's list already) off its lock,
  // grants the waiters that now fit (a withdrawn waiter gets no event: its
  // transaction is ending or has let it go) and returns q to the pool.
  void free_request(uint32_t q);
  // Whether mode m is compatible with lock l's granted group, leaving out
  // one granted request of mode `own` (a conversion); kNL: leave none out.
  bool grantable(const Lock& l, LockMode m, LockMode own) const;
  bool older_than_all(const Lock& l, uint64_t ts) const;
  void link_holder(Lock& l, uint32_t r);
  void unlink_holder(Lock& l, uint32_t r);
  void enqueue(Lock& l, uint32_t li, uint32_t r);
  void dequeue(Lock& l, uint32_t r);
  // Grants waiting heads of lock l while compatible; events for each.
  void grant_waiters(uint32_t li);
  void push_event(const Req& r, bool granted);

  Limits limits_;
  DeadlockPolicy policy_;
  uint64_t wait_limit_;
  IdPool<Lock> locks_;
  IdPool<Txn> txns_;
  std::vector<Req> reqs_;
  uint32_t free_req_ = kNone, free_reqs_;
  uint32_t pending_head_ = kNone;  // locks with waiters
  EventRing<Event> events_;  // `requests` entries
};

}  // namespace rdtx::cc::twopl
