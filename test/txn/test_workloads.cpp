// The workloads' flavours do what doc/writing-a-workload.md says they do:
// SmallBank's loaded state, fixed amounts and insufficient-funds behaviour
// per flavour (hstore, drtmh), the share of accesses each hot-set meaning
// sends to the hot set (measured from generated inputs), the keys' cross
// checks, and YCSB's computation burning CPU rather than sleeping.
// (Contention, invariants and serializability of both flavours are in the
// generated suites: test_protocols runs "smallbank" and "smallbank/drtmh".)
#include <gtest/gtest.h>

#include <time.h>

#include <string>
#include <vector>

#include "run/runner.hpp"
#include "test/txn/contention.hpp"
#include "workloads/smallbank/smallbank.hpp"
#include "workloads/ycsb/ycsb.hpp"

using namespace rdtx;
using namespace rdtx::txn;
using rdtx::workloads::SmallBank;
using rdtx::workloads::Ycsb;

namespace {

Result<config::Config> config_of(const WorkloadDef& def, const std::vector<std::string>& overrides) {
  config::Schema schema;
  def.add_schema(schema);
  return config::Config::parse(schema, "", "test", overrides);
}

SmallBank smallbank(const std::vector<std::string>& overrides, uint32_t nodes = 2) {
  auto cfg = config_of(*find_workload("smallbank"), overrides);
  EXPECT_TRUE(cfg.ok()) << cfg.error().message;
  return SmallBank(SmallBank::params_from(*cfg, nodes));
}

// A short run of `w` on two nodes (one thread, 1 us latency), NOWAIT over
// one-sided verbs.
run::RunResult run_of(Workload& w, double seconds = 0.2) {
  run::RunConfig rc;
  rc.workload = &w;
  rc.cluster.nodes = 2;
  rc.cluster.devargs = "shm,latency_ns=1000";
  rc.protocol = find_protocol("nowait");
  rc.options.coroutines = 4;
  rc.duration_s = seconds;
  rc.warmup_s = 0;
  rc.seed = 7;
  rc.single_thread = true;
  auto r = run::run(rc);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? std::move(*r) : run::RunResult{};
}

uint64_t user_aborts(const run::RunResult& r) { return testing_contention::aborts_named(r, "workload"); }

double thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

}  // namespace

