// Table and HashIndex on the owner: insert, lookup, erase, overflow chains,
// incarnations, full-table errors, layout, and concurrent local use.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "store/table.hpp"
#include "store_fixture.hpp"

using namespace rdtx;
using namespace rdtx::store;
using namespace rdtx::store::test;

namespace {

TableSpec spec(uint32_t capacity, uint64_t buckets = 0, std::optional<uint64_t> overflow = {}) {
  TableSpec s;
  s.id = 3;
  s.name = "accounts";
  s.meta_bytes = 16;
  s.record_bytes = 32;
  s.capacity = capacity;
  s.buckets = buckets;
  s.overflow_buckets = overflow;
  return s;
}

int insert(Table& t, uint64_t key, uint64_t version = 0, TupleRef* ref = nullptr) {
  return t.insert(key, make_record(key, version, t.layout().record_bytes), ref);
}

// Looks `key` up and checks the record names it; returns the status.
int lookup_checked(const Table& t, uint64_t key, uint64_t* version = nullptr) {
  TupleRef ref;
  int rc = t.lookup(key, &ref);
  if (rc != 0) return rc;
  std::vector<std::byte> copy(t.tuple_bytes());
  EXPECT_TRUE(t.copy_tuple(ref, copy.data()));
  const std::byte* rec = copy.data() + t.layout().record_offset();
  EXPECT_EQ(check_record(rec, key, t.layout().record_bytes), RecordCheck::kGood) << "key " << key;
  EXPECT_EQ(read_header(copy.data(), t.layout()).key, key);
  if (version) *version = record_version(rec);
  return 0;
}

// Which bucket of `key`'s chain holds it: 0 = primary, 1 = first overflow...
int chain_position(Table& t, uint64_t key) {
  HashIndex& ix = t.index();
  uint64_t b = bucket_of(key, ix.geometry().buckets);
  for (int pos = 0; b != 0 || pos == 0; ++pos) {
    for (const IndexSlot& s : ix.bucket(b)->slots)
      if (s.value != 0 && s.key == key) return pos;
    b = ix.bucket(b)->next;
  }
  return -1;
}

}  // namespace

TEST(Table, LayoutOffsetsAndDescriptor) {
  OneNode n;
  TableSpec s = spec(100);
  s.record_bytes = 20;  // rounded up to 24 in the tuple
  Table* t = must(n.store.create_table(s));
  const TupleLayout& l = t->layout();
  EXPECT_EQ(l.key_offset(), 16u);
  EXPECT_EQ(l.state_offset(), 24u);
  EXPECT_EQ(l.record_offset(), 32u);
  EXPECT_EQ(t->tuple_bytes(), 56u);

  TableDescriptor d = t->descriptor();
  EXPECT_TRUE(validate(d).ok()) << validate(d).error().message;
  EXPECT_EQ(d.table_id, 3u);
  EXPECT_EQ(d.node_id, 0u);
  EXPECT_EQ(d.rkey, t->region().rkey);
  EXPECT_EQ(d.buckets, 25u) << "default: capacity / 4 primary buckets";
  EXPECT_EQ(d.overflow_buckets, 25u / 8 + 16);
  EXPECT_EQ(d.index_addr, t->region().remote_addr(0));
  EXPECT_EQ(d.heap_addr, d.index_addr + (d.buckets + d.overflow_buckets) * kBucketBytes);
  EXPECT_EQ(d.index_addr % 64, 0u);
  TupleRef ref;
  ASSERT_EQ(insert(*t, 7, 0, &ref), 0);
  EXPECT_EQ(d.tuple_addr(ref.index), reinterpret_cast<uint64_t>(ref.tuple));
}

TEST(Table, InsertLookupErase) {
  OneNode n;
  Table* t = must(n.store.create_table(spec(1000)));
  for (uint64_t k = 1; k <= 500; ++k) ASSERT_EQ(insert(*t, k * 31), 0);
  EXPECT_EQ(t->size(), 500u);
  for (uint64_t k = 1; k <= 500; ++k) ASSERT_EQ(lookup_checked(*t, k * 31), 0) << k;
  TupleRef ref;
  EXPECT_EQ(t->lookup(30, &ref), -ENOENT);
  EXPECT_EQ(t->lookup(31 * 501, &ref), -ENOENT);

  for (uint64_t k = 1; k <= 500; k += 2) ASSERT_EQ(t->erase(k * 31), 0);
  EXPECT_EQ(t->size(), 250u);
  for (uint64_t k = 1; k <= 500; ++k) EXPECT_EQ(lookup_checked(*t, k * 31), k % 2 ? -ENOENT : 0) << k;
  EXPECT_EQ(t->erase(31), -ENOENT) << "erasing twice";
  EXPECT_EQ(t->erase(12345), -ENOENT);
}

