// lib/cluster: every worker reaches every node by one-sided verbs (its own
// node through loopback) and every other worker by RPC.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>

#include "cluster/cluster.hpp"
#include "env/tsc.hpp"
#include "runtime/cq_poller.hpp"
#include "runtime/task.hpp"

using namespace rdtx;
using runtime::Task;

namespace {

// A counter on one node, registered in the device context of each of the
// node's workers (by worker index): keys are per context.
struct Counters {
  std::unique_ptr<rdma::DeviceMemory> mem;
  std::vector<rdma::Device*> contexts;
  std::vector<rdma::MemoryRegion> mrs;
};

Task<void> bump_everywhere(cluster::WorkerContext& w, std::vector<Counters>& counters, int rounds, int& done) {
  auto* buf = static_cast<uint64_t*>(w.scratch->data());
  for (int r = 0; r < rounds; ++r) {
    for (uint32_t n = 0; n < counters.size(); ++n) {
      rdma::WorkRequest faa;
      faa.opcode = rdma::Opcode::kFetchAdd;
      faa.local = buf;
      faa.length = 8;
      faa.lkey = w.scratch_mr.lkey;
      // The QP reaches node n's worker of the same index: its context's key.
      faa.remote_addr = counters[n].mrs[w.index].remote_addr(0);
      faa.rkey = counters[n].mrs[w.index].rkey;
      faa.compare_add = 1;
      // Every QP to the node in turn (cluster.qps_per_node).
      bool ok = co_await runtime::post_and_wait(w.qp_to(n, static_cast<uint32_t>(r)), &faa, &faa);
      EXPECT_TRUE(ok);
    }
  }
  ++done;
}

// Every worker adds 1 to a counter on every node `rounds` times, one-sided;
// each counter must end at workers x rounds.
void bump_everywhere_and_check(cluster::Cluster& c, int rounds) {
  const uint32_t nodes = c.nodes();
  std::vector<Counters> counters(nodes);
  for (uint32_t n = 0; n < nodes; ++n) {
    auto mem = c.node(n).device->alloc_memory(4096);
    ASSERT_TRUE(mem.ok());
    counters[n].mem = std::move(*mem);
    std::memset(counters[n].mem->data(), 0, 4096);
    counters[n].contexts = c.contexts(n);
    for (rdma::Device* ctx : counters[n].contexts) {
      auto mr = ctx->reg_mr(counters[n].mem->data(), 4096, rdma::kAccessAll);
      ASSERT_TRUE(mr.ok());
      counters[n].mrs.push_back(*mr);
    }
  }
  int done = 0;
  for (uint32_t id = 0; id < c.workers(); ++id)
    c.worker(id).worker->spawn(bump_everywhere(c.worker(id), counters, rounds, done));
  auto rs = c.run(0, runtime::IdlePolicy::kSpin, /*stop_when_idle=*/true);
  ASSERT_TRUE(rs.ok()) << rs.error().message;
  EXPECT_EQ(rs->reason, runtime::StopReason::kIdle);
  EXPECT_EQ(done, static_cast<int>(c.workers()));
  for (uint32_t n = 0; n < nodes; ++n)
    EXPECT_EQ(*static_cast<uint64_t*>(counters[n].mem->data()), uint64_t{c.workers()} * rounds) << "node " << n;
  for (uint32_t n = 0; n < nodes; ++n)
    for (size_t i = 0; i < counters[n].mrs.size(); ++i)
      ASSERT_TRUE(counters[n].contexts[i]->dereg_mr(counters[n].mrs[i]).ok());
}

cluster::ClusterConfig three_nodes_two_workers() {
  cluster::ClusterConfig cfg;
  cfg.nodes = 3;
  cfg.workers_per_node = 2;
  cfg.rpc.recv_buffers = 64;
  cfg.rpc.send_buffers = 64;
  return cfg;
}

}  // namespace

