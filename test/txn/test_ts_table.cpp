// Timestamp ordering at one shard (cc/twopl/ts_table.hpp): the textbook
// rules (late reads and writes refused, younger requests wait for a pending
// write, older ones are refused), install and discard, waiters served in
// timestamp order, expiry, full pools, and a randomized schedule checked
// after every step against the table's invariants and at the end against
// the definition: every read saw the latest committed write below its
// timestamp, and every item's writes were installed in timestamp order.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "cc/twopl/ts_table.hpp"

using namespace rdtx::cc::twopl;
using Outcome = TsTable::Outcome;

namespace {
constexpr LockMode R = LockMode::kS, W = LockMode::kX;

TsTable::Request req(uint64_t txn, LockMode m, uint64_t ts, uint64_t tag = 0) { return {txn, ts, m, tag}; }

std::vector<TsTable::Event> drain(TsTable& t) {
  std::vector<TsTable::Event> out;
  TsTable::Event e;
  while (t.pop_event(&e)) out.push_back(e);
  return out;
}
}  // namespace

TEST(TsTable, LateReadsAndWritesAreRefused) {
  TsTable t({}, 1000);
  uint64_t st[2] = {0, 0}, seen = 0;
  EXPECT_EQ(t.acquire(1, st, req(1, R, 50), 0, &seen), Outcome::kGranted);
  EXPECT_EQ(st[0], 50u) << "rts is the newest read";
  EXPECT_EQ(t.acquire(1, st, req(2, R, 40), 0, &seen), Outcome::kGranted) << "reads need not be in order";
  EXPECT_EQ(st[0], 50u);
  EXPECT_EQ(t.requests_in_use(), 0u) << "a served read keeps nothing";
  EXPECT_EQ(t.acquire(1, st, req(3, W, 45), 0, &seen), Outcome::kDenied) << "a write below rts";
  EXPECT_EQ(seen, 50u);
  EXPECT_EQ(t.acquire(1, st, req(4, W, 60), 0, &seen), Outcome::kGranted);
  EXPECT_EQ(t.held(1, 4), W);
  EXPECT_EQ(t.held(1, 3), LockMode::kNL);
  EXPECT_EQ(t.release_all(4, true), 1u);
  EXPECT_EQ(st[1], 60u) << "installed: wts";
  EXPECT_EQ(t.acquire(1, st, req(5, R, 55), 0, &seen), Outcome::kDenied) << "a read below wts";
  EXPECT_EQ(seen, 60u);
  EXPECT_EQ(t.acquire(1, st, req(6, W, 58), 0, &seen), Outcome::kDenied) << "a write below wts";
  EXPECT_EQ(t.requests_in_use(), 0u);
  EXPECT_EQ(t.items_in_use(), 0u);
  EXPECT_EQ(t.check(), "");
}

TEST(TsTable, YoungerRequestsWaitForAPendingWriteAndOlderOnesAreRefused) {
  TsTable t({}, 1000);
  uint64_t st[2] = {0, 10}, seen = 0;
  ASSERT_EQ(t.acquire(9, st, req(1, W, 20), 0, &seen), Outcome::kGranted);
  EXPECT_EQ(t.acquire(9, st, req(2, R, 15), 0, &seen), Outcome::kDenied) << "it should have read before the write";
  EXPECT_EQ(seen, 20u);
  EXPECT_EQ(t.acquire(9, st, req(3, W, 17), 0, &seen), Outcome::kDenied);
  EXPECT_EQ(t.acquire(9, st, req(4, R, 30, 44), 0, &seen), Outcome::kWaiting) << "it must see the write if installed";
  EXPECT_EQ(t.acquire(9, st, req(4, R, 30), 0, &seen), Outcome::kDenied) << "a second request while one waits";
  EXPECT_EQ(t.acquire(9, st, req(1, R, 20), 0, &seen), Outcome::kGranted) << "its own pending write covers it";
  EXPECT_EQ(t.waiting(9), 1u);
  EXPECT_EQ(t.check(), "");
  EXPECT_TRUE(drain(t).empty());
  t.release_all(1, true);
  const auto ev = drain(t);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(ev[0].granted);
  EXPECT_EQ(ev[0].tag, 44u);
  EXPECT_EQ(st[1], 20u);
  EXPECT_EQ(st[0], 30u);
  EXPECT_EQ(t.requests_in_use(), 0u);
  EXPECT_EQ(t.check(), "");
}

