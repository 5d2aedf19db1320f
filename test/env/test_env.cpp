// lib/env: EAL-backed rings and mempools, rings in caller memory, kvargs, tsc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "env/eal.hpp"
#include "env/kvargs.hpp"
#include "env/log.hpp"
#include "env/mempool.hpp"
#include "env/ring.hpp"
#include "env/tsc.hpp"

using namespace rdtx;
using namespace rdtx::env;

TEST(Eal, InitialisedWithOneLcore) {
  EXPECT_TRUE(eal_initialized());
  EXPECT_EQ(lcore_count(), 1u);
  EXPECT_EQ(lcore_id(), main_lcore());
  EXPECT_TRUE(worker_lcores().empty());
  EXPECT_GE(available_cores(), 1u);
  EXPECT_EQ(lcore_cpu_count(), 1u);
}

TEST(Tsc, FrequencyMatchesTheMonotonicClock) {
  uint64_t hz = tsc_hz();
  ASSERT_GT(hz, 100'000'000u);
  uint64_t t0 = monotonic_ns(), c0 = tsc();
  usleep(50'000);
  uint64_t t1 = monotonic_ns(), c1 = tsc();
  double ratio = tsc_to_ns(c1 - c0) / static_cast<double>(t1 - t0);
  EXPECT_NEAR(ratio, 1.0, 0.05);
  EXPECT_EQ(ns_to_tsc(1'000'000'000), hz);
}

TEST(Ring, OwnedRingIsFifoAndBounded) {
  auto r = Ring::create("t", 8, sizeof(uint64_t), Sync::kSingle, Sync::kSingle);
  ASSERT_TRUE(r.ok()) << r.error().message;
  uint64_t in[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(r->enqueue_burst(in, 10), 7u) << "a ring of 8 holds 7";
  EXPECT_EQ(r->free_count(), 0u);
  uint64_t out[10] = {};
  EXPECT_EQ(r->dequeue_burst(out, 3), 3u);
  EXPECT_EQ(out[0], 1u);
  EXPECT_EQ(out[2], 3u);
  EXPECT_EQ(r->count(), 4u);
}

TEST(Ring, PeekLeavesElementsUntilFinished) {
  auto r = Ring::create("p", 16, 16, Sync::kMulti, Sync::kSingle);
  ASSERT_TRUE(r.ok()) << r.error().message;
  struct E {
    uint64_t a, b;
  } in[3] = {{1, 10}, {2, 20}, {3, 30}}, out[3] = {};
  ASSERT_EQ(r->enqueue_burst(in, 3), 3u);
  ASSERT_EQ(r->peek_start(out, 3), 3u);
  r->peek_finish(1);  // consume only the first
  EXPECT_EQ(r->count(), 2u);
  E next{};
  ASSERT_EQ(r->dequeue_burst(&next, 1), 1u);
  EXPECT_EQ(next.a, 2u);
  EXPECT_EQ(next.b, 20u);
}

TEST(Ring, InPlaceRingSharedByThreadsLosesNothing) {
  constexpr unsigned kCount = 1024, kPerThread = 100000;
  size_t bytes = Ring::memsize(kCount, 8);
  ASSERT_GT(bytes, 0u);
  void* mem = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  auto r = Ring::init_in(mem, kCount, 8, Sync::kMulti, Sync::kSingle);
  ASSERT_TRUE(r.ok()) << r.error().message;
  std::vector<std::thread> producers;
  for (uint64_t t = 0; t < 2; ++t)
    producers.emplace_back([mem, t] {
      Ring view = Ring::attach(mem, 8);  // another user of the same memory
      for (uint64_t i = 0; i < kPerThread;) {
        uint64_t v = (t << 32) | i;
        i += view.enqueue_burst(&v, 1);
      }
    });
  uint64_t sum = 0, got = 0, last[2] = {0, 0};
  bool ordered = true;
  while (got < 2 * kPerThread) {
    uint64_t v[32];
    unsigned n = r->dequeue_burst(v, 32);
    for (unsigned i = 0; i < n; ++i) {
      uint64_t t = v[i] >> 32, seq = v[i] & 0xffffffff;
      ordered &= (seq == 0 || seq == last[t] + 1);
      last[t] = seq;
      sum += seq;
    }
    got += n;
  }
  for (auto& p : producers) p.join();
  EXPECT_TRUE(ordered) << "each producer's elements arrive in order";
  EXPECT_EQ(sum, 2ull * (kPerThread - 1) * kPerThread / 2);
  std::free(mem);
}

TEST(Ring, BadGeometryIsAnError) {
  EXPECT_EQ(Ring::memsize(1000, 8), 0u);
  alignas(64) static char mem[4096];
  auto r = Ring::init_in(mem, 1000, 8, Sync::kSingle, Sync::kSingle);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("power of two"), std::string::npos);
}

TEST(Mempool, GetPutAndExhaustion) {
  auto mp = Mempool::create("t", 63, 128, 0);
  ASSERT_TRUE(mp.ok()) << mp.error().message;
  std::vector<void*> objs(63);
  ASSERT_TRUE(mp->get_bulk(objs.data(), 63));
  EXPECT_EQ(mp->available(), 0u);
  EXPECT_EQ(mp->get(), nullptr);
  void* two[2];
  EXPECT_FALSE(mp->get_bulk(two, 2));
  mp->put_bulk(objs.data(), 63);
  EXPECT_EQ(mp->available(), 63u);
  EXPECT_EQ(mp->in_use(), 0u);
}

TEST(KvArgs, ParsesAndValidates) {
  auto kv = parse_kvargs("shm,latency_ns=2000,bw_gbps=100", {"latency_ns", "bw_gbps"});
  ASSERT_TRUE(kv.ok()) << kv.error().message;
  EXPECT_EQ(kv->name, "shm");
  EXPECT_EQ(*kv->get_u64("latency_ns", 0), 2000u);
  EXPECT_DOUBLE_EQ(*kv->get_double("bw_gbps", 0, 0, 1000), 100.0);
  EXPECT_EQ(*kv->get_u64("absent", 7), 7u);

  auto bad = parse_kvargs("shm,latncy_ns=5", {"latency_ns", "bw_gbps"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("unknown key 'latncy_ns'"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("latency_ns, bw_gbps"), std::string::npos);

  // A key given twice: which value is meant is not guessed (issue 46 item 8).
  auto twice = parse_kvargs("shm,latency_ns=5,latency_ns=9", {"latency_ns"});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().message.find("key 'latency_ns' given twice"), std::string::npos) << twice.error().message;

  EXPECT_FALSE(parse_kvargs("shm,flag", {"flag"}).ok());
  EXPECT_FALSE(parse_kvargs(",a=1", {"a"}).ok());
  auto neg = parse_kvargs("shm,latency_ns=-1", {"latency_ns"});
  ASSERT_TRUE(neg.ok());
  EXPECT_FALSE(neg->get_u64("latency_ns", 0).ok());
  auto big = parse_kvargs("shm,latency_ns=99", {"latency_ns"});
  auto r = big->get_u64("latency_ns", 0, 0, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("out of range [0, 10]"), std::string::npos);
}

TEST(Log, TypesRegisterAndHonourLevels) {
  LogType t("rdtx.test.env");
  EXPECT_GE(t.id(), 0);
  EXPECT_TRUE(t.enabled(LogLevel::kError));
  EXPECT_FALSE(t.enabled(LogLevel::kDebug));
}

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  std::string prefix = "--file-prefix=rdtx-test-env-" + std::to_string(getpid());
  const char* eal_argv[] = {"test_env", "-l", "0", "--no-huge", "--no-pci", "--no-shconf", "-m", "64",
                            "--log-level=lib.eal:error", prefix.c_str()};
  auto r = eal_init(static_cast<int>(std::size(eal_argv)), const_cast<char**>(eal_argv));
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.error().message.c_str());
    return 1;
  }
  int rc = RUN_ALL_TESTS();
  eal_cleanup();
  return rc;
}
