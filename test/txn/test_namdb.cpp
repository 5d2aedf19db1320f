// NAM-DB's parts beyond what the generated suites check on every workload
// (test_protocols, test_stress, test_chaos run namdb and namdb/compressed
// with the history certified at snapshot isolation):
//   - the version mover keeps up: at the default E nothing is collected
//     under a snapshot and few attempts meet an unmoved slot
//   - stepped by hand (stepper.hpp): a snapshot reads its version from the
//     buffer, or from the overflow region once writers pushed it out, or
//     aborts when garbage collection took it; a second writer of one
//     version loses (first committer wins) and leaves no lock
//   - stepped: a row inserted is invisible to snapshots older than its
//     commit; an erased row is read by older snapshots, not found by newer
//     ones, and removed from the store E later
//   - the configuration: namdb runs at its own level (snapshot isolation)
//     by default and refuses serializable by name
#include <gtest/gtest.h>

#include <string>

#include "env/tsc.hpp"
#include "run/runner.hpp"
#include "test/txn/contention.hpp"
#include "test/txn/stepper.hpp"

using namespace rdtx;
using namespace rdtx::txn;
using namespace rdtx::testing_contention;

namespace {

// The protocol's reason `key` (kDef.abort_reasons) as an index of the run's counters.
int reason_index(const char* key) {
  const ProtocolDef* d = find_protocol("namdb");
  for (size_t k = 0; k < d->abort_reasons.size(); ++k)
    if (std::string(d->abort_reasons[k].key) == key) return kEngineAbortReasons + static_cast<int>(k);
  return -1;
}

// Readers with long snapshots beside hot writers: YCSB, read-only scans of
// a hot range (one snapshot over many rows) and read-modify-writes of it.
Combo long_readers(std::vector<std::pair<std::string, std::string>> settings) {
  Combo cb{"ycsb", "namdb"};
  cb.settings = std::move(settings);
  cb.workload_settings = {"ycsb.scan_percent=50", "ycsb.scan_length=12", "ycsb.read_percent=50"};
  return cb;
}

}  // namespace

TEST(NamDb, TheMoverKeepsUpAtTheDefaultHorizon) {
  auto out = run_contended(long_readers({}), 1, 0.3);
  ASSERT_TRUE(out.ok()) << out.error().message;
  const run::RunResult& r = out->run;
  SCOPED_TRACE(summary(r));
  EXPECT_TRUE(out->check.certified) << out->check_text;
  EXPECT_EQ(r.total.aborts[reason_index("version_gone")], 0u);
  // An unmoved slot is met only while the mover is behind a burst: a few
  // percent of attempts at most.
  EXPECT_LT(r.total.aborts[reason_index("buffer_full")], r.total.attempts / 10);
}

TEST(NamDb, RunsAtSnapshotIsolationAndRefusesSerializable) {
  Combo cb{"ycsb", "namdb"};
  auto out = run_contended(cb, 1, 0.1);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(out->run.isolation, Isolation::kSnapshot);
  run::RunConfig rc;
  auto w = contended_workload("ycsb", 2);
  ASSERT_TRUE(w.ok());
  rc.workload = w->get();
  rc.protocol = find_protocol("namdb");
  rc.options.isolation = Isolation::kSerializable;
  auto r = run::run(rc);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("protocol 'namdb' runs at snapshot isolation only"), std::string::npos)
      << r.error().message;
}

// ------------------------------------------------------------ stepped rules

