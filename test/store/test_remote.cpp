// One-sided lookups and fetches between two shm nodes: present and absent
// keys, chains, READ counts, hostile index contents, and reads racing with
// the owner's inserts, erases and updates.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "store_fixture.hpp"

using namespace rdtx;
using namespace rdtx::store;
using namespace rdtx::store::test;

namespace {

TableSpec spec(uint32_t capacity, uint64_t buckets = 0, std::optional<uint64_t> overflow = {}) {
  TableSpec s;
  s.id = 1;
  s.name = "items";
  s.meta_bytes = 16;
  s.record_bytes = 64;
  s.capacity = capacity;
  s.buckets = buckets;
  s.overflow_buckets = overflow;
  return s;
}

int insert(Table& t, uint64_t key, uint64_t version = 0, TupleRef* ref = nullptr) {
  return t.insert(key, make_record(key, version, t.layout().record_bytes), ref);
}

// The slot holding `key` in the owner's memory (quiescent table).
IndexSlot* slot_of(Table& t, uint64_t key) {
  HashIndex& ix = t.index();
  uint64_t b = bucket_of(key, ix.geometry().buckets);
  for (int hops = 0; hops < 1000; ++hops) {
    for (IndexSlot& s : ix.bucket(b)->slots)
      if (s.value != 0 && s.key == key) return &s;
    b = ix.bucket(b)->next;
    if (b == 0) break;
  }
  return nullptr;
}

}  // namespace

TEST(RemoteLookup, FindsPresentKeysAndReportsAbsentOnes) {
  TwoNodes c;
  Table* t = must(c.owner->create_table(spec(2000)));
  for (uint64_t k = 0; k < 1000; ++k) ASSERT_EQ(insert(*t, k * 7 + 1), 0);
  TableDescriptor d = t->descriptor();
  ASSERT_TRUE(validate(d).ok());

  uint64_t reads = 0;
  for (uint64_t k = 0; k < 1000; ++k) {
    uint64_t key = k * 7 + 1;
    LookupResult r = c.lookup(d, key);
    ASSERT_EQ(r.status, 0) << key;
    TupleRef ref;
    ASSERT_EQ(t->lookup(key, &ref), 0);
    EXPECT_EQ(r.tuple_index, ref.index);
    EXPECT_EQ(r.remote_addr, reinterpret_cast<uint64_t>(ref.tuple));
    EXPECT_EQ(r.state_low, state_low(ref.state));
    reads += r.reads;
  }
  // Half full with the default sizing: nearly every key is in its primary bucket.
  EXPECT_LT(reads, 1010u);
  for (uint64_t k = 0; k < 1000; ++k) {
    LookupResult r = c.lookup(d, k * 7 + 2);
    EXPECT_EQ(r.status, -ENOENT);
    EXPECT_GE(r.reads, 1u);
  }
}

TEST(RemoteLookup, FollowsOverflowChainsOneReadPerBucket) {
  TwoNodes c;
  Table* t = must(c.owner->create_table(spec(100, /*buckets=*/1, /*overflow=*/4)));
  for (uint64_t k = 0; k < 20; ++k) ASSERT_EQ(insert(*t, k), 0);  // 3 buckets
  TableDescriptor d = t->descriptor();
  EXPECT_EQ(c.lookup(d, 0).reads, 1u);
  EXPECT_EQ(c.lookup(d, 10).reads, 2u);
  LookupResult last = c.lookup(d, 19);
  EXPECT_EQ(last.status, 0);
  EXPECT_EQ(last.reads, 3u);
  LookupResult absent = c.lookup(d, 99);
  EXPECT_EQ(absent.status, -ENOENT);
  EXPECT_EQ(absent.reads, 3u);
  // Erasing from the middle bucket leaves the tail reachable.
  for (uint64_t k = 7; k < 14; ++k) ASSERT_EQ(t->erase(k), 0);
  EXPECT_EQ(c.lookup(d, 19).status, 0);
  EXPECT_EQ(c.lookup(d, 10).status, -ENOENT);
}

