// lib/run and the libraries' telemetry: the worker counter table reaches
// merge(), the node-to-node encoding and /rdtx/stats; lib/rpc and lib/store
// list their objects in their own telemetry commands, read here over the
// socket as DPDK's client does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <functional>
#include <thread>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cluster/bootstrap.hpp"
#include "cluster/cluster.hpp"
#include "cluster/wire_codec.hpp"
#include "env/eal.hpp"
#include "env/telemetry.hpp"
#include "rdma/rdma.hpp"
#include "rpc/endpoint.hpp"
#include "run/result_wire.hpp"
#include "run/telemetry.hpp"
#include "run/verdict.hpp"
#include "runtime/worker.hpp"
#include "store/location_cache.hpp"
#include "txn/database.hpp"
#include "txn/workload.hpp"
#include "test/env/telemetry_client.hpp"
#include "../free_ports.hpp"

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

// --- a run that went on without removed nodes (cluster::Bootstrap::exclude) ---

TEST(RemovedNodes, AreNamedInOrder) {
  EXPECT_EQ(run::removed_text({}), "");
  EXPECT_EQ(run::removed_text({3}), "node 3");
  EXPECT_EQ(run::removed_text({2, 3}), "nodes 2 and 3");
  EXPECT_EQ(run::removed_text({1, 2, 3}), "nodes 1, 2 and 3");
}

namespace {

const run::Check* check_of(const std::vector<run::Check>& checks, std::string_view key) {
  for (const run::Check& c : checks)
    if (key == c.key) return &c;
  return nullptr;
}

}  // namespace

// A removed coordinator took the deltas of what it committed with it: an
// invariant sum that does not match the survivors' deltas is undecided,
// not failed and not passed; anything else stays as it was.
TEST(RemovedNodes, MissingDeltasLeaveTheInvariantsNotChecked) {
  run::RunResult r;
  r.total.commits = 1;
  r.removed = {3};
  r.invariants = make_error(ENODATA, "node 3 was removed during the run, and the deltas ...");
  auto checks = run::verdict(r, {});
  const run::Check* inv = check_of(checks, "invariants");
  ASSERT_NE(inv, nullptr);
  EXPECT_FALSE(inv->ok);
  EXPECT_TRUE(inv->not_checked);
  EXPECT_EQ(inv->message, "node 3 was removed during the run, and the deltas ...");
  EXPECT_FALSE(run::passed(checks));

  // ENODATA without a removed node is a failure like any other.
  r.removed.clear();
  inv = check_of(checks = run::verdict(r, {}), "invariants");
  ASSERT_NE(inv, nullptr);
  EXPECT_FALSE(inv->ok);
  EXPECT_FALSE(inv->not_checked);

  // A removed node that held data: failed, naming it.
  r.removed = {1};
  r.invariants = make_error(EIO, "node 1 held data and was removed during the run: its share ...");
  inv = check_of(checks = run::verdict(r, {}), "invariants");
  ASSERT_NE(inv, nullptr);
  EXPECT_FALSE(inv->ok);
  EXPECT_FALSE(inv->not_checked);

  // A sum that matched: passed, removed node or not.
  r.invariants = {};
  inv = check_of(checks = run::verdict(r, {}), "invariants");
  ASSERT_NE(inv, nullptr);
  EXPECT_TRUE(inv->ok);
  EXPECT_TRUE(run::passed(checks));
}

// --- the results exchange without a removed node (run::exchange_results) ---

