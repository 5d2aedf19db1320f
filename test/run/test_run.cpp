// lib/run and the libraries' telemetry: the worker counter table reaches
// merge(), the node-to-node encoding and /rdtx/stats; lib/rpc and lib/store
// list their objects in their own telemetry commands, read here over the
// socket as DPDK's client does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cluster/wire_codec.hpp"
#include "env/eal.hpp"
#include "env/telemetry.hpp"
#include "rdma/rdma.hpp"
#include "rpc/endpoint.hpp"
#include "run/result_wire.hpp"
#include "run/telemetry.hpp"
#include "runtime/worker.hpp"
#include "store/location_cache.hpp"
#include "test/env/telemetry_client.hpp"

using namespace rdtx;
using namespace rdtx::testing_telemetry;

namespace {

std::string g_unavailable;  // why the socket cannot be read here, or ""

#define REQUIRE_TELEMETRY() \
  if (!g_unavailable.empty()) GTEST_SKIP() << g_unavailable

// Every counter of the table set to a value of its own (signed ones negative).
txn::WorkerStats distinct_counters() {
  txn::WorkerStats s;
  for (size_t k = 0; k < txn::kWorkerCounterCount; ++k) {
    const txn::WorkerCounter& c = txn::kWorkerCounters[k];
    const int64_t v = 1000 * static_cast<int64_t>(k + 1) + 7;
    c.set_bits(s, static_cast<uint64_t>(c.is_signed() ? -v : v));
  }
  return s;
}

}  // namespace

