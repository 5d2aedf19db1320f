// LocationCache: hits, misses, bounded capacity with eviction, RPC-reply
// fills, and stale entries detected by one-sided fetches after the owner
// erased, reused or reinserted the tuple.
#include <gtest/gtest.h>

#include "store/location_cache.hpp"
#include "store_fixture.hpp"

using namespace rdtx;
using namespace rdtx::store;
using namespace rdtx::store::test;

namespace {

TableSpec spec() {
  TableSpec s;
  s.id = 7;
  s.name = "orders";
  s.meta_bytes = 8;
  s.record_bytes = 24;
  s.capacity = 64;
  return s;
}

int insert(Table& t, uint64_t key, uint64_t version, TupleRef* ref = nullptr) {
  return t.insert(key, make_record(key, version, t.layout().record_bytes), ref);
}

}  // namespace

TEST(LocationCache, CountsHitsAndMissesPerTableAndKey) {
  LocationCache cache(64);
  CachedLocation loc;
  EXPECT_FALSE(cache.find(1, 10, &loc));
  cache.insert(1, 10, CachedLocation{2, 0x1000, 5});
  ASSERT_TRUE(cache.find(1, 10, &loc));
  EXPECT_EQ(loc.node, 2u);
  EXPECT_EQ(loc.remote_addr, 0x1000u);
  EXPECT_EQ(loc.state, 5u);
  EXPECT_FALSE(cache.find(2, 10, &loc)) << "same key, other table";
  cache.insert(1, 10, CachedLocation{2, 0x2000, 7});  // update in place
  ASSERT_TRUE(cache.find(1, 10, &loc));
  EXPECT_EQ(loc.remote_addr, 0x2000u);
  cache.insert(1, 11, CachedLocation{2, 0x3000, 4});  // dead state: not cached
  EXPECT_FALSE(cache.find(1, 11, &loc));
  cache.invalidate(1, 10);
  EXPECT_FALSE(cache.find(1, 10, &loc));
  EXPECT_EQ(cache.stats().hits, 2u);
  EXPECT_EQ(cache.stats().misses, 4u);
  EXPECT_EQ(cache.stats().inserts, 1u);
  EXPECT_EQ(cache.stats().stale, 0u) << "an explicit invalidate is not a stale detection";
  EXPECT_EQ(cache.size(), 0u);
}

TEST(LocationCache, CapacityIsBoundedAndOldEntriesAreEvicted) {
  LocationCache cache(8);  // 2 sets of 4 ways
  EXPECT_EQ(cache.capacity(), 8u);
  uint64_t bytes = cache.memory_bytes();
  for (uint64_t k = 0; k < 100; ++k) cache.insert(1, k, CachedLocation{0, 0x1000 + 64 * k, 1});
  EXPECT_EQ(cache.size(), 8u);
  EXPECT_EQ(cache.stats().inserts, 100u);
  EXPECT_EQ(cache.stats().evictions, 92u);
  EXPECT_EQ(cache.memory_bytes(), bytes);
  int found = 0;
  CachedLocation loc;
  for (uint64_t k = 0; k < 100; ++k)
    if (cache.find(1, k, &loc)) {
      ++found;
      EXPECT_EQ(loc.remote_addr, 0x1000 + 64 * k) << "an entry keeps its own location";
    }
  EXPECT_EQ(found, 8);
  EXPECT_EQ(LocationCache(0).capacity(), LocationCache::kWays) << "at least one set";
  EXPECT_EQ(LocationCache(100).capacity(), 64u) << "rounded down to a power-of-two number of sets";
}

