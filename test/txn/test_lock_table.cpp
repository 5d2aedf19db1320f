// The 2PL lock table (cc/twopl/lock_table.hpp): the paper's compatibility
// matrix, conversions, FIFO waiting without barging, the three deadlock
// policies, release of everything a transaction holds in one call, Bounded
// Wait's expiry, multi-granularity through intention modes, full pools, and
// a randomized run checked after every step against the table's invariants
// and against a model of who holds what.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "cc/twopl/lock_table.hpp"

using namespace rdtx::cc::twopl;
using Outcome = LockTable::Outcome;

namespace {
constexpr LockMode NL = LockMode::kNL, IS = LockMode::kIS, IX = LockMode::kIX, S = LockMode::kS,
                   SIX = LockMode::kSIX, X = LockMode::kX;

LockTable::Request req(uint64_t txn, LockMode m, uint64_t ts = 0, uint64_t tag = 0) {
  return LockTable::Request{txn, ts == 0 ? txn : ts, m, tag};
}

std::vector<LockTable::Event> drain(LockTable& t) {
  std::vector<LockTable::Event> out;
  LockTable::Event e;
  while (t.pop_event(&e)) out.push_back(e);
  return out;
}
}  // namespace

// Table 1 of "Strong consistency is not hard to get", row by row.
TEST(LockModes, CompatibilityIsThePapersTable) {
  const LockMode all[] = {NL, IS, IX, S, SIX, X};
  const char* rows[] = {"111111", "111110", "111000", "110100", "110000", "100000"};
  for (int a = 0; a < 6; ++a)
    for (int b = 0; b < 6; ++b) {
      EXPECT_EQ(compatible(all[a], all[b]), rows[a][b] == '1') << to_string(all[a]) << " " << to_string(all[b]);
      EXPECT_EQ(compatible(all[a], all[b]), compatible(all[b], all[a])) << "symmetric";
    }
  EXPECT_EQ(supremum(IX, S), SIX);
  EXPECT_EQ(supremum(S, IX), SIX);
  EXPECT_EQ(supremum(IS, S), S);
  EXPECT_EQ(supremum(SIX, IX), SIX);
  EXPECT_EQ(supremum(S, X), X);
  EXPECT_EQ(supremum(NL, IS), IS);
}

TEST(LockTable, SharedLocksShareAndExclusiveWaitsInFifoOrder) {
  LockTable t({}, DeadlockPolicy::kBoundedWait, 1000);
  EXPECT_EQ(t.acquire(7, req(1, S), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(7, req(2, S), 0), Outcome::kGranted);
  EXPECT_EQ(t.granted_count(7, S), 2u);
  EXPECT_EQ(t.acquire(7, req(3, X, 0, 33), 1), Outcome::kWaiting);
  // S is compatible with the granted group, but X waits ahead: no barging.
  EXPECT_EQ(t.acquire(7, req(4, S, 0, 44), 2), Outcome::kWaiting);
  EXPECT_EQ(t.waiting(7), 2u);
  EXPECT_EQ(t.check(), "");
  EXPECT_EQ(t.release_all(1), 1u);
  EXPECT_TRUE(drain(t).empty()) << "one S holder is left";
  EXPECT_EQ(t.release_all(2), 1u);
  auto ev = drain(t);
  ASSERT_EQ(ev.size(), 1u) << "X, then S stays behind it";
  EXPECT_EQ(ev[0].txn, 3u);
  EXPECT_EQ(ev[0].tag, 33u);
  EXPECT_TRUE(ev[0].granted);
  EXPECT_EQ(t.granted_count(7, X), 1u);
  t.release_all(3);
  ev = drain(t);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].txn, 4u);
  EXPECT_EQ(ev[0].mode, S);
  t.release_all(4);
  EXPECT_EQ(t.locks_in_use(), 0u);
  EXPECT_EQ(t.requests_in_use(), 0u);
  EXPECT_EQ(t.transactions_in_use(), 0u);
}