TEST(CounterTable, KeysAreUniqueAndWellFormed) {
  std::set<std::string> keys;
  for (const txn::WorkerCounter& c : txn::kWorkerCounters) {
    EXPECT_TRUE(keys.insert(c.key).second) << c.key;
    EXPECT_TRUE((c.u64 == nullptr) != (c.i64 == nullptr)) << c.key << ": exactly one member";
    for (const char* p = c.key; *p; ++p)
      EXPECT_TRUE((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_') << c.key;
  }
}

TEST(CounterTable, MergeAddsEveryCounter) {
  txn::WorkerStats a = distinct_counters(), b = distinct_counters();
  a.merge(b);
  for (const txn::WorkerCounter& c : txn::kWorkerCounters) EXPECT_EQ(c.value(a), 2 * c.value(b)) << c.key;
}

// What node 0 gathers from the other node processes.
TEST(CounterTable, EveryCounterSurvivesTheNodeEncoding) {
  txn::WorkerStats s = distinct_counters();
  s.aborts[3] = 11;
  s.commits_by_type = {1, 2, 3};
  s.issued_by_type = {4, 5, 6};
  s.latency_tsc.record(500);
  s.phase_sum_tsc[1] = 99;
  s.net_all.round_trips = 5;
  cluster::WireWriter w;
  run::put_worker_stats(w, s);
  const std::vector<std::byte> bytes(w.view().begin(), w.view().end());

  cluster::WireReader r(bytes);
  txn::WorkerStats got;
  ASSERT_TRUE(run::get_worker_stats(r, &got));
  EXPECT_TRUE(r.done());
  for (const txn::WorkerCounter& c : txn::kWorkerCounters) EXPECT_EQ(c.value(got), c.value(s)) << c.key;
  EXPECT_EQ(got.aborts[3], 11u);
  EXPECT_EQ(got.commits_by_type, s.commits_by_type);
  EXPECT_EQ(got.issued_by_type, s.issued_by_type);
  EXPECT_EQ(got.latency_tsc.count(), 1u);
  EXPECT_EQ(got.phase_sum_tsc[1], 99u);
  EXPECT_EQ(got.net_all.round_trips, 5u);

  // Cut short, or written by a build with another counter table: refused.
  cluster::WireReader cut(std::span<const std::byte>(bytes).first(bytes.size() - 1));
  EXPECT_FALSE(run::get_worker_stats(cut, &got));
  std::vector<std::byte> other = bytes;
  other[7] = std::byte{static_cast<uint8_t>(txn::kWorkerCounterCount + 1)};  // the count, big-endian
  cluster::WireReader mismatch(other);
  EXPECT_FALSE(run::get_worker_stats(mismatch, &got));
}

// /rdtx/stats carries the table as "counters": every key with its value.
TEST(RunTelemetry, CountersCarryEveryKeyOfTheTable) {
  REQUIRE_TELEMETRY();
  const txn::WorkerStats s = distinct_counters();
  uint64_t bits[txn::kWorkerCounterCount];
  for (size_t k = 0; k < txn::kWorkerCounterCount; ++k) bits[k] = txn::kWorkerCounters[k].bits(s);
  auto cmd = env::telemetry_register("/rdtx/test/counters", "h", [&](std::string_view, env::TelemetryDict& out) {
    run::add_worker_counters(out, bits);
  });
  ASSERT_TRUE(cmd.ok()) << cmd.error().message;
  Client c(env::telemetry_socket_path());
  ASSERT_EQ(c.error(), "");
  const std::string reply = c.query("/rdtx/test/counters");
  EXPECT_FALSE(contains(reply, "\"error\":")) << reply;
  for (const txn::WorkerCounter& k : txn::kWorkerCounters)
    EXPECT_TRUE(contains(reply, "\"" + std::string(k.key) + "\":" + std::to_string(k.value(s))))
        << k.key << ": " << reply;
}

// lib/rpc lists every endpoint of the process, with what its owner published.
TEST(RpcTelemetry, ListsEveryEndpointWithItsCounters) {
  REQUIRE_TELEMETRY();
  std::vector<std::unique_ptr<rdma::Device>> devs;
  const std::string fabric = "run-test-" + std::to_string(getpid());
  for (uint32_t n = 0; n < 2; ++n) {
    auto d = rdma::open_device("shm", {n, fabric});
    ASSERT_TRUE(d.ok()) << d.error().message;
    devs.push_back(std::move(*d));
  }
  rpc::EndpointConfig cfg;
  cfg.recv_buffers = 64;
  cfg.send_buffers = 64;
  cfg.max_calls = 64;
  std::vector<std::unique_ptr<rpc::Endpoint>> eps;
  for (uint32_t i = 0; i < 2; ++i) {
    auto ep = rpc::Endpoint::create(*devs[i], i, 2, cfg);
    ASSERT_TRUE(ep.ok()) << ep.error().message;
    eps.push_back(std::move(*ep));
  }
  for (auto& a : eps)
    for (auto& b : eps) ASSERT_TRUE(a->connect(b->id(), b->address()).ok());
  int handled = 0;
  ASSERT_TRUE(eps[1]->register_handler(1, "count", [&](rpc::Request&) { ++handled; }).ok());
  runtime::Worker worker("w");
  {
    runtime::Worker::Scope scope(&worker);
    rpc::Batch b(*eps[0]);
    const uint64_t v = 42;
    ASSERT_TRUE(b.oneway(1, 1, std::as_bytes(std::span(&v, 1))));
    (void)b.send();
    for (int i = 0; i < 100000 && handled == 0; ++i) {
      eps[0]->poll();
      eps[1]->poll();
    }
  }
  ASSERT_EQ(handled, 1);

  Client c(env::telemetry_socket_path());
  ASSERT_EQ(c.error(), "");
  EXPECT_EQ(c.query("/rdtx/rpc/endpoints"), "{\"/rdtx/rpc/endpoints\":{}}") << "nothing published yet";
  for (auto& ep : eps) ep->publish_stats();
  std::string r = c.query("/rdtx/rpc/endpoints");
  EXPECT_TRUE(contains(r, "\"ep0\":{\"calls\":0,\"oneways\":1,")) << r;
  EXPECT_TRUE(contains(r, "\"ep1\":{\"calls\":0,\"oneways\":0,\"passives\":0,\"requests_handled\":1,")) << r;
  for (const char* key : {"datagrams_sent", "timeouts", "duplicates", "credit_stalls", "malformed"})
    EXPECT_TRUE(contains(r, "\"" + std::string(key) + "\":")) << key << ": " << r;
  r = c.query("/rdtx/rpc/endpoints,1");
  EXPECT_TRUE(contains(r, "\"ep1\":")) << r;
  EXPECT_FALSE(contains(r, "\"ep0\":")) << r;
  eps.clear();
  EXPECT_EQ(c.query("/rdtx/rpc/endpoints"), "{\"/rdtx/rpc/endpoints\":{}}") << "endpoints leave the list";
}

// lib/store lists the named location caches.
TEST(StoreTelemetry, ListsNamedLocationCaches) {
  REQUIRE_TELEMETRY();
  auto named = std::make_unique<store::LocationCache>(64, "n7w3");
  store::LocationCache unnamed(64);
  store::CachedLocation loc;
  EXPECT_FALSE(named->find(1, 10, &loc));
  named->insert(1, 10, store::CachedLocation{2, 0x1000, 5});
  EXPECT_TRUE(named->find(1, 10, &loc));
  EXPECT_TRUE(named->find(1, 10, &loc));
  EXPECT_TRUE(named->find(1, 10, &loc));
  named->publish_stats();
  unnamed.publish_stats();
  Client c(env::telemetry_socket_path());
  ASSERT_EQ(c.error(), "");
  EXPECT_EQ(c.query("/rdtx/store/location_cache"),
            "{\"/rdtx/store/location_cache\":{\"n7w3\":{\"hits\":3,\"misses\":1,\"stale\":0,\"inserts\":1,"
            "\"evictions\":0,\"hit_rate_ppm\":750000}}}");
  named.reset();
  EXPECT_EQ(c.query("/rdtx/store/location_cache"), "{\"/rdtx/store/location_cache\":{}}");
}

namespace {

// With --no-shconf the EAL never removes its runtime directory; DPDK
// unlinks the socket in an atexit handler of its own, so this one,
// registered before eal_init(), runs after it and finds the directory empty.
std::string g_runtime_dir;
void remove_runtime_dir() { rmdir(g_runtime_dir.c_str()); }

std::string runtime_dir(const std::string& prefix) {
  std::string base;
  if (const char* d = std::getenv("RUNTIME_DIRECTORY"))
    base = d;
  else if (getuid() == 0)
    base = "/var/run";
  else if (const char* x = std::getenv("XDG_RUNTIME_DIR"))
    base = x;
  else
    base = "/tmp";
  return base + "/dpdk/" + prefix;
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const std::string prefix = "rdtx-test-run-" + std::to_string(getpid());
  static std::vector<std::string> args{"test_run"};
  std::istringstream in(
      "-l 0 --no-huge --no-pci --no-shconf -m 64 --log-level=lib.eal:error --log-level=lib.telemetry:error");
  for (std::string w; in >> w;) args.push_back(w);
  args.push_back("--file-prefix=" + prefix);
  g_runtime_dir = runtime_dir(prefix);
  std::atexit(remove_runtime_dir);
  std::vector<char*> av;
  for (auto& s : args) av.push_back(s.data());
  auto r = env::eal_init(static_cast<int>(av.size()), av.data());
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.error().message.c_str());
    return 1;
  }
  if (!env::telemetry_available()) g_unavailable = "this process serves no telemetry socket";
  int rc = RUN_ALL_TESTS();
  env::eal_cleanup();
  return rc;
}