// Balances are whole units in [10,000, 50,000] (cents), differ between
// accounts, and a read-only run finds exactly the total check_total()
// computes from the keys.
TEST(SmallBankFlavor, LoadedBalancesAreInRangeAndSumToTheComputedTotal) {
  int64_t lo = INT64_MAX, hi = 0;
  for (uint64_t k = 0; k < 10'000; ++k)
    for (TableId t : {SmallBank::kSavings, SmallBank::kChecking}) {
      const int64_t b = SmallBank::initial_balance(t, k);
      EXPECT_EQ(b % SmallBank::kCents, 0);
      lo = std::min(lo, b);
      hi = std::max(hi, b);
    }
  EXPECT_GE(lo, SmallBank::kMinBalance * SmallBank::kCents);
  EXPECT_LE(hi, SmallBank::kMaxBalance * SmallBank::kCents);
  EXPECT_LT(lo, 11'000 * SmallBank::kCents) << "not spread over the range";
  EXPECT_GT(hi, 49'000 * SmallBank::kCents) << "not spread over the range";
  for (const char* flavor : {"hstore", "drtmh"}) {
    SCOPED_TRACE(flavor);
    SmallBank w = smallbank({std::string("smallbank.flavor=") + flavor, "smallbank.accounts_per_node=300",
                             "smallbank.hot_accounts_per_node=10", "smallbank.mix=0,100,0,0,0,0"});
    run::RunResult r = run_of(w, 0.05);
    EXPECT_GT(r.total.commits, 0u);
    EXPECT_TRUE(r.invariants.ok()) << r.invariants.error().message;
    EXPECT_EQ(r.total.committed_delta, 0);
  }
}

// Every type moves its fixed amount: a run of one type only leaves a
// committed delta that is a multiple of its amount, one per commit.
TEST(SmallBankFlavor, AmountsAreFixedPerType) {
  struct Case {
    const char* flavor;
    const char* mix;
    int type;
    int64_t amount;  // per commit, cents
  };
  const Case cases[] = {
      {"hstore", "0,0,100,0,0,0", SmallBank::kDepositChecking, 130},
      {"drtmh", "0,0,100,0,0,0", SmallBank::kDepositChecking, 130},
      {"hstore", "0,0,0,0,100,0", SmallBank::kTransactSavings, -2020},  // OLTP-Bench: bal - amount
      {"drtmh", "0,0,0,0,100,0", SmallBank::kTransactSavings, 2020},    // DrTM+H: s_balance += amount
      {"hstore", "0,0,0,0,0,100", SmallBank::kWriteCheck, -500},        // never overdrawn here
      {"drtmh", "0,0,0,0,0,100", SmallBank::kWriteCheck, -500},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.flavor) + " " + c.mix);
    // No hot set: hstore's TransactSavings would empty hot accounts (and
    // then abort, as it should; InsufficientFunds tests that).
    SmallBank w = smallbank({std::string("smallbank.flavor=") + c.flavor, "smallbank.accounts_per_node=300",
                             "smallbank.hot_accounts_per_node=300", std::string("smallbank.mix=") + c.mix});
    run::RunResult r = run_of(w, 0.05);
    ASSERT_GT(r.total.commits, 0u);
    EXPECT_TRUE(r.invariants.ok()) << r.invariants.error().message;
    EXPECT_EQ(r.total.committed_delta % c.amount, 0) << r.total.committed_delta;
    // Commits counted in the measured window; the delta covers every
    // commit, so the two may differ by the transactions in flight at the end.
    const int64_t n = r.total.committed_delta / c.amount;
    EXPECT_NEAR(static_cast<double>(n), static_cast<double>(r.total.commits_by_type[c.type]), 16.0);
    EXPECT_EQ(user_aborts(r), 0u);
  }
}

// Amalgamate empties accounts, so SendPayment meets insufficient funds:
// hstore aborts it (user abort, not retried: SendPayment's committed share
// falls below its issued share), drtmh commits it without the transfer.
TEST(SmallBankFlavor, InsufficientFunds) {
  for (const char* flavor : {"hstore", "drtmh"}) {
    SCOPED_TRACE(flavor);
    const bool hstore = std::string(flavor) == "hstore";
    SmallBank w = smallbank({std::string("smallbank.flavor=") + flavor, "smallbank.accounts_per_node=4",
                             "smallbank.hot_accounts_per_node=4", "smallbank.mix=50,0,0,50,0,0"});
    run::RunResult r = run_of(w, 0.1);
    const uint64_t sp_issued = r.total.issued_by_type[SmallBank::kSendPayment];
    const uint64_t sp_commits = r.total.commits_by_type[SmallBank::kSendPayment];
    ASSERT_GT(sp_issued, 100u);
    EXPECT_TRUE(r.invariants.ok()) << r.invariants.error().message;
    if (hstore) {
      EXPECT_GT(user_aborts(r), sp_issued / 10) << "SendPayment never met insufficient funds";
      EXPECT_LT(sp_commits + user_aborts(r) / 2, sp_issued + 16);
    } else {
      EXPECT_EQ(user_aborts(r), 0u);
      EXPECT_NEAR(static_cast<double>(sp_commits), static_cast<double>(sp_issued), 16.0)
          << "drtmh commits every SendPayment";
    }
  }
}

// The share of transactions whose accounts are hot, measured from generated
// inputs: hstore's hot_percent is that share (the others avoid the hot
// set); drtmh's tx_hot is the share drawn uniformly over all accounts (RCC:
// `r.next() % 100 < tx_hot` picks NumAccounts(), else NumHotAccounts()).
TEST(SmallBankFlavor, HotShareFollowsEachReferencesMeaning) {
  struct Case {
    std::vector<std::string> keys;
    double hot_share;
  };
  // 10 hot of 1000 per node.
  const Case cases[] = {
      {{"smallbank.flavor=hstore", "smallbank.hot_percent=90"}, 0.90},
      {{"smallbank.flavor=hstore", "smallbank.hot_percent=25"}, 0.25},
      {{"smallbank.flavor=drtmh", "smallbank.tx_hot=90"}, 0.10 + 0.90 * 0.01},
      {{"smallbank.flavor=drtmh", "smallbank.tx_hot=10"}, 0.90 + 0.10 * 0.01},
  };
  for (const Case& c : cases) {
    std::vector<std::string> keys = c.keys;
    keys.push_back("smallbank.accounts_per_node=1000");
    keys.push_back("smallbank.hot_accounts_per_node=10");
    SCOPED_TRACE(keys[0] + " " + keys[1]);
    SmallBank w = smallbank(keys, 3);
    Rng rng(42);
    TxnInput in;
    const int n = 200'000;
    int hot = 0;
    for (int i = 0; i < n; ++i) {
      w.generate(rng, 0, in);
      const bool h0 = in.args[0] % 1000 < 10, h1 = in.args[1] % 1000 < 10;
      hot += h0;
      if (c.keys[0] == "smallbank.flavor=hstore") {
        EXPECT_EQ(h0, h1) << "one hot draw per transaction";
      }
    }
    EXPECT_NEAR(static_cast<double>(hot) / n, c.hot_share, 0.005);
  }
}

// A hot set of one customer in the whole cluster still yields two distinct
// customers per transaction.
TEST(SmallBankFlavor, OneHotCustomerDoesNotHang) {
  for (const char* flavor : {"smallbank.flavor=hstore", "smallbank.flavor=drtmh"}) {
    const std::string hot = std::string(flavor) == "smallbank.flavor=hstore" ? "smallbank.hot_percent=100"
                                                                              : "smallbank.tx_hot=0";
    SmallBank w = smallbank({flavor, "smallbank.accounts_per_node=2", "smallbank.hot_accounts_per_node=1", hot}, 1);
    Rng rng(5);
    TxnInput in;
    for (int i = 0; i < 1000; ++i) {
      w.generate(rng, 0, in);
      ASSERT_NE(in.args[0], in.args[1]);
    }
  }
}

TEST(SmallBankFlavor, MixIsTheFlavoursUnlessSet) {
  auto share = [](const SmallBank& w, int type) {
    Rng rng(3);
    TxnInput in;
    int k = 0;
    for (int i = 0; i < 100'000; ++i) {
      w.generate(rng, 0, in);
      k += in.type == type;
    }
    return k / 100'000.0;
  };
  EXPECT_NEAR(share(smallbank({"smallbank.flavor=hstore"}), SmallBank::kSendPayment), 0.25, 0.01);
  EXPECT_NEAR(share(smallbank({"smallbank.flavor=drtmh"}), SmallBank::kSendPayment), 0.17, 0.01);
  EXPECT_NEAR(share(smallbank({"smallbank.mix=0,0,0,100,0,0"}), SmallBank::kSendPayment), 1.0, 1e-9);
}

TEST(SmallBankFlavor, KeysOfTheOtherFlavourAreRefused) {
  const WorkloadDef& def = *find_workload("smallbank");
  auto a = config_of(def, {"smallbank.flavor=drtmh", "smallbank.hot_percent=90"});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("smallbank.tx_hot"), std::string::npos) << a.error().message;
  auto b = config_of(def, {"smallbank.tx_hot=90"});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("hstore"), std::string::npos) << b.error().message;
  auto c = config_of(def, {"smallbank.mix=10,10,10,10,10,10"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("sum to 60"), std::string::npos) << c.error().message;
  EXPECT_TRUE(config_of(def, {"smallbank.flavor=drtmh", "smallbank.tx_hot=90", "smallbank.hot_percent=5"}).ok());
}

