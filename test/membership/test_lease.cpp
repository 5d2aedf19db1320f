// lib/membership/lease: leases between the CM and its members over the
// fabric (shm, one process, one agent thread per node): leases hold while
// renewed; a frozen or destroyed member is suspected by the CM only after
// its own lease has lapsed, and the frozen one fences itself; a CM that is
// gone leaves every member fenced; configuration numbers go out in grants
// and come back in renewals; bad options are refused. RDTX_TEST_DEVARGS
// runs them on another device (scripts/rdma-field-test: verbs over
// Soft-RoCE in a guest), with every time five times longer.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "membership/lease.hpp"

namespace rdtx::membership {
namespace {

// Nanoseconds in a millisecond of the test: five under RDTX_TEST_DEVARGS
// (an emulated CPU's Soft-RoCE is slower).
const uint64_t kMs = std::getenv("RDTX_TEST_DEVARGS") != nullptr && *std::getenv("RDTX_TEST_DEVARGS") != '\0'
                         ? 5'000'000
                         : 1'000'000;

std::string devargs() {
  const char* d = std::getenv("RDTX_TEST_DEVARGS");
  return d != nullptr && *d != '\0' ? d : "shm";
}

// all_gather among the threads of one process, one per node.
class Gather {
 public:
  explicit Gather(uint32_t nodes) : blobs_(nodes), nodes_(nodes) {}
  Result<std::vector<std::vector<std::byte>>> operator()(uint32_t self, std::span<const std::byte> mine) {
    std::unique_lock lk(mu_);
    blobs_[self].assign(mine.begin(), mine.end());
    if (++arrived_ == nodes_) cv_.notify_all();
    cv_.wait(lk, [&] { return arrived_ == nodes_; });
    return blobs_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<std::byte>> blobs_;
  uint32_t nodes_, arrived_ = 0;
};

struct Cluster {
  std::vector<std::unique_ptr<rdma::Device>> devices;
  std::vector<std::unique_ptr<LeaseAgent>> agents;
};

// `before_start`: called with the agents made, before any starts.
Cluster make(uint32_t nodes, LeaseOptions o, uint32_t cm = 0,
             const std::function<void(Cluster&)>& before_start = nullptr) {
  static int seq = 0;
  const std::string fabric = "lease-test-" + std::to_string(::getpid()) + "-" + std::to_string(seq++);
  Cluster c;
  c.agents.resize(nodes);
  for (uint32_t n = 0; n < nodes; ++n) {
    auto d = rdma::open_device(devargs(), {n, fabric});
    EXPECT_TRUE(d.ok()) << d.error().message;
    c.devices.push_back(std::move(*d));
  }
  Gather g(nodes);
  std::vector<std::thread> ts;
  for (uint32_t n = 0; n < nodes; ++n)
    ts.emplace_back([&, n] {
      auto a = LeaseAgent::create(*c.devices[n], n, nodes, cm, o,
                                  [&, n](std::span<const std::byte> m, std::string_view) { return g(n, m); });
      EXPECT_TRUE(a.ok()) << a.error().message;
      if (a.ok()) c.agents[n] = std::move(*a);
    });
  for (auto& t : ts) t.join();
  if (before_start) before_start(c);
  for (auto& a : c.agents)
    if (a) a->start();
  return c;
}

LeaseOptions lease_of(uint64_t ms) {
  LeaseOptions o;
  o.lease_ns = ms * kMs;
  return o;
}

void sleep_ms(uint64_t ms) { std::this_thread::sleep_for(std::chrono::nanoseconds(ms * kMs)); }

// Waits up to `ms` (test milliseconds) for pred.
template <class P>
bool eventually(uint64_t ms, P pred) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ms * kMs);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    sleep_ms(1);
  }
  return pred();
}

TEST(Lease, HoldsWhileRenewed) {
  Cluster c = make(3, lease_of(200));
  ASSERT_TRUE(c.agents[2]);
  sleep_ms(1200);
  EXPECT_TRUE(c.agents[0]->take_suspicions().empty());
  for (uint32_t n = 1; n < 3; ++n) {
    EXPECT_FALSE(c.agents[n]->fenced()) << c.agents[n]->fence_reason();
    // A tick of 25 ms: about 48 renewals in 1.2 s.
    EXPECT_GT(c.agents[0]->renewal_stats(n).renewals, 20u) << "node " << n;
    EXPECT_GT(c.agents[n]->renewals_sent(), 20u);
  }
  EXPECT_EQ(c.agents[0]->verb_errors(), 0u);
}