TEST(Table, DuplicateInsertIsRejectedAndKeepsTheRecord) {
  OneNode n;
  Table* t = must(n.store.create_table(spec(10)));
  ASSERT_EQ(insert(*t, 5, 1), 0);
  EXPECT_EQ(insert(*t, 5, 2), -EEXIST);
  uint64_t version = 0;
  ASSERT_EQ(lookup_checked(*t, 5, &version), 0);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(t->size(), 1u);
}

TEST(Table, ShortRecordsAreZeroFilledAndLongOnesRejected) {
  OneNode n;
  Table* t = must(n.store.create_table(spec(10)));
  std::vector<std::byte> rec(5, std::byte{0xab});
  TupleRef ref;
  ASSERT_EQ(t->insert(1, rec, &ref), 0);
  const std::byte* r = ref.tuple + t->layout().record_offset();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(r[i], std::byte{0xab});
  for (int i = 5; i < 32; ++i) EXPECT_EQ(r[i], std::byte{0}) << i;
  for (uint32_t i = 0; i < t->layout().meta_bytes; ++i) EXPECT_EQ(ref.tuple[i], std::byte{0});
  std::vector<std::byte> too_long(33);
  EXPECT_EQ(t->insert(2, too_long), -EINVAL);
}

TEST(Table, OverflowChainsHoldEveryKey) {
  OneNode n;
  Table* t = must(n.store.create_table(spec(100, /*buckets=*/1, /*overflow=*/8)));
  for (uint64_t k = 0; k < 50; ++k) ASSERT_EQ(insert(*t, k), 0) << k;
  // 50 keys in 7-slot buckets: the primary bucket and 7 overflow buckets.
  EXPECT_EQ(t->index().overflow_used(), 7u);
  for (uint64_t k = 0; k < 50; ++k) {
    EXPECT_EQ(lookup_checked(*t, k), 0) << k;
    EXPECT_EQ(chain_position(*t, k), static_cast<int>(k / kSlotsPerBucket));
  }
  TupleRef ref;
  EXPECT_EQ(t->lookup(50, &ref), -ENOENT) << "absent key walks the whole chain";
}

TEST(Table, EraseFromTheMiddleOfAChainKeepsTheRestAndReusesTheSlots) {
  OneNode n;
  Table* t = must(n.store.create_table(spec(100, 1, 4)));
  for (uint64_t k = 0; k < 20; ++k) ASSERT_EQ(insert(*t, k), 0);  // buckets 0, 1, 2 of the chain
  for (uint64_t k = 7; k < 14; ++k) {
    ASSERT_EQ(chain_position(*t, k), 1);
    ASSERT_EQ(t->erase(k), 0);
  }
  for (uint64_t k = 0; k < 20; ++k) EXPECT_EQ(lookup_checked(*t, k), k >= 7 && k < 14 ? -ENOENT : 0) << k;
  uint64_t used = t->index().overflow_used();
  for (uint64_t k = 100; k < 107; ++k) {
    ASSERT_EQ(insert(*t, k), 0);
    EXPECT_EQ(chain_position(*t, k), 1) << "the emptied middle bucket is reused first";
  }
  EXPECT_EQ(t->index().overflow_used(), used);
  for (uint64_t k = 14; k < 20; ++k) EXPECT_EQ(lookup_checked(*t, k), 0) << "keys behind the middle bucket";
}