TEST(Cluster, EveryWorkerReachesEveryNodeOneSided) {
  auto c = cluster::Cluster::create_embedded(three_nodes_two_workers());
  ASSERT_TRUE(c.ok()) << c.error().message;
  bump_everywhere_and_check(**c, 100);
}

// Each worker has a device context of its own (cluster.context_per_worker),
// or, when asked, shares its node's.
TEST(Cluster, EachWorkerHasItsOwnDeviceContextUnlessShared) {
  for (bool own : {true, false}) {
    cluster::ClusterConfig cfg = three_nodes_two_workers();
    cfg.context_per_worker = own;
    auto c = cluster::Cluster::create_embedded(cfg);
    ASSERT_TRUE(c.ok()) << c.error().message;
    for (uint32_t n = 0; n < 3; ++n) {
      std::vector<rdma::Device*> ctx = (*c)->contexts(n);
      ASSERT_EQ(ctx.size(), 2u);
      rdma::Device* node_dev = (*c)->node(n).device.get();
      if (own) {
        EXPECT_NE(ctx[0], ctx[1]);
        EXPECT_NE(ctx[0], node_dev);
        EXPECT_NE(ctx[1], node_dev);
      } else {
        EXPECT_EQ(ctx[0], node_dev);
        EXPECT_EQ(ctx[1], node_dev);
      }
    }
    bump_everywhere_and_check(**c, 10);
  }
}

// Several RC QPs per (worker, node), as an emulated larger cluster has: each
// is connected to its own lane at the paired worker, and every one works.
TEST(Cluster, EveryQpOfEveryLaneIsConnectedToItsLane) {
  cluster::ClusterConfig cfg = three_nodes_two_workers();
  cfg.qps_per_node = 3;
  auto c = cluster::Cluster::create_embedded(cfg);
  ASSERT_TRUE(c.ok()) << c.error().message;
  for (uint32_t id = 0; id < (*c)->workers(); ++id) {
    cluster::WorkerContext& w = (*c)->worker(id);
    ASSERT_EQ(w.qps.size(), 9u);
    for (uint32_t n = 0; n < 3; ++n)
      for (uint32_t lane = 0; lane < 3; ++lane) {
        EXPECT_EQ(w.qp_to(n, lane + 3), w.qp_to(n, lane)) << "users wrap around the lanes";
        const cluster::WorkerContext& peer = (*c)->worker(n, w.index);
        const rdma::QpAddress want = peer.qp_to(w.node, lane)->address();
        const rdma::QpAddress got = w.peer_qps[w.qp_index(n, lane)];
        EXPECT_TRUE(want == got) << "worker " << id << " node " << n << " lane " << lane;
      }
  }
  bump_everywhere_and_check(**c, 9);  // round r uses lane r mod 3
  cfg.qps_per_node = 0;
  auto bad = cluster::Cluster::create_embedded(cfg);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("qps_per_node (0)"), std::string::npos);
}

TEST(Cluster, EveryWorkerCallsEveryWorker) {
  cluster::ClusterConfig cfg;
  cfg.nodes = 2;
  cfg.workers_per_node = 3;
  cfg.rpc.recv_buffers = 64;
  cfg.rpc.send_buffers = 64;
  auto c = cluster::Cluster::create_embedded(cfg);
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto& cl = **c;
  for (uint32_t id = 0; id < cl.workers(); ++id)
    ASSERT_TRUE(cl.worker(id).rpc->register_handler(1, "whoami", [id](rpc::Request& r) {
                   std::memcpy(r.reply_buffer().data(), &id, 4);
                   r.set_reply_len(4);
                 }).ok());
  int checked = 0;
  for (uint32_t id = 0; id < cl.workers(); ++id)
    cl.worker(id).worker->spawn([](cluster::Cluster& cl, uint32_t self, int& checked) -> Task<void> {
      rpc::Batch b(*cl.worker(self).rpc);
      std::vector<uint32_t> who(cl.workers(), ~0u);
      std::vector<rpc::Reply> r(cl.workers());
      for (uint32_t p = 0; p < cl.workers(); ++p) {
        r[p] = {reinterpret_cast<std::byte*>(&who[p]), 4};
        b.call(p, 1, {}, &r[p]);
      }
      EXPECT_TRUE(co_await b.send());
      for (uint32_t p = 0; p < cl.workers(); ++p) EXPECT_EQ(who[p], p);
      ++checked;
    }(cl, id, checked));
  for (int i = 0; i < 100000 && checked < 6; ++i) cl.poll_all();
  EXPECT_EQ(checked, 6);
}