TEST(Lease, AFrozenMemberFencesItselfAndIsSuspectedOnlyAfterItsLeaseLapsed) {
  Cluster c = make(3, lease_of(100));
  ASSERT_TRUE(c.agents[2]);
  sleep_ms(300);
  const uint64_t froze = lease_clock_ns();
  c.agents[2]->freeze(300 * kMs);  // 3 leases, as a SIGSTOP would
  ASSERT_TRUE(eventually(2000, [&] { return c.agents[2]->fenced(); }));
  auto s = c.agents[0]->take_suspicions();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].node, 2u);
  // Suspected a lease (+ guard, + at most two ticks) after it stopped renewing.
  EXPECT_GT(s[0].at_ns, froze + 100 * kMs);
  EXPECT_LT(s[0].at_ns, froze + 200 * kMs);
  EXPECT_GE(s[0].since_grant_ns, 100 * kMs);
  // The member's lease had ended before the CM suspected it.
  EXPECT_LT(c.agents[2]->lease_end_ns(), s[0].at_ns);
  EXPECT_NE(c.agents[2]->fence_reason().find("node 2's lease ends"), std::string::npos)
      << c.agents[2]->fence_reason();
  // Never granted again: still fenced, and the other member unharmed.
  sleep_ms(300);
  EXPECT_TRUE(c.agents[2]->fenced());
  EXPECT_FALSE(c.agents[1]->fenced());
  EXPECT_TRUE(c.agents[0]->take_suspicions().empty());
}

TEST(Lease, ADeadMemberIsSuspected) {
  Cluster c = make(3, lease_of(100));
  ASSERT_TRUE(c.agents[1]);
  sleep_ms(200);
  const uint64_t died = lease_clock_ns();
  c.agents[1].reset();  // its QPs and region go with it
  std::vector<Suspicion> s;
  ASSERT_TRUE(eventually(1000, [&] {
    auto got = c.agents[0]->take_suspicions();
    s.insert(s.end(), got.begin(), got.end());
    return !s.empty();
  }));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].node, 1u);
  EXPECT_GT(s[0].at_ns - died, 75 * kMs);
  EXPECT_LT(s[0].at_ns - died, 200 * kMs);
  EXPECT_FALSE(c.agents[2]->fenced());
}

TEST(Lease, EveryMemberFencesItselfWhenItsCmIsGone) {
  std::atomic<int> fences{0};
  LeaseOptions o = lease_of(100);
  o.on_fence = [&fences] { fences.fetch_add(1); };
  Cluster c = make(3, o);
  ASSERT_TRUE(c.agents[0]);
  sleep_ms(200);
  c.agents[0]->freeze(1000 * kMs);
  for (uint32_t n = 1; n < 3; ++n) {
    ASSERT_TRUE(eventually(500, [&] { return c.agents[n]->fenced(); })) << "node " << n;
    EXPECT_NE(c.agents[n]->fence_reason().find("the newest grant from its CM, node 0"), std::string::npos)
        << c.agents[n]->fence_reason();
    // Running on time, a member fences itself before its lease ends.
    EXPECT_LT(c.agents[n]->fenced_at_ns(), c.agents[n]->lease_end_ns());
  }
  sleep_ms(100);
  EXPECT_EQ(fences.load(), 2) << "on_fence once per member";
}

// The CM stops: its members fence themselves and see its beat stand still;
// one of them becomes the CM (as the store's compare-and-set would decide),
// the other renews with it, and configurations flow from the new CM.
TEST(Lease, AMemberTakesOverAsCmOnceTheCmsBeatStandsStill) {
  Cluster c = make(3, lease_of(100));
  ASSERT_TRUE(c.agents[2]);
  sleep_ms(200);
  c.agents[0]->freeze(3000 * kMs);
  for (uint32_t n = 1; n < 3; ++n) ASSERT_TRUE(eventually(500, [&] { return c.agents[n]->fenced(); }));
  // Fenced members probe the CM: its beat does not move; each other's do.
  ASSERT_TRUE(eventually(500, [&] { return c.agents[1]->cm_silent_ns() > 100 * kMs; }));
  EXPECT_GT(c.agents[2]->cm_silent_ns(), 0u);
  EXPECT_EQ(c.agents[1]->live_nodes(100 * kMs), 2u) << "itself and node 2: a majority of 3";
  for (uint32_t n = 1; n < 3; ++n) c.agents[n]->switch_cm(1);
  c.agents[1]->forget(0);
  ASSERT_TRUE(eventually(500, [&] { return c.agents[1]->is_cm() && !c.agents[2]->fenced(); }));
  EXPECT_EQ(c.agents[2]->cm(), 1u);
  // Node 2 renews with node 1 for several leases without fencing.
  sleep_ms(400);
  EXPECT_FALSE(c.agents[2]->fenced()) << c.agents[2]->fence_reason();
  EXPECT_GT(c.agents[1]->renewal_stats(2).renewals, 5u);
  c.agents[1]->announce(2);
  ASSERT_TRUE(eventually(500, [&] { return c.agents[2]->announced() == 2; }));
  c.agents[2]->acknowledge(2);
  ASSERT_TRUE(eventually(500, [&] { return c.agents[1]->acknowledged(2) == 2; }));
  EXPECT_TRUE(c.agents[1]->take_suspicions().empty()) << "the forgotten old CM, or node 2, suspected";
}

