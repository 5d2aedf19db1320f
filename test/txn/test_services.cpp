// Per-node services (lib/txn/service.hpp) run their lifecycle around a real
// run: a test-only protocol, NOWAIT plus a Probe service per worker
// (registered in this binary only), checks that start() comes once per worker
// before any attempt, poll() runs while the coordinators do, the worker
// keeps running while drain() says it is not done (and polls it until it
// is), and stop() comes last; a service whose start() fails fails the run
// with the service's name.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "test/txn/contention.hpp"
#include "txn/coordinator.hpp"
#include "txn/service.hpp"

using namespace rdtx;
using namespace rdtx::txn;
using namespace rdtx::testing_contention;

namespace {

struct Counts {
  int starts = 0, stops = 0, drains = 0, drained = 0, polls_while_draining = 0;
  uint64_t polls = 0;
  bool started_before_attempts = true;
  bool stop_after_drain = true;
};
Counts g;  // single-thread runs: one thread touches it
bool g_fail_start = false;

// Drains in five calls: the worker must keep polling it until the fifth.
class Probe final : public Service {
 public:
  explicit Probe(WorkerEngine& e) : Service("probe"), e_(e) {}
  Result<void> start() override {
    ++g.starts;
    g.started_before_attempts &= e_.live_counts().attempts == 0;
    if (g_fail_start) return make_error(EIO, "probe refuses to start");
    return {};
  }
  int poll() override {
    ++g.polls;
    if (drains_ > 0 && drains_ < 5) ++g.polls_while_draining;
    return 0;
  }
  bool drain() override {
    ++g.drains;
    if (++drains_ < 5) return false;
    if (drains_ == 5) ++g.drained;
    return true;
  }
  void stop() override {
    ++g.stops;
    g.stop_after_drain &= drains_ >= 5;
  }

 private:
  WorkerEngine& e_;
  int drains_ = 0;
};

Result<std::unique_ptr<Protocol>> create_probed(WorkerEngine& e) {
  auto p = find_protocol("nowait")->create(e);
  if (p.ok()) e.add_service(std::make_unique<Probe>(e));
  return p;
}

constexpr AbortReasonName kReasons[] = {{"lock_conflict", "lock conflict"}};

constexpr ProtocolDef kProbed = {
    .name = "nowait-probed",
    .summary = "tests only: NOWAIT with a probe service",
    .meta_bytes = 8,
    .isolation = Isolation::kSerializable,
    .allowed = {.fetch = {Primitive::kOneSided, Primitive::kRpc}, .commit = {Primitive::kOneSided, Primitive::kRpc}},
    .abort_reasons = kReasons,
    .lock_held = lock_word0_held,
    .create = create_probed,
    .broken = true,  // not a protocol of its own: kept out of the generated test lists
};
RDTX_REGISTER_PROTOCOL(kProbed)

Combo probed() {
  Combo c;
  c.workload = "smallbank";
  c.protocol = "nowait-probed";
  return c;
}

}  // namespace

TEST(Services, LifecycleAroundARun) {
  g = {};
  g_fail_start = false;
  auto out = run_contended(probed(), 1, 0.2);
  ASSERT_TRUE(out.ok()) << out.error().message;
  const run::RunResult& r = out->run;
  EXPECT_GT(r.total.commits, 0u);
  const int workers = kNodes;  // one worker per node
  EXPECT_EQ(g.starts, workers);
  EXPECT_TRUE(g.started_before_attempts) << "a service started after its worker's first attempt";
  EXPECT_GT(g.polls, 0u);
  EXPECT_EQ(g.drained, workers) << "the worker stopped before its service drained";
  EXPECT_GE(g.drains, 5 * workers);
  EXPECT_GT(g.polls_while_draining, 0) << "the service was not polled while it drained";
  EXPECT_EQ(g.stops, workers);
  EXPECT_TRUE(g.stop_after_drain);
  EXPECT_EQ(r.locks_left, 0u);
}

TEST(Services, AFailedStartFailsTheRunNamingTheService) {
  g = {};
  g_fail_start = true;
  auto out = run_contended(probed(), 1, 0.1);
  g_fail_start = false;
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("service probe"), std::string::npos) << out.error().message;
  EXPECT_NE(out.error().message.find("probe refuses to start"), std::string::npos) << out.error().message;
}