TEST(TsTable, AnAbortedWriteIsDiscardedAndItsWaitersServed) {
  TsTable t({}, 1000);
  uint64_t st[2] = {0, 10}, seen = 0;
  ASSERT_EQ(t.acquire(9, st, req(1, W, 20), 0, &seen), Outcome::kGranted);
  ASSERT_EQ(t.acquire(9, st, req(2, R, 30), 0, &seen), Outcome::kWaiting);
  t.release_all(1, false);
  EXPECT_EQ(st[1], 10u) << "discarded: wts unchanged";
  const auto ev = drain(t);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(ev[0].granted);
  EXPECT_EQ(st[0], 30u);
  // With the write gone, an older read than it is fine again.
  EXPECT_EQ(t.acquire(9, st, req(3, R, 15), 0, &seen), Outcome::kGranted);
}

TEST(TsTable, WaitersAreServedInTimestampOrderUntilAWriteIsAccepted) {
  TsTable t({}, 1000);
  uint64_t st[2] = {0, 0}, seen = 0;
  ASSERT_EQ(t.acquire(5, st, req(1, W, 10), 0, &seen), Outcome::kGranted);
  ASSERT_EQ(t.acquire(5, st, req(2, R, 30, 2), 1, &seen), Outcome::kWaiting);
  ASSERT_EQ(t.acquire(5, st, req(3, W, 20, 3), 2, &seen), Outcome::kWaiting);
  ASSERT_EQ(t.acquire(5, st, req(4, R, 15, 4), 3, &seen), Outcome::kWaiting);
  EXPECT_EQ(t.check(), "");
  t.release_all(1, true);
  auto ev = drain(t);
  // R15 served (rts 15 < 20, so W20 still fits), then W20 accepted; R30 waits on.
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].txn, 4u);
  EXPECT_TRUE(ev[0].granted);
  EXPECT_EQ(ev[1].txn, 3u);
  EXPECT_TRUE(ev[1].granted);
  EXPECT_EQ(t.held(5, 3), W);
  EXPECT_EQ(t.waiting(5), 1u);
  EXPECT_EQ(t.check(), "");
  t.release_all(3, true);
  ev = drain(t);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].txn, 2u);
  EXPECT_EQ(st[1], 20u);
  EXPECT_EQ(st[0], 30u);
  EXPECT_EQ(t.requests_in_use(), 0u);
  EXPECT_EQ(t.transactions_in_use(), 0u);
  EXPECT_EQ(t.items_in_use(), 0u);
}

TEST(TsTable, WaitsEndAtTheLimitAndEndingATransactionWithdrawsItsWaiters) {
  TsTable t({}, 100);
  uint64_t st[2] = {0, 0}, seen = 0;
  ASSERT_EQ(t.acquire(5, st, req(1, W, 10), 0, &seen), Outcome::kGranted);
  ASSERT_EQ(t.acquire(5, st, req(2, R, 30, 2), 50, &seen), Outcome::kWaiting);
  ASSERT_EQ(t.acquire(5, st, req(3, R, 40, 3), 120, &seen), Outcome::kWaiting);
  EXPECT_EQ(t.expire(149), 0u);
  EXPECT_EQ(t.expire(150), 1u);
  auto ev = drain(t);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].txn, 2u);
  EXPECT_FALSE(ev[0].granted);
  EXPECT_EQ(t.release_all(3, false), 1u);  // withdrawn: no event
  EXPECT_TRUE(drain(t).empty());
  EXPECT_EQ(t.requests_in_use(), 1u);
  t.release_all(1, true);
  EXPECT_EQ(t.requests_in_use(), 0u);
  EXPECT_EQ(st[0], 0u) << "nobody read";
}

TEST(TsTable, AFullTableRefusesAndChangesNothing) {
  TsTable t({1, 2, 2}, 1000);
  uint64_t a[2] = {0, 0}, b[2] = {0, 0}, seen = 0;
  ASSERT_EQ(t.acquire(1, a, req(1, W, 10), 0, &seen), Outcome::kGranted);
  EXPECT_EQ(t.acquire(2, b, req(2, W, 20), 0, &seen), Outcome::kFull) << "no item left";
  EXPECT_EQ(t.acquire(2, b, req(2, R, 20), 0, &seen), Outcome::kGranted) << "a read needs no entry";
  EXPECT_EQ(b[0], 20u);
  ASSERT_EQ(t.acquire(1, a, req(3, R, 30), 0, &seen), Outcome::kWaiting);
  EXPECT_EQ(t.acquire(1, a, req(4, R, 40), 0, &seen), Outcome::kFull) << "no request left";
  EXPECT_EQ(t.waiting(1), 1u);
  EXPECT_EQ(a[0], 0u);
  EXPECT_EQ(t.check(), "");
}