TEST(Table, ReinsertAfterEraseIsANewIncarnation) {
  OneNode n;
  Table* t = must(n.store.create_table(spec(10)));
  TupleRef first, second;
  ASSERT_EQ(insert(*t, 9, 1, &first), 0);
  EXPECT_EQ(first.state, 1u);
  EXPECT_TRUE(is_live(first.state));
  EXPECT_EQ(incarnation(first.state), 0u);
  ASSERT_EQ(t->erase(9), 0);
  EXPECT_EQ(read_header(first.tuple, t->layout()).state, 2u) << "dead, next incarnation";

  ASSERT_EQ(insert(*t, 9, 2, &second), 0);
  EXPECT_EQ(second.index, first.index) << "the freed tuple is reused first";
  EXPECT_EQ(second.state, 3u);
  EXPECT_EQ(incarnation(second.state), 1u);

  std::vector<std::byte> copy(t->tuple_bytes());
  EXPECT_FALSE(t->copy_tuple(first, copy.data())) << "a reference to the old incarnation must not pass";
  EXPECT_TRUE(t->copy_tuple(second, copy.data()));
  EXPECT_EQ(record_version(copy.data() + t->layout().record_offset()), 2u);
}

// Incarnations are the table's: two tuples never show the same live state,
// so a state kept from one tuple cannot pass for another's.
TEST(Table, LiveStatesAreUniqueAcrossTuples) {
  OneNode n;
  Table* t = must(n.store.create_table(spec(10)));
  TupleRef a, b, c;
  ASSERT_EQ(insert(*t, 1, 1, &a), 0);
  ASSERT_EQ(insert(*t, 2, 1, &b), 0);
  ASSERT_EQ(t->erase(1), 0);
  ASSERT_EQ(insert(*t, 3, 1, &c), 0);
  EXPECT_EQ(c.index, a.index);
  EXPECT_NE(a.state, b.state);
  EXPECT_GT(c.state, b.state);
  EXPECT_GT(c.state, a.state + 1) << "above the dead state erase left";
}

// A relocation moves a live key to another tuple in one step: the key is
// found at every moment, its old tuple is dead and taken by the next
// insert, and the reference to the old place fails.
TEST(Table, RelocateMovesAKeyAndFreesItsTuple) {
  OneNode n;
  Table* t = must(n.store.create_table(spec(4)));
  TupleRef before, after, other;
  ASSERT_EQ(insert(*t, 7, 1, &before), 0);
  const auto rec = make_record(7, 5, t->layout().record_bytes);
  ASSERT_EQ(t->relocate(7, rec, &after), 0);
  EXPECT_NE(after.index, before.index);
  EXPECT_GT(after.state, before.state);
  EXPECT_EQ(t->size(), 1u);
  TupleRef found;
  ASSERT_EQ(t->lookup(7, &found), 0);
  EXPECT_EQ(found.index, after.index);
  EXPECT_EQ(record_version(found.tuple + t->layout().record_offset()), 5u);
  std::vector<std::byte> copy(t->tuple_bytes());
  EXPECT_FALSE(t->copy_tuple(before, copy.data())) << "the old place is dead";
  ASSERT_EQ(insert(*t, 8, 1, &other), 0);
  EXPECT_EQ(other.index, before.index) << "the freed tuple is taken by another key";
  EXPECT_EQ(t->relocate(9, rec), -ENOENT);
  // Full: nothing changes.
  ASSERT_EQ(insert(*t, 10, 1), 0);
  ASSERT_EQ(insert(*t, 11, 1), 0);
  EXPECT_EQ(t->relocate(7, rec), -ENOSPC);
  ASSERT_EQ(t->lookup(7, &found), 0);
  EXPECT_EQ(found.index, after.index);
}

TEST(Table, FullTableAndFullOverflowAreErrorsThatLeaveNothingBehind) {
  OneNode n;
  Table* t = must(n.store.create_table(spec(10)));
  for (uint64_t k = 0; k < 10; ++k) ASSERT_EQ(insert(*t, k), 0);
  EXPECT_EQ(insert(*t, 10), -ENOSPC);
  TupleRef ref;
  EXPECT_EQ(t->lookup(10, &ref), -ENOENT);
  ASSERT_EQ(t->erase(3), 0);
  EXPECT_EQ(insert(*t, 10), 0) << "an erased tuple is free again";

  Table* chain = must(n.store.create_table([] {
    TableSpec s = spec(100, 1, 1);
    s.id = 4;
    s.name = "tiny_index";
    return s;
  }()));
  for (uint64_t k = 0; k < 14; ++k) ASSERT_EQ(insert(*chain, k), 0);
  EXPECT_EQ(insert(*chain, 14), -ENOSPC) << "no overflow bucket left";
  EXPECT_EQ(chain->size(), 14u);
  ASSERT_EQ(chain->erase(0), 0);
  EXPECT_EQ(insert(*chain, 14), 0);
  EXPECT_EQ(lookup_checked(*chain, 14), 0);
}