TEST(LockTable, NoWaitDeniesEveryConflict) {
  LockTable t({}, DeadlockPolicy::kNoWait, 0);
  EXPECT_EQ(t.acquire(1, req(1, X), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(1, req(2, S), 0), Outcome::kDenied);
  EXPECT_EQ(t.acquire(1, req(2, IS), 0), Outcome::kDenied);
  EXPECT_EQ(t.acquire(2, req(2, S), 0), Outcome::kGranted);
  EXPECT_EQ(t.waiting(1), 0u);
  EXPECT_EQ(t.requests_in_use(), 2u) << "a denied request holds nothing";
  EXPECT_EQ(t.check(), "");
}

// Wait-Die: only a transaction older than every holder and waiter waits;
// a younger one dies. So waits only ever go from older to younger.
TEST(LockTable, WaitDieLetsOnlyOlderTransactionsWait) {
  LockTable t({}, DeadlockPolicy::kWaitDie, 0);
  EXPECT_EQ(t.acquire(1, req(50, X, 50), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(1, req(60, S, 60), 0), Outcome::kDenied) << "younger than the holder: dies";
  EXPECT_EQ(t.acquire(1, req(40, S, 40), 0), Outcome::kWaiting) << "older: waits";
  EXPECT_EQ(t.acquire(1, req(45, S, 45), 0), Outcome::kDenied) << "younger than the waiter ahead: dies";
  EXPECT_EQ(t.acquire(1, req(30, S, 30), 0), Outcome::kWaiting);
  t.release_all(50);
  auto ev = drain(t);
  ASSERT_EQ(ev.size(), 2u) << "both S waiters, in order";
  EXPECT_EQ(ev[0].txn, 40u);
  EXPECT_EQ(ev[1].txn, 30u);
  EXPECT_EQ(t.check(), "");
}

// Bounded Wait: a request not granted within the limit is denied, leaves
// the queue, and the next waiter gets its chance.
TEST(LockTable, BoundedWaitDeniesWhatWaitedTooLong) {
  LockTable t({}, DeadlockPolicy::kBoundedWait, 100);
  EXPECT_EQ(t.acquire(1, req(1, S), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(1, req(2, X, 0, 22), 10), Outcome::kWaiting);
  EXPECT_EQ(t.acquire(1, req(3, S, 0, 33), 50), Outcome::kWaiting);
  EXPECT_EQ(t.expire(109), 0u) << "not yet";
  EXPECT_EQ(t.expire(110), 1u);
  auto ev = drain(t);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].txn, 2u);
  EXPECT_FALSE(ev[0].granted) << "X timed out";
  EXPECT_EQ(ev[1].txn, 3u);
  EXPECT_TRUE(ev[1].granted) << "S, next in line, fits the granted group";
  EXPECT_EQ(t.granted_count(1, S), 2u);
  EXPECT_EQ(t.transactions_in_use(), 2u) << "transaction 2 had nothing else";
  EXPECT_EQ(t.check(), "");
  // A deadlock (1 waits for 2's lock, 2 for 1's) is broken by the timeout.
  EXPECT_EQ(t.acquire(2, req(1, X), 200), Outcome::kGranted);
  EXPECT_EQ(t.acquire(3, req(3, X), 200), Outcome::kGranted);
  EXPECT_EQ(t.acquire(3, req(1, X), 210), Outcome::kWaiting);
  EXPECT_EQ(t.acquire(2, req(3, X), 220), Outcome::kWaiting);
  EXPECT_EQ(t.expire(310), 1u);
  ev = drain(t);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].txn, 1u);
  EXPECT_FALSE(ev[0].granted);
  t.release_all(1);  // transaction 1 aborts
  ev = drain(t);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].txn, 3u);
  EXPECT_TRUE(ev[0].granted);
}

// release_all also withdraws a transaction's waiting requests, silently.
TEST(LockTable, ReleaseAllWithdrawsWaitingRequests) {
  LockTable t({}, DeadlockPolicy::kBoundedWait, 1000);
  EXPECT_EQ(t.acquire(1, req(1, X), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(1, req(2, X), 0), Outcome::kWaiting);
  EXPECT_EQ(t.acquire(1, req(3, S), 0), Outcome::kWaiting);
  EXPECT_EQ(t.acquire(9, req(2, S), 0), Outcome::kGranted);
  EXPECT_EQ(t.release_all(2), 2u);
  EXPECT_TRUE(drain(t).empty()) << "S still waits for the X holder";
  EXPECT_EQ(t.waiting(1), 1u);
  t.release_all(1);
  auto ev = drain(t);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].txn, 3u);
  EXPECT_EQ(t.check(), "");
}

