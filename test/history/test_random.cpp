// The checker on random serial histories: certified at every level as
// generated, and caught with the planted anomaly when one access is changed.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <set>
#include <utility>
#include <vector>

#include "history/checker.hpp"
#include "history_builder.hpp"
#include "random_history.hpp"

namespace rdtx::history::test {
namespace {

CheckReport run(const History& h, Isolation level) {
  CheckOptions o;
  o.isolation = level;
  auto r = check(h, o);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::move(*r) : CheckReport{};
}

uint64_t count(const CheckReport& r, Anomaly a) { return r.counts[static_cast<size_t>(a)]; }

const Finding* first(const CheckReport& r, Anomaly a) {
  for (const Finding& f : r.findings)
    if (f.kind == a) return &f;
  return nullptr;
}

std::set<TxnId> as_set(const std::vector<TxnId>& v) { return {v.begin(), v.end()}; }

constexpr Isolation kLevels[] = {Isolation::kSerializable, Isolation::kSnapshot, Isolation::kReadCommitted,
                                 Isolation::kRepeatableRead};

TEST(RandomHistory, SerialHistoriesAreCertifiedAtEveryLevel) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    RandomHistoryOptions o;
    o.seed = seed;
    o.keys = seed % 2 ? 50 : 5000;  // hot and cold keys
    o.timestamps = seed % 3 != 0;
    History h = random_serial_history(o);
    for (Isolation level : kLevels) {
      CheckReport r = run(h, level);
      EXPECT_TRUE(r.certified) << "seed " << seed << " " << to_string(level) << "\n" << format_report(r, 3);
      EXPECT_EQ(r.stats.committed + r.stats.aborted, o.txns);
      EXPECT_GT(r.stats.aborted, 0u);
      EXPECT_GT(r.stats.edges[0] * r.stats.edges[1] * r.stats.edges[2], 0u) << "every edge kind occurs";
    }
  }
}

TEST(RandomHistory, PlantedLostUpdateIsCaught) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    RandomHistoryOptions o;
    o.seed = seed;
    o.keys = 200;
    History h = random_serial_history(o);
    const auto planted = plant_lost_update(h, seed * 7919);
    ASSERT_TRUE(planted);
    const auto [reader, overwritten] = *planted;

    CheckReport s = run(h, Isolation::kSerializable);
    EXPECT_EQ(count(s, Anomaly::kLostUpdate), 1u);
    ASSERT_EQ(count(s, Anomaly::kG2Item), 1u) << format_report(s, 3);
    EXPECT_EQ(s.anomalies(), 2u) << format_report(s, 3);
    const Finding* g2 = first(s, Anomaly::kG2Item);
    EXPECT_EQ(g2->classification, "lost update") << g2->text;
    EXPECT_EQ(as_set(g2->txns), (std::set<TxnId>{reader, overwritten})) << g2->text;
    EXPECT_EQ(first(s, Anomaly::kLostUpdate)->txns, (std::vector<TxnId>{reader, overwritten}));

    CheckReport si = run(h, Isolation::kSnapshot);
    EXPECT_EQ(count(si, Anomaly::kLostUpdate), 1u);
    EXPECT_EQ(count(si, Anomaly::kGSIb), 1u) << format_report(si, 3);
    EXPECT_FALSE(si.certified);

    // Read committed allows a lost update.
    EXPECT_TRUE(run(h, Isolation::kReadCommitted).certified);
  }
}

TEST(RandomHistory, PlantedFutureReadIsCaughtAsG1c) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    RandomHistoryOptions o;
    o.seed = seed;
    o.keys = 300;
    o.timestamps = false;
    History h = random_serial_history(o);
    const auto planted = plant_future_read(h, seed * 104729);
    ASSERT_TRUE(planted);
    const auto [a, b] = *planted;
    for (Isolation level : kLevels) {
      CheckReport r = run(h, level);
      ASSERT_EQ(count(r, Anomaly::kG1c), 1u) << to_string(level) << "\n" << format_report(r, 3);
      const Finding* f = first(r, Anomaly::kG1c);
      EXPECT_EQ(as_set(f->txns), (std::set<TxnId>{a, b})) << f->text;
      EXPECT_FALSE(r.certified);
    }
  }
}

