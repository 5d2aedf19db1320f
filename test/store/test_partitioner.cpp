// Partitioner kinds map keys to nodes as documented in partitioner.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "store/hash_index.hpp"
#include "store/partitioner.hpp"
#include "store_fixture.hpp"

using namespace rdtx;
using namespace rdtx::store;
using rdtx::store::test::must;

TEST(Partitioner, DefaultPutsEverythingOnNodeZero) {
  Partitioner p;
  EXPECT_EQ(p.nodes(), 1u);
  for (uint64_t k : {0ull, 1ull, 12345ull, ~0ull}) EXPECT_EQ(p.node_of(k), 0u);
}

TEST(Partitioner, RangeSplitsTheKeySpaceIntoContiguousRanges) {
  Partitioner p = must(Partitioner::range(4, 1000));  // 250 keys per node
  EXPECT_EQ(p.node_of(0), 0u);
  EXPECT_EQ(p.node_of(249), 0u);
  EXPECT_EQ(p.node_of(250), 1u);
  EXPECT_EQ(p.node_of(749), 2u);
  EXPECT_EQ(p.node_of(750), 3u);
  EXPECT_EQ(p.node_of(999), 3u);
  EXPECT_EQ(p.node_of(5000), 3u) << "keys past key_space belong to the last node";
  EXPECT_EQ(p.node_of(~0ull), 3u);

  Partitioner uneven = must(Partitioner::range(3, 10));  // ceil(10/3) = 4 per node
  std::vector<uint32_t> got;
  for (uint64_t k = 0; k < 10; ++k) got.push_back(uneven.node_of(k));
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2}));
  EXPECT_EQ(uneven.describe(), "range(3 nodes, 4 keys/node)");
}

TEST(Partitioner, ModuloIsKeyModNodes) {
  Partitioner p = must(Partitioner::modulo(3));
  for (uint64_t k = 0; k < 100; ++k) EXPECT_EQ(p.node_of(k), k % 3);
  EXPECT_EQ(p.node_of(~0ull), ~0ull % 3);
}

TEST(Partitioner, HashIsDeterministicAndBalancedForSequentialKeys) {
  Partitioner p = must(Partitioner::hash(4));
  std::vector<int> per_node(4);
  for (uint64_t k = 0; k < 100'000; ++k) {
    uint32_t n = p.node_of(k);
    ASSERT_LT(n, 4u);
    ASSERT_EQ(n, p.node_of(k));
    ++per_node[n];
  }
  for (int c : per_node) EXPECT_NEAR(c, 25'000, 1'000);
}

// If the partitioner and the index used the same hash, the keys a node owns
// would crowd into a quarter of its buckets (one READ no longer enough).
TEST(Partitioner, HashPartitioningDoesNotSkewTheIndex) {
  Partitioner p = must(Partitioner::hash(4));
  constexpr uint64_t kBuckets = 1024;
  std::vector<int> per_bucket(kBuckets);
  int owned = 0;
  for (uint64_t k = 0; k < 40'000; ++k)
    if (p.node_of(k) == 0) {
      ++per_bucket[bucket_of(k, kBuckets)];
      ++owned;
    }
  int empty = static_cast<int>(std::count(per_bucket.begin(), per_bucket.end(), 0));
  int fullest = *std::max_element(per_bucket.begin(), per_bucket.end());
  double mean = static_cast<double>(owned) / kBuckets;  // ~9.8
  EXPECT_LE(empty, 2);
  EXPECT_LT(fullest, 3 * mean);
}

namespace {
// TPC-C style: key = warehouse id (1-based) << 32 | rest; `arg` warehouses per node.
uint32_t by_warehouse(uint64_t key, uint64_t arg) { return static_cast<uint32_t>(((key >> 32) - 1) / arg); }
}  // namespace

TEST(Partitioner, CustomCallsTheWorkloadFunction) {
  Partitioner p = must(Partitioner::custom(4, by_warehouse, 2, "by_warehouse"));
  EXPECT_EQ(p.node_of(1ull << 32 | 77), 0u);
  EXPECT_EQ(p.node_of(2ull << 32), 0u);
  EXPECT_EQ(p.node_of(3ull << 32 | 5), 1u);
  EXPECT_EQ(p.node_of(8ull << 32 | 0xffffffff), 3u);
  EXPECT_EQ(p.describe(), "custom by_warehouse(4 nodes, arg 2)");
}

TEST(Partitioner, BadParametersAreErrorsNamingThem) {
  auto zero = Partitioner::hash(0);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("nodes"), std::string::npos) << zero.error().message;
  auto no_space = Partitioner::range(2, 0);
  ASSERT_FALSE(no_space.ok());
  EXPECT_NE(no_space.error().message.find("key_space"), std::string::npos) << no_space.error().message;
  auto no_fn = Partitioner::custom(2, nullptr, 0, "tpcc");
  ASSERT_FALSE(no_fn.ok());
  EXPECT_NE(no_fn.error().message.find("tpcc"), std::string::npos) << no_fn.error().message;
  EXPECT_FALSE(Partitioner::modulo(0).ok());
}
