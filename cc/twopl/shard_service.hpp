// ShardService: one server agent of "Strong consistency is not hard to get"
// (section 3, Figure 1), run by every worker of every node for the records
// whose name falls to it (shard_of()). It owns the concurrency layer's table
// for those records, a LockTable (protocol 2pl: LockService) or a TsTable
// (protocol to, timestamp ordering: TsService), and answers two RPCs:
//
//   <p>.lock  per item (table, key; arg0 the attempt id, arg1 its
//             timestamp; data: the mode word) ask for the record in that
//             mode: a lock (2pl; a short lock is released once the row is
//             copied; a partition's lock, kParentLock, carries no row) or a
//             timestamped read or write (to). Granted: the
//             reply carries the tuple, copied while nobody may write it
//             (the paper replies with the address and the agent READs it;
//             doc/txn.md "2PL" says why one message here). Refused: the
//             reply's arg is the timestamp it came too late for (to), so
//             that the caller's clock catches up. Waiting: the reply is
//             deferred until every item of the call is granted or refused
//             (the table's events); a waiter is refused after the wait
//             limit (Bounded Wait's timeout; under WaitDie and TO a safety
//             bound, so that a lost end message never blocks forever and
//             the caller hears back before it gives up: its calls time out
//             after the wait limit plus the RPC timeout).
//   <p>.end   the end-of-transaction message: per item (arg0 the attempt,
//             arg1 commit or abort; data: the new tuple for a write) install
//             each write the attempt holds (an X lock; TO: its pending
//             write), then end everything of the attempt here at once
//             (LockTable::release_all; TsTable::release_all installs or
//             discards its pending writes) and fence the attempt: a request
//             of it (or of an older attempt of its coordinator) arriving
//             later, late or duplicated, is refused, never granted to a
//             caller that has moved on. A re-sent copy finds nothing held:
//             kNotHeld, which the coordinator accepts for a re-sent copy only.
//
//   2pl.vote  (2pl only; a oneway message: 8 bytes, the attempt id) the 2PC
//             vote request of a transaction that wrote here and at another
//             shard. The shard votes with a remote fetch-and-add on the
//             coordinator's vote word (VoteLayout): +1 in the low 32 bits
//             if the attempt still holds its locks here (not fenced, known
//             to the table), +1 in the high 32 bits (abort) if not. Once
//             per attempt: a duplicated request is ignored. The FAA goes
//             on this worker's QP to the coordinator's node, into the
//             region of this worker's counterpart there (the only region
//             that QP reaches), so every coordinator has a word in every
//             worker's region of its node.
//
// Memory: the table's pools and the deferred calls are sized at creation
// from the run (coordinators in the cluster); nothing is allocated after.
// Thread-safety: the worker's thread (handlers and poller).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "base/result.hpp"
#include "cc/twopl/lock_table.hpp"
#include "cc/twopl/region.hpp"
#include "cc/twopl/ts_table.hpp"
#include "rpc/endpoint.hpp"
#include "runtime/worker.hpp"
#include "txn/service.hpp"
#include "txn/types.hpp"

namespace rdtx::txn {
class WorkerEngine;
}

namespace rdtx::cc::twopl {

// ItemReply statuses of <p>.lock and <p>.end (0, 4 and 5 are the toolkit's
// owner statuses, which the commit settling code judges).
enum LockStatus : int32_t {
  kLockGranted = 0,
  kLockDenied = 1,    // refused at once (NoWait: a conflict; WaitDie: younger; a denied conversion;
                      // TO: too late, the reply's arg the timestamp it came too late for)
  kLockNotHeld = 4,   // end: the attempt holds no such lock here (a re-sent copy, or a bug)
  kLockFenced = 5,    // the attempt ended here already
  kLockTimedOut = 7,  // waited past the wait limit
  kLockVotedNo = 6,   // end: a commit of an attempt this shard did not vote yes for (2PC broken)
  kLockFull = 8,      // the shard's lock table (or its deferred calls) is full
  kLockPending = 9,   // internal: a reserved reply not answered yet
};

// A lock request's mode word: the LockMode in the low byte, and this flag
// for a short lock: released as soon as the row is copied (read committed's
// read locks), never held to the end of the transaction.
inline constexpr uint64_t kShortLock = 0x100;
// ... and this one for a partition's lock (the lock hierarchy, doc/txn.md
// "Scans and the lock hierarchy"): the item's key is the partition number,
// the lock is parent_lock_name()'s, and the grant carries no row (the
// caller READs the rows it needs afterwards, as the paper does).
inline constexpr uint64_t kParentLock = 0x200;

// End message flags (ItemHeader::arg1).
inline constexpr uint64_t kEndCommit = 1;

// The lock name of a record, and the worker of its node that serves it.
inline uint64_t lock_name(txn::TableId table, txn::Key key) {
  uint64_t x = key ^ (uint64_t{table} * 0xd6e8feb86659fd93ull);
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  return x;
}
// A partition's lock name: the record name of its number, salted so that
// partition k and record k of a table are different locks.
inline uint64_t parent_lock_name(txn::TableId table, uint64_t part) {
  return lock_name(table, part ^ 0x8a5cd789635d2dffull) ^ 0x9e3779b97f4a7c15ull;
}
inline uint32_t shard_of(uint64_t name, uint32_t workers) { return static_cast<uint32_t>((name >> 40) % workers); }

template <class Table>
class ShardService final : public txn::Service {
 public:
  static constexpr bool kTimestampOrdering = std::is_same_v<Table, TsTable>;
  struct Config {
    DeadlockPolicy policy = DeadlockPolicy::kBoundedWait;  // a LockTable's
    uint64_t wait_ns = 100'000'000;  // the wait limit (Bounded Wait's; see above)
    bool mailbox = false;            // 2pl: lock requests through mailboxes (region.hpp)
  };
  // Registers the handlers on the worker's endpoint (same ids everywhere):
  // "2pl.lock" and "2pl.end", or "to.lock" and "to.end".
  static Result<std::unique_ptr<ShardService>> create(txn::WorkerEngine& e, const Config& cfg);