// RCC's meaning of the hot area (rcc_hotspot, tx_hot) against rdtx's
// (hotspot, hot_percent): measured over generated keys.
TEST(YcsbHot, RccMeaningSendsTheDocumentedShareToTheHotSet) {
  struct Case {
    std::vector<std::string> keys;
    double hot_share;
  };
  const Case cases[] = {
      {{"ycsb.distribution=rcc_hotspot", "ycsb.tx_hot=90"}, 0.10 + 0.90 * 0.01},
      {{"ycsb.distribution=rcc_hotspot", "ycsb.tx_hot=50"}, 0.50 + 0.50 * 0.01},
      {{"ycsb.distribution=hotspot", "ycsb.hot_percent=90"}, 0.90 + 0.10 * 0.01},
  };
  for (const Case& c : cases) {
    std::vector<std::string> keys = c.keys;
    keys.push_back("ycsb.records_per_node=1000");
    keys.push_back("ycsb.hot_records_per_node=10");
    SCOPED_TRACE(keys[0] + " " + keys[1]);
    auto cfg = config_of(*find_workload("ycsb"), keys);
    ASSERT_TRUE(cfg.ok()) << cfg.error().message;
    Ycsb w(Ycsb::params_from(*cfg, 3));
    Rng rng(9);
    const int n = 300'000;
    int hot = 0;
    for (int i = 0; i < n; ++i) hot += w.pick_key(rng) % 1000 < 10;
    EXPECT_NEAR(static_cast<double>(hot) / n, c.hot_share, 0.005);
  }
  auto bad = config_of(*find_workload("ycsb"), {"ycsb.distribution=rcc_hotspot", "ycsb.hot_percent=90"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("ycsb.tx_hot"), std::string::npos) << bad.error().message;
}

// The computation is a CPU burn: the thread's CPU time grows by at least
// the configured time (a sleep would leave it flat).
TEST(YcsbCompute, BurnsCpuNotSleeps) {
  const uint64_t ns = 5'000'000;
  const double before = thread_cpu_ns();
  Ycsb::burn_ns(ns);
  const double used = thread_cpu_ns() - before;
  EXPECT_GE(used, 0.95 * static_cast<double>(ns));  // CPU-time clock granularity
  auto both = config_of(*find_workload("ycsb"), {"ycsb.compute_ns=1000", "ycsb.compute_percent=5"});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.error().message.find("choose one"), std::string::npos) << both.error().message;
}

