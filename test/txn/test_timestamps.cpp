// Transaction timestamps and ids: unique across coordinators, strictly
// increasing per coordinator, whatever the clock does.
#include <gtest/gtest.h>

#include <set>

#include "txn/types.hpp"

using namespace rdtx::txn;

TEST(Timestamps, UniqueAcrossCoordinatorsAndMonotonicPerCoordinator) {
  std::set<uint64_t> seen;
  // 4 nodes x 3 workers x 5 coroutines, all reading the same clock value
  // (the worst case: ties everywhere), then the clock standing still.
  for (uint32_t n = 0; n < 4; ++n)
    for (uint32_t w = 0; w < 3; ++w)
      for (uint32_t c = 0; c < 5; ++c) {
        uint64_t last = 0;
        for (int i = 0; i < 100; ++i) {
          uint64_t ts = next_timestamp(/*now=*/1'000'000, /*epoch=*/0, last, n, w, c);
          EXPECT_GT(ts, last) << "not increasing for coordinator " << n << "." << w << "." << c;
          EXPECT_TRUE(seen.insert(ts).second) << "collision at " << ts;
          last = ts;
        }
      }
  EXPECT_EQ(seen.size(), 4u * 3 * 5 * 100);
}

// The clock floor (RCC 4.4's clock adjustment): a coordinator whose clock is
// behind hands out timestamps above the largest one it observed, from any
// coordinator, and keeps increasing; a floor below its clock changes nothing.
TEST(Timestamps, FloorLiftsABehindClockAboveWhatWasObserved) {
  const uint64_t ahead = next_timestamp(/*now=*/50'000'000, 0, 0, 3, 1, 7);
  uint64_t last = 0;
  for (int i = 0; i < 10; ++i) {
    const uint64_t ts = next_timestamp(/*now=*/1'000, 0, last, 0, 0, 0, /*floor=*/ahead);
    EXPECT_GT(ts, ahead);
    EXPECT_GT(ts, last);
    last = ts;
  }
  const uint64_t behind = next_timestamp(/*now=*/1'000, 0, 0, 3, 1, 7);
  EXPECT_EQ(next_timestamp(50'000'000, 0, 0, 0, 0, 0, behind), next_timestamp(50'000'000, 0, 0, 0, 0, 0));
}

TEST(Timestamps, LimitsOfTheLayoutDoNotCollide) {
  // The largest node, worker and coroutine ids the configuration admits.
  uint64_t a = next_timestamp(640, 0, 0, kMaxNodesTs - 1, kMaxWorkersPerNode - 1, kMaxCoroutines - 1);
  uint64_t b = next_timestamp(640, 0, 0, 0, 0, 0);
  uint64_t c = next_timestamp(640, 0, 0, kMaxNodesTs - 1, 0, 0);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(b, c);
  EXPECT_EQ(a >> 20, b >> 20) << "same clock part";
}

TEST(TxnIds, UniqueAndNeverZero) {
  std::set<uint64_t> seen;
  for (uint32_t n : {0u, 1u, 63u})
    for (uint32_t w : {0u, 1u, 255u})
      for (uint32_t c : {0u, 63u})
        for (uint32_t s : {1u, 2u, 0xffffffffu}) {
          uint64_t id = make_txn_id(n, w, c, s);
          EXPECT_NE(id, 0u);
          EXPECT_TRUE(seen.insert(id).second);
        }
}