  rpc::HandlerId lock_handler() const { return lock_id_; }
  rpc::HandlerId end_handler() const { return end_id_; }
  rpc::HandlerId vote_handler() const { return vote_id_; }  // 2pl only

  int poll() override;
  bool drain() override;
  // Requests still held or waiting after the run: locks left.
  uint64_t locks_left() const override { return table_.requests_in_use(); }

 private:
  // Where a mailbox reply goes: the coordinator (node, worker, coroutine)
  // and its request's sequence.
  struct MailTo {
    uint32_t node = 0, worker = 0, coroutine = 0;
    uint64_t seq = 0;
  };
  struct Pending {
    bool used = false;
    bool mail = false;   // the reply goes to a mailbox (`to`), not by RPC (`token`)
    bool ready = false;  // complete, waiting for a staging slot (mailbox)
    MailTo to;
    rpc::Deferred token;
    uint64_t txn = 0;
    uint32_t waiting = 0;  // items not answered yet
    uint32_t len = 0;
    std::vector<std::byte> reply;
  };
  ShardService(txn::WorkerEngine& e, const typename Table::Limits& limits, DeadlockPolicy policy, uint64_t wait_tsc,
               uint32_t pending, uint32_t max_payload);
  void serve_lock(rpc::Request& r);
  // The items of one lock request, answered into `out`: the reply's
  // length; *pending: the pending slot now holding a reply that waits
  // (kNoPending: complete; the caller sets its transport).
  uint32_t serve_items(std::span<const std::byte> payload, std::span<std::byte> out, uint32_t* pending);
  void serve_end(rpc::Request& r);
  // Whether this shard voted abort for attempt `txn` (or dropped its vote).
  bool voted_no(uint64_t txn) const;
  // Mailboxes (2pl, fetch = mailbox): requests taken from the slots, replies
  // WRITten from staging slots (one WRITE in flight each).
  int poll_mailboxes();
  int free_staging() const;
  void finish_ready();
  bool send_mail(const MailTo& to, std::span<const std::byte> reply);
  void post_mail(const MailTo& to, uint32_t staging, uint32_t len);
  void serve_vote(rpc::Request& r);
  // Posts the queued votes' FAAs while fewer than kVotesInFlight are.
  int post_votes();
  // Answers the waiters the table granted or denied since the last call.
  int deliver_events();
  // Copies the tuple of (table, key) into a reply slot of `tb` bytes.
  int32_t copy_row(txn::TableId table, txn::Key key, std::byte* slot, uint32_t tb, uint64_t* index,
                   uint64_t* state) const;
  void finish(uint32_t p);
  bool fenced(uint64_t id) const;

  txn::WorkerEngine& e_;
  Table table_;
  uint64_t wait_tsc_;
  std::vector<Pending> pending_;
  std::vector<uint32_t> free_pending_;
  uint32_t pending_used_ = 0;
  rpc::HandlerId lock_id_ = 0, end_id_ = 0, vote_id_ = 0;
  uint32_t workers_per_node_;
  // 2PC votes: the newest attempt sequence + 1 voted for, per coordinator
  // of the cluster (a duplicate is ignored); votes waiting for a free FAA
  // slot (at most one per coordinator: a ring of that many); the FAAs in
  // flight (their completions, polled by the worker's CQ poller).
  struct Vote {
    uint64_t txn;
    bool yes;
  };
  std::vector<uint32_t> voted_;
  // Per coordinator: the last attempt this shard voted abort for, or whose
  // vote it never sent (tests' drops): a commit of it is refused
  // (kLockVotedNo), which the coordinator counts as a commit error.
  std::vector<uint64_t> refused_;
  std::vector<Vote> vote_queue_;
  uint32_t vq_head_ = 0, vq_count_ = 0;
  runtime::WaitGroup faa_wg_;
  uint64_t votes_seen_ = 0, abort_every_ = 0, drop_every_ = 0;  // tests' faults
  MailboxLayout mail_;               // nodes == 0: no mailboxes
  std::vector<uint64_t> mail_seen_;  // per request slot: the newest sequence taken
  std::vector<uint64_t> mail_buf_;   // one slot's copy
  runtime::WaitGroup staging_wg_[MailboxLayout::kReplyStaging];
  struct Staged {
    MailTo to;
    uint32_t len = 0;
    uint32_t tries = 0;
  };
  Staged staged_[MailboxLayout::kReplyStaging];
  // Reply WRITEs that failed: their QP is brought back and they are sent
  // again (a slot WRITE can be repeated), a few times.
  int retry_failed_mail();
};

using LockService = ShardService<LockTable>;
using TsService = ShardService<TsTable>;

}  // namespace rdtx::cc::twopl