// Random transactions over a few items, interleaved at random, ending in
// commit or abort; every step keeps the invariants, nothing is left, and
// the outcome is what timestamp order defines.
TEST(TsTable, RandomSchedulesAreTimestampOrdered) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    constexpr int kItems = 4, kTxns = 60;
    TsTable t({8, 64, 64}, 1'000'000);
    uint64_t stamps[kItems][2] = {};
    struct T {
      uint64_t ts;
      std::vector<std::pair<int, LockMode>> ops;
      size_t next = 0;
      bool blocked = false, ended = false, failed = false;
      std::vector<std::pair<int, uint64_t>> reads;  // item, wts seen
    };
    std::vector<T> txns(kTxns);
    for (int i = 0; i < kTxns; ++i) {
      // Clocks roughly in step: timestamps grow with the start order, give
      // or take a few transactions (distinct: the low bits name the txn).
      txns[i].ts = (100 + uint64_t(i) * 10 + rng() % 50) * 128 + uint64_t(i);
      std::vector<int> items = {0, 1, 2, 3};
      std::shuffle(items.begin(), items.end(), rng);
      const int n = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < n; ++k) txns[i].ops.push_back({items[k], rng() % 2 ? W : R});
    }
    std::map<int, std::vector<uint64_t>> installed;  // per item, committed write ts in install order
    std::vector<std::pair<int, std::pair<int, uint64_t>>> committed_reads;  // txn, (item, wts seen)
    std::vector<int> committed;
    auto on_events = [&] {
      TsTable::Event e;
      while (t.pop_event(&e)) {
        T& x = txns[e.txn - 1];
        ASSERT_TRUE(x.blocked);
        x.blocked = false;
        const int item = static_cast<int>(e.lock);
        if (!e.granted) x.failed = true;
        else if (e.mode == R) x.reads.push_back({item, stamps[item][1]});
        ++x.next;
      }
    };
    int live = kTxns, active_limit = 6;
    uint64_t now = 0;
    while (live > 0) {
      ++now;
      // A started, unfinished, unblocked transaction among the first few.
      std::vector<int> ready;
      int started = 0;
      for (int i = 0; i < kTxns && started < active_limit; ++i) {
        if (txns[i].ended) continue;
        ++started;
        if (!txns[i].blocked) ready.push_back(i);
      }
      ASSERT_FALSE(ready.empty()) << "seed " << seed << ": every transaction waits (a deadlock)";
      const int i = ready[rng() % ready.size()];
      T& x = txns[i];
      const uint64_t id = static_cast<uint64_t>(i) + 1;
      if (x.failed || x.next == x.ops.size()) {
        const bool commit = !x.failed && rng() % 8 != 0;
        t.release_all(id, commit);
        if (commit) {
          committed.push_back(i);
          for (auto& r : x.reads) committed_reads.push_back({i, r});
          for (auto& [item, mode] : x.ops)
            if (mode == W) installed[item].push_back(x.ts);
        }
        x.ended = true;
        --live;
      } else {
        const auto [item, mode] = x.ops[x.next];
        uint64_t seen = 0;
        const Outcome o = t.acquire(static_cast<uint64_t>(item), stamps[item], req(id, mode, x.ts, id), now, &seen);
        ASSERT_NE(o, Outcome::kFull);
        if (o == Outcome::kDenied) {
          x.failed = true;
          EXPECT_GT(seen, x.ts) << "refused for a later transaction's access";
        } else if (o == Outcome::kWaiting) {
          x.blocked = true;
        } else {
          if (mode == R) x.reads.push_back({item, stamps[item][1]});
          ++x.next;
        }
      }
      on_events();
      ASSERT_EQ(t.check(), "") << "seed " << seed;
    }
    EXPECT_EQ(t.requests_in_use(), 0u);
    EXPECT_EQ(t.items_in_use(), 0u);
    EXPECT_EQ(t.transactions_in_use(), 0u);
    // Writes installed in timestamp order; each read saw the newest
    // committed write below its timestamp (0: the initial value).
    for (auto& [item, ws] : installed) EXPECT_TRUE(std::is_sorted(ws.begin(), ws.end())) << "seed " << seed;
    for (auto& [i, r] : committed_reads) {
      uint64_t expect = 0;
      for (uint64_t w : installed[r.first])
        if (w < txns[i].ts && w > expect) expect = w;
      EXPECT_EQ(r.second, expect) << "seed " << seed << ": txn ts " << txns[i].ts << " read item " << r.first;
    }
    EXPECT_GT(committed.size(), 10u) << "seed " << seed;
  }
}
