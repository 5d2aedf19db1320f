#include "cc/twopl/lock_table.hpp"

#include <algorithm>
#include <cstdio>

namespace rdtx::cc::twopl {

namespace {
// Table 1 of the paper, rows and columns NL IS IX S SIX X.
constexpr bool kCompatible[kLockModes][kLockModes] = {
    {true, true, true, true, true, true},       // NL
    {true, true, true, true, true, false},      // IS
    {true, true, true, false, false, false},    // IX
    {true, true, false, true, false, false},    // S
    {true, true, false, false, false, false},   // SIX
    {true, false, false, false, false, false},  // X
};
int idx(LockMode m) { return static_cast<int>(m); }
}  // namespace

const char* to_string(LockMode m) {
  static const char* const names[] = {"NL", "IS", "IX", "S", "SIX", "X"};
  return names[idx(m)];
}

bool compatible(LockMode a, LockMode b) { return kCompatible[idx(a)][idx(b)]; }

LockMode supremum(LockMode a, LockMode b) {
  // NL < IS < {IX, S} < SIX < X; IX and S meet at SIX.
  if (a == b) return a;
  if ((a == LockMode::kIX && b == LockMode::kS) || (a == LockMode::kS && b == LockMode::kIX)) return LockMode::kSIX;
  return idx(a) > idx(b) ? a : b;
}

LockTable::LockTable(const Limits& limits, DeadlockPolicy policy, uint64_t wait_limit)
    : limits_(limits), policy_(policy), wait_limit_(wait_limit), reqs_(limits.requests), free_reqs_(limits.requests) {
  events_.init(limits.requests);
  locks_.init(limits.locks);
  txns_.init(limits.transactions);
  for (uint32_t i = limits.requests; i-- > 0;) {
    reqs_[i].txn_next = free_req_;
    free_req_ = i;
  }
}

void LockTable::drop_lock_if_idle(uint32_t l) {
  const Lock& k = locks_.items[l];
  if (k.holders == 0 && k.wait_head == kNone) locks_.drop(l);
}

bool LockTable::grantable(const Lock& l, LockMode m, LockMode own) const {
  for (int g = 1; g < kLockModes; ++g) {
    uint32_t n = l.granted[g] - (own != LockMode::kNL && g == idx(own) ? 1 : 0);
    if (n > 0 && !compatible(m, static_cast<LockMode>(g))) return false;
  }
  return true;
}

bool LockTable::older_than_all(const Lock& l, uint64_t ts) const {
  for (uint32_t r = l.holder_head; r != kNone; r = reqs_[r].next)
    if (reqs_[r].ts <= ts) return false;
  for (uint32_t r = l.wait_head; r != kNone; r = reqs_[r].next)
    if (reqs_[r].ts <= ts) return false;
  return true;
}

void LockTable::link_holder(Lock& l, uint32_t r) {
  Req& q = reqs_[r];
  q.granted = true;
  q.prev = kNone;
  q.next = l.holder_head;
  if (l.holder_head != kNone) reqs_[l.holder_head].prev = r;
  l.holder_head = r;
  ++l.holders;
  ++l.granted[idx(q.mode)];
}

void LockTable::unlink_holder(Lock& l, uint32_t r) {
  Req& q = reqs_[r];
  if (q.prev != kNone) reqs_[q.prev].next = q.next;
  else l.holder_head = q.next;
  if (q.next != kNone) reqs_[q.next].prev = q.prev;
  --l.holders;
  --l.granted[idx(q.mode)];
}

void LockTable::enqueue(Lock& l, uint32_t li, uint32_t r) {
  Req& q = reqs_[r];
  q.granted = false;
  q.next = kNone;
  q.prev = l.wait_tail;
  if (l.wait_tail != kNone) reqs_[l.wait_tail].next = r;
  else l.wait_head = r;
  l.wait_tail = r;
  if (!l.pending) {
    l.pending = true;
    l.pending_prev = kNone;
    l.pending_next = pending_head_;
    if (pending_head_ != kNone) locks_.items[pending_head_].pending_prev = li;
    pending_head_ = li;
  }
}

void LockTable::dequeue(Lock& l, uint32_t r) {
  Req& q = reqs_[r];
  if (q.prev != kNone) reqs_[q.prev].next = q.next;
  else l.wait_head = q.next;
  if (q.next != kNone) reqs_[q.next].prev = q.prev;
  else l.wait_tail = q.prev;
  if (l.wait_head == kNone && l.pending) {
    l.pending = false;
    if (l.pending_prev != kNone) locks_.items[l.pending_prev].pending_next = l.pending_next;
    else pending_head_ = l.pending_next;
    if (l.pending_next != kNone) locks_.items[l.pending_next].pending_prev = l.pending_prev;
  }
}

void LockTable::push_event(const Req& r, bool granted) {
  events_.push(Event{r.txn, locks_.items[r.lock].id, r.tag, r.mode, granted});
}

bool LockTable::pop_event(Event* e) { return events_.pop(e); }

void LockTable::grant_waiters(uint32_t li) {
  Lock& l = locks_.items[li];
  while (l.wait_head != kNone && grantable(l, reqs_[l.wait_head].mode, LockMode::kNL)) {
    const uint32_t r = l.wait_head;
    dequeue(l, r);
    link_holder(l, r);
    push_event(reqs_[r], true);
  }
}

LockTable::Outcome LockTable::acquire(uint64_t lock, const Request& r, uint64_t now) {
  if (r.mode == LockMode::kNL) return Outcome::kGranted;
  uint32_t li = find_lock(lock);
  uint32_t ti = find_txn(r.txn);
  // A second request of the transaction for this lock: a conversion.
  if (li != kNone && ti != kNone)
    for (uint32_t q = txns_.items[ti].head; q != kNone; q = reqs_[q].txn_next) {
      Req& held = reqs_[q];
      if (held.lock != li) continue;
      if (!held.granted) return Outcome::kDenied;  // it waits for this lock already
      const LockMode want = supremum(held.mode, r.mode);
      if (want == held.mode) return Outcome::kGranted;
      Lock& l = locks_.items[li];
      if (!grantable(l, want, held.mode)) return Outcome::kDenied;
      --l.granted[idx(held.mode)];
      held.mode = want;
      ++l.granted[idx(want)];
      return Outcome::kGranted;
    }

  const Lock* existing = li != kNone ? &locks_.items[li] : nullptr;
  const bool now_ok = existing == nullptr || (existing->wait_head == kNone && grantable(*existing, r.mode, LockMode::kNL));
  if (!now_ok) {
    if (policy_ == DeadlockPolicy::kNoWait) return Outcome::kDenied;
    if (policy_ == DeadlockPolicy::kWaitDie && !older_than_all(*existing, r.ts)) return Outcome::kDenied;
  }
  // Resources first, so that a full table changes nothing.
  if (free_req_ == kNone || (li == kNone && locks_.free == kNone) || (ti == kNone && txns_.free == kNone))
    return Outcome::kFull;
  if (li == kNone) li = locks_.add(lock);
  if (ti == kNone) ti = txns_.add(r.txn);
  const uint32_t q = free_req_;
  free_req_ = reqs_[q].txn_next;
  --free_reqs_;
  Req& n = reqs_[q];
  n = Req{};
  n.txn = r.txn;
  n.ts = r.ts;
  n.tag = r.tag;
  n.since = now;
  n.lock = li;
  n.mode = r.mode;
  n.txn_next = txns_.items[ti].head;
  txns_.items[ti].head = q;
  Lock& l = locks_.items[li];
  if (now_ok) {
    link_holder(l, q);
    return Outcome::kGranted;
  }
  enqueue(l, li, q);
  return Outcome::kWaiting;
}

void LockTable::free_request(uint32_t q) {
  Req& r = reqs_[q];
  const uint32_t li = r.lock;
  Lock& l = locks_.items[li];
  if (r.granted) unlink_holder(l, q);
  else dequeue(l, q);
  grant_waiters(li);
  drop_lock_if_idle(li);
  r.txn_next = free_req_;
  free_req_ = q;
  ++free_reqs_;
}

uint32_t LockTable::release_all(uint64_t txn) {
  const uint32_t ti = find_txn(txn);
  if (ti == kNone) return 0;
  uint32_t n = 0;
  for (uint32_t q = txns_.items[ti].head; q != kNone;) {
    const uint32_t next = reqs_[q].txn_next;
    free_request(q);
    ++n;
    q = next;
  }
  txns_.drop(ti);
  return n;
}

LockMode LockTable::held(uint64_t lock, uint64_t txn) const {
  const uint32_t li = find_lock(lock), ti = find_txn(txn);
  if (li == kNone || ti == kNone) return LockMode::kNL;
  for (uint32_t q = txns_.items[ti].head; q != kNone; q = reqs_[q].txn_next)
    if (reqs_[q].lock == li) return reqs_[q].granted ? reqs_[q].mode : LockMode::kNL;
  return LockMode::kNL;
}

bool LockTable::release(uint64_t lock, uint64_t txn) {
  const uint32_t li = find_lock(lock), ti = find_txn(txn);
  if (li == kNone || ti == kNone) return false;
  for (uint32_t* p = &txns_.items[ti].head; *p != kNone; p = &reqs_[*p].txn_next) {
    const uint32_t q = *p;
    if (reqs_[q].lock != li) continue;
    *p = reqs_[q].txn_next;
    free_request(q);
    if (txns_.items[ti].head == kNone) txns_.drop(ti);
    return true;
  }
  return false;
}

uint32_t LockTable::expire(uint64_t now) {
  if (policy_ == DeadlockPolicy::kNoWait) return 0;
  uint32_t n = 0;
  for (uint32_t li = pending_head_; li != kNone;) {
    Lock& l = locks_.items[li];
    const uint32_t next_lock = l.pending_next;
    bool denied = false;
    while (l.wait_head != kNone && now >= reqs_[l.wait_head].since && now - reqs_[l.wait_head].since >= wait_limit_) {
      const uint32_t q = l.wait_head;
      Req& r = reqs_[q];
      dequeue(l, q);
      push_event(r, false);
      // Off its transaction's list, back to the pool.
      const uint32_t ti = find_txn(r.txn);
      for (uint32_t* p = &txns_.items[ti].head; *p != kNone; p = &reqs_[*p].txn_next)
        if (*p == q) {
          *p = r.txn_next;
          break;
        }
      if (txns_.items[ti].head == kNone) txns_.drop(ti);
      r.txn_next = free_req_;
      free_req_ = q;
      ++free_reqs_;
      ++n;
      denied = true;
    }
    if (denied) {
      grant_waiters(li);  // the new head may fit the granted group
      drop_lock_if_idle(li);
    }
    li = next_lock;
  }
  return n;
}

uint32_t LockTable::granted_count(uint64_t lock, LockMode m) const {
  const uint32_t l = find_lock(lock);
  return l == kNone ? 0 : locks_.items[l].granted[idx(m)];
}

uint32_t LockTable::waiting(uint64_t lock) const {
  const uint32_t l = find_lock(lock);
  uint32_t n = 0;
  if (l != kNone)
    for (uint32_t r = locks_.items[l].wait_head; r != kNone; r = reqs_[r].next) ++n;
  return n;
}

std::string LockTable::check() const {
  if (std::string lost = events_.check(); !lost.empty()) return lost;
  char buf[200];
  for (uint32_t head : locks_.buckets)
    for (uint32_t li = head; li != kNone; li = locks_.items[li].next) {
      const Lock& l = locks_.items[li];
      uint32_t count[kLockModes] = {};
      uint32_t holders = 0;
      for (uint32_t r = l.holder_head; r != kNone; r = reqs_[r].next) {
        const Req& a = reqs_[r];
        ++count[idx(a.mode)];
        ++holders;
        if (!a.granted) return "a waiting request among the holders";
        for (uint32_t s = reqs_[r].next; s != kNone; s = reqs_[s].next)
          if (reqs_[s].txn != a.txn && !compatible(a.mode, reqs_[s].mode)) {
            std::snprintf(buf, sizeof buf, "lock %llu: %s and %s granted together",
                          static_cast<unsigned long long>(l.id), to_string(a.mode), to_string(reqs_[s].mode));
            return buf;
          }
      }
      if (holders != l.holders) return "holder count differs from the holders";
      for (int m = 0; m < kLockModes; ++m)
        if (count[m] != l.granted[m]) return "a mode counter differs from the holders";
      if (l.wait_head != kNone && grantable(l, reqs_[l.wait_head].mode, LockMode::kNL)) {
        std::snprintf(buf, sizeof buf, "lock %llu: its waiting head (%s) could be granted",
                      static_cast<unsigned long long>(l.id), to_string(reqs_[l.wait_head].mode));
        return buf;
      }
      if ((l.wait_head != kNone) != l.pending) return "pending flag differs from the waiting group";
      for (uint32_t r = l.wait_head; r != kNone && reqs_[r].next != kNone; r = reqs_[r].next)
        if (reqs_[reqs_[r].next].since < reqs_[r].since) return "waiters out of arrival order";
      if (l.holders == 0 && l.wait_head == kNone) return "an idle lock was kept";
    }
  return "";
}

}  // namespace rdtx::cc::twopl