TEST(RemoteFetch, ReadsTheTupleAndValidatesItsHeader) {
  TwoNodes c;
  Table* t = must(c.owner->create_table(spec(100)));
  ASSERT_EQ(insert(*t, 42, 5), 0);
  TableDescriptor d = t->descriptor();
  for (TupleCheck check : {TupleCheck::kConfirmed, TupleCheck::kSingleRead}) {
    FetchResult f = c.fetch(d, 42, nullptr, check);
    ASSERT_EQ(f.status, 0);
    EXPECT_FALSE(f.cache_hit);
    EXPECT_EQ(f.round_trips, 2u) << "bucket + tuple";
    EXPECT_EQ(f.reads, check == TupleCheck::kConfirmed ? 3u : 2u);
    EXPECT_EQ(f.state, 1u);
    EXPECT_EQ(read_header(f.tuple, d.layout()).key, 42u);
    EXPECT_EQ(check_record(f.tuple + d.layout().record_offset(), 42, 64), RecordCheck::kGood);
    EXPECT_EQ(record_version(f.tuple + d.layout().record_offset()), 5u);
  }
  EXPECT_EQ(c.fetch(d, 43, nullptr).status, -ENOENT);
}

TEST(RemoteFetch, CacheHitCostsOneRoundTrip) {
  TwoNodes c;
  Table* t = must(c.owner->create_table(spec(100)));
  ASSERT_EQ(insert(*t, 42, 5), 0);
  TableDescriptor d = t->descriptor();
  LocationCache cache(64);
  FetchResult miss = c.fetch(d, 42, &cache);
  ASSERT_EQ(miss.status, 0);
  EXPECT_FALSE(miss.cache_hit);
  FetchResult hit = c.fetch(d, 42, &cache);
  ASSERT_EQ(hit.status, 0);
  EXPECT_TRUE(hit.cache_hit);
  EXPECT_EQ(hit.round_trips, 1u);
  EXPECT_EQ(hit.reads, 2u) << "tuple + confirmation, one doorbell";
  EXPECT_EQ(hit.remote_addr, miss.remote_addr);
  EXPECT_EQ(record_version(hit.tuple + d.layout().record_offset()), 5u);
  FetchResult single = c.fetch(d, 42, &cache, TupleCheck::kSingleRead);
  EXPECT_TRUE(single.cache_hit);
  EXPECT_EQ(single.reads, 1u);
  EXPECT_EQ(cache.stats().hits, 2u);
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_EQ(cache.stats().stale, 0u);
}

TEST(RemoteFetch, ScratchTooSmallIsAnError) {
  TwoNodes c;
  Table* t = must(c.owner->create_table(spec(100)));
  ASSERT_EQ(insert(*t, 1), 0);
  TableDescriptor d = t->descriptor();
  Scratch s = c.scratch();
  s.bytes = 100;
  EXPECT_EQ(c.run(fetch_onesided(c.qp[0].get(), d, 1, s, nullptr)).status, -EINVAL);
  EXPECT_EQ(c.run(lookup_onesided(c.qp[0].get(), d, 1, s)).status, -EINVAL);
  EXPECT_EQ(scratch_bytes(d), kBucketBytes) << "a bucket is larger than this tuple";
  d.tuple_bytes = 200;
  EXPECT_EQ(scratch_bytes(d), 208u) << "the tuple and its confirmation word";
}

TEST(RemoteFetch, FailedReadIsAnIoError) {
  TwoNodes c;
  Table* t = must(c.owner->create_table(spec(100)));
  ASSERT_EQ(insert(*t, 1), 0);
  TableDescriptor d = t->descriptor();
  d.rkey ^= 0x5a5a;
  EXPECT_EQ(c.fetch(d, 1, nullptr).status, -EIO);
}

