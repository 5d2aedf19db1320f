// Performance of recording and checking (suite perf): prints what it
// measures, asserts only correctness, never a time.
//   RDTX_HISTORY_BENCH_TXNS  transactions in the checked history (default 2000000)
//   RDTX_HISTORY_BENCH_DIR   also keep the history files there (for rdtx-check)
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "history/checker.hpp"
#include "history/reader.hpp"
#include "history/recorder.hpp"
#include "random_history.hpp"
#include "temp_dir.hpp"

namespace rdtx::history::test {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint32_t bench_txns() {
  const char* v = std::getenv("RDTX_HISTORY_BENCH_TXNS");
  return v && *v ? static_cast<uint32_t>(std::strtoul(v, nullptr, 10)) : 2'000'000;
}

// Writes h as the files its recorders would have written, one per worker.
void write_files(const History& h, const RandomHistoryOptions& o, const std::string& dir) {
  std::vector<Recorder> recs;
  for (const Source& s : h.sources) {
    RecorderOptions ro;
    ro.run_id = h.run_id;
    ro.node = s.node;
    ro.worker = s.worker;
    ro.cluster_nodes = h.cluster_nodes;
    ro.node_workers = s.node_workers;
    ro.record_aborted = true;
    ro.names = h.names;
    ro.capacity_bytes = (s.txns + 1) * (sizeof(TxnRecord) + o.accesses * sizeof(AccessRecord));
    recs.push_back(std::move(*Recorder::create(ro)));
  }
  TxnTrace t(o.accesses);
  for (size_t i = 0; i < h.size(); ++i) {
    const TxnRecord& r = h.txn(i);
    t.begin(r.id, r.type, r.start_ts);
    for (const AccessRecord& a : h.accesses(i)) {
      if (!a.writes())
        t.read(a.table, a.key, a.read_version());
      else if (a.reads())
        t.read_modify_write(a.table, a.key, a.read_version(), a.replaced_version(), a.write_seq);
      else
        t.write(a.table, a.key, a.replaced_version(), a.write_seq);
    }
    Recorder& rec = recs[txn_node(r.id) * o.workers + txn_worker(r.id)];
    if (r.committed())
      rec.commit(t, r.commit_ts);
    else
      rec.abort(t, r.abort_reason);
  }
  for (const Recorder& rec : recs) {
    ASSERT_FALSE(rec.truncated());
    ASSERT_TRUE(rec.write_file(dir + "/" + Recorder::file_name(rec.options().node, rec.options().worker)).ok());
  }
}

TEST(HistoryPerf, CheckRate) {
  RandomHistoryOptions o;
  o.txns = bench_txns();
  o.accesses = 4;
  o.tables = 2;
  o.keys = 1'000'000;
  o.aborts = 0.02;
  o.nodes = 4;
  o.workers = 4;
  o.coroutines = 8;
  auto t0 = std::chrono::steady_clock::now();
  const History h = random_serial_history(o);
  std::printf(
      "history: %zu transactions x %u accesses (%.0f%% read-only, %.0f%% of the others' accesses write), "
      "%u tables x %llu keys, %u nodes x %u workers; generated in %.2f s\n",
      h.size(), o.accesses, o.read_only * 100, o.writes * 100, o.tables, static_cast<unsigned long long>(o.keys),
      o.nodes, o.workers, seconds_since(t0));

  for (Isolation level : {Isolation::kSerializable, Isolation::kSnapshot, Isolation::kReadCommitted}) {
    CheckOptions co;
    co.isolation = level;
    auto r = check(h, co);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->certified) << format_report(*r, 3);
    std::printf("check %-18s %.2f s, %.2f M transactions/s (%llu ww, %llu wr, %llu rw edges)\n", to_string(level),
                r->stats.seconds, static_cast<double>(h.size()) / r->stats.seconds / 1e6,
                static_cast<unsigned long long>(r->stats.edges[0]), static_cast<unsigned long long>(r->stats.edges[1]),
                static_cast<unsigned long long>(r->stats.edges[2]));
  }

  TempDir dir;
  write_files(h, o, dir.path());
  t0 = std::chrono::steady_clock::now();
  auto loaded = load_history({dir.path()});
  const double load_s = seconds_since(t0);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  ASSERT_EQ(loaded->size(), h.size());
  std::printf("load %zu files: %.2f s, %.2f M transactions/s\n", loaded->sources.size(), load_s,
              static_cast<double>(h.size()) / load_s / 1e6);
  if (const char* keep = std::getenv("RDTX_HISTORY_BENCH_DIR"); keep && *keep) {
    std::filesystem::create_directories(keep);
    write_files(h, o, keep);
    std::printf("files kept in %s\n", keep);
  }
}

TEST(HistoryPerf, RecorderCost) {
  // The recording calls an engine makes per 4-access transaction, against
  // the same loop that only fills the trace (what recording off costs: the
  // engine does not build a trace then, so this is an upper bound).
  constexpr uint32_t kTxns = 1'000'000;
  RecorderOptions ro;
  ro.names = {{"t"}, {"T"}, {"r"}};
  ro.capacity_bytes = size_t{kTxns} * (sizeof(TxnRecord) + 4 * sizeof(AccessRecord));
  TxnTrace t(4);
  uint64_t sink = 0;
  double best_trace = 1e9, best_record = 1e9;
  for (int round = 0; round < 5; ++round) {
    auto rec = Recorder::create(ro);
    ASSERT_TRUE(rec.ok());
    auto t0 = std::chrono::steady_clock::now();
    for (uint32_t i = 1; i <= kTxns; ++i) {
      t.begin(make_txn_id(0, 0, i % 8, i), 0, i);
      for (uint64_t k = 0; k < 4; ++k) t.read_modify_write(0, i * 4 + k, {i - 1u, 0}, {i - 1u, 0});
      sink += t.size();
    }
    best_trace = std::min(best_trace, seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    for (uint32_t i = 1; i <= kTxns; ++i) {
      t.begin(make_txn_id(0, 0, i % 8, i), 0, i);
      for (uint64_t k = 0; k < 4; ++k) t.read_modify_write(0, i * 4 + k, {i - 1u, 0}, {i - 1u, 0});
      rec->commit(t, i);
    }
    best_record = std::min(best_record, seconds_since(t0));
    ASSERT_FALSE(rec->truncated());
    ASSERT_EQ(rec->txn_count(), kTxns);
  }
  EXPECT_GT(sink, 0u);
  std::printf(
      "recording a 4-access transaction: %.1f ns (trace only: %.1f ns; commit + copy: %.1f ns), "
      "%zu bytes\n",
      best_record / kTxns * 1e9, best_trace / kTxns * 1e9, (best_record - best_trace) / kTxns * 1e9,
      sizeof(TxnRecord) + 4 * sizeof(AccessRecord));
}

}  // namespace
}  // namespace rdtx::history::test
