// The stress suite: every protocol x per-stage primitive x optimisation set,
// on every registered workload (but those WorkloadDef::stress_suites leaves
// out: writeskew), under high contention (contention.hpp: the
// workload's contended setting, 8 or 32 coroutines, three nodes in one
// thread, a 1 us latency model), with a random seed, history recording, the
// serializability check and the workload invariants. Plus the broken protocol (OCC without validation),
// which the checker must catch.
//
//   RDTX_STRESS_SECONDS  measured seconds per combination (default 0.3)
//   RDTX_STRESS_SEED     the seed of the transaction generators (default: random)
//
// A failure prints the seed, the command that reruns the combination, and
// writes the history files for rdtx-check. The seed fixes the transaction
// inputs; the interleaving also depends on timing (the latency model runs on
// the clock), so a rerun may need a few tries.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "test/txn/contention.hpp"

using namespace rdtx;
using namespace rdtx::txn;
using namespace rdtx::testing_contention;

namespace {

double seconds() {
  const char* s = std::getenv("RDTX_STRESS_SECONDS");
  double v = s ? std::atof(s) : 0.0;
  return v > 0 ? v : 0.3;
}

uint64_t seed() { return stress_seed(); }

// The optimisation sets each protocol x primitive combination runs with.
std::vector<Combo> combos() {
  std::vector<Combo> v;
  for (const Combo& base : stress_primitive_combos()) {
    // TPC-C/no runs in test_protocols; here TPC-C's full mix stands for both
    // (CI time: each TPC-C run loads twelve tables), except where the full
    // mix is refused (CALVIN: TPC-C/no is the TPC-C it runs).
    if (base.workload == "tpcc/neworder" && !full_tpcc_refused(base)) continue;
    // YCSB's scans are their rows' reads for every protocol but 2PL (its
    // partition locks): test_protocols runs them under each; here 2PL only
    // (CI time).
    if (base.workload == "ycsb/scan" && base.protocol.rfind("2pl/", 0) != 0) continue;
    Combo all = base;  // every optimisation on
    v.push_back(all);
    Combo sync = base;  // commits and releases acknowledged before going on
    sync.passive_ack = false;
    v.push_back(sync);
    Combo plain = base;  // one doorbell per request, one node at a time
    plain.doorbell = false;
    plain.outstanding = false;
    v.push_back(plain);
    // No location cache, many coroutines spread over several QPs per node,
    // two scratch banks, unsignaled commits confirmed by other coroutines'
    // requests on the shared QPs, RPC commit replies piggybacked.
    Combo busy = base;
    busy.cache = false;
    busy.scratch_banks = 2;
    busy.unsignaled = true;
    busy.piggyback = true;
    busy.coroutines = 32;
    busy.qps_per_node = 4;
    v.push_back(busy);
    Combo repl = base;  // 3-way replication through the log stage
    // (Not with shared read locks: the log stage carries written records,
    // exclusively locked as ever; CI time.)
    if (protocol_of(base.protocol)->replicable && !shared_read_locks(base.protocol)) {
      repl.replicas = 3;
      repl.log = base.commit == Primitive::kRpc ? Primitive::kRpc : Primitive::kOneSided;
      v.push_back(repl);
    }
  }
  std::erase_if(v, refused);
  return v;
}

std::string rerun_command(const std::string& test_name) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "RDTX_STRESS_SEED=%llu RDTX_STRESS_SECONDS=%g %s --gtest_filter='%s'",
                static_cast<unsigned long long>(seed()), seconds(),
                std::filesystem::canonical("/proc/self/exe").c_str(), test_name.c_str());
  return buf;
}

std::string current_test_name() {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

// On failure: the seed, the command, and the history files for rdtx-check.
std::string failure_help(const Outcome& out, const std::string& name) {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("rdtx-stress-" + std::to_string(getpid()) + "-" + std::to_string(seed())))
                        .string();
  std::string msg = "seed " + std::to_string(seed()) + "; rerun: " + rerun_command(name);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!ec && write_histories(out.run, dir).ok()) msg += "\nhistory: rdtx-check " + dir;
  return msg;
}

class StressTest : public testing::TestWithParam<Combo> {};

}  // namespace

TEST_P(StressTest, SerializableWithInvariants) {
  const Combo& cb = GetParam();
  auto out = run_contended(cb, seed(), seconds());
  // A window in which nothing committed measured nothing: the run's thread
  // did not get a CPU for its 0.1 s (CI runs this suite beside the
  // multi-process one, whose nodes spin on both cores; seen once in 2,100
  // runs with no attempt at all, and once on CI with a single attempt that
  // wait-die aborted). Run again, same seed, four times as long: a
  // coordinator that hangs or livelocks does so again, and the checks below
  // fail it.
  if (out.ok() && out->run.total.commits == 0) {
    std::printf("nothing committed in the window (%llu attempts): running again for %.1f s\n",
                static_cast<unsigned long long>(out->run.total.attempts), 4 * seconds());
    out = run_contended(cb, seed(), 4 * seconds());
  }
  const std::string name = current_test_name();
  ASSERT_TRUE(out.ok()) << out.error().message << "\nseed " << seed() << "; rerun: " << rerun_command(name);
  const run::RunResult& r = out->run;
  // rdtx-bench's checks (run/verdict.hpp); a call may time out here (the
  // multi-process suite spins beside this one) if the attempt it aborted
  // was retried, but no attempt may abort on the network otherwise.
  const std::string failed = verdict_failures(*out);
  const uint64_t net = r.total.aborts[static_cast<int>(AbortReason::kNetwork)];
  const std::string unseen = conflicts_unseen(r, cb.protocol);
  if (failed.empty() && unseen.empty() && net == 0) return;
  SCOPED_TRACE(failure_help(*out, name));
  SCOPED_TRACE(summary(r));
  EXPECT_EQ(failed, "");
  EXPECT_EQ(unseen, "");
  EXPECT_EQ(net, 0u);
}

