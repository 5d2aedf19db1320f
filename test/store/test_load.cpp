// Parallel loading with oneTBB: every key findable afterwards, memory report
// consistent with the geometry, and load errors naming the table and row.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "runtime/shutdown.hpp"
#include "store/loader.hpp"
#include "store_fixture.hpp"

using namespace rdtx;
using namespace rdtx::store;
using namespace rdtx::store::test;

namespace {

// Distinct for rows < 2^32 (odd multiplier modulo 2^32), scattered, and
// below 2^32 as record_word() needs.
uint64_t key_of(uint64_t row) { return (row * 0x9e3779b1ull + 17) & 0xffffffffull; }

RowBuilder rows_with_keys(uint32_t record_bytes) {
  return [record_bytes](uint64_t row, std::span<std::byte> record) {
    uint64_t key = key_of(row);
    auto r = make_record(key, row, record_bytes);
    std::memcpy(record.data(), r.data(), r.size());
    return key;
  };
}

}  // namespace

TEST(Load, ParallelLoadOfOneMillionTuplesIsAllFindableAndReported) {
  TwoNodes c;
  constexpr uint32_t kRows = 1'000'000;
  TableSpec s;
  s.id = 2;
  s.name = "stock";
  s.meta_bytes = 16;
  s.record_bytes = 16;
  s.capacity = kRows;
  Table* t = must(c.owner->create_table(s));
  TableSpec small;
  small.id = 5;
  small.name = "warehouse";
  small.meta_bytes = 8;
  small.record_bytes = 80;
  small.capacity = 100;
  Table* w = must(c.owner->create_table(small));

  auto started = std::chrono::steady_clock::now();
  auto loaded = load(*t, kRows, rows_with_keys(s.record_bytes));
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  std::printf("loaded %u tuples in %.0f ms\n", kRows,
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
  ASSERT_TRUE(load(*w, 10, rows_with_keys(small.record_bytes)).ok());
  EXPECT_EQ(t->size(), kRows);
  EXPECT_EQ(w->size(), 10u);

  std::vector<std::byte> copy(t->tuple_bytes());
  for (uint64_t row = 0; row < kRows; ++row) {
    TupleRef ref;
    ASSERT_EQ(t->lookup(key_of(row), &ref), 0) << "row " << row;
    ASSERT_TRUE(t->copy_tuple(ref, copy.data()));
    const std::byte* rec = copy.data() + t->layout().record_offset();
    ASSERT_EQ(check_record(rec, key_of(row), s.record_bytes), RecordCheck::kGood);
    ASSERT_EQ(record_version(rec), row & 0xffffff);
  }
  // And through one-sided reads, for a sample.
  TableDescriptor d = t->descriptor();
  std::mt19937_64 rng(3);
  uint64_t round_trips = 0;
  for (int i = 0; i < 2000; ++i) {
    uint64_t row = rng() % kRows;
    FetchResult f = c.fetch(d, key_of(row), nullptr);
    ASSERT_EQ(f.status, 0);
    ASSERT_EQ(record_version(f.tuple + d.layout().record_offset()), row & 0xffffff);
    round_trips += f.round_trips;
  }
  EXPECT_LT(round_trips, 2000u * 2 + 200) << "a full table with default sizing: ~1 bucket READ per lookup";

  MemoryReport report = c.owner->memory_report();
  ASSERT_EQ(report.tables.size(), 2u);
  const TableMemory& m = report.tables[0];
  EXPECT_EQ(m.name, "stock");
  EXPECT_EQ(m.live, kRows);
  EXPECT_EQ(m.capacity, kRows);
  EXPECT_EQ(m.tuple_bytes, 48u);
  EXPECT_EQ(m.buckets, kRows / 4);
  EXPECT_EQ(m.index_bytes, (m.buckets + m.overflow_buckets) * kBucketBytes);
  EXPECT_EQ(m.heap_bytes, uint64_t{kRows} * 48);
  EXPECT_EQ(m.host_bytes, uint64_t{kRows} * 4);
  EXPECT_GT(m.overflow_used, 0u);
  EXPECT_LT(m.overflow_used, m.overflow_buckets);
  EXPECT_EQ(m.total_bytes(), m.index_bytes + m.heap_bytes + m.host_bytes);
  EXPECT_EQ(report.total_bytes(), m.total_bytes() + report.tables[1].total_bytes());
  EXPECT_EQ(report.tables[1].live, 10u);
  // The registered part is exactly the region peers can reach.
  EXPECT_EQ(m.index_bytes + m.heap_bytes, t->region().length);
  std::string text = report.to_string();
  EXPECT_NE(text.find("stock"), std::string::npos) << text;
  EXPECT_NE(text.find("warehouse"), std::string::npos) << text;
  EXPECT_NE(text.find("total"), std::string::npos) << text;
  std::printf("%s", text.c_str());
}

TEST(Load, DuplicateKeysAndFullTablesAreErrorsNamingTableRowAndKey) {
  OneNode n;
  TableSpec s;
  s.id = 1;
  s.name = "customer";
  s.record_bytes = 8;
  s.capacity = 100;
  Table* t = must(n.store.create_table(s));
  auto dup = load(*t, 50, [](uint64_t row, std::span<std::byte>) { return row == 30 ? uint64_t{7} : row; });
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().code, EEXIST);
  EXPECT_NE(dup.error().message.find("customer"), std::string::npos) << dup.error().message;
  EXPECT_NE(dup.error().message.find("key 7"), std::string::npos) << dup.error().message;

  TableSpec s2 = s;
  s2.id = 2;
  s2.name = "district";
  Table* full = must(n.store.create_table(s2));
  auto over = load(*full, 101, [](uint64_t row, std::span<std::byte>) { return row; });
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, ENOSPC);
  EXPECT_NE(over.error().message.find("district"), std::string::npos) << over.error().message;
  EXPECT_EQ(full->size(), 100u);
}

// SIGINT/SIGTERM while loading (issue 46): the load and the creation of a
// table end at the stop request, with ECANCELED naming the table, instead
// of loading on for seconds.
TEST(Load, AStopRequestEndsLoadingAndTableCreation) {
  OneNode n;
  TableSpec s;
  s.id = 1;
  s.name = "savings";
  s.record_bytes = 8;
  s.capacity = 200'000;
  Table* t = must(n.store.create_table(s));
  runtime::reset_shutdown();
  runtime::request_shutdown();
  auto r = load(*t, 200'000, rows_with_keys(8));
  TableSpec s2 = s;
  s2.id = 2;
  s2.name = "checking";
  auto created = n.store.create_table(s2);
  runtime::reset_shutdown();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ECANCELED);
  EXPECT_NE(r.error().message.find("savings"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("stopped by a stop request"), std::string::npos) << r.error().message;
  EXPECT_LT(t->size(), 200'000u) << "the load went on after the stop request";
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.error().code, ECANCELED);
  EXPECT_NE(created.error().message.find("checking"), std::string::npos) << created.error().message;
  // Without a request both work.
  EXPECT_TRUE(load(*t, 0, rows_with_keys(8)).ok());
  EXPECT_TRUE(n.store.create_table(s2).ok());
}
