// lib/rpc: calls across many endpoints and nodes in one thread, coalescing
// and doorbells, deferred replies, one-way and passive requests with
// piggybacked acks, timeouts, buffer exhaustion and malformed datagrams.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cluster/cluster.hpp"
#include "drivers/rdma/shm/shm.hpp"
#include "env/tsc.hpp"
#include "rdma/rdma.hpp"
#include "rpc/endpoint.hpp"
#include "runtime/loop.hpp"
#include "runtime/task.hpp"
#include "runtime/worker.hpp"

using namespace rdtx;
using namespace rdtx::rpc;
using runtime::Task;

namespace {

constexpr HandlerId kEcho = 1;
constexpr HandlerId kAdd = 2;
constexpr HandlerId kPark = 3;

std::span<const std::byte> bytes_of(const auto& v) { return std::as_bytes(std::span(&v, 1)); }

// N nodes x W endpoints, every endpoint connected to every other, each on its
// own runtime::Worker, all driven by one Loop on the test thread.
struct Cluster {
  std::vector<std::unique_ptr<rdma::Device>> nodes;
  std::vector<std::unique_ptr<Endpoint>> eps;
  std::vector<std::unique_ptr<runtime::Worker>> workers;
  runtime::Loop loop;

  Cluster(uint32_t n_nodes, uint32_t per_node, EndpointConfig cfg = small_config(),
          const std::string& devargs = "shm") {
    static int seq = 0;
    std::string fabric = "rpc-test-" + std::to_string(getpid()) + "-" + std::to_string(seq++);
    for (uint32_t n = 0; n < n_nodes; ++n) {
      auto d = rdma::open_device(devargs, {n, fabric});
      EXPECT_TRUE(d.ok()) << d.error().message;
      nodes.push_back(std::move(*d));
    }
    uint32_t total = n_nodes * per_node;
    for (uint32_t i = 0; i < total; ++i) {
      auto ep = Endpoint::create(*nodes[i / per_node], i, total, cfg);
      EXPECT_TRUE(ep.ok()) << ep.error().message;
      eps.push_back(std::move(*ep));
    }
    for (auto& a : eps)
      for (auto& b : eps) EXPECT_TRUE(a->connect(b->id(), b->address()).ok());
    for (uint32_t i = 0; i < total; ++i) {
      workers.push_back(std::make_unique<runtime::Worker>("w" + std::to_string(i)));
      Endpoint* ep = eps[i].get();
      workers[i]->add_poller([ep] { return ep->poll(); });
      loop.add_worker(workers[i].get());
      register_defaults(*ep);
    }
  }
  ~Cluster() {
    workers.clear();  // coroutines first: they hold Batches on endpoints
    eps.clear();
  }

  static EndpointConfig small_config() {
    EndpointConfig c;
    c.recv_buffers = 128;
    c.send_buffers = 128;
    c.max_calls = 256;
    c.timeout_ns = 50'000'000;
    return c;
  }

  static void register_defaults(Endpoint& ep) {
    ASSERT_TRUE(ep.register_handler(kEcho, "echo", [](Request& r) {
                    std::memcpy(r.reply_buffer().data(), r.payload().data(), r.payload().size());
                    r.set_reply_len(static_cast<uint32_t>(r.payload().size()));
                  }).ok());
  }

  // Runs until every worker's tasks are done (bounded by `max_ms`).
  void run_until_idle(uint64_t max_ms = 5000) {
    uint64_t end = env::tsc() + env::ns_to_tsc(max_ms * 1'000'000);
    auto live = [&] {
      size_t n = 0;
      for (auto& w : workers) n += w->live_tasks();
      return n;
    };
    while (live() > 0 && env::tsc() < end) loop.run_once();
    ASSERT_EQ(live(), 0u) << "coroutines did not finish in " << max_ms << " ms";
  }
  void run_for_ms(uint64_t ms) {
    uint64_t end = env::tsc() + env::ns_to_tsc(ms * 1'000'000);
    while (env::tsc() < end) loop.run_once();
  }
};

}  // namespace

TEST(Rpc, CallsToManyPeersAtOnceGetTheirOwnReplies) {
  Cluster c(3, 2);  // 6 endpoints on 3 nodes, one thread
  int done = 0;
  for (uint32_t i = 0; i < c.eps.size(); ++i)
    for (int co = 0; co < 4; ++co)
      c.workers[i]->spawn([](Endpoint& ep, uint32_t n, int seed, int& done) -> Task<void> {
        std::mt19937 rng(seed);
        for (int round = 0; round < 50; ++round) {
          Batch b(ep);
          uint64_t req[5], rep[5];
          Reply r[5];
          for (int k = 0; k < 5; ++k) {
            req[k] = rng();
            r[k] = {reinterpret_cast<std::byte*>(&rep[k]), sizeof rep[k]};
            EXPECT_TRUE(b.call(rng() % n, kEcho, bytes_of(req[k]), &r[k]));
          }
          bool ok = co_await b.send();
          EXPECT_TRUE(ok);
          for (int k = 0; k < 5; ++k) {
            EXPECT_EQ(r[k].status, CallStatus::kOk);
            EXPECT_EQ(r[k].len, 8u);
            EXPECT_EQ(rep[k], req[k]);
          }
        }
        ++done;
      }(*c.eps[i], static_cast<uint32_t>(c.eps.size()), static_cast<int>(i * 10 + co), done));
  c.run_until_idle();
  EXPECT_EQ(done, 24);
  for (auto& ep : c.eps) {
    EXPECT_EQ(ep->stats().timeouts, 0u);
    EXPECT_EQ(ep->stats().malformed_total(), 0u);
    EXPECT_EQ(ep->calls_in_flight(), 0u);
  }
}

TEST(Rpc, RequestsToOnePeerShareADatagramAndABatchOneDoorbell) {
  Cluster c(3, 1);
  c.workers[0]->spawn([](Endpoint& ep) -> Task<void> {
    Batch b(ep);
    uint64_t v[12] = {}, out[12] = {};
    Reply r[12];
    for (int k = 0; k < 12; ++k) {
      v[k] = k;
      r[k] = {reinterpret_cast<std::byte*>(&out[k]), 8};
      b.call(k < 10 ? 1 : 2, kEcho, bytes_of(v[k]), &r[k]);
    }
    uint64_t d0 = ep.stats().doorbells, s0 = ep.stats().datagrams_sent;
    EXPECT_TRUE(co_await b.send());
    EXPECT_EQ(ep.stats().doorbells - d0, 1u);
    EXPECT_EQ(ep.stats().datagrams_sent - s0, 2u) << "10 requests to node 1 and 2 to node 2: two datagrams";
    for (int k = 0; k < 12; ++k) EXPECT_EQ(out[k], uint64_t(k));
  }(*c.eps[0]));
  c.run_until_idle();
  EXPECT_EQ(c.eps[1]->stats().requests_handled, 10u);
  EXPECT_EQ(c.eps[1]->stats().datagrams_sent, 1u) << "its ten replies also share one datagram";
}