// Hostile or corrupt index contents in the owner's memory: every remote and
// local path reports an error; nothing reads out of bounds (ASan) or loops.
TEST(HostileIndex, SlotWithOutOfRangeTupleIndex) {
  TwoNodes c;
  Table* t = must(c.owner->create_table(spec(100)));
  for (uint64_t k = 0; k < 10; ++k) ASSERT_EQ(insert(*t, k), 0);
  IndexSlot* s = slot_of(*t, 4);
  ASSERT_NE(s, nullptr);
  s->value = slot_value(0xfffffff0u, 1);
  TableDescriptor d = t->descriptor();
  EXPECT_EQ(c.lookup(d, 4).status, -EBADMSG);
  LocationCache cache(16);
  EXPECT_EQ(c.fetch(d, 4, &cache).status, -EBADMSG);
  TupleRef ref;
  EXPECT_EQ(t->lookup(4, &ref), -EBADMSG);
  EXPECT_EQ(t->erase(4), -EBADMSG);
  EXPECT_EQ(insert(*t, 4), -EEXIST) << "the slot still claims the key";
  // Other keys are unaffected.
  EXPECT_EQ(c.fetch(d, 5, &cache).status, 0);

  s->value = slot_value(2, 2);  // in range, but a dead (even) state
  EXPECT_EQ(c.lookup(d, 4).status, -EBADMSG);
}

TEST(HostileIndex, SlotNamingAnotherKeysTupleIsNeverAccepted) {
  TwoNodes c;
  Table* t = must(c.owner->create_table(spec(100)));
  TupleRef a, b;
  ASSERT_EQ(insert(*t, 100, 1, &a), 0);
  ASSERT_EQ(insert(*t, 200, 2, &b), 0);
  slot_of(*t, 100)->value = slot_value(b.index, b.state);  // key 100 -> key 200's tuple
  TableDescriptor d = t->descriptor();
  FetchResult f = c.fetch(d, 100, nullptr);
  EXPECT_EQ(f.status, -EAGAIN);
  EXPECT_EQ(f.round_trips, 2u * kFetchAttempts);
  TupleRef ref;
  EXPECT_EQ(t->lookup(100, &ref), -EAGAIN);
  EXPECT_EQ(t->erase(100), -EBADMSG);
  uint64_t version = 0;
  ASSERT_EQ(t->lookup(200, &ref), 0) << "the other key's tuple was left alone";
  std::vector<std::byte> copy(t->tuple_bytes());
  ASSERT_TRUE(t->copy_tuple(ref, copy.data()));
  version = record_version(copy.data() + t->layout().record_offset());
  EXPECT_EQ(version, 2u);
}

TEST(HostileIndex, BadOverflowLinks) {
  TwoNodes c;
  Table* t = must(c.owner->create_table(spec(100, /*buckets=*/1, /*overflow=*/4)));
  for (uint64_t k = 0; k < 20; ++k) ASSERT_EQ(insert(*t, k), 0);  // chain 0 -> 1 -> 2
  TableDescriptor d = t->descriptor();
  Bucket* head = t->index().bucket(0);
  Bucket* mid = t->index().bucket(1);
  const uint64_t good_next = head->next;
  ASSERT_EQ(good_next, 1u);

  for (uint64_t bad : {uint64_t{5}, uint64_t{1} << 40, ~uint64_t{0}}) {
    head->next = bad;  // past the overflow area
    EXPECT_EQ(c.lookup(d, 10).status, -EBADMSG) << bad;
    TupleRef ref;
    EXPECT_EQ(t->lookup(10, &ref), -EBADMSG) << bad;
    EXPECT_EQ(insert(*t, 50), -EBADMSG) << bad;
    EXPECT_EQ(c.lookup(d, 3).status, 0) << "keys before the bad link are still found";
  }
  head->next = good_next;

  mid->next = 1;  // a cycle: 0 -> 1 -> 1 -> ...
  LookupResult r = c.lookup(d, 99);
  EXPECT_EQ(r.status, -EBADMSG);
  EXPECT_EQ(r.reads, 2u) << "a link that does not go forward is corrupt at once";
  TupleRef ref;
  EXPECT_EQ(t->lookup(99, &ref), -EBADMSG);
  EXPECT_EQ(t->erase(99), -EBADMSG);

  // A link back into the primary area is never valid either.
  Table* two = must(c.owner->create_table([] {
    TableSpec s = spec(100, /*buckets=*/2, /*overflow=*/2);
    s.id = 2;
    s.name = "two";
    return s;
  }()));
  uint64_t absent = 1000;
  while (bucket_of(absent, 2) != 0) ++absent;
  two->index().bucket(0)->next = 1;  // primary bucket 1
  EXPECT_EQ(c.lookup(two->descriptor(), absent).status, -EBADMSG);
}

