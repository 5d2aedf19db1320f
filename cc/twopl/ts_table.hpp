// TsTable: timestamp ordering at one server shard ("Strong consistency is
// not hard to get", section 3.2.2: textbook TO, as Bernstein, Hadzilacos
// and Goodman describe it, chapter 4.2). Conflicting reads and writes of an
// item run in the order of their transactions' timestamps; what comes too
// late aborts.
//
// Per item the timestamp of the last read served (rts) and of the last
// write installed (wts). They live with the record (its tuple's protocol
// words, which only this shard touches), so they outlive this table's
// entries, which exist only while a write is pending or a request waits.
// A request of transaction T with timestamp ts:
//   read   ts < wts: denied (it should have read the value before that write).
//          A write of another transaction is pending: ts below it, denied
//          (the paper: below the last write request); above it, the read
//          waits until that write is installed or discarded, since it must
//          see its value if installed. Else served: rts = max(rts, ts).
//   write  ts < rts or ts < wts: denied (a later transaction has read or
//          written the item). A pending write of another transaction: as
//          for a read (below: denied; above: waits, as it must overwrite
//          that value, not be overwritten by it). Else accepted: pending
//          until T commits (installed: wts = ts) or aborts (discarded).
// So at most one write per item is pending, every waiter is younger than
// it (waits-for edges go from younger to older: no deadlock), and when it
// ends the waiters are taken in timestamp order: reads are served or
// denied, until a write is accepted and becomes the pending one (the rest
// keep waiting for it).
//
// The paper's text says requests "with timestamps lower than existing
// pending writes are also queued, as they need to serve or overwrite the
// value of those writes". A request that must serve or overwrite a pending
// write's value is one with a higher timestamp; a lower one is refused by
// the rule before it (below the last write request). This follows the
// textbook's strict TO, which the paper cites for the details (doc/txn.md).
//
// A request waiting `wait_limit` is denied (expire(): only a stalled or
// dead writer makes a wait long). A transaction's request for an item whose
// write it has pending is granted (its own write covers it); a second
// request while one waits is denied. Waiters granted or denied later come
// out as events (pop_event), which the server answers.
// Memory: fixed pools sized at construction; a request that finds one empty
// is kFull and changes nothing. Thread-safety: none; one shard per thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/twopl/id_pool.hpp"
#include "cc/twopl/lock_table.hpp"

namespace rdtx::cc::twopl {

class TsTable {
 public:
  struct Limits {
    uint32_t items = 1024;         // items with a pending write or a waiter at once
    uint32_t requests = 4096;      // pending writes + waiting requests at once
    uint32_t transactions = 1024;  // transactions with either at once
  };
  TsTable(const Limits& limits, uint64_t wait_limit);

  // An item's timestamps, in the record: stamps[0] rts, stamps[1] wts.
  struct Request {
    uint64_t txn = 0;
    uint64_t ts = 0;
    LockMode mode = LockMode::kS;  // kS: a read; kX: a write (read-modify-write)
    uint64_t tag = 0;              // the caller's handle for a deferred reply
  };
  using Outcome = LockTable::Outcome;
  // `seen`: on kDenied, the timestamp the request came too late for (the
  // caller's clock catches up with it).
  Outcome acquire(uint64_t item, uint64_t* stamps, const Request& r, uint64_t now, uint64_t* seen);

  // Ends `txn` here: its pending writes are installed (commit: wts = its
  // timestamp) or discarded, its waiting requests withdrawn; waiters behind
  // its writes are served in timestamp order. Returns its requests.
  uint32_t release_all(uint64_t txn, bool commit);
  // Denies every request waiting since before now - wait_limit.
  uint32_t expire(uint64_t now);

  struct Event {
    uint64_t txn;
    uint64_t lock;  // the item
    uint64_t tag;
    LockMode mode;
    bool granted;
  };
  bool pop_event(Event* e);

  // kX if `txn` has its write of `item` pending here, else kNL.
  LockMode held(uint64_t item, uint64_t txn) const;

  uint32_t requests_in_use() const { return limits_.requests - free_reqs_; }
  uint32_t items_in_use() const { return limits_.items - items_.free_count; }
  uint32_t transactions_in_use() const { return limits_.transactions - txns_.free_count; }
  uint32_t waiting(uint64_t item) const;
  // Every item's invariants: a waiter only behind a pending write and
  // younger than it, waiters in timestamp order, a pending write not older
  // than the item's wts and rts; "" if they hold.
  std::string check() const;

 private:
  static constexpr uint32_t kNone = kNoIndex;
  struct Item {
    uint64_t id = 0;
    uint32_t next = kNone;  // hash chain, or free list
    uint64_t* stamps = nullptr;
    uint32_t writer = kNone;     // the pending write's request
    uint32_t wait_head = kNone;  // waiting requests, by timestamp
  };
  struct Req {
    uint64_t txn, ts, tag, since;
    uint32_t item;
    uint32_t prev, next;    // in the item's waiting list
    uint32_t aprev, anext;  // in the table's arrival order (waiters only)
    uint32_t txn_next;      // the transaction's requests (or the free list)
    LockMode mode;
    bool waiting;
  };
  struct Txn {
    uint64_t id = 0;
    uint32_t next = kNone;
    uint32_t head = kNone;
  };

  uint32_t new_request(uint32_t ti, uint32_t item, const Request& r, uint64_t now);
  void free_request(uint32_t q);
  void unlink_from_txn(uint32_t q);
  void enqueue(uint32_t ii, uint32_t q);
  void dequeue(uint32_t q);
  // The pending write of item ii ended: install or discard it, then serve
  // its waiters in timestamp order.
  void end_write(uint32_t ii, bool commit);
  void push_event(const Req& r, bool granted);

  Limits limits_;
  uint64_t wait_limit_;
  IdPool<Item> items_;
  IdPool<Txn> txns_;
  std::vector<Req> reqs_;
  uint32_t free_req_ = kNone, free_reqs_;
  uint32_t arrival_head_ = kNone, arrival_tail_ = kNone;
  EventRing<Event> events_;  // `requests` entries
};

}  // namespace rdtx::cc::twopl