// Multi-granularity: intention locks on the parent before the child. A
// writer of one row (IX on the warehouse, X on the row) and a reader of
// another row (IS, S) share the warehouse; a scan's S on the warehouse
// conflicts with the writer's IX but not with the reader's IS.
TEST(LockTable, IntentionLocksOnParentsGuardScans) {
  LockTable t({}, DeadlockPolicy::kNoWait, 0);
  const uint64_t warehouse = 1, row_a = 100, row_b = 101;
  EXPECT_EQ(t.acquire(warehouse, req(1, IX), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(row_a, req(1, X), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(warehouse, req(2, IS), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(row_b, req(2, S), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(warehouse, req(3, S), 0), Outcome::kDenied) << "a scan while a row is written";
  t.release_all(1);
  EXPECT_EQ(t.acquire(warehouse, req(3, S), 0), Outcome::kGranted) << "only readers left";
  EXPECT_EQ(t.acquire(warehouse, req(4, IX), 0), Outcome::kDenied) << "no writer under a scan";
  EXPECT_EQ(t.check(), "");
}

// A second request of a transaction converts its lock to the supremum when
// no one else is in the way, and is denied otherwise.
TEST(LockTable, ConversionsTakeTheSupremumOrAreDenied) {
  LockTable t({}, DeadlockPolicy::kBoundedWait, 1000);
  EXPECT_EQ(t.acquire(1, req(1, S), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(1, req(1, IS), 0), Outcome::kGranted) << "covered";
  EXPECT_EQ(t.granted_count(1, S), 1u);
  EXPECT_EQ(t.acquire(1, req(1, IX), 0), Outcome::kGranted) << "S + IX";
  EXPECT_EQ(t.granted_count(1, SIX), 1u);
  EXPECT_EQ(t.granted_count(1, S), 0u);
  EXPECT_EQ(t.acquire(1, req(2, IS), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(1, req(1, X), 0), Outcome::kDenied) << "another holder's IS";
  EXPECT_EQ(t.granted_count(1, SIX), 1u) << "the denied conversion changed nothing";
  EXPECT_EQ(t.acquire(5, req(3, X), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(5, req(4, S), 0), Outcome::kWaiting);
  EXPECT_EQ(t.acquire(5, req(4, S), 0), Outcome::kDenied) << "it waits for that lock already";
  EXPECT_EQ(t.check(), "");
}

// Fixed pools: a request that finds one empty is kFull and changes nothing;
// everything is reusable after release.
TEST(LockTable, FullPoolsAreReportedAndChangeNothing) {
  LockTable t({/*locks=*/2, /*requests=*/3, /*transactions=*/2}, DeadlockPolicy::kBoundedWait, 1000);
  EXPECT_EQ(t.acquire(1, req(1, S), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(2, req(1, S), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(3, req(1, S), 0), Outcome::kFull) << "no third lock";
  EXPECT_EQ(t.acquire(1, req(2, S), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(1, req(3, S), 0), Outcome::kFull) << "no third transaction";
  EXPECT_EQ(t.acquire(2, req(2, X), 0), Outcome::kFull) << "no fourth request";
  EXPECT_EQ(t.waiting(2), 0u);
  EXPECT_EQ(t.check(), "");
  t.release_all(1);
  t.release_all(2);
  EXPECT_EQ(t.locks_in_use() + t.requests_in_use() + t.transactions_in_use(), 0u);
  EXPECT_EQ(t.acquire(3, req(3, X), 0), Outcome::kGranted);
}

// Random requests, conversions, releases and expiries by 12 transactions on
// 6 locks, under each policy: after every step the table's invariants hold
// (holders compatible, counters right, no grantable head, FIFO), every
// waiter eventually hears back exactly once, and a model of who holds what
// (built from kGranted replies and events) equals the table's view.
TEST(LockTable, RandomScheduleKeepsEveryInvariant) {
  for (DeadlockPolicy policy : {DeadlockPolicy::kNoWait, DeadlockPolicy::kWaitDie, DeadlockPolicy::kBoundedWait}) {
    SCOPED_TRACE(static_cast<int>(policy));
    LockTable t({16, 64, 16}, policy, 50);
    std::mt19937_64 rng(42 + static_cast<int>(policy));
    std::map<std::pair<uint64_t, uint64_t>, LockMode> held;  // (txn, lock) -> mode
    std::set<std::pair<uint64_t, uint64_t>> waiting;
    uint64_t now = 0, granted_later = 0, denied_later = 0;
    auto absorb = [&] {
      LockTable::Event e;
      while (t.pop_event(&e)) {
        auto key = std::make_pair(e.txn, e.lock);
        ASSERT_EQ(waiting.erase(key), 1u) << "an event for a request that was not waiting";
        if (e.granted) {
          held[key] = e.mode;
          ++granted_later;
        } else {
          ++denied_later;
        }
      }
    };
    for (int step = 0; step < 20'000; ++step) {
      now += rng() % 5;
      const uint64_t txn = 1 + rng() % 12, lock = rng() % 6;
      const int op = static_cast<int>(rng() % 10);
      if (op < 7) {
        const LockMode m = static_cast<LockMode>(1 + rng() % 5);
        Outcome o = t.acquire(lock, req(txn, m, txn), now);
        auto key = std::make_pair(txn, lock);
        if (o == Outcome::kGranted) {
          auto it = held.find(key);
          held[key] = it == held.end() ? m : supremum(it->second, m);
        }
        if (o == Outcome::kWaiting) waiting.insert(key);
        ASSERT_NE(o, Outcome::kFull);
      } else if (op < 9) {
        t.release_all(txn);
        for (auto it = held.begin(); it != held.end();) it = it->first.first == txn ? held.erase(it) : std::next(it);
        for (auto it = waiting.begin(); it != waiting.end();)
          it = it->first == txn ? waiting.erase(it) : std::next(it);
      } else {
        t.expire(now);
      }
      absorb();
      ASSERT_EQ(t.check(), "") << "step " << step;
      // The model's holders are the table's.
      for (uint64_t l = 0; l < 6; ++l)
        for (LockMode m : {IS, IX, S, SIX, X}) {
          uint32_t n = 0;
          for (const auto& [k, mode] : held) n += k.second == l && mode == m;
          ASSERT_EQ(t.granted_count(l, m), n) << "step " << step << " lock " << l << " " << to_string(m);
        }
      uint32_t w = 0;
      for (uint64_t l = 0; l < 6; ++l) w += t.waiting(l);
      ASSERT_EQ(w, waiting.size());
    }
    if (policy != DeadlockPolicy::kNoWait) {
      EXPECT_GT(granted_later, 100u) << "waiters were granted";
    }
    if (policy == DeadlockPolicy::kBoundedWait) {
      EXPECT_GT(denied_later, 10u) << "waiters timed out";
    }
    for (uint64_t txn = 1; txn <= 12; ++txn) t.release_all(txn);
    absorb();
    EXPECT_EQ(t.locks_in_use() + t.requests_in_use() + t.transactions_in_use(), 0u) << "nothing leaks";
  }
}

// One lock released before the end (read committed's short read locks):
// the waiter it held up is granted, the transaction's other locks stay, and
// held() reports what each holds.
TEST(LockTable, ReleasingOneLockGrantsItsWaitersAndKeepsTheRest) {
  LockTable t({}, DeadlockPolicy::kBoundedWait, 1000);
  EXPECT_EQ(t.acquire(1, req(1, S), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(2, req(1, X), 0), Outcome::kGranted);
  EXPECT_EQ(t.acquire(1, req(2, X, 0, 77), 0), Outcome::kWaiting);
  EXPECT_EQ(t.held(1, 1), S);
  EXPECT_EQ(t.held(1, 2), NL) << "a waiting request holds nothing";
  EXPECT_TRUE(t.release(1, 1));
  EXPECT_FALSE(t.release(1, 1)) << "released already";
  LockTable::Event e;
  ASSERT_TRUE(t.pop_event(&e));
  EXPECT_TRUE(e.granted);
  EXPECT_EQ(e.txn, 2u);
  EXPECT_EQ(e.tag, 77u);
  EXPECT_EQ(t.held(1, 2), X);
  EXPECT_EQ(t.held(2, 1), X) << "the other lock stays";
  EXPECT_TRUE(t.known(1));
  EXPECT_EQ(t.check(), "");
  EXPECT_TRUE(t.release(2, 1));
  EXPECT_FALSE(t.known(1)) << "no request left: the transaction is gone";
  t.release_all(2);
  EXPECT_EQ(t.locks_in_use() + t.requests_in_use() + t.transactions_in_use(), 0u);
}