namespace {

using namespace rdtx::testing_stepper;
constexpr Key kX = kKeysPerNode + 0;  // node 1: remote for node 0's coordinators
constexpr Key kY = 1;                 // node 0

std::unique_ptr<Stepper> stepped(std::vector<std::pair<std::string, std::string>> settings = {}) {
  StepConfig cfg;
  cfg.protocol = "namdb";
  cfg.settings = std::move(settings);
  auto s = Stepper::create(cfg);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return s.ok() ? std::move(*s) : nullptr;
}

// T1 takes its snapshot (reading y), then `writes` transactions each add
// one to x, the version mover running between them; then T1 reads x.
void snapshot_then_writes(Stepper& fx, Script& t1, int writes) {
  ASSERT_TRUE(fx.start(0, 0, t1));
  ASSERT_TRUE(fx.run_until_paused(t1, "snapshot"));
  for (int k = 0; k < writes; ++k) {
    Script& w = fx.script({W(kX), Fetch(), Commit()});
    ASSERT_TRUE(fx.start(0, 1, w));
    ASSERT_TRUE(fx.run_until_done(w));
    ASSERT_TRUE(w.committed()) << "writer " << k << ": " << fx.reason_key(w);
    fx.poll(50);  // the mover moves what the writer put in the buffer
  }
  ASSERT_EQ(fx.counter(kX), kInitial + writes);
  fx.resume(t1);
  ASSERT_TRUE(fx.run_until_done(t1));
}

}  // namespace

TEST(NamDbRule, ASnapshotReadsItsVersionFromTheBuffer) {
  auto fx = stepped();
  ASSERT_NE(fx, nullptr);
  Script& t1 = fx->script({R(kY), Fetch(), Pause("snapshot"), R(kX), Fetch(), Commit()});
  snapshot_then_writes(*fx, t1, 2);
  EXPECT_TRUE(t1.committed()) << fx->reason_key(t1);
  EXPECT_EQ(t1.reads_seen(), (std::vector<uint64_t>{kInitial, kInitial})) << "x as of T1's snapshot";
}

TEST(NamDbRule, ASnapshotReadsItsVersionFromTheOverflowRegion) {
  auto fx = stepped();
  ASSERT_NE(fx, nullptr);
  Script& t1 = fx->script({R(kY), Fetch(), Pause("snapshot"), R(kX), Fetch(), Commit()});
  snapshot_then_writes(*fx, t1, 7);  // four buffer slots: the loaded version left them
  EXPECT_TRUE(t1.committed()) << fx->reason_key(t1);
  EXPECT_EQ(t1.reads_seen(), (std::vector<uint64_t>{kInitial, kInitial})) << "x as of T1's snapshot";
  // A snapshot taken now sees the newest version.
  Script& t2 = fx->script({R(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t2));
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_EQ(t2.reads_seen(), (std::vector<uint64_t>{kInitial + 7}));
}

TEST(NamDbRule, ACollectedVersionAbortsTheSnapshotThatNeedsIt) {
  auto fx = stepped({{"namdb.max_txn_us", "1"}});
  ASSERT_NE(fx, nullptr);
  Script& t1 = fx->script({R(kY), Fetch(), Pause("snapshot"), R(kX), Fetch(), Commit()});
  snapshot_then_writes(*fx, t1, 7);
  EXPECT_FALSE(t1.committed());
  EXPECT_EQ(fx->reason_key(t1), "version_gone");
}

// Two writers read the same version of x; the first to commit wins, the
// second's CAS fails (write_conflict) and it leaves nothing locked.
TEST(NamDbRule, FirstCommitterWins) {
  auto fx = stepped();
  ASSERT_NE(fx, nullptr);
  Script& t1 = fx->script({W(kX), Fetch(), Pause("fetched"), Commit()});
  Script& t2 = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "fetched"));
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_FALSE(t1.committed());
  EXPECT_EQ(fx->reason_key(t1), "write_conflict");
  EXPECT_EQ(fx->counter(kX), kInitial + 1);
  EXPECT_FALSE(fx->def().lock_held(fx->tuple(kX))) << "no lock left on x";
}