// A growing table commits tuples and overflow buckets after the peer got
// its descriptor; the peer reaches them with that descriptor (nothing is
// re-sent), while the owner goes on inserting: every key inserted before a
// fetch began is found with its own record.
TEST(RemoteFetch, GrownTableIsReachedWithTheFirstDescriptor) {
  TwoNodes c;
  TableSpec s = spec(32);
  s.grows = true;
  Table* t = must(c.owner->create_table(s));
  const TableDescriptor d = t->descriptor();
  ASSERT_TRUE(validate(d).ok());
  EXPECT_GT(d.capacity, 1'000'000u) << "the descriptor covers the reservation";

  constexpr uint64_t kKeys = 40'000;
  std::atomic<uint64_t> inserted{0};
  std::thread owner([&] {
    for (uint64_t k = 0; k < kKeys; ++k) {
      ASSERT_EQ(insert(*t, k * 5 + 3, k % 1000), 0) << k;
      inserted.store(k + 1, std::memory_order_release);
    }
  });
  std::mt19937_64 rng(11);
  uint64_t fetches = 0, grown = 0;
  while (inserted.load(std::memory_order_acquire) < kKeys || fetches < 2000) {
    const uint64_t n = inserted.load(std::memory_order_acquire);
    // Fetch only once the newest 64 rows are past the first 32 tuples: on a
    // loaded machine the owner thread can lose its CPU early, and fetches
    // spinning on the first rows would not test the grown memory.
    if (n < 96) {
      std::this_thread::yield();
      continue;
    }
    const uint64_t k = n - 1 - rng() % 64;  // the newest rows
    FetchResult f = c.fetch(d, k * 5 + 3, nullptr);
    ASSERT_EQ(f.status, 0) << "key " << k << " of " << n;
    ASSERT_EQ(check_record(f.tuple + d.layout().record_offset(), k * 5 + 3, 64), RecordCheck::kGood);
    ASSERT_EQ(record_version(f.tuple + d.layout().record_offset()), k % 1000);
    grown += f.tuple_index >= 32;
    ++fetches;
  }
  owner.join();
  EXPECT_GT(grown, fetches / 2) << "most fetches landed in memory committed after the descriptor";
  EXPECT_GT(t->memory().overflow_used, 32 / 4 / 8 + 16) << "chains grew into committed-later buckets";
  uint64_t reads = 0;
  for (uint64_t k = 0; k < kKeys; k += 97) {
    LookupResult r = c.lookup(d, k * 5 + 3);
    ASSERT_EQ(r.status, 0) << k;
    reads += r.reads;
  }
  EXPECT_GT(reads, 2 * (kKeys / 97)) << "a table grown far past its sizing has long chains";
}