TEST(Rpc, LargeBatchesSpillIntoSeveralDatagrams) {
  Cluster c(2, 1);
  c.workers[0]->spawn([](Endpoint& ep) -> Task<void> {
    Batch b(ep);
    std::vector<std::byte> big(ep.max_payload() / 3, std::byte{7});
    std::vector<std::vector<std::byte>> out(7, std::vector<std::byte>(big.size()));
    std::vector<Reply> r(7);
    for (int k = 0; k < 7; ++k) {
      r[k] = {out[k].data(), static_cast<uint32_t>(out[k].size())};
      EXPECT_TRUE(b.call(1, kEcho, big, &r[k]));
    }
    EXPECT_TRUE(co_await b.send());
    for (auto& o : out) EXPECT_EQ(o, big);
    EXPECT_GE(ep.stats().datagrams_sent, 3u);
  }(*c.eps[0]));
  c.run_until_idle();
}

TEST(Rpc, DeferredRepliesDoNotBlockTheLoop) {
  Cluster c(2, 1);
  std::deque<std::pair<Deferred, uint64_t>> parked;
  Endpoint& server = *c.eps[1];
  ASSERT_TRUE(server.register_handler(kPark, "park", [&](Request& r) {
                uint64_t v;
                std::memcpy(&v, r.payload().data(), 8);
                parked.push_back({r.defer(), v * 2});
              }).ok());
  // Answers one parked request every 50 passes of the server's worker.
  int passes = 0;
  c.workers[1]->add_poller([&] {
    if (parked.empty() || ++passes % 50 != 0) return 0;
    auto [d, v] = parked.front();
    parked.pop_front();
    EXPECT_TRUE(server.reply(d, bytes_of(v)));
    return 1;
  });
  int echoes = 0;
  bool parked_done = false;
  c.workers[0]->spawn([](Endpoint& ep, bool& done) -> Task<void> {
    Batch b(ep);
    uint64_t in[3] = {1, 2, 3}, out[3] = {};
    Reply r[3];
    for (int k = 0; k < 3; ++k) {
      r[k] = {reinterpret_cast<std::byte*>(&out[k]), 8};
      b.call(1, kPark, bytes_of(in[k]), &r[k]);
    }
    EXPECT_TRUE(co_await b.send());
    EXPECT_EQ(out[0], 2u);
    EXPECT_EQ(out[2], 6u);
    done = true;
  }(*c.eps[0], parked_done));
  // Meanwhile other calls to the same server complete.
  c.workers[0]->spawn([](Endpoint& ep, int& echoes, bool& parked_done) -> Task<void> {
    while (!parked_done) {
      Batch b(ep);
      uint64_t v = 5, out = 0;
      Reply r{reinterpret_cast<std::byte*>(&out), 8};
      b.call(1, kEcho, bytes_of(v), &r);
      EXPECT_TRUE(co_await b.send());
      ++echoes;
    }
  }(*c.eps[0], echoes, parked_done));
  c.run_until_idle();
  EXPECT_TRUE(parked_done);
  EXPECT_GT(echoes, 10) << "echo calls completed while the parked requests waited";
}

TEST(Rpc, OnewayRunsTheHandlerAndExpectsNothing) {
  Cluster c(2, 1);
  uint64_t sum = 0;
  ASSERT_TRUE(c.eps[1]->register_handler(kAdd, "add", [&](Request& r) {
                uint64_t v;
                std::memcpy(&v, r.payload().data(), 8);
                sum += v;
                EXPECT_FALSE(r.wants_reply());
              }).ok());
  c.workers[0]->spawn([](Endpoint& ep) -> Task<void> {
    Batch b(ep);
    for (uint64_t v = 1; v <= 10; ++v) EXPECT_TRUE(b.oneway(1, kAdd, bytes_of(v)));
    EXPECT_TRUE(co_await b.send());  // nothing to wait for
  }(*c.eps[0]));
  c.run_until_idle();
  c.run_for_ms(5);
  EXPECT_EQ(sum, 55u);
  EXPECT_EQ(c.eps[1]->stats().datagrams_sent, 0u);
  EXPECT_EQ(c.eps[0]->calls_in_flight(), 0u);
}

TEST(Rpc, PassiveAcksRideOnTheNextReply) {
  EndpointConfig cfg = Cluster::small_config();
  cfg.passive_delay_ns = 10'000'000'000;  // never alone within this test
  Cluster c(2, 1, cfg);
  uint64_t commits = 0;
  ASSERT_TRUE(c.eps[1]->register_handler(kAdd, "commit", [&](Request&) { ++commits; }).ok());
  Endpoint& client = *c.eps[0];
  Endpoint& server = *c.eps[1];
  c.workers[0]->spawn([](Endpoint& ep) -> Task<void> {
    Batch b(ep);
    uint64_t v = 1;
    EXPECT_TRUE(b.passive(1, kAdd, bytes_of(v)));
    EXPECT_TRUE(co_await b.send());  // does not wait for the ack
  }(client));
  c.run_until_idle();
  c.run_for_ms(5);
  EXPECT_EQ(commits, 1u);
  EXPECT_EQ(client.passive_outstanding(), 1u) << "the ack is held by the server";
  EXPECT_EQ(server.stats().datagrams_sent, 0u);
  c.workers[0]->spawn([](Endpoint& ep) -> Task<void> {
    Batch b(ep);
    uint64_t v = 9, out = 0;
    Reply r{reinterpret_cast<std::byte*>(&out), 8};
    b.call(1, kEcho, bytes_of(v), &r);
    EXPECT_TRUE(co_await b.send());
    EXPECT_EQ(ep.passive_outstanding(), 0u) << "the ack arrived with the reply";
  }(client));
  c.run_until_idle();
  EXPECT_EQ(server.stats().datagrams_sent, 1u) << "reply and ack shared one datagram";
}

