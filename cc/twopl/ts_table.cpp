#include "cc/twopl/ts_table.hpp"

#include <algorithm>
#include <cstdio>

namespace rdtx::cc::twopl {

TsTable::TsTable(const Limits& limits, uint64_t wait_limit)
    : limits_(limits), wait_limit_(wait_limit), reqs_(limits.requests), free_reqs_(limits.requests) {
  events_.init(limits.requests);
  items_.init(limits.items);
  txns_.init(limits.transactions);
  for (uint32_t i = limits.requests; i-- > 0;) {
    reqs_[i].txn_next = free_req_;
    free_req_ = i;
  }
}

uint32_t TsTable::new_request(uint32_t ti, uint32_t item, const Request& r, uint64_t now) {
  const uint32_t q = free_req_;
  free_req_ = reqs_[q].txn_next;
  --free_reqs_;
  Req& n = reqs_[q];
  n = Req{};
  n.txn = r.txn;
  n.ts = r.ts;
  n.tag = r.tag;
  n.since = now;
  n.item = item;
  n.prev = n.next = n.aprev = n.anext = kNone;
  n.mode = r.mode;
  n.waiting = false;
  n.txn_next = txns_.items[ti].head;
  txns_.items[ti].head = q;
  return q;
}

void TsTable::unlink_from_txn(uint32_t q) {
  const uint32_t ti = txns_.find(reqs_[q].txn);
  if (ti == kNone) return;
  for (uint32_t* p = &txns_.items[ti].head; *p != kNone; p = &reqs_[*p].txn_next)
    if (*p == q) {
      *p = reqs_[q].txn_next;
      break;
    }
  if (txns_.items[ti].head == kNone) txns_.drop(ti);
}

void TsTable::free_request(uint32_t q) {
  reqs_[q].txn_next = free_req_;
  free_req_ = q;
  ++free_reqs_;
}

void TsTable::enqueue(uint32_t ii, uint32_t q) {
  Req& r = reqs_[q];
  r.waiting = true;
  // By timestamp: the waiters are served in that order.
  uint32_t before = kNone, at = items_.items[ii].wait_head;
  while (at != kNone && reqs_[at].ts < r.ts) {
    before = at;
    at = reqs_[at].next;
  }
  r.prev = before;
  r.next = at;
  if (before != kNone) reqs_[before].next = q;
  else items_.items[ii].wait_head = q;
  if (at != kNone) reqs_[at].prev = q;
  // And in arrival order, for expire().
  r.anext = kNone;
  r.aprev = arrival_tail_;
  if (arrival_tail_ != kNone) reqs_[arrival_tail_].anext = q;
  else arrival_head_ = q;
  arrival_tail_ = q;
}

void TsTable::dequeue(uint32_t q) {
  Req& r = reqs_[q];
  Item& it = items_.items[r.item];
  if (r.prev != kNone) reqs_[r.prev].next = r.next;
  else it.wait_head = r.next;
  if (r.next != kNone) reqs_[r.next].prev = r.prev;
  if (r.aprev != kNone) reqs_[r.aprev].anext = r.anext;
  else arrival_head_ = r.anext;
  if (r.anext != kNone) reqs_[r.anext].aprev = r.aprev;
  else arrival_tail_ = r.aprev;
  r.prev = r.next = r.aprev = r.anext = kNone;
  r.waiting = false;
}

void TsTable::push_event(const Req& r, bool granted) {
  events_.push(Event{r.txn, items_.items[r.item].id, r.tag, r.mode, granted});
}

bool TsTable::pop_event(Event* e) { return events_.pop(e); }

TsTable::Outcome TsTable::acquire(uint64_t item, uint64_t* stamps, const Request& r, uint64_t now, uint64_t* seen) {
  const bool write = r.mode == LockMode::kX;
  uint32_t ii = items_.find(item);
  uint32_t ti = txns_.find(r.txn);
  if (ii != kNone) {
    const Item& it = items_.items[ii];
    if (it.writer != kNone && reqs_[it.writer].txn == r.txn) return Outcome::kGranted;  // its own write
    if (ti != kNone)
      for (uint32_t q = it.wait_head; q != kNone; q = reqs_[q].next)
        if (reqs_[q].txn == r.txn) return Outcome::kDenied;  // it waits here already
  }
  const uint64_t rts = stamps[0], wts = stamps[1];
  if (r.ts < wts || (write && r.ts < rts)) {
    *seen = std::max(wts, write ? rts : 0);
    return Outcome::kDenied;
  }
  const uint32_t writer = ii == kNone ? kNone : items_.items[ii].writer;
  if (writer != kNone && r.ts < reqs_[writer].ts) {
    *seen = reqs_[writer].ts;
    return Outcome::kDenied;
  }
  if (writer == kNone && !write) {  // served: nothing is kept but rts
    stamps[0] = std::max(rts, r.ts);
    return Outcome::kGranted;
  }
  // A write accepted, or a request that waits: resources first, so that a
  // full table changes nothing.
  if (free_req_ == kNone || (ii == kNone && items_.free == kNone) || (ti == kNone && txns_.free == kNone))
    return Outcome::kFull;
  if (ii == kNone) {
    ii = items_.add(item);
    items_.items[ii].stamps = stamps;
  }
  if (ti == kNone) ti = txns_.add(r.txn);
  const uint32_t q = new_request(ti, ii, r, now);
  if (writer == kNone) {
    items_.items[ii].writer = q;
    return Outcome::kGranted;
  }
  enqueue(ii, q);
  return Outcome::kWaiting;
}

void TsTable::end_write(uint32_t ii, bool commit) {
  Item& it = items_.items[ii];
  const uint32_t w = it.writer;
  if (commit) it.stamps[1] = std::max(it.stamps[1], reqs_[w].ts);
  it.writer = kNone;
  free_request(w);  // off its transaction's list already (release_all)
  // The waiters, oldest first: reads are served or come too late, until a
  // write is accepted; the younger ones wait for it.
  while (it.wait_head != kNone && it.writer == kNone) {
    const uint32_t q = it.wait_head;
    Req& r = reqs_[q];
    dequeue(q);
    const uint64_t rts = it.stamps[0], wts = it.stamps[1];
    const bool write = r.mode == LockMode::kX;
    const bool late = r.ts < wts || (write && r.ts < rts);
    push_event(r, !late);
    if (!late && write) {
      it.writer = q;  // stays on its transaction's list
      continue;
    }
    if (!late) it.stamps[0] = std::max(rts, r.ts);
    unlink_from_txn(q);
    free_request(q);
  }
  if (it.writer == kNone && it.wait_head == kNone) items_.drop(ii);
}

uint32_t TsTable::release_all(uint64_t txn, bool commit) {
  const uint32_t ti = txns_.find(txn);
  if (ti == kNone) return 0;
  uint32_t n = 0;
  // Detach the list first: ending a write serves other transactions'
  // waiters, which may drop their (never this one's) entries.
  uint32_t q = txns_.items[ti].head;
  txns_.drop(ti);
  while (q != kNone) {
    const uint32_t next = reqs_[q].txn_next;
    Req& r = reqs_[q];
    ++n;
    if (r.waiting) {  // withdrawn: no event, its transaction is ending
      const uint32_t ii = r.item;
      dequeue(q);
      free_request(q);
      const Item& it = items_.items[ii];
      if (it.writer == kNone && it.wait_head == kNone) items_.drop(ii);
    } else {
      end_write(r.item, commit);
    }
    q = next;
  }
  return n;
}

LockMode TsTable::held(uint64_t item, uint64_t txn) const {
  const uint32_t ii = items_.find(item);
  if (ii == kNone) return LockMode::kNL;
  const uint32_t w = items_.items[ii].writer;
  return w != kNone && reqs_[w].txn == txn ? LockMode::kX : LockMode::kNL;
}

uint32_t TsTable::expire(uint64_t now) {
  uint32_t n = 0;
  while (arrival_head_ != kNone) {
    const uint32_t q = arrival_head_;
    Req& r = reqs_[q];
    if (now < r.since || now - r.since < wait_limit_) break;  // arrival order: the rest came later
    // A waiter leaving changes nothing for the others: they wait for the
    // pending write, which is still there.
    dequeue(q);
    push_event(r, false);
    unlink_from_txn(q);
    free_request(q);
    ++n;
  }
  return n;
}

uint32_t TsTable::waiting(uint64_t item) const {
  const uint32_t ii = items_.find(item);
  uint32_t n = 0;
  if (ii != kNone)
    for (uint32_t q = items_.items[ii].wait_head; q != kNone; q = reqs_[q].next) ++n;
  return n;
}

std::string TsTable::check() const {
  if (std::string lost = events_.check(); !lost.empty()) return lost;
  char buf[200];
  for (uint32_t head : items_.buckets)
    for (uint32_t ii = head; ii != kNone; ii = items_.items[ii].next) {
      const Item& it = items_.items[ii];
      const auto id = static_cast<unsigned long long>(it.id);
      if (it.writer == kNone) {
        std::snprintf(buf, sizeof buf, "item %llu: %s without a pending write", id,
                      it.wait_head == kNone ? "kept" : "waiters");
        return buf;
      }
      const Req& w = reqs_[it.writer];
      if (w.waiting || w.mode != LockMode::kX) return "a pending write that is not an accepted write";
      if (w.ts < it.stamps[1] || w.ts < it.stamps[0]) {
        std::snprintf(buf, sizeof buf, "item %llu: a pending write older than its rts or wts", id);
        return buf;
      }
      for (uint32_t q = it.wait_head; q != kNone; q = reqs_[q].next) {
        if (!reqs_[q].waiting) return "a served request among the waiters";
        if (reqs_[q].ts < w.ts) {
          std::snprintf(buf, sizeof buf, "item %llu: a waiter older than the pending write", id);
          return buf;
        }
        if (reqs_[q].next != kNone && reqs_[reqs_[q].next].ts < reqs_[q].ts) return "waiters out of timestamp order";
      }
    }
  return "";
}

}  // namespace rdtx::cc::twopl