// The owner inserts, erases and updates records in place while node 0
// fetches them one-sided through a small location cache. Every fetch that
// the store accepts must carry the requested key's header and only that
// key's record words (a record mixing two versions of that key is a torn
// in-place update, which the protocol's metadata handles; a word of another
// key would be the store accepting a reused tuple). Both acceptance and
// rejection (absent, changed, stale cache entries) must occur.
TEST(RemoteFetch, ConcurrentOwnerUpdatesNeverYieldWrongTuples) {
  TwoNodes c;
  // Large records widen the window in which a READ can straddle an erase
  // and a reuse: with TupleCheck::kSingleRead instead, this test accepts a
  // few records holding another key's words per run on 2 cores; with the
  // confirmation it must accept none.
  TableSpec s = spec(256, /*buckets=*/4, /*overflow=*/32);
  s.record_bytes = 2048;
  Table* t = must(c.owner->create_table(s));
  constexpr uint64_t kKeys = 48;
  for (uint64_t k = 0; k < kKeys; ++k) ASSERT_EQ(insert(*t, k), 0);
  TableDescriptor d = t->descriptor();
  const TupleLayout layout = d.layout();

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writer_ops{0};
  std::thread writer([&] {
    std::mt19937_64 rng(11);
    std::vector<uint64_t> version(kKeys, 0);
    std::vector<bool> present(kKeys, true);
    while (!stop.load(std::memory_order_relaxed)) {
      uint64_t k = rng() % kKeys;
      switch (rng() % 4) {
        case 0:
          if (present[k]) {
            ASSERT_EQ(t->erase(k), 0);
            present[k] = false;
          }
          break;
        case 1:
          if (!present[k]) {
            ASSERT_EQ(insert(*t, k, ++version[k]), 0);
            present[k] = true;
          }
          break;
        default:
          if (present[k]) {  // in-place update, word by word as a protocol would
            TupleRef ref;
            ASSERT_EQ(t->lookup(k, &ref), 0);
            auto* rec = reinterpret_cast<uint64_t*>(ref.tuple + layout.record_offset());
            ++version[k];
            for (uint32_t i = 0; i < layout.record_bytes / 8; ++i)
              store_word(rec + i, record_word(k, version[k], i), std::memory_order_relaxed);
          }
      }
      writer_ops.fetch_add(1, std::memory_order_relaxed);
    }
  });

  struct Counts {
    uint64_t fetches = 0, good = 0, torn = 0, wrong = 0, absent = 0, changed = 0, other = 0;
  } n;
  LocationCache cache(16);  // smaller than the key set: evictions too
  constexpr int kCoroutines = 4;
  for (int co = 0; co < kCoroutines; ++co)
    c.worker.spawn([](TwoNodes& c, TableDescriptor d, LocationCache& cache, Counts& n, std::atomic<bool>& stop,
                      int co) -> runtime::Task<void> {
      std::mt19937_64 rng(co);
      const TupleLayout layout = d.layout();
      while (!stop.load(std::memory_order_relaxed)) {
        uint64_t key = rng() % kKeys;
        FetchResult f = co_await fetch_onesided(c.qp[0].get(), d, key, c.scratch(co), &cache);
        ++n.fetches;
        if (f.status == -ENOENT) {
          ++n.absent;
        } else if (f.status == -EAGAIN) {
          ++n.changed;
        } else if (f.status != 0) {
          ++n.other;
        } else if (read_header(f.tuple, layout).key != key || !is_live(read_header(f.tuple, layout).state)) {
          ++n.wrong;
        } else {
          switch (check_record(f.tuple + layout.record_offset(), key, layout.record_bytes)) {
            case RecordCheck::kGood:
              ++n.good;
              break;
            case RecordCheck::kTorn:
              ++n.torn;
              break;
            case RecordCheck::kWrong:
              ++n.wrong;
              break;
          }
        }
      }
    }(c, d, cache, n, stop, co));

  auto start = std::chrono::steady_clock::now();
  while ((n.fetches < 200'000 || writer_ops.load() < 100'000) &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(8))
    c.worker.poll_once();
  stop = true;
  c.drain();
  writer.join();

  std::printf("fetches %" PRIu64 ": good %" PRIu64 " torn %" PRIu64 " absent %" PRIu64 " changed %" PRIu64
              " wrong %" PRIu64 "; cache hits %" PRIu64 " stale %" PRIu64 "; owner ops %" PRIu64 "\n",
              n.fetches, n.good, n.torn, n.absent, n.changed, n.wrong, cache.stats().hits, cache.stats().stale,
              writer_ops.load());
  EXPECT_EQ(n.wrong, 0u);
  EXPECT_EQ(n.other, 0u);
  EXPECT_GT(n.good, 0u);
  EXPECT_GT(n.absent + n.changed, 0u);
  EXPECT_GT(cache.stats().stale, 0u) << "erases and reuses must be caught on cached locations";
  EXPECT_GT(cache.stats().hits, 0u);
}
