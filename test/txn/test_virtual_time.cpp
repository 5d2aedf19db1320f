// Virtual time (run::RunConfig::virtual_time, doc/runtime.md "Virtual
// time") end to end: with the modelled cost a run repeats exactly for a
// seed (commits, aborts, latencies, the recorded history), a different seed
// gives a different run, network round trips take their modelled time, an
// uncontended workload's throughput grows with its workers as if each had a
// CPU, and what virtual time cannot run is refused.
// The figures asserted are virtual, computed from the cost model: they do
// not depend on the machine or its load (no real time is asserted).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "history/history.hpp"
#include "run/runner.hpp"
#include "test/txn/contention.hpp"
#include "txn/protocol.hpp"
#include "txn/workload.hpp"

using namespace rdtx;

namespace {

// A workload from its registry defaults and `overrides`.
std::unique_ptr<txn::Workload> workload_of(const std::string& name, uint32_t nodes,
                                           const std::vector<std::string>& overrides) {
  const txn::WorkloadDef* def = txn::find_workload(name);
  if (def == nullptr) return nullptr;
  config::Schema schema;
  def->add_schema(schema);
  auto cfg = config::Config::parse(schema, "", name, overrides);
  if (!cfg.ok()) {
    ADD_FAILURE() << cfg.error().message;
    return nullptr;
  }
  auto w = def->create(*cfg, nodes);
  if (!w.ok()) {
    ADD_FAILURE() << w.error().message;
    return nullptr;
  }
  return std::move(*w);
}

run::RunConfig virtual_run(txn::Workload* w, const char* protocol, const std::string& devargs) {
  run::RunConfig rc;
  rc.workload = w;
  rc.protocol = txn::find_protocol(protocol);
  rc.cluster.nodes = 2;
  rc.cluster.devargs = devargs;
  rc.options.coroutines = 4;
  rc.warmup_s = 0.002;
  rc.duration_s = 0.02;
  rc.virtual_time.on = true;
  rc.virtual_time.cost = env::VirtualCost::kModel;
  return rc;
}

struct Outcome {
  run::RunResult result;
  history::History history;
};

Outcome run_recorded(run::RunConfig rc, uint64_t seed) {
  rc.seed = seed;
  rc.options.record_history = true;
  rc.options.record_aborted = true;
  // Small: its halves fill and are written during the run (streamed to a
  // file), as in long runs.
  rc.options.history_capacity_bytes = size_t{1} << 20;
  Outcome o;
  auto r = run::run(rc);
  if (!r.ok()) {
    ADD_FAILURE() << r.error().message;
    return o;
  }
  o.result = std::move(*r);
  auto h = run::merged_history(o.result);
  if (!h.ok()) {
    ADD_FAILURE() << h.error().message;
    return o;
  }
  o.history = std::move(*h);
  return o;
}

// The first difference between two histories, or "" if they are the same
// attempt for attempt, access for access.
std::string history_difference(const history::History& a, const history::History& b) {
  if (a.run_id != b.run_id) return "run ids differ";
  if (a.size() != b.size()) return "attempts: " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a.txn(i), &b.txn(i), sizeof(history::TxnRecord)) != 0)
      return "attempt " + std::to_string(i) + " differs";
    const auto x = a.accesses(i), y = b.accesses(i);
    if (x.size() != y.size() || std::memcmp(x.data(), y.data(), x.size_bytes()) != 0)
      return "the accesses of attempt " + std::to_string(i) + " differ";
  }
  return "";
}

void expect_same_run(const Outcome& a, const Outcome& b) {
  const txn::WorkerStats &x = a.result.total, &y = b.result.total;
  EXPECT_EQ(x.commits, y.commits);
  EXPECT_EQ(x.attempts, y.attempts);
  for (size_t k = 0; k < txn::kMaxAbortReasons; ++k) EXPECT_EQ(x.aborts[k], y.aborts[k]) << "abort reason " << k;
  EXPECT_EQ(x.committed_delta, y.committed_delta);
  EXPECT_EQ(x.latency_tsc.percentile(0.5), y.latency_tsc.percentile(0.5));
  EXPECT_EQ(x.latency_tsc.percentile(0.99), y.latency_tsc.percentile(0.99));
  EXPECT_EQ(x.latency_tsc.max(), y.latency_tsc.max());
  EXPECT_EQ(x.net_all.round_trips, y.net_all.round_trips);
  EXPECT_EQ(a.result.virtual_time.passes, b.result.virtual_time.passes);
  EXPECT_EQ(history_difference(a.history, b.history), "");
}