TEST(Table, BadSpecsAreErrorsNamingTheTable) {
  OneNode n;
  TableSpec s = spec(10);
  s.meta_bytes = 12;
  auto r = n.store.create_table(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("accounts"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("meta_bytes"), std::string::npos) << r.error().message;
  s = spec(0);
  EXPECT_FALSE(n.store.create_table(s).ok());
  s = spec(10);
  s.record_bytes = 2u << 20;
  EXPECT_FALSE(n.store.create_table(s).ok());
}

// A growing table starts with memory for `capacity` tuples and a few
// overflow buckets, and commits more as inserts need them: 50x its sizing
// later every key is there with its record, chains are longer, erased
// tuples are reused before fresh ones, and memory() shows what was added.
TEST(Table, GrowingTableCommitsMemoryAsInsertsNeedIt) {
  OneNode n;
  TableSpec s = spec(200);
  s.grows = true;
  Table* t = must(n.store.create_table(s));
  const TableMemory before = t->memory();
  EXPECT_EQ(before.capacity, 200u);
  EXPECT_GT(before.max_capacity, 1'000'000u) << "reserved for what the machine's memory could hold";
  constexpr uint64_t kKeys = 10'000;
  for (uint64_t k = 0; k < kKeys; ++k) ASSERT_EQ(insert(*t, k * 3 + 1, k), 0) << k;
  const TableMemory after = t->memory();
  EXPECT_EQ(after.live, kKeys);
  EXPECT_GE(after.capacity, kKeys);
  EXPECT_LT(after.capacity, kKeys + Table::kGrowBytes / t->tuple_bytes() + 1) << "one step at a time";
  EXPECT_GT(after.heap_bytes, before.heap_bytes * 40);
  EXPECT_GT(after.overflow_used, before.overflow_buckets) << "the overflow area grew too";
  EXPECT_GT(after.index_bytes, before.index_bytes);
  EXPECT_EQ(t->high_water(), kKeys);
  for (uint64_t k = 0; k < kKeys; ++k) {
    uint64_t v = 0;
    ASSERT_EQ(lookup_checked(*t, k * 3 + 1, &v), 0) << k;
    EXPECT_EQ(v, k);
  }
  for (uint64_t k = 0; k < kKeys; k += 2) ASSERT_EQ(t->erase(k * 3 + 1), 0);
  for (uint64_t k = 0; k < kKeys; k += 2) ASSERT_EQ(insert(*t, k * 3 + 2), 0);
  EXPECT_EQ(t->high_water(), kKeys) << "erased tuples are reused first";
  EXPECT_EQ(t->memory().capacity, after.capacity);
}

// Growth stops at max_capacity: the insert past it is -ENOSPC with nothing
// left behind, and a freed tuple is usable again.
TEST(Table, GrowingTableStopsAtItsLargestSize) {
  OneNode n;
  TableSpec s = spec(16, 2, 1);
  s.grows = true;
  s.max_capacity = 3000;
  Table* t = must(n.store.create_table(s));
  EXPECT_EQ(t->max_capacity(), 3000u);
  for (uint64_t k = 0; k < 3000; ++k) ASSERT_EQ(insert(*t, k), 0) << k;
  EXPECT_EQ(insert(*t, 3000), -ENOSPC);
  TupleRef ref;
  EXPECT_EQ(t->lookup(3000, &ref), -ENOENT);
  EXPECT_EQ(t->size(), 3000u);
  ASSERT_EQ(t->erase(5), 0);
  EXPECT_EQ(insert(*t, 3000), 0);
  EXPECT_EQ(lookup_checked(*t, 3000), 0);
  s.max_capacity = 8;
  s.id = 9;
  s.name = "inverted";
  auto bad = n.store.create_table(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("max_capacity"), std::string::npos) << bad.error().message;
}

namespace {
// A device whose reserved memory commits `budget` times, then runs out as a
// full /dev/shm would: everything else is the shm device's.
class StingyMemory final : public rdma::DeviceMemory {
 public:
  StingyMemory(std::unique_ptr<rdma::DeviceMemory> m, int budget) : m_(std::move(m)), budget_(budget) {}
  void* data() const override { return m_->data(); }
  size_t size() const override { return m_->size(); }
  Result<void> commit(size_t offset, size_t length) override {
    if (budget_-- <= 0) return make_error(ENOSPC, "no space left (test)");
    return m_->commit(offset, length);
  }

 private:
  std::unique_ptr<rdma::DeviceMemory> m_;
  int budget_;
};
class StingyDevice final : public rdma::Device {
 public:
  StingyDevice(rdma::Device& d, int budget) : d_(d), budget_(budget) {}
  const rdma::DeviceCaps& caps() const override { return d_.caps(); }
  Result<std::unique_ptr<rdma::DeviceMemory>> alloc_memory(size_t b) override { return d_.alloc_memory(b); }
  Result<std::unique_ptr<rdma::DeviceMemory>> reserve_memory(size_t r, size_t c) override {
    auto m = d_.reserve_memory(r, c);
    if (!m.ok()) return m.error();
    return std::unique_ptr<rdma::DeviceMemory>(std::make_unique<StingyMemory>(std::move(*m), budget_));
  }
  Result<rdma::MemoryRegion> reg_mr(void* a, size_t l, uint32_t acc) override { return d_.reg_mr(a, l, acc); }
  Result<void> dereg_mr(const rdma::MemoryRegion& mr) override { return d_.dereg_mr(mr); }
  Result<std::unique_ptr<rdma::CompletionQueue>> create_cq(uint32_t n) override { return d_.create_cq(n); }
  Result<std::unique_ptr<rdma::QueuePair>> create_qp(const rdma::QpInit& i) override { return d_.create_qp(i); }
  Result<std::unique_ptr<rdma::AddressHandle>> create_ah(const rdma::QpAddress& a) override { return d_.create_ah(a); }
  Result<std::unique_ptr<rdma::Device>> open_context() override { return d_.open_context(); }

 private:
  rdma::Device& d_;
  int budget_;
};
}  // namespace

// No memory for the next step: the insert is -ENOSPC, nothing is left
// behind, the table keeps working within what it has.
TEST(Table, GrowthWithoutMemoryIsAFullTable) {
  OneNode n;
  StingyDevice dev(*n.dev, 2);  // the initial heap, then one step
  TableSpec s = spec(16, 4, 5000);  // overflow buckets enough for every key: only the heap grows
  s.grows = true;
  auto tab = Table::create(dev, 0, s);
  ASSERT_TRUE(tab.ok()) << tab.error().message;
  Table& g = **tab;
  const uint32_t step = static_cast<uint32_t>(Table::kGrowBytes / g.tuple_bytes());
  uint64_t k = 0;
  while (insert(g, k) == 0) ++k;
  EXPECT_EQ(k, 16u + step) << "the initial tuples and one step";
  EXPECT_EQ(g.size(), k);
  TupleRef ref;
  EXPECT_EQ(g.lookup(k, &ref), -ENOENT);
  ASSERT_EQ(g.erase(0), 0);
  EXPECT_EQ(insert(g, k), 0);
  EXPECT_EQ(lookup_checked(g, k), 0);
}

TEST(Store, TableIdsAndNamesAreUnique) {
  OneNode n;
  ASSERT_TRUE(n.store.create_table(spec(10)).ok());
  TableSpec same_id = spec(10);
  same_id.name = "other";
  auto r = n.store.create_table(same_id);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EEXIST);
  TableSpec same_name = spec(10);
  same_name.id = 5;
  EXPECT_FALSE(n.store.create_table(same_name).ok());
  TableSpec big_id = spec(10);
  big_id.id = Store::kMaxTables;
  big_id.name = "big";
  EXPECT_FALSE(n.store.create_table(big_id).ok());
  EXPECT_EQ(n.store.table(3)->name(), "accounts");
  EXPECT_EQ(n.store.table(4), nullptr);
  EXPECT_EQ(n.store.table(~0u), nullptr);
  ASSERT_EQ(n.store.descriptors().size(), 1u);
  EXPECT_EQ(n.store.descriptors()[0].table_id, 3u);
}