// Rows a transaction inserts carry its commit version: a snapshot taken
// before that commit does not find them (not_found), one taken after reads
// them. With either oracle (compressed: the timestamp is taken for the
// inserts, before the commit stage).
TEST(NamDbRule, AnInsertedRowIsInvisibleToOlderSnapshots) {
  for (const char* oracle : {"vector", "compressed"}) {
    SCOPED_TRACE(oracle);
    auto fx = stepped({{"namdb.oracle", oracle}});
    ASSERT_NE(fx, nullptr);
    constexpr Key kNew = kKeysPerNode + kLoadedPerNode;  // node 1, not loaded
    Script& t1 = fx->script({R(kY), Fetch(), Pause("snapshot"), R(kNew), Fetch(), Commit()});
    ASSERT_TRUE(fx->start(0, 0, t1));
    ASSERT_TRUE(fx->run_until_paused(t1, "snapshot"));
    Script& ins = fx->script({W(kY), Fetch(), Ins(kNew), Commit()});
    ASSERT_TRUE(fx->start(0, 1, ins));
    ASSERT_TRUE(fx->run_until_done(ins));
    ASSERT_TRUE(ins.committed()) << fx->reason_key(ins);
    ASSERT_NE(fx->tuple(kNew), nullptr);
    fx->resume(t1);
    ASSERT_TRUE(fx->run_until_done(t1));
    EXPECT_FALSE(t1.committed());
    EXPECT_EQ(fx->reason_key(t1), "not_found") << "the row was inserted after T1's snapshot";
    Script& t2 = fx->script({R(kNew), Fetch(), Commit()});
    ASSERT_TRUE(fx->start(0, 0, t2));
    ASSERT_TRUE(fx->run_until_done(t2));
    EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
    EXPECT_EQ(t2.reads_seen(), (std::vector<uint64_t>{kInserted}));
    // A transaction that only inserts publishes its timestamp too.
    constexpr Key kNew2 = kNew + 1;
    Script& only = fx->script({Ins(kNew2), Commit()});
    ASSERT_TRUE(fx->start(0, 1, only));
    ASSERT_TRUE(fx->run_until_done(only));
    ASSERT_TRUE(only.committed()) << fx->reason_key(only);
    Script& t3 = fx->script({R(kNew2), Fetch(), Commit()});
    ASSERT_TRUE(fx->start(0, 2, t3));
    ASSERT_TRUE(fx->run_until_done(t3));
    EXPECT_TRUE(t3.committed()) << fx->reason_key(t3);
  }
}

// An erase installs a version that says the row is gone: an older snapshot
// still reads the row, a newer one does not find it, a writer of the
// version erased loses; the version mover removes the row from the store
// once E has passed.
TEST(NamDbRule, AnEraseIsAVersionOlderSnapshotsReadPast) {
  auto fx = stepped({{"namdb.max_txn_us", "20000"}});
  ASSERT_NE(fx, nullptr);
  Script& t1 = fx->script({R(kY), Fetch(), Pause("snapshot"), R(kX), Fetch(), Commit()});
  Script& w = fx->script({W(kX), Fetch(), Pause("fetched"), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "snapshot"));
  ASSERT_TRUE(fx->start(1, 0, w));
  ASSERT_TRUE(fx->run_until_paused(w, "fetched"));
  Script& er = fx->script({Erase(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 1, er));
  ASSERT_TRUE(fx->run_until_done(er));
  ASSERT_TRUE(er.committed()) << fx->reason_key(er);
  ASSERT_NE(fx->tuple(kX), nullptr) << "the row stays while a snapshot may need it";
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_TRUE(t1.committed()) << fx->reason_key(t1);
  EXPECT_EQ(t1.reads_seen(), (std::vector<uint64_t>{kInitial, kInitial})) << "x as of T1's snapshot";
  fx->resume(w);
  ASSERT_TRUE(fx->run_until_done(w));
  EXPECT_FALSE(w.committed());
  EXPECT_EQ(fx->reason_key(w), "write_conflict");
  Script& t2 = fx->script({R(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t2));
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_FALSE(t2.committed());
  EXPECT_EQ(fx->reason_key(t2), "not_found");
  // E later the mover takes the row out.
  const uint64_t until = env::tsc() + env::ns_to_tsc(200'000'000);
  while (fx->tuple(kX) != nullptr && env::tsc() < until) fx->poll(10);
  EXPECT_EQ(fx->tuple(kX), nullptr) << "the erased row is still in the store 200 ms after E = 20 ms";
  EXPECT_FALSE(fx->def().lock_held(fx->tuple(kY))) << "no lock left";
}