// A run with computation: every transaction's worker spends at least
// compute_ns in it (commits x compute_ns <= the run's CPU time), and with
// compute_percent the latency share is calibrated (the run completes and
// keeps its invariant).
TEST(YcsbCompute, RunsBurnTheConfiguredTime) {
  for (const char* key : {"ycsb.compute_ns=20000", "ycsb.compute_percent=50"}) {
    SCOPED_TRACE(key);
    auto cfg = config_of(*find_workload("ycsb"),
                         {key, "ycsb.records_per_node=1000", "ycsb.ops_per_txn=4", "ycsb.distribution=uniform"});
    ASSERT_TRUE(cfg.ok()) << cfg.error().message;
    Ycsb w(Ycsb::params_from(*cfg, 2));
    const double before = thread_cpu_ns();
    run::RunResult r = run_of(w, 0.2);
    const double used = thread_cpu_ns() - before;
    ASSERT_GT(r.total.commits, 0u);
    EXPECT_TRUE(r.invariants.ok()) << r.invariants.error().message;
    if (std::string(key) == "ycsb.compute_ns=20000") {
      EXPECT_GE(used, static_cast<double>(r.total.attempts) * 20000 * 0.95);
      // 20 us per attempt, one thread: at most ~10,000 attempts in 0.2 s.
      EXPECT_LT(r.total.attempts, 11'000u);
    } else {
      // Half of the latency: the mean latency is at least twice the
      // (calibrated) burn, which is > 0.
      EXPECT_GT(used, 0.5 * 0.2e9 * 0.5);
    }
  }
}