TEST(TableDescriptor, ValidateRejectsInconsistentFields) {
  OneNode n;
  Table* t = must(n.store.create_table(spec(100)));
  const TableDescriptor good = t->descriptor();
  ASSERT_TRUE(validate(good).ok());
  auto rejects = [&](auto mutate, const char* what) {
    TableDescriptor d = good;
    mutate(d);
    auto r = validate(d);
    EXPECT_FALSE(r.ok()) << what;
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("table 3"), std::string::npos) << r.error().message;
    }
  };
  rejects([](TableDescriptor& d) { d.tuple_bytes += 8; }, "tuple size");
  rejects([](TableDescriptor& d) { d.meta_bytes = 4; }, "meta not multiple of 8");
  rejects([](TableDescriptor& d) { d.buckets = 0; }, "no bucket");
  rejects([](TableDescriptor& d) { d.capacity = 0; }, "no tuple");
  rejects([](TableDescriptor& d) { d.capacity = 1ull << 40; }, "capacity beyond slot format");
  rejects([](TableDescriptor& d) { d.heap_addr = ~0ull - 64; }, "heap wraps");
  rejects([](TableDescriptor& d) { d.overflow_buckets = ~0ull / 2; }, "index wraps");
  rejects([](TableDescriptor& d) { d.index_addr += 4; }, "misaligned");
  rejects([](TableDescriptor& d) { d.record_bytes = ~0u; }, "record size overflow");
}