TEST(RandomHistory, PlantedAbortedReadIsCaughtAsG1a) {
  RandomHistoryOptions o;
  o.seed = 11;
  History h = random_serial_history(o);
  // Point a later committed read of the same key at an aborted attempt's write.
  bool planted = false;
  for (size_t i = 0; i < h.size() && !planted; ++i) {
    if (h.txn(i).committed()) continue;
    for (const AccessRecord& w : h.accesses(i)) {
      if (!w.writes()) continue;
      for (size_t j = i + 1; j < h.size() && !planted; ++j) {
        if (!h.txn(j).committed()) continue;
        for (AccessRecord& r : h.mutable_accesses(j))
          if (!r.writes() && r.table == w.table && r.key == w.key) {
            r.read_txn = h.txn(i).id;
            r.read_seq = 0;
            planted = true;
            break;
          }
      }
      break;
    }
  }
  ASSERT_TRUE(planted);
  for (Isolation level : kLevels) {
    CheckReport r = run(h, level);
    EXPECT_EQ(count(r, Anomaly::kG1a), 1u) << format_report(r, 3);
    EXPECT_EQ(r.anomalies(), 1u) << format_report(r, 3);
  }
}

}  // namespace
}  // namespace rdtx::history::test

namespace rdtx::history::test {
namespace {

// What a protocol whose lock never locks records: batches of `batch`
// concurrent read-modify-writes of one of four hot keys, each reading the
// current version and replacing it -- every version forked `batch` ways.
History broken_lock_history(uint32_t txns, uint32_t batch) {
  HistoryBuilder b;
  Version cur[4] = {};
  for (uint32_t i = 0; i < txns; i += batch) {
    const uint64_t k = (i / batch) % 4;
    const Version seen = cur[k];
    for (uint32_t j = 0; j < batch && i + j < txns; ++j) {
      const TxnId id = T(1 + i + j, j % kMaxCoroutines);
      b.txn(id).rmw(kChecking, k, seen, seen).commit();
      cur[k] = V(id);
    }
  }
  return std::move(b.history());
}

TEST(BrokenHistory, FullOfAnomaliesIsCheckedInBoundedMemory) {
  // 40,000 transactions in forks 200 wide: readers x replacers would be
  // 8 million anti-dependencies; the checker keeps the graph linear in the
  // accesses and the details to the first N of each kind, counting the rest.
  constexpr uint32_t kTxns = 40'000, kBatch = 200;
  const History h = broken_lock_history(kTxns, kBatch);
  for (size_t n : {size_t{0}, size_t{3}, size_t{10}}) {
    CheckOptions o;
    o.max_findings = n;
    auto r = check(h, o);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->certified);
    const CheckStats& s = r->stats;
    EXPECT_LE(s.edges[0] + s.edges[1] + s.edges[2], 3 * h.access_count()) << "edges linear in the accesses";
    EXPECT_EQ(count(*r, Anomaly::kVersionFork), kTxns / kBatch) << "every fork counted";
    EXPECT_GT(count(*r, Anomaly::kLostUpdate) + count(*r, Anomaly::kG2Item), n);
    std::array<size_t, kAnomalyKinds> kept{};
    for (const Finding& f : r->findings) ++kept[static_cast<size_t>(f.kind)];
    for (size_t k = 0; k < kAnomalyKinds; ++k) {
      EXPECT_LE(kept[k], n) << to_string(static_cast<Anomaly>(k));
      EXPECT_EQ(kept[k], std::min<uint64_t>(n, r->counts[k])) << to_string(static_cast<Anomaly>(k));
    }
    const std::string text = format_report(*r, n);
    EXPECT_NE(text.find("more version fork not shown"), std::string::npos);
  }
}

// A stop request (rdtx-bench's SIGINT or SIGTERM, issue 46) ends a check
// wherever it comes: every poll of CheckOptions::stop that says stop makes
// check() fail with ECANCELED, and the poll comes from every piece of every
// phase; a stop that never comes changes nothing.
TEST(Stop, ACheckGivesUpAtAnyOfItsPolls) {
  RandomHistoryOptions ro;
  ro.txns = 20'000;
  for (const History& h : {random_serial_history(ro), broken_lock_history(4'000, 200)}) {
    std::atomic<uint64_t> polls{0};
    CheckOptions o;
    o.stop = [&] {
      polls.fetch_add(1, std::memory_order_relaxed);
      return false;
    };
    auto whole = check(h, o);
    ASSERT_TRUE(whole.ok()) << whole.error().message;
    CheckOptions plain;
    auto unpolled = check(h, plain);
    ASSERT_TRUE(unpolled.ok());
    EXPECT_EQ(whole->certified, unpolled->certified);
    EXPECT_EQ(whole->anomalies(), unpolled->anomalies());
    const uint64_t total = polls.load();
    EXPECT_GE(total, 6u * 64) << "every piece of the parallel phases polls";
    for (uint64_t at : {uint64_t{0}, total / 3, total / 2, total - 1}) {
      SCOPED_TRACE(at);
      std::atomic<uint64_t> n{0};
      o.stop = [&] { return n.fetch_add(1, std::memory_order_relaxed) >= at; };
      auto r = check(h, o);
      ASSERT_FALSE(r.ok()) << "the check went on after the stop request";
      EXPECT_EQ(r.error().code, ECANCELED) << r.error().message;
    }
  }
}

}  // namespace
}  // namespace rdtx::history::test