// With the CM and the other member both stopped, a member sees only itself:
// no majority, so it must not take over.
TEST(Lease, AMemberAloneSeesNoMajority) {
  Cluster c = make(3, lease_of(100));
  ASSERT_TRUE(c.agents[2]);
  sleep_ms(200);
  c.agents[0]->freeze(1500 * kMs);
  c.agents[2]->freeze(1500 * kMs);
  ASSERT_TRUE(eventually(500, [&] { return c.agents[1]->fenced(); }));
  ASSERT_TRUE(eventually(500, [&] { return c.agents[1]->cm_silent_ns() > 100 * kMs; }));
  EXPECT_EQ(c.agents[1]->live_nodes(100 * kMs), 1u);
}

// A member whose CM runs does not see it silent: its beat moves.
TEST(Lease, AFencedMemberSeesALiveCmsBeatMove) {
  Cluster c = make(2, lease_of(100));
  ASSERT_TRUE(c.agents[1]);
  sleep_ms(100);
  c.agents[0]->revoke(1);  // no more grants: node 1 fences itself, node 0 runs on
  ASSERT_TRUE(eventually(500, [&] { return c.agents[1]->fenced(); }));
  sleep_ms(300);
  EXPECT_LT(c.agents[1]->cm_silent_ns(), 60 * kMs) << "the beat of a CM that runs stood still";
}

TEST(Lease, AMemberThatNeverRenewsIsSuspectedAfterTheFirstGrantWait) {
  LeaseOptions o = lease_of(50);
  o.first_grant_ns = 300 * kMs;
  const uint64_t t0 = lease_clock_ns();
  // Frozen before its first tick: it never renews.
  Cluster c = make(2, o, 0, [](Cluster& c) {
    if (c.agents[1]) c.agents[1]->freeze(700 * kMs);
  });
  ASSERT_TRUE(c.agents[1]);
  std::vector<Suspicion> s;
  ASSERT_TRUE(eventually(1500, [&] {
    s = c.agents[0]->take_suspicions();
    return !s.empty();
  }));
  EXPECT_EQ(s[0].renewals, 0u);
  EXPECT_GT(s[0].at_ns - t0, 250 * kMs);  // not before the first grant wait
}

TEST(Lease, ConfigurationsGoOutInGrantsAndComeBackInRenewals) {
  Cluster c = make(3, lease_of(100));
  ASSERT_TRUE(c.agents[2]);
  c.agents[0]->announce(7);
  for (uint32_t n = 1; n < 3; ++n) ASSERT_TRUE(eventually(500, [&] { return c.agents[n]->announced() == 7; }));
  EXPECT_EQ(c.agents[0]->acknowledged(1), 0u);
  c.agents[1]->acknowledge(7);
  ASSERT_TRUE(eventually(500, [&] { return c.agents[0]->acknowledged(1) == 7; }));
  EXPECT_EQ(c.agents[0]->acknowledged(2), 0u);
  EXPECT_EQ(c.agents[0]->acknowledged(0), 7u);  // the CM's own
  // A revoked member gets no grants and fences itself; the CM then
  // suspects it.
  c.agents[0]->revoke(2);
  ASSERT_TRUE(eventually(500, [&] { return c.agents[2]->fenced(); }));
  ASSERT_TRUE(eventually(500, [&] { return !c.agents[0]->take_suspicions().empty(); }));
  EXPECT_FALSE(c.agents[1]->fenced());
}

TEST(Lease, RefusesOptionsItCannotKeep) {
  auto d = rdma::open_device(devargs(), {0, "lease-test-bad-" + std::to_string(::getpid())});
  ASSERT_TRUE(d.ok());
  auto gather = [](std::span<const std::byte> m, std::string_view) {
    return Result<std::vector<std::vector<std::byte>>>(std::vector<std::vector<std::byte>>{{m.begin(), m.end()}});
  };
  LeaseOptions o = lease_of(0);
  o.lease_ns = 500'000;
  auto a = LeaseAgent::create(**d, 0, 1, 0, o, gather);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("below the 1 ms"), std::string::npos) << a.error().message;
  o = lease_of(10);
  o.tick_ns = 6 * kMs;
  a = LeaseAgent::create(**d, 0, 1, 0, o, gather);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("no second renewal"), std::string::npos) << a.error().message;
  a = LeaseAgent::create(**d, 1, 1, 0, lease_of(10), gather);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, EINVAL);
}

}  // namespace
}  // namespace rdtx::membership