// Several owner threads insert and erase while others look up. Keys that
// are never erased must always be found, with their own record; any other
// key found must be found with its own record. Catches slots that move, and
// chains that lose buckets, under concurrent modification.
TEST(Table, ConcurrentLocalInsertEraseAndLookup) {
  OneNode n;
  Table* t = must(n.store.create_table(spec(512, /*buckets=*/4, /*overflow=*/64)));
  constexpr uint64_t kStable = 40, kChurn = 200;
  for (uint64_t k = 0; k < kStable; ++k) ASSERT_EQ(insert(*t, k), 0);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0};
  auto churn = [&](uint64_t first) {
    std::mt19937_64 rng(first);
    while (!stop.load(std::memory_order_relaxed)) {
      uint64_t k = first + rng() % kChurn;
      if (rng() % 2) {
        int rc = insert(*t, k, rng() % 1000);
        EXPECT_TRUE(rc == 0 || rc == -EEXIST) << rc;
      } else {
        int rc = t->erase(k);
        EXPECT_TRUE(rc == 0 || rc == -ENOENT) << rc;
      }
      ops.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::thread w1(churn, 1000), w2(churn, 2000);

  uint64_t stable_found = 0, churn_found = 0, churn_missing = 0, lookups = 0;
  auto start = std::chrono::steady_clock::now();
  std::mt19937_64 rng(7);
  std::vector<std::byte> copy(t->tuple_bytes());
  while ((lookups < 200'000 || ops.load() < 100'000) &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    ++lookups;
    uint64_t k = rng() % 3 == 0 ? rng() % kStable : 1000 + (rng() % 2) * 1000 + rng() % kChurn;
    TupleRef ref;
    int rc = t->lookup(k, &ref);
    if (k < kStable) {
      ASSERT_EQ(rc, 0) << "a key that is never erased was not found: " << k;
      ++stable_found;
    } else if (rc != 0) {
      ASSERT_TRUE(rc == -ENOENT || rc == -EAGAIN) << rc;
      ++churn_missing;
      continue;
    } else {
      ++churn_found;
    }
    if (!t->copy_tuple(ref, copy.data())) continue;  // erased meanwhile: correctly refused
    ASSERT_EQ(read_header(copy.data(), t->layout()).key, k);
    ASSERT_EQ(check_record(copy.data() + t->layout().record_offset(), k, 32), RecordCheck::kGood) << k;
  }
  stop = true;
  w1.join();
  w2.join();
  EXPECT_GT(stable_found, 0u);
  EXPECT_GT(churn_found, 0u);
  EXPECT_GT(churn_missing, 0u);
  // Quiescent again: the index and the live count agree with a full scan.
  uint64_t present = 0;
  TupleRef ref;
  for (uint64_t base : {1000ull, 2000ull})
    for (uint64_t k = base; k < base + kChurn; ++k) present += t->lookup(k, &ref) == 0;
  EXPECT_EQ(t->size(), kStable + present);
}