// A lazy call (piggybacked acknowledgement): its reply waits at the server
// for a ride, comes with the reply to the next urgent call, and completes
// the lazy call with its own status and data.
TEST(Rpc, LazyCallRepliesRideOnTheNextReply) {
  EndpointConfig cfg = Cluster::small_config();
  cfg.passive_delay_ns = 10'000'000'000;  // never alone within this test
  Cluster c(2, 1, cfg);
  Endpoint& client = *c.eps[0];
  Endpoint& server = *c.eps[1];
  uint64_t lazy_out = 0;
  Reply lazy{reinterpret_cast<std::byte*>(&lazy_out), 8};
  bool lazy_done = false;
  c.workers[0]->spawn([](Endpoint& ep, Reply& r, bool& done) -> Task<void> {
    Batch b(ep);
    uint64_t v = 41;
    EXPECT_TRUE(b.call(1, kEcho, bytes_of(v), &r, true));
    EXPECT_TRUE(co_await b.send());  // the reply comes later
    done = true;
  }(client, lazy, lazy_done));
  c.run_for_ms(5);
  EXPECT_FALSE(lazy_done) << "the lazy reply was sent at once";
  EXPECT_EQ(lazy.status, CallStatus::kPending);
  EXPECT_EQ(server.stats().datagrams_sent, 0u) << "the server held the reply";
  c.workers[0]->spawn([](Endpoint& ep) -> Task<void> {
    Batch b(ep);
    uint64_t v = 9, out = 0;
    Reply r{reinterpret_cast<std::byte*>(&out), 8};
    b.call(1, kEcho, bytes_of(v), &r);
    EXPECT_TRUE(co_await b.send());
    EXPECT_EQ(out, 9u);
  }(client));
  c.run_until_idle();
  EXPECT_TRUE(lazy_done);
  EXPECT_EQ(lazy.status, CallStatus::kOk);
  EXPECT_EQ(lazy_out, 41u);
  EXPECT_EQ(server.stats().datagrams_sent, 1u) << "both replies shared one datagram";
}