INSTANTIATE_TEST_SUITE_P(Stress, StressTest, testing::ValuesIn(combos()),
                         [](const testing::TestParamInfo<Combo>& i) { return name_of(i.param); });

// The broken protocol must be caught, on every workload and every primitive
// of its stages, with the cycle or lost update printed.
class BrokenTest : public testing::TestWithParam<Combo> {};

TEST_P(BrokenTest, CheckerCatchesBrokenProtocol) {
  // Caught by the history, or by the run's checks (TPC-C: a row inserted
  // twice by two New-Orders the guard did not serialise, or a condition);
  // a run that happens to miss the anomaly is followed by up to 7 more with
  // the next seeds (CI once saw MVCC without rts on SmallBank's drtmh
  // flavour over RPC certified in one 0.2 s run).
  auto out = until_caught(GetParam(), seed(), seconds(), [](const Outcome&) {});
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_TRUE(caught(*out)) << "not caught in 8 runs from seed " << seed()
                            << "; rerun: " << rerun_command(current_test_name()) << "\n" << what_caught(*out);
  if (!out->check.certified) std::printf("%s\n", out->check_text.substr(0, 1500).c_str());
}

INSTANTIATE_TEST_SUITE_P(Broken, BrokenTest, testing::ValuesIn([] {
                           std::vector<Combo> v;
                           for (Combo c : stress_primitive_combos()) {
                             // Left out: MVCC's RPC reads on SmallBank's hstore flavour. Every
                             // read-only access there is one account's two records, served in one
                             // handler run, so ignoring locks and rts shows only through a chain
                             // (a WriteCheck pending while a TransactSavings commits the savings
                             // it read and a Balance reads both): the drtmh flavour and YCSB catch
                             // it on this path within 0.2 s, the hstore flavour's 12 hot accounts
                             // shared by 24 coroutines did not in 1 s (five seeds tried). The same
                             // protocol's one-sided and hybrid reads are caught there.
                             if (c.protocol == "mvcc" && c.workload == "smallbank" && c.fetch == Primitive::kRpc) continue;
                             // Left out: MVCC without read timestamps on TPC-C. TPC-C/no has no
                             // plain read of a written row (the variant is correct there); the
                             // full mix shows it only in some runs of 0.2 s: test_protocols'
                             // MvccWithoutReadTimestampIsCaught gives it up to 8 seeds.
                             if (c.protocol == "mvcc" && c.workload.rfind("tpcc", 0) == 0) continue;
                             // TPC-C/no (every access a read-modify-write of a written row, or a
                             // read of a row nothing writes) hides what skipping validation breaks
                             // on some lock paths (OCC's RPC lock reads the tuple under the lock).
                             if (c.workload == "tpcc/neworder") continue;
                             if (c.protocol == "occ" || c.protocol == "mvcc" || c.protocol == "calvin") {
                               c.protocol = c.protocol == "occ"    ? "occ-unvalidated"
                                            : c.protocol == "mvcc" ? "mvcc-broken-norts"
                                                                   : "calvin-broken-early-reads";
                               v.push_back(c);
                             }
                           }
                           return v;
                         }()),
                         [](const testing::TestParamInfo<Combo>& i) { return name_of(i.param); });

// The same for SUNDIAL without lease renewal.
class BrokenSundialTest : public testing::TestWithParam<Combo> {};

TEST_P(BrokenSundialTest, CheckerCatchesUnrenewedSundial) {
  auto out = until_caught(GetParam(), seed(), seconds(), [](const Outcome&) {});
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_FALSE(out->check.certified) << "not caught in 8 runs from seed " << seed()
                                     << "; rerun: " << rerun_command(current_test_name());
  if (!out->check.certified) std::printf("%s\n", out->check_text.substr(0, 1500).c_str());
}

INSTANTIATE_TEST_SUITE_P(Broken, BrokenSundialTest, testing::ValuesIn([] {
                           std::vector<Combo> v;
                           for (Combo c : stress_primitive_combos())
                             // (Not on TPC-C: as for MVCC above; test_protocols' until_caught.)
                             if (c.protocol == "sundial" && c.workload.rfind("tpcc", 0) != 0) {
                               c.protocol = "sundial-unrenewed";
                               v.push_back(c);
                             }
                           return v;
                         }()),
                         [](const testing::TestParamInfo<Combo>& i) { return name_of(i.param); });

// Printed once, so that a log always has the seed even when all pass.
class SeedPrinter : public testing::Environment {
 public:
  void SetUp() override {
    std::printf("stress: seed %llu, %g s per combination (RDTX_STRESS_SEED, RDTX_STRESS_SECONDS)\n",
                static_cast<unsigned long long>(seed()), seconds());
  }
};
const auto* const kSeedPrinter = testing::AddGlobalTestEnvironment(new SeedPrinter);