namespace {

// A workload whose check is arithmetic: every partition's share is 100, and
// the total must be 100 per partition plus the committed deltas.
class SharesWorkload : public txn::Workload {
 public:
  const char* name() const override { return "shares"; }
  std::vector<txn::TableDef> tables(uint32_t) const override { return {}; }
  Result<void> load(store::Store&, uint32_t) const override { return {}; }
  std::vector<std::string> type_names() const override { return {"t"}; }
  void generate(txn::Rng&, uint32_t, txn::TxnInput&) const override {}
  runtime::Task<bool> execute(txn::Txn&, const txn::TxnInput&, int64_t*) const override { co_return false; }
  Result<int64_t> check_node(txn::Database&, uint32_t) const override { return int64_t{100}; }
  Result<void> check_total(int64_t sum, uint32_t nodes, int64_t delta) const override {
    if (sum != 100 * static_cast<int64_t>(nodes) + delta)
      return make_error(EIO, "shares: sum %lld, expected %lld", static_cast<long long>(sum),
                        static_cast<long long>(100 * static_cast<int64_t>(nodes) + delta));
    return {};
  }
};

using rdtx::test::free_ports;

// Three nodes' results exchanged by nodes 0 and 1 after node 2 was removed
// (excluded on both): each node's share of the invariant and its one
// worker's figures (node n committed 10 (n + 1)), one embedded database
// standing for every node's. `delta1`: node 1's committed deltas.
struct Exchanged {
  run::RunResult res[2];
  Error err[2];
};

Exchanged exchange_without_node_two(uint32_t memory_nodes, int64_t delta1) {
  Exchanged out;
  cluster::ClusterConfig cc;
  cc.nodes = 3;
  cc.memory_nodes = memory_nodes;
  auto c = cluster::Cluster::create_embedded(cc);
  if (!c.ok()) {
    ADD_FAILURE() << c.error().message;
    return out;
  }
  auto db = txn::Database::create(**c, {}, txn::TupleShape{}, false);
  if (!db.ok()) {
    ADD_FAILURE() << db.error().message;
    return out;
  }
  SharesWorkload wl;
  auto ports = free_ports(3);
  std::unique_ptr<cluster::Bootstrap> boot[3];
  std::vector<std::thread> ts;
  for (uint32_t i = 0; i < 3; ++i)
    ts.emplace_back([&, i] {
      cluster::BootstrapOptions o;
      o.self = i;
      for (uint32_t k = 0; k < 3; ++k) o.nodes.push_back({k, "127.0.0.1", ports[k]});
      o.connect_timeout_ms = 5000;
      o.op_timeout_ms = 5000;
      auto b = cluster::Bootstrap::connect(o);
      if (b.ok()) boot[i] = std::move(*b);
      else ADD_FAILURE() << b.error().message;
    });
  for (auto& t : ts) t.join();
  ts.clear();
  if (!boot[0] || !boot[1] || !boot[2]) return out;
  boot[2].reset();  // removed, and gone
  for (uint32_t i = 0; i < 2; ++i) EXPECT_TRUE(boot[i]->exclude(2).ok());
  for (uint32_t i = 0; i < 2; ++i)
    ts.emplace_back([&, i] {
      run::RunResult& r = out.res[i];
      txn::WorkerStats s;
      s.commits = 10 * (i + 1);
      s.committed_delta = i == 1 ? delta1 : 0;
      r.per_worker = {s};
      r.total = s;
      auto e = run::exchange_results(*boot[i], **db, wl, r);
      if (!e.ok()) out.err[i] = e.error();
    });
  for (auto& t : ts) t.join();
  return out;
}

}  // namespace

TEST(RemovedNodes, ExchangeCoversTheSurvivorsOfAComputeNodesRemoval) {
  Exchanged x = exchange_without_node_two(1, 0);  // node 0 memory, nodes 1 and 2 compute
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_EQ(x.err[i].message, "") << "node " << i;
    EXPECT_EQ(x.res[i].removed, std::vector<uint32_t>{2}) << "node " << i;
    EXPECT_TRUE(x.res[i].invariants.ok()) << x.res[i].invariants.error().message;
    EXPECT_TRUE(x.res[i].replicas_equal.ok());
  }
  const run::RunResult& r = x.res[0];
  EXPECT_TRUE(r.aggregate);
  EXPECT_EQ(r.total.commits, 10u + 20u);  // the survivors'
  ASSERT_EQ(r.per_worker.size(), 3u);     // still indexed by node: node 2's stands empty
  EXPECT_EQ(r.per_worker[1].commits, 20u);
  EXPECT_EQ(r.per_worker[2].commits, 0u);
}

TEST(RemovedNodes, ExchangeLeavesTheInvariantsUndecidedWithoutTheRemovedNodesDeltas) {
  Exchanged x = exchange_without_node_two(1, 5);  // the survivors' deltas no longer add up
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_EQ(x.err[i].message, "") << "node " << i;
    ASSERT_FALSE(x.res[i].invariants.ok());
    EXPECT_EQ(x.res[i].invariants.error().code, ENODATA);
    EXPECT_EQ(x.res[i].invariants.error().message,
              "node 2 was removed during the run, and the deltas of the transactions it committed went with it "
              "(the survivors' check: shares: sum 100, expected 105)");
    const std::vector<run::Check> checks_inv = run::verdict(x.res[i], {});
    const run::Check* inv = check_of(checks_inv, "invariants");
    ASSERT_NE(inv, nullptr);
    EXPECT_TRUE(inv->not_checked);
  }
}

TEST(RemovedNodes, ExchangeFailsTheInvariantsNamingARemovedNodeThatHeldData) {
  Exchanged x = exchange_without_node_two(0, 0);  // symmetric: node 2 held partition 2
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_EQ(x.err[i].message, "") << "node " << i;
    ASSERT_FALSE(x.res[i].invariants.ok());
    EXPECT_EQ(x.res[i].invariants.error().code, EIO);
    EXPECT_EQ(x.res[i].invariants.error().message,
              "node 2 held data and was removed during the run: its share of the invariant went with it");
  }
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