struct Case {
  const char* name;
  const char* protocol;
  const char* devargs;
  txn::Primitive stages;  // every stage the protocol offers it for
};

class Deterministic : public ::testing::TestWithParam<Case> {};

// The same seed twice: the same run, down to every recorded access; another
// seed: another run (the comparison can tell).
TEST_P(Deterministic, SameSeedSameRunAndHistory) {
  const Case& c = GetParam();
  auto w = testing_contention::contended_workload("smallbank", 2, 0, {});
  ASSERT_TRUE(w.ok()) << w.error().message;
  run::RunConfig rc = virtual_run(w->get(), c.protocol, c.devargs);
  ASSERT_NE(rc.protocol, nullptr);
  for (txn::Stage s : {txn::Stage::kFetch, txn::Stage::kLock, txn::Stage::kValidate, txn::Stage::kCommit}) {
    const auto& allowed = rc.protocol->allowed[static_cast<int>(s)];
    if (std::find(allowed.begin(), allowed.end(), c.stages) != allowed.end())
      rc.options.pipeline[static_cast<int>(s)] = c.stages;
  }
  const Outcome a = run_recorded(rc, 11), b = run_recorded(rc, 11), other = run_recorded(rc, 12);
  ASSERT_GT(a.result.total.commits, 100u);
  ASSERT_GT(a.result.total.aborts_total(), 0u) << "contended: the interleaving decides who aborts";
  ASSERT_TRUE(a.result.invariants.ok()) << a.result.invariants.error().message;
  EXPECT_TRUE(a.result.virtual_time.on);
  EXPECT_EQ(a.result.tsc_hz, env::VirtualClock::kHz);
  expect_same_run(a, b);
  EXPECT_NE(history_difference(a.history, other.history), "") << "seed 12 ran the same as seed 11";
}