// Removing a member (doc/membership.md "Refusing the old configuration"):
// every worker disconnects its QPs to the removed node on its own thread,
// so that node's one-sided requests to the others fail and touch nothing,
// while the others still reach each other.
TEST(Cluster, ARemovedNodesOneSidedRequestsFail) {
  auto cl = cluster::Cluster::create_embedded(three_nodes_two_workers());
  ASSERT_TRUE(cl.ok()) << cl.error().message;
  cluster::Cluster& c = **cl;
  c.watch_removals();
  // A counter on node 0 (worker 0's context: the QPs of worker 0 of every
  // node reach it).
  auto mem = c.node(0).device->alloc_memory(4096);
  ASSERT_TRUE(mem.ok());
  std::memset((*mem)->data(), 0, 4096);
  auto mr = c.worker(0, 0).device->reg_mr((*mem)->data(), 4096, rdma::kAccessAll);
  ASSERT_TRUE(mr.ok());
  auto* counter = static_cast<uint64_t*>((*mem)->data());
  auto faa_from = [&](uint32_t node) {
    cluster::WorkerContext& w = c.worker(node, 0);
    rdma::WorkRequest faa;
    faa.opcode = rdma::Opcode::kFetchAdd;
    faa.flags = rdma::kSignaled;
    faa.local = w.scratch->data();
    faa.length = 8;
    faa.lkey = w.scratch_mr.lkey;
    faa.remote_addr = mr->remote_addr(0);
    faa.rkey = mr->rkey;
    faa.compare_add = 1;
    rdma::WorkRequest* bad = nullptr;
    if (w.qp_to(0)->post_send(&faa, &bad) != 0) return rdma::Status::kLocalQpOperationError;
    rdma::Completion wc;
    const uint64_t end = env::tsc() + env::ns_to_tsc(2'000'000'000);
    while (env::tsc() < end)
      if (w.cq->poll(&wc, 1) == 1) return wc.status;
    return rdma::Status::kLocalLengthError;
  };
  EXPECT_EQ(faa_from(2), rdma::Status::kSuccess);
  EXPECT_EQ(*counter, 1u);
  // Nobody polls: nobody has disconnected yet when the wait ends.
  EXPECT_EQ(c.remove_nodes({2}, 1'000'000), c.workers());
  EXPECT_EQ(c.removed_nodes(), uint64_t{1} << 2);
  c.poll_all();
  EXPECT_EQ(c.removal_pending(), 0u) << "every worker applied the removal in one pass";
  EXPECT_EQ(faa_from(2), rdma::Status::kGeneralError) << "the removed node reached node 0";
  EXPECT_EQ(*counter, 1u);
  EXPECT_EQ(faa_from(1), rdma::Status::kSuccess) << "a member no longer reaches node 0";
  EXPECT_EQ(*counter, 2u);
  ASSERT_TRUE(c.worker(0, 0).device->dereg_mr(*mr).ok());
}

TEST(Cluster, BadShapeIsAnError) {
  cluster::ClusterConfig cfg;
  cfg.nodes = 0;
  auto c = cluster::Cluster::create_embedded(cfg);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("nodes (0)"), std::string::npos);
  cfg.nodes = 1;
  cfg.devargs = "shm,bogus=1";
  c = cluster::Cluster::create_embedded(cfg);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("bogus"), std::string::npos);
}