TEST(LocationCache, RpcReplyFillsAreCheckedAndServeOneReadFetches) {
  TwoNodes c;
  Table* t = must(c.owner->create_table(spec()));
  TupleRef ref;
  ASSERT_EQ(insert(*t, 5, 3, &ref), 0);
  TableDescriptor d = t->descriptor();
  LocationCache cache(16);
  EXPECT_FALSE(cache.insert(d, 5, d.capacity, ref.state)) << "tuple index out of range";
  EXPECT_FALSE(cache.insert(d, 5, ref.index, ref.state + 1)) << "dead state";
  ASSERT_TRUE(cache.insert(d, 5, ref.index, ref.state));  // as an RPC handler's reply would say
  FetchResult f = c.fetch(d, 5, &cache);
  ASSERT_EQ(f.status, 0);
  EXPECT_TRUE(f.cache_hit);
  EXPECT_EQ(f.round_trips, 1u);
  EXPECT_EQ(f.tuple_index, ref.index);
  EXPECT_EQ(record_version(f.tuple + d.layout().record_offset()), 3u);
}

TEST(LocationCache, StaleEntriesAreDetectedInvalidatedAndRelookedUp) {
  TwoNodes c;
  Table* t = must(c.owner->create_table(spec()));
  TableDescriptor d = t->descriptor();
  LocationCache cache(16);
  TupleRef k1;
  ASSERT_EQ(insert(*t, 1, 1, &k1), 0);
  FetchResult f = c.fetch(d, 1, &cache);
  ASSERT_EQ(f.status, 0);
  const uint64_t old_addr = f.remote_addr;

  // Key 1 is erased and its tuple reused by key 2: the cached address now
  // holds another key.
  ASSERT_EQ(t->erase(1), 0);
  TupleRef k2;
  ASSERT_EQ(insert(*t, 2, 1, &k2), 0);
  ASSERT_EQ(k2.index, k1.index);
  f = c.fetch(d, 1, &cache);
  EXPECT_EQ(f.status, -ENOENT);
  EXPECT_EQ(cache.stats().stale, 1u);
  EXPECT_EQ(f.round_trips, 2u) << "the stale READ, then the bucket";
  CachedLocation loc;
  EXPECT_FALSE(cache.find(1, 1, &loc)) << "the stale entry was dropped";

  // Key 1 comes back in another tuple: a miss, then found there.
  ASSERT_EQ(insert(*t, 1, 2), 0);
  f = c.fetch(d, 1, &cache);
  ASSERT_EQ(f.status, 0);
  EXPECT_FALSE(f.cache_hit);
  EXPECT_NE(f.remote_addr, old_addr);
  EXPECT_EQ(record_version(f.tuple + d.layout().record_offset()), 2u);
  const uint64_t second_addr = f.remote_addr;
  const uint64_t second_state = f.state;

  // Erased and reinserted into the same tuple: same address, new incarnation.
  ASSERT_EQ(t->erase(1), 0);
  ASSERT_EQ(insert(*t, 1, 3), 0);
  f = c.fetch(d, 1, &cache);
  ASSERT_EQ(f.status, 0);
  EXPECT_FALSE(f.cache_hit) << "a new incarnation must not pass as a hit";
  EXPECT_EQ(cache.stats().stale, 2u);
  EXPECT_EQ(f.remote_addr, second_addr);
  EXPECT_GT(incarnation(f.state), incarnation(second_state));
  EXPECT_EQ(record_version(f.tuple + d.layout().record_offset()), 3u);
  f = c.fetch(d, 1, &cache);
  EXPECT_TRUE(f.cache_hit) << "refilled with the new incarnation";

  // An entry from another node or outside the table is stale without a READ.
  cache.insert(d.table_id, 2, CachedLocation{d.node_id + 1, d.tuple_addr(k2.index), k2.state});
  f = c.fetch(d, 2, &cache);
  ASSERT_EQ(f.status, 0);
  EXPECT_EQ(f.round_trips, 2u);
  EXPECT_EQ(cache.stats().stale, 3u);
  cache.insert(d.table_id, 2, CachedLocation{d.node_id, d.heap_addr + 3, k2.state});
  f = c.fetch(d, 2, &cache);
  ASSERT_EQ(f.status, 0);
  EXPECT_EQ(f.round_trips, 2u);
  EXPECT_EQ(cache.stats().stale, 4u);
}