// Only a lower bound on time is asserted: a loaded machine may preempt the
// test for longer than the delay, never make the ack come early.
TEST(Rpc, PassiveAcksAreSentAloneAfterTheDelay) {
  EndpointConfig cfg = Cluster::small_config();
  cfg.passive_delay_ns = 2'000'000;
  Cluster c(2, 1, cfg);
  ASSERT_TRUE(c.eps[1]->register_handler(kAdd, "commit", [](Request&) {}).ok());
  uint64_t sent_tsc = 0;
  c.workers[0]->spawn([](Endpoint& ep, uint64_t& sent_tsc) -> Task<void> {
    Batch b(ep);
    uint64_t v = 1;
    b.passive(1, kAdd, bytes_of(v));
    sent_tsc = env::tsc();
    co_await b.send();
  }(*c.eps[0], sent_tsc));
  c.run_until_idle();
  uint64_t end = env::tsc() + env::ns_to_tsc(2'000'000'000);
  while (c.eps[0]->passive_outstanding() > 0 && env::tsc() < end) c.loop.run_once();
  EXPECT_EQ(c.eps[0]->passive_outstanding(), 0u);
  EXPECT_GE(env::tsc_to_ns(env::tsc() - sent_tsc), 2'000'000.0) << "the ack went before its delay";
  EXPECT_EQ(c.eps[1]->stats().datagrams_sent, 1u) << "the ack went alone";
  EXPECT_EQ(c.eps[0]->stats().passive_failures, 0u);
}

TEST(Rpc, UnknownHandlerAndSmallReplyBufferFailTheCall) {
  Cluster c(2, 1);
  c.workers[0]->spawn([](Endpoint& ep) -> Task<void> {
    Batch b(ep);
    uint64_t v = 1, out = 0;
    std::byte tiny[4];
    Reply r1{reinterpret_cast<std::byte*>(&out), 8}, r2{tiny, sizeof tiny};
    b.call(1, 42, bytes_of(v), &r1);
    b.call(1, kEcho, bytes_of(v), &r2);
    EXPECT_FALSE(co_await b.send());
    EXPECT_EQ(r1.status, CallStatus::kNoHandler);
    EXPECT_EQ(r2.status, CallStatus::kTooLarge);
  }(*c.eps[0]));
  c.run_until_idle();
}

TEST(Rpc, CallsToASilentPeerTimeOut) {
  EndpointConfig cfg = Cluster::small_config();
  cfg.timeout_ns = 5'000'000;
  Cluster c(2, 1, cfg);
  c.loop = runtime::Loop();
  c.loop.add_worker(c.workers[0].get());  // endpoint 1 is never polled
  uint64_t start = env::tsc();
  c.workers[0]->spawn([](Endpoint& ep) -> Task<void> {
    Batch b(ep);
    uint64_t v = 1, out = 0;
    Reply r{reinterpret_cast<std::byte*>(&out), 8};
    b.call(1, kEcho, bytes_of(v), &r);
    EXPECT_FALSE(co_await b.send());
    EXPECT_EQ(r.status, CallStatus::kTimeout);
  }(*c.eps[0]));
  c.run_until_idle();
  EXPECT_GE(env::tsc_to_ns(env::tsc() - start), 5'000'000.0);
  EXPECT_EQ(c.eps[0]->stats().timeouts, 1u);
  EXPECT_EQ(c.eps[0]->calls_in_flight(), 0u);
}

// Configuration numbers (doc/membership.md): a datagram of an older
// configuration than the receiver's is dropped whole and counted; once the
// sender has the newest too, calls go through again.
TEST(Rpc, DatagramsOfAnOlderConfigurationAreDropped) {
  std::atomic<uint32_t> config[2] = {2, 1};  // node 0 has configuration 2, node 1 still 1
  static int seq = 0;
  const std::string fabric = "rpc-config-" + std::to_string(getpid()) + "-" + std::to_string(seq++);
  std::vector<std::unique_ptr<rdma::Device>> nodes;
  std::vector<std::unique_ptr<Endpoint>> eps;
  for (uint32_t n = 0; n < 2; ++n) {
    auto d = rdma::open_device("shm", {n, fabric});
    ASSERT_TRUE(d.ok()) << d.error().message;
    nodes.push_back(std::move(*d));
    EndpointConfig cfg = Cluster::small_config();
    cfg.timeout_ns = 5'000'000;
    cfg.max_timeout_ns = 5'000'000;
    cfg.configuration = &config[n];
    auto ep = Endpoint::create(*nodes[n], n, 2, cfg);
    ASSERT_TRUE(ep.ok()) << ep.error().message;
    eps.push_back(std::move(*ep));
  }
  for (auto& a : eps)
    for (auto& b : eps) ASSERT_TRUE(a->connect(b->id(), b->address()).ok());
  runtime::Loop loop;
  std::vector<std::unique_ptr<runtime::Worker>> workers;
  for (uint32_t i = 0; i < 2; ++i) {
    workers.push_back(std::make_unique<runtime::Worker>("w" + std::to_string(i)));
    Endpoint* ep = eps[i].get();
    workers[i]->add_poller([ep] { return ep->poll(); });
    loop.add_worker(workers[i].get());
    Cluster::register_defaults(*ep);
  }
  auto call = [&](uint32_t from, uint32_t to) {
    CallStatus st = CallStatus::kPending;
    workers[from]->spawn([](Endpoint& ep, uint32_t to, CallStatus& st) -> Task<void> {
      Batch b(ep);
      uint64_t v = 7, out = 0;
      Reply r{reinterpret_cast<std::byte*>(&out), 8};
      b.call(to, kEcho, bytes_of(v), &r);
      (void)co_await b.send();
      st = r.status;
    }(*eps[from], to, st));
    const uint64_t end = env::tsc() + env::ns_to_tsc(2'000'000'000);
    while (st == CallStatus::kPending && env::tsc() < end) loop.run_once();
    return st;
  };
  // Node 1's request is refused by node 0; node 0's request is served by
  // node 1, but its reply (configuration 1) is refused in turn.
  EXPECT_EQ(call(1, 0), CallStatus::kTimeout);
  EXPECT_GE(eps[0]->stats().stale_configuration, 1u);
  EXPECT_EQ(eps[0]->stats().requests_handled, 0u);
  EXPECT_EQ(call(0, 1), CallStatus::kTimeout);
  EXPECT_EQ(eps[1]->stats().requests_handled, 1u);
  EXPECT_EQ(eps[1]->stats().stale_configuration, 0u);
  const uint64_t dropped = eps[0]->stats().stale_configuration;
  EXPECT_GE(dropped, 2u);
  // Node 1 learns configuration 2: both ways work.
  config[1] = 2;
  EXPECT_EQ(call(1, 0), CallStatus::kOk);
  EXPECT_EQ(call(0, 1), CallStatus::kOk);
  loop.run_once();
  workers.clear();
  eps.clear();
}

// A call's own timeout (Batch::set_timeout_ns): a server that answers
// after the endpoint's timeout on purpose (a queued lock request) is heard
// by a call given a longer one, while a call with the endpoint's timeout to
// the same server gives up.
TEST(Rpc, ACallsOwnTimeoutOutlastsTheEndpoints) {
  EndpointConfig cfg = Cluster::small_config();
  cfg.timeout_ns = 5'000'000;
  Cluster c(2, 1, cfg);
  std::deque<std::pair<Deferred, uint64_t>> parked;
  Endpoint& server = *c.eps[1];
  ASSERT_TRUE(server.register_handler(kPark, "park", [&](Request& r) {
                uint64_t v;
                std::memcpy(&v, r.payload().data(), 8);
                parked.push_back({r.defer(), env::tsc() + env::ns_to_tsc(15'000'000)});
              }).ok());
  c.workers[1]->add_poller([&] {  // answers each request 15 ms after it came
    if (parked.empty() || env::tsc() < parked.front().second) return 0;
    const uint64_t v = 7;
    server.reply(parked.front().first, bytes_of(v));
    parked.pop_front();
    return 1;
  });
  CallStatus patient = CallStatus::kPending, hasty = CallStatus::kPending;
  c.workers[0]->spawn([](Endpoint& ep, CallStatus& patient, CallStatus& hasty) -> Task<void> {
    uint64_t v = 1, out[2] = {};
    Reply r0{reinterpret_cast<std::byte*>(&out[0]), 8}, r1{reinterpret_cast<std::byte*>(&out[1]), 8};
    Batch b(ep);
    b.call(1, kPark, bytes_of(v), &r0);  // the endpoint's 5 ms
    b.set_timeout_ns(50'000'000);
    b.call(1, kPark, bytes_of(v), &r1);
    co_await b.send();
    hasty = r0.status;
    patient = r1.status;
    EXPECT_EQ(out[1], 7u);
  }(*c.eps[0], patient, hasty));
  c.run_until_idle();
  EXPECT_EQ(hasty, CallStatus::kTimeout);
  EXPECT_EQ(patient, CallStatus::kOk);
}

// The timeout adapts (EndpointConfig::timeout_ns, endpoint_timeout.cpp): a
// peer that answers every call 12 ms late, over a 4 ms floor, times out the
// first calls while the timeout doubles, then none once the round trips
// are measured (a slow device, a loaded host); a peer that stops answering
// still times every call out, each after a longer wait up to the ceiling.
// Without the adaptation every call to the slow peer times out.
TEST(Rpc, TheTimeoutAdaptsToASlowPeerAndStillCatchesASilentOne) {
  EndpointConfig cfg = Cluster::small_config();
  cfg.timeout_ns = 4'000'000;
  cfg.max_timeout_ns = 200'000'000;
  Cluster c(2, 1, cfg);
  std::deque<std::pair<Deferred, uint64_t>> parked;
  bool silent = false;
  Endpoint& server = *c.eps[1];
  ASSERT_TRUE(server.register_handler(kPark, "park", [&](Request& r) {
                const Deferred d = r.defer();  // never answered once silent
                if (!silent) parked.push_back({d, env::tsc() + env::ns_to_tsc(12'000'000)});
              }).ok());
  c.workers[1]->add_poller([&] {
    if (parked.empty() || env::tsc() < parked.front().second) return 0;
    const uint64_t v = 7;
    server.reply(parked.front().first, bytes_of(v));
    parked.pop_front();
    return 1;
  });
  std::vector<CallStatus> slow, quiet;
  std::vector<uint64_t> quiet_waits;
  c.workers[0]->spawn([](Endpoint& ep, std::vector<CallStatus>& slow, std::vector<CallStatus>& quiet,
                         std::vector<uint64_t>& quiet_waits, bool& silent) -> Task<void> {
    for (int i = 0; i < 20; ++i) {
      Batch b(ep);
      uint64_t v = 1, out = 0;
      Reply r{reinterpret_cast<std::byte*>(&out), 8};
      b.call(1, kPark, bytes_of(v), &r);
      co_await b.send();
      slow.push_back(r.status);
    }
    silent = true;
    for (int i = 0; i < 4; ++i) {
      Batch b(ep);
      uint64_t v = 1, out = 0;
      Reply r{reinterpret_cast<std::byte*>(&out), 8};
      const uint64_t t0 = env::tsc();
      b.call(1, kPark, bytes_of(v), &r);
      co_await b.send();
      quiet.push_back(r.status);
      quiet_waits.push_back(env::tsc_to_ns(env::tsc() - t0));
    }
  }(*c.eps[0], slow, quiet, quiet_waits, silent));
  c.run_until_idle(10'000);
  ASSERT_EQ(slow.size(), 20u);
  const auto first_ok = std::find(slow.begin(), slow.end(), CallStatus::kOk);
  ASSERT_NE(first_ok, slow.end()) << "every call to the slow peer timed out";
  EXPECT_LE(first_ok - slow.begin(), 3) << "the doubling reaches 12 ms after 2 timeouts (4, 8, 16 ms)";
  EXPECT_EQ(std::count(first_ok, slow.end(), CallStatus::kOk), slow.end() - first_ok)
      << "a call timed out after the round trips were measured";
  EXPECT_GE(c.eps[0]->settled_timeout_ns(), 12'000'000u);
  EXPECT_LE(c.eps[0]->stats().longest_reply_ns, 100'000'000u);
  ASSERT_EQ(quiet.size(), 4u);
  for (CallStatus st : quiet) EXPECT_EQ(st, CallStatus::kTimeout) << "a silent peer must still time out";
  EXPECT_GT(quiet_waits[3], quiet_waits[0]) << "each timeout to a silent peer is longer";
  EXPECT_LE(c.eps[0]->stats().timeout_max_ns, cfg.max_timeout_ns);
}

// One thread running both ends is descheduled (here: sleeps) for longer
// than the timeout right after a call went out. The peer was no more silent
// than the caller: the caller's next pass must not end the call before the
// peer has had its turn.
TEST(Rpc, TimeTheCallerWasNotPolledIsNotAPeersSilence) {
  EndpointConfig cfg = Cluster::small_config();
  cfg.timeout_ns = 5'000'000;
  Cluster c(2, 1, cfg);
  bool ok = false;
  c.workers[0]->spawn([](Endpoint& ep, bool& ok) -> Task<void> {
    Batch b(ep);
    uint64_t v = 7, out = 0;
    Reply r{reinterpret_cast<std::byte*>(&out), 8};
    b.call(1, kEcho, bytes_of(v), &r);
    ok = co_await b.send() && out == 7;
  }(*c.eps[0], ok));
  // The caller's passes alone first: the request is out, not yet served.
  c.loop = runtime::Loop();
  c.loop.add_worker(c.workers[0].get());
  for (int i = 0; i < 3; ++i) c.loop.run_once();
  usleep(20'000);  // 4 timeouts unpolled
  c.loop.add_worker(c.workers[1].get());  // the caller's pass comes first
  c.run_until_idle();
  EXPECT_TRUE(ok) << "the call ended by timeout";
  EXPECT_EQ(c.eps[0]->stats().timeouts, 0u);
}

uint64_t recv_dropped(const Endpoint& ep) {
  auto st = rdma::shm::ud_qp_stats(ep.queue_pair());
  EXPECT_TRUE(st.ok());
  return st.ok() ? st->recv_dropped : 0;
}

// Many coroutines each send their own datagram to a server that has not
// polled yet. Without credits the first 40 datagrams would need 40 buffers;
// with them at most `credits` go, the rest wait (coalescing) and every call
// completes, nothing dropped.
TEST(Rpc, RequestsBeyondTheCreditsWaitAndAllComplete) {
  EndpointConfig cfg = Cluster::small_config();
  cfg.recv_buffers = 0;  // what the credits need: 2 x 8 x 2 + 16 spare for batched reposts
  Cluster c(2, 1, cfg);
  ASSERT_EQ(c.eps[1]->recv_buffers(), 48u);
  int ok_calls = 0;
  for (int i = 0; i < 40; ++i)
    c.workers[0]->spawn([](Endpoint& ep, int i, int& ok_calls) -> Task<void> {
      Batch b(ep);
      uint64_t v = static_cast<uint64_t>(i), out = ~0ull;
      Reply r{reinterpret_cast<std::byte*>(&out), 8};
      b.call(1, kEcho, bytes_of(v), &r);
      EXPECT_TRUE(co_await b.send());
      EXPECT_EQ(out, v);
      ++ok_calls;
    }(*c.eps[0], i, ok_calls));
  c.workers[0]->poll_once();  // every coroutine sends before the server polls
  EXPECT_EQ(c.eps[0]->stats().datagrams_sent, 8u) << "one per credit";
  EXPECT_EQ(c.eps[0]->credits(1), 0u);
  EXPECT_EQ(c.eps[0]->stats().credit_stalls, 1u);
  c.run_until_idle();
  EXPECT_EQ(ok_calls, 40);
  EXPECT_EQ(c.eps[0]->stats().timeouts, 0u);
  EXPECT_LT(c.eps[0]->stats().datagrams_sent, 40u) << "the waiting requests shared datagrams";
  EXPECT_EQ(recv_dropped(*c.eps[1]), 0u);
  EXPECT_EQ(recv_dropped(*c.eps[0]), 0u);
}

// A peer that never answers keeps the credits our datagrams took; once
// something has waited for a whole timeout with no credit returned, the
// window comes back and the waiting datagram goes.
TEST(Rpc, CreditsAPeerNeverReturnsComeBackAfterATimeout) {
  EndpointConfig cfg = Cluster::small_config();
  cfg.timeout_ns = 5'000'000;
  Cluster c(2, 1, cfg);
  c.loop = runtime::Loop();
  c.loop.add_worker(c.workers[0].get());  // endpoint 1 is never polled
  int timeouts = 0;
  for (int i = 0; i < 9; ++i)
    c.workers[0]->spawn([](Endpoint& ep, int& timeouts) -> Task<void> {
      Batch b(ep);
      uint64_t v = 1, out = 0;
      Reply r{reinterpret_cast<std::byte*>(&out), 8};
      b.call(1, kEcho, bytes_of(v), &r);
      EXPECT_FALSE(co_await b.send());
      timeouts += r.status == CallStatus::kTimeout;
    }(*c.eps[0], timeouts));
  c.workers[0]->poll_once();
  Endpoint& ep = *c.eps[0];
  EXPECT_EQ(ep.stats().datagrams_sent, 8u);
  EXPECT_EQ(ep.stats().credit_stalls, 1u);
  c.run_until_idle();
  EXPECT_EQ(timeouts, 9);
  uint64_t end = env::tsc() + env::ns_to_tsc(1'000'000'000);
  while (ep.stats().datagrams_sent < 9 && env::tsc() < end) c.loop.run_once();
  EXPECT_EQ(ep.stats().credit_resets, 1u);
  EXPECT_EQ(ep.stats().datagrams_sent, 9u) << "the waiting datagram went once the window came back";
  EXPECT_EQ(ep.credits(1), 7u);
}

// The same when every send buffer waits for that peer: a credit return
// arrives (the stall ends), the window goes at once, and the datagrams still
// waiting have no open datagram behind them (no message could open one: no
// buffer). If the peer then returns nothing more, the wait must still count
// as a stall and the window come back after a timeout; otherwise nothing to
// that peer ever goes again (the chaos suite wedged so on TPC-C's large
// write-backs under lost datagrams).
TEST(Rpc, CreditsComeBackWhenEverySendBufferWaits) {
  EndpointConfig cfg = Cluster::small_config();
  cfg.timeout_ns = 5'000'000;
  cfg.send_buffers = 24;
  Cluster c(2, 1, cfg);
  c.loop = runtime::Loop();
  c.loop.add_worker(c.workers[0].get());  // endpoint 1 is polled once, by hand
  Endpoint& ep = *c.eps[0];
  const std::vector<std::byte> big(ep.max_payload() - 16);  // a datagram each
  int unsent = 0;
  for (int i = 0; i < 40; ++i)
    c.workers[0]->spawn([](Endpoint& ep, const std::vector<std::byte>& big, int& unsent) -> Task<void> {
      Batch b(ep);
      std::vector<std::byte> out(big.size());
      Reply r{out.data(), static_cast<uint32_t>(out.size())};
      unsent += !b.call(1, kEcho, big, &r);
      co_await b.send();
    }(ep, big, unsent));
  for (int i = 0; i < 4; ++i) c.workers[0]->poll_once();
  ASSERT_EQ(ep.stats().datagrams_sent, 8u) << "one per credit";
  ASSERT_GT(unsent, 0) << "the send buffers ran out";
  // Endpoint 1 answers the first window once: its replies return 8 credits,
  // which the waiting datagrams take at once.
  for (int i = 0; i < 4; ++i) c.workers[1]->poll_once();
  for (int i = 0; i < 4; ++i) c.workers[0]->poll_once();
  const uint64_t sent = ep.stats().datagrams_sent;
  ASSERT_GT(sent, 8u) << "the returned credits took waiting datagrams";
  ASSERT_EQ(ep.credits(1), 0u) << "and datagrams still wait";
  const uint64_t resets = ep.stats().credit_resets;
  uint64_t end = env::tsc() + env::ns_to_tsc(1'000'000'000);
  while (ep.stats().datagrams_sent == sent && env::tsc() < end) c.loop.run_once();
  EXPECT_GT(ep.stats().credit_resets, resets) << "a wait with no datagram open is a stall too";
  EXPECT_GT(ep.stats().datagrams_sent, sent) << "the waiting datagrams went once the window came back";
  c.run_until_idle();
}

// High fan-in: 15 endpoints x 32 coroutines call, send passive requests
// and one-way requests to endpoint 0, which has 2 x 8 x 16 + 16 = 272
// receive buffers (16 of them possibly consumed and not reposted yet) for a
// demand of 480 datagrams at once (and unbounded one-ways).
// Credits must keep every datagram within the posted buffers: nothing is
// dropped, every call completes, and every credit comes back.
TEST(Rpc, HighFanInNeverOverrunsTheReceiveBuffers) {
  EndpointConfig cfg = Cluster::small_config();
  cfg.recv_buffers = 0;
  cfg.send_buffers = 512;
  cfg.max_calls = 1024;
  Cluster c(4, 4, cfg);
  ASSERT_EQ(c.eps[0]->recv_buffers(), 272u);
  uint64_t oneways = 0, passives = 0;
  ASSERT_TRUE(c.eps[0]->register_handler(kAdd, "count", [&](Request& r) {
                ++(r.wants_reply() ? passives : oneways);
              }).ok());
  constexpr int kCoroutines = 32, kRounds = 12;
  int done = 0;
  for (uint32_t s = 1; s < c.eps.size(); ++s)
    for (int co = 0; co < kCoroutines; ++co)
      c.workers[s]->spawn([](Endpoint& ep, uint64_t tag, int& done) -> Task<void> {
        for (int round = 0; round < kRounds; ++round) {
          Batch b(ep);
          uint64_t v = tag * 1000 + static_cast<uint64_t>(round), out = 0;
          Reply r{reinterpret_cast<std::byte*>(&out), 8};
          if (round % 3 == 2) {
            EXPECT_TRUE(b.oneway(0, kAdd, bytes_of(v)));  // a datagram of one-ways only
            co_await b.send();
            continue;
          }
          EXPECT_TRUE(b.call(0, kEcho, bytes_of(v), &r));
          if (round % 3 == 1) {
            EXPECT_TRUE(b.passive(0, kAdd, bytes_of(v)));
          }
          EXPECT_TRUE(co_await b.send());
          EXPECT_EQ(r.status, CallStatus::kOk);
          EXPECT_EQ(out, v);
        }
        ++done;
      }(*c.eps[s], s * 100 + static_cast<uint64_t>(co), done));
  c.run_until_idle(20'000);
  const uint64_t per_sender = kCoroutines * kRounds / 3;
  EXPECT_EQ(done, 15 * kCoroutines);
  // The last one-ways, passive acks and credit returns settle.
  uint64_t end = env::tsc() + env::ns_to_tsc(2'000'000'000);
  auto settled = [&] {
    if (oneways != 15 * per_sender) return false;
    for (uint32_t s = 1; s < c.eps.size(); ++s)
      if (c.eps[s]->passive_outstanding() > 0 || c.eps[s]->credits(0) != cfg.credits) return false;
    return c.eps[0]->credits(1) == cfg.credits;
  };
  while (!settled() && env::tsc() < end) c.loop.run_once();
  EXPECT_TRUE(settled()) << "every credit and ack comes back";
  EXPECT_EQ(oneways, 15 * per_sender);
  EXPECT_EQ(passives, 15 * per_sender);
  uint64_t stalls = 0;
  for (auto& ep : c.eps) {
    EXPECT_EQ(recv_dropped(*ep), 0u) << "endpoint " << ep->id();
    EXPECT_EQ(ep->stats().timeouts, 0u);
    EXPECT_EQ(ep->stats().passive_timeouts, 0u);
    EXPECT_EQ(ep->stats().stale_replies, 0u);
    EXPECT_EQ(ep->stats().send_failures, 0u);
    EXPECT_EQ(ep->stats().credit_resets, 0u);
    stalls += ep->stats().credit_stalls;
  }
  EXPECT_GT(stalls, 0u) << "the senders did run out of credits";
}

// Datagrams crafted by hand through a raw UD QP: every malformation is
// counted under its reason and dropped; the endpoint keeps working.
TEST(Rpc, MalformedDatagramsAreCountedAndDropped) {
  Cluster c(3, 1);  // the raw datagrams claim endpoint 0; endpoint 2 checks it still serves
  Endpoint& ep = *c.eps[1];
  rdma::Device& dev = *c.nodes[0];
  auto cq = dev.create_cq(64);
  rdma::QpInit init;
  init.type = rdma::QpType::kUd;
  init.send_cq = cq->get();
  init.recv_cq = cq->get();
  init.max_send_wr = 32;
  init.max_recv_wr = 1;
  auto qp = dev.create_qp(init);
  ASSERT_TRUE(qp.ok()) << qp.error().message;
  auto ah = dev.create_ah(ep.address());
  ASSERT_TRUE(ah.ok());
  auto send_raw = [&](const std::vector<std::byte>& d) {
    rdma::WorkRequest wr;
    std::vector<std::byte> copy = d;
    wr.opcode = rdma::Opcode::kSend;
    wr.ah = ah->get();
    wr.local = copy.data();
    wr.length = static_cast<uint32_t>(copy.size());
    wr.flags = rdma::kInline | rdma::kSignaled;
    rdma::WorkRequest* bad = nullptr;
    ASSERT_EQ((*qp)->post_send(&wr, &bad), 0);
    rdma::Completion wc[4];
    while ((*cq)->poll(wc, 4) == 0) {
    }
    for (int i = 0; i < 50; ++i) c.loop.run_once();
  };
  uint32_t seq = 0;  // datagram numbers, as the sending endpoint would give them
  auto datagram = [&seq](uint16_t magic, uint16_t src, uint8_t count, std::vector<MsgHeader> msgs, size_t pad = 8) {
    std::vector<std::byte> d(sizeof(DatagramHeader));
    DatagramHeader dh{magic, kVersion, count, src, 0, ++seq, 0};
    std::memcpy(d.data(), &dh, sizeof dh);
    for (auto& m : msgs) {
      size_t at = d.size();
      d.resize(at + sizeof m + pad);
      std::memcpy(d.data() + at, &m, sizeof m);
    }
    return d;
  };
  using M = Malformed;
  auto count = [&](M m) { return ep.stats().malformed[static_cast<unsigned>(m)]; };
  MsgHeader good{Kind::kOneway, kEcho, WireStatus::kOk, 0, 8, 0};
  send_raw(std::vector<std::byte>(5));
  EXPECT_EQ(count(M::kShort), 1u);
  send_raw(datagram(0xdead, 0, 1, {good}));
  EXPECT_EQ(count(M::kMagic), 1u);
  send_raw(datagram(kMagic, 999, 1, {good}));
  EXPECT_EQ(count(M::kSource), 1u);
  send_raw(datagram(kMagic, 0, 0, {good}));
  send_raw(datagram(kMagic, 0, 3, {good}));
  EXPECT_EQ(count(M::kCount), 2u);
  MsgHeader long_len = good;
  long_len.len = 1000;
  send_raw(datagram(kMagic, 0, 1, {long_len}));
  long_len.len = UINT32_MAX;
  send_raw(datagram(kMagic, 0, 1, {long_len}));
  EXPECT_EQ(count(M::kLength), 2u);
  MsgHeader bad_kind = good;
  bad_kind.kind = static_cast<Kind>(9);
  send_raw(datagram(kMagic, 0, 1, {bad_kind}));
  EXPECT_EQ(count(M::kKind), 1u);
  MsgHeader bad_handler = good;
  bad_handler.handler = 200;
  send_raw(datagram(kMagic, 0, 2, {good, bad_handler}));
  EXPECT_EQ(count(M::kHandler), 1u);
  EXPECT_EQ(ep.stats().requests_handled, 0u) << "a datagram with one bad message is dropped whole";
  MsgHeader forged{Kind::kReply, 0, WireStatus::kOk, 0, 8, 0x100000005ull};
  send_raw(datagram(kMagic, 0, 1, {forged}));
  EXPECT_EQ(ep.stats().stale_replies, 1u);
  EXPECT_EQ(ep.stats().malformed_total(), 9u);
  // The same datagram twice (a duplicating network): handled once; a copy
  // older than the window is dropped too.
  const auto once = datagram(kMagic, 0, 1, {good});
  const uint64_t handled = ep.stats().requests_handled;
  send_raw(once);
  send_raw(once);
  EXPECT_EQ(ep.stats().requests_handled, handled + 1);
  EXPECT_EQ(ep.stats().duplicates, 1u);
  for (int i = 0; i < 70; ++i) (void)datagram(kMagic, 0, 1, {good});  // numbers the peer used meanwhile
  send_raw(datagram(kMagic, 0, 1, {good}));
  send_raw(once);
  EXPECT_EQ(ep.stats().requests_handled, handled + 2);
  EXPECT_EQ(ep.stats().duplicates, 2u);

  // Still serving.
  c.workers[0]->spawn([](Endpoint& ep) -> Task<void> {
    Batch b(ep);
    uint64_t v = 3, out = 0;
    Reply r{reinterpret_cast<std::byte*>(&out), 8};
    b.call(1, kEcho, bytes_of(v), &r);
    EXPECT_TRUE(co_await b.send());
    EXPECT_EQ(out, 3u);
  }(*c.eps[2]));
  c.run_until_idle();
}

TEST(Rpc, ForgedReplyFromTheWrongPeerIsIgnored) {
  Cluster c(3, 1);
  // Endpoint 2 answers a call that endpoint 0 made to endpoint 1 by
  // replaying its cookie: the reply must be rejected as stale.
  uint64_t cookie = 0;
  ASSERT_TRUE(c.eps[1]->register_handler(kPark, "park", [&](Request& r) { cookie = r.defer().cookie; }).ok());
  bool done = false;
  c.workers[0]->spawn([](Endpoint& ep, bool& done) -> Task<void> {
    Batch b(ep);
    uint64_t v = 1, out = 0;
    Reply r{reinterpret_cast<std::byte*>(&out), 8};
    b.call(1, kPark, bytes_of(v), &r);
    co_await b.send();
    done = true;
  }(*c.eps[0], done));
  for (int i = 0; i < 20; ++i) c.loop.run_once();
  ASSERT_NE(cookie, 0u);
  uint64_t v = 666;
  EXPECT_TRUE(c.eps[2]->reply(Deferred{0, cookie, Kind::kRequest}, bytes_of(v)));
  for (int i = 0; i < 20; ++i) c.loop.run_once();
  EXPECT_FALSE(done);
  EXPECT_EQ(c.eps[0]->stats().stale_replies, 1u);
  EXPECT_TRUE(c.eps[1]->reply(Deferred{0, cookie, Kind::kRequest}, bytes_of(v)));
  c.run_until_idle();
  EXPECT_TRUE(done);
}

// A call times out while the server holds its request; the next call takes
// the same slot of the call table (to the same server); then the old call's
// reply arrives. It carries the old generation in its cookie, so it is stale:
// the newer call must stay pending and later get its own reply.
TEST(Rpc, ALateReplyNeverCompletesTheCallThatReusedItsSlot) {
  // The first call waits out the whole timeout; the second must not time out
  // in the few ms the test needs (a loaded machine preempts): 50 ms.
  Cluster c(2, 1);
  std::vector<Deferred> parked;
  ASSERT_TRUE(c.eps[1]->register_handler(kPark, "park", [&](Request& r) { parked.push_back(r.defer()); }).ok());
  uint64_t second_out = 0;
  Reply second{reinterpret_cast<std::byte*>(&second_out), 8};
  bool first_timed_out = false, second_done = false;
  c.workers[0]->spawn([](Endpoint& ep, Reply& second, bool& first_timed_out, bool& second_done) -> Task<void> {
    {
      Batch b(ep);
      uint64_t v = 1, out = 0;
      Reply r{reinterpret_cast<std::byte*>(&out), 8};
      EXPECT_TRUE(b.call(1, kPark, bytes_of(v), &r));
      EXPECT_FALSE(co_await b.send());
      EXPECT_EQ(r.status, CallStatus::kTimeout);
      first_timed_out = true;
    }
    Batch b(ep);
    uint64_t v = 2;
    EXPECT_TRUE(b.call(1, kPark, bytes_of(v), &second));
    co_await b.send();
    second_done = true;
  }(*c.eps[0], second, first_timed_out, second_done));
  uint64_t end = env::tsc() + env::ns_to_tsc(2'000'000'000);
  while (parked.size() < 2 && env::tsc() < end) c.loop.run_once();
  ASSERT_TRUE(first_timed_out);
  ASSERT_EQ(parked.size(), 2u);
  ASSERT_EQ(static_cast<uint32_t>(parked[0].cookie), static_cast<uint32_t>(parked[1].cookie))
      << "the second call reuses the first call's slot";
  ASSERT_NE(parked[0].cookie, parked[1].cookie) << "with a new generation";

  const uint64_t stale = 111, fresh = 222;
  EXPECT_TRUE(c.eps[1]->reply(parked[0], bytes_of(stale)));
  c.run_for_ms(2);
  EXPECT_FALSE(second_done) << "the late reply completed the call that reused its slot";
  EXPECT_EQ(second.status, CallStatus::kPending);
  EXPECT_EQ(second_out, 0u);
  EXPECT_EQ(c.eps[0]->stats().stale_replies, 1u);

  EXPECT_TRUE(c.eps[1]->reply(parked[1], bytes_of(fresh)));
  c.run_until_idle();
  EXPECT_TRUE(second_done);
  EXPECT_EQ(second.status, CallStatus::kOk);
  EXPECT_EQ(second_out, fresh);
  EXPECT_EQ(c.eps[0]->calls_in_flight(), 0u);
}

TEST(Rpc, SetupErrorsNameTheProblem) {
  Cluster c(1, 1);
  auto dup = c.eps[0]->register_handler(kEcho, "again", [](Request&) {});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().message.find("already taken by 'echo'"), std::string::npos);
  EXPECT_FALSE(c.eps[0]->register_handler(64, "x", [](Request&) {}).ok());
  auto far = c.eps[0]->connect(5, c.eps[0]->address());
  ASSERT_FALSE(far.ok());
  EXPECT_NE(far.error().message.find("peer id 5"), std::string::npos);
  auto bad = Endpoint::create(*c.nodes[0], 3, 2);
  ASSERT_FALSE(bad.ok());
  // Payload larger than a datagram can carry is refused at add time.
  c.workers[0]->spawn([](Endpoint& ep) -> Task<void> {
    Batch b(ep);
    std::vector<std::byte> huge(ep.max_payload() + 1);
    Reply r;
    EXPECT_FALSE(b.call(0, kEcho, huge, &r));
    EXPECT_EQ(r.status, CallStatus::kSendFailed);
    EXPECT_FALSE(b.call(7, kEcho, {}, &r)) << "unknown destination";
    EXPECT_TRUE(co_await b.send());
    EXPECT_EQ(ep.calls_in_flight(), 0u);
  }(*c.eps[0]));
  c.run_until_idle();
}

// Receive buffers follow the credits and the number of endpoints; sizes no
// device (or the cap) can hold are refused with the computed number, and a
// cluster names its configuration keys.
TEST(Rpc, ReceiveBuffersBeyondTheLimitsAreRefusedWithTheNumbers) {
  rdma::DeviceCaps caps;
  caps.max_recv_wr = 4096;
  caps.max_send_wr = 1 << 14;
  caps.max_cqe = 1 << 20;
  caps.max_msg_size = 4096;
  EndpointConfig cfg;
  EXPECT_EQ(Endpoint::recv_buffers_needed(cfg, 100), 1616u);
  EXPECT_TRUE(Endpoint::check_config(caps, cfg, 255).ok()) << "2 x 8 x 255 + 16 = 4096 fit";
  auto over = Endpoint::check_config(caps, cfg, 256);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message.find("4112 receive buffers"), std::string::npos) << over.error().message;
  EXPECT_NE(over.error().message.find("(4096)"), std::string::npos) << over.error().message;
  cfg.credits = 0;
  ASSERT_FALSE(Endpoint::check_config(caps, cfg, 2).ok());
  EXPECT_NE(Endpoint::check_config(caps, cfg, 2).error().message.find("credits = 0"), std::string::npos);
  cfg.credits = 8;
  caps.max_cqe = 2000;
  ASSERT_FALSE(Endpoint::check_config(caps, cfg, 2).ok()) << "2 x 1024 send buffers + 48 receive buffers";

  cluster::ClusterConfig cc;
  cc.nodes = 4;
  cc.workers_per_node = 1024;
  cc.rpc.credits = 4;
  auto cl = cluster::Cluster::create_embedded(cc);
  ASSERT_FALSE(cl.ok());
  const std::string& msg = cl.error().message;
  for (const char* part : {"cluster.nodes (4)", "cluster.workers_per_node (1024)", "rpc.credits = 4", "32784 receive buffers"})
    EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;
}