INSTANTIATE_TEST_SUITE_P(
    VirtualTime, Deterministic,
    ::testing::Values(Case{"occ_onesided_latency", "occ", "shm,latency_ns=2000", txn::Primitive::kOneSided},
                      Case{"occ_rpc_latency", "occ", "shm,latency_ns=2000", txn::Primitive::kRpc},
                      Case{"nowait_onesided_edr", "nowait", "shm,nic=edr,latency_ns=1000", txn::Primitive::kOneSided}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// A round trip takes at least two one-way delays of virtual time, and a
// transaction's round trips follow each other: its mean latency is at least
// its mean round trips x 2 x latency_ns (it would not be if the driver read
// another clock than the worker's).
TEST(VirtualTime, RoundTripsTakeTheirModelledTime) {
  auto w = workload_of("ycsb", 2, {"ycsb.records_per_node=10000", "ycsb.compute_ns=0"});
  ASSERT_NE(w, nullptr);
  run::RunConfig rc = virtual_run(w.get(), "occ", "shm,latency_ns=5000");
  auto r = run::run(rc);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const txn::WorkerStats& t = r->total;
  ASSERT_GT(t.commits, 0u);
  const double round_trips = static_cast<double>(t.net_committed.round_trips) / static_cast<double>(t.commits);
  const double mean_ns = t.latency_tsc.mean();  // ticks are ns in virtual time
  EXPECT_GE(mean_ns, round_trips * 2 * 5000) << round_trips << " round trips";
  // ... and not much more: the CPU cost of 4 coroutines is small beside it.
  EXPECT_LT(mean_ns, round_trips * 2 * 5000 * 1.5) << round_trips << " round trips";
}

// txn.options.outstanding_requests off sends a stage's RPC calls one after
// another, each awaited (RCC's protocols without outstanding requests): on 4
// nodes a YCSB transaction's fetch calls up to 4 owners, so NOWAIT over RPC
// takes more round trips a commit, each costing its modelled time.
TEST(VirtualTime, RpcCallsGoOneByOneWithoutOutstandingRequests) {
  auto w = workload_of("ycsb", 4, {"ycsb.records_per_node=10000", "ycsb.compute_ns=0"});
  ASSERT_NE(w, nullptr);
  run::RunConfig rc = virtual_run(w.get(), "nowait", "shm,latency_ns=5000");
  rc.cluster.nodes = 4;
  rc.options.pipeline[static_cast<int>(txn::Stage::kFetch)] = txn::Primitive::kRpc;
  rc.options.pipeline[static_cast<int>(txn::Stage::kCommit)] = txn::Primitive::kRpc;
  double rt[2] = {}, lat[2] = {};
  for (int serial = 0; serial < 2; ++serial) {
    rc.options.outstanding_requests = serial == 0;
    auto r = run::run(rc);
    ASSERT_TRUE(r.ok()) << r.error().message;
    const txn::WorkerStats& t = r->total;
    ASSERT_GT(t.commits, 100u);
    EXPECT_TRUE(r->invariants.ok());
    rt[serial] = static_cast<double>(t.net_committed.round_trips) / static_cast<double>(t.commits);
    lat[serial] = t.latency_tsc.mean();
  }
  EXPECT_GT(rt[1], rt[0] * 2) << rt[0] << " round trips a commit at once, " << rt[1] << " one by one";
  EXPECT_GT(lat[1], lat[0] * 1.5) << lat[0] << " ns at once, " << lat[1] << " one by one";
}

// Uncontended (YCSB, uniform over large tables, reads mostly): twice the
// workers per node, about twice the throughput, as if each had a CPU of its
// own, though all run on this one thread.
TEST(VirtualTime, ThroughputScalesWithWorkersWhereNothingContends) {
  auto w = workload_of(
      "ycsb", 2,
      {"ycsb.records_per_node=100000", "ycsb.distribution=uniform", "ycsb.read_percent=95", "ycsb.compute_ns=0"});
  ASSERT_NE(w, nullptr);
  double per_s[2] = {};
  for (uint32_t i = 0; i < 2; ++i) {
    run::RunConfig rc = virtual_run(w.get(), "occ", "shm,latency_ns=2000");
    rc.cluster.workers_per_node = 1u << i;
    auto r = run::run(rc);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_TRUE(r->invariants.ok());
    per_s[i] = r->committed_per_s();
  }
  ASSERT_GT(per_s[0], 0);
  EXPECT_NEAR(per_s[1] / per_s[0], 2.0, 0.2) << per_s[0] << " -> " << per_s[1] << " txn/s";
}

TEST(VirtualTime, RefusesWhatItCannotRun) {
  auto w = workload_of("smallbank", 2, {});
  ASSERT_NE(w, nullptr);
  run::RunConfig rc = virtual_run(w.get(), "occ", "verbs,dev=mlx5_0");
  auto r = run::run(rc);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_NE(r.error().message.find("run.virtual_time needs the shm driver"), std::string::npos) << r.error().message;

  rc = virtual_run(w.get(), "occ", "shm");
  rc.virtual_time.model.pass_ns = 0;
  r = run::run(rc);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("run.virtual_pass_ns"), std::string::npos) << r.error().message;

  rc = virtual_run(w.get(), "occ", "shm");
  rc.virtual_time.cost = env::VirtualCost::kMeasured;
  rc.virtual_time.max_pass_ns = 0;
  EXPECT_FALSE(run::check_virtual_time(rc).ok());

  // Real time is not affected: the same run without virtual_time is fine.
  rc = virtual_run(w.get(), "occ", "verbs,dev=mlx5_0");
  rc.virtual_time.on = false;
  EXPECT_TRUE(run::check_virtual_time(rc).ok());
}

// After a virtual run this thread reads real time again.
TEST(VirtualTime, TheClockGoesWithTheRun) {
  auto w = workload_of("smallbank", 2, {});
  ASSERT_NE(w, nullptr);
  const uint64_t hz = env::tsc_hz();
  auto r = run::run(virtual_run(w.get(), "occ", "shm"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(env::virtual_clock(), nullptr);
  EXPECT_EQ(env::tsc_hz(), hz);
  const uint64_t a = env::tsc(), b = env::hw_tsc();
  EXPECT_LE(a, b);
}

}  // namespace
