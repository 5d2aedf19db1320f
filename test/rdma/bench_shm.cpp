// Micro-benchmarks of the shm driver with zero latency: what the framework's
// own software costs per verb. Never asserts a time (suite perf).
//   Read64Batch32/inproc|process  64-byte READs posted 32 per doorbell, only
//                                 the last signaled; items = READs
//   SendRecvEcho                  request + reply between two UD QPs of two
//                                 nodes, both polled on this thread; items =
//                                 round trips
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "rdma/rdma.hpp"
#include "topology.hpp"

namespace rdtx::rdma::test {
namespace {

constexpr int kBatch = 32;

struct Local {
  std::unique_ptr<Device> dev;
  std::unique_ptr<DeviceMemory> mem;
  MemoryRegion mr{};
};

Local open_local(const std::string& fabric, uint32_t node) {
  Local l;
  OpenOptions oo;
  oo.fabric = fabric;
  oo.node_id = node;
  l.dev = open_device("shm", oo).value();
  l.mem = l.dev->alloc_memory(1 << 20).value();
  std::memset(l.mem->data(), 1, 1 << 20);
  l.mr = *l.dev->reg_mr(l.mem->data(), 1 << 20, kAccessAll);
  return l;
}

void read_batches(benchmark::State& state, Device& dev, const MemoryRegion& local, uint64_t raddr, uint32_t rkey,
                  const QpAddress& target, Topology* topo) {
  auto cq = dev.create_cq(64).value();
  QpInit init;
  init.send_cq = cq.get();
  init.max_send_wr = 64;
  auto qp = dev.create_qp(init).value();
  if (topo != nullptr) {
    auto remote = topo->remote_rc(qp->address());
    if (!remote.ok()) return state.SkipWithError(remote.error().message.c_str());
    (void)qp->connect(remote->second);
  } else {
    (void)qp->connect(target);
  }
  WorkRequest wrs[kBatch];
  for (int i = 0; i < kBatch; ++i) {
    wrs[i].opcode = Opcode::kRead;
    wrs[i].local = static_cast<uint8_t*>(local.addr) + i * 64;
    wrs[i].length = 64;
    wrs[i].lkey = local.lkey;
    wrs[i].remote_addr = raddr + i * 64;
    wrs[i].rkey = rkey;
    wrs[i].next = i + 1 < kBatch ? &wrs[i + 1] : nullptr;
  }
  wrs[kBatch - 1].flags = kSignaled;
  Completion wc[4];
  for (auto _ : state) {
    WorkRequest* bad = nullptr;
    if (qp->post_send(wrs, &bad) != 0) return state.SkipWithError("post_send failed");
    while (cq->poll(wc, 4) == 0) {
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

void BM_Read64Batch32_inproc(benchmark::State& state) {
  std::string fabric = "bench" + std::to_string(getpid());
  Local a = open_local(fabric, 0), b = open_local(fabric, 1);
  auto cq = b.dev->create_cq(4).value();
  QpInit init;
  init.send_cq = cq.get();
  init.max_send_wr = 4;
  auto target = b.dev->create_qp(init).value();
  read_batches(state, *a.dev, a.mr, b.mr.remote_addr(), b.mr.rkey, target->address(), nullptr);
}
BENCHMARK(BM_Read64Batch32_inproc);

void BM_Read64Batch32_process(benchmark::State& state) {
  auto topo = Topology::start({"shm_process", "shm", true, ""});
  if (!topo.ok()) return state.SkipWithError(topo.error().message.c_str());
  Device& dev = (*topo)->local();
  auto mem = dev.alloc_memory(1 << 16).value();
  MemoryRegion mr = *dev.reg_mr(mem->data(), 1 << 16, kAccessAll);
  read_batches(state, dev, mr, (*topo)->mem.addr, (*topo)->mem.rkey, QpAddress{}, topo->get());
}
BENCHMARK(BM_Read64Batch32_process);

struct Ud {
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<QueuePair> qp;
  std::unique_ptr<AddressHandle> to_peer;
};

Ud make_ud(Device& dev) {
  Ud u;
  u.cq = dev.create_cq(256).value();
  QpInit init;
  init.type = QpType::kUd;
  init.send_cq = u.cq.get();
  init.recv_cq = u.cq.get();
  init.max_send_wr = 64;
  init.max_recv_wr = 64;
  u.qp = dev.create_qp(init).value();
  return u;
}

void BM_SendRecvEcho(benchmark::State& state) {
  std::string fabric = "benchud" + std::to_string(getpid());
  Local a = open_local(fabric, 0), b = open_local(fabric, 1);
  Ud ua = make_ud(*a.dev), ub = make_ud(*b.dev);
  ua.to_peer = a.dev->create_ah(ub.qp->address()).value();
  ub.to_peer = b.dev->create_ah(ua.qp->address()).value();
  const uint32_t kMsg = 64;
  auto recv_req = [](const Local& l, uint64_t i) {
    RecvRequest r;
    r.wr_id = i;
    r.addr = static_cast<uint8_t*>(l.mr.addr) + 65536 + (i % 64) * 1024;
    r.length = 1024;
    r.lkey = l.mr.lkey;
    return r;
  };
  RecvRequest* rbad = nullptr;
  for (uint64_t i = 0; i < 64; ++i) {
    RecvRequest ra = recv_req(a, i), rb = recv_req(b, i);
    ua.qp->post_recv(&ra, &rbad);
    ub.qp->post_recv(&rb, &rbad);
  }
  auto send_req = [&](const Local& l, const Ud& u, uint64_t n) {
    WorkRequest s;
    s.wr_id = n;
    s.opcode = Opcode::kSend;
    s.flags = (n % 32 == 31) ? uint32_t{kSignaled} : 0u;  // signal now and then to free send slots
    s.local = l.mr.addr;
    s.length = kMsg;
    s.lkey = l.mr.lkey;
    s.ah = u.to_peer.get();
    return s;
  };
  // Polls until a RECV arrives, reposting its buffer.
  auto await_recv = [&](const Local& l, Ud& u) {
    Completion wc[8];
    for (;;) {
      int n = u.cq->poll(wc, 8);
      for (int k = 0; k < n; ++k) {
        if (wc[k].opcode != Opcode::kRecv) continue;
        RecvRequest r = recv_req(l, wc[k].wr_id);
        u.qp->post_recv(&r, &rbad);
        return;
      }
    }
  };
  uint64_t n = 0;
  for (auto _ : state) {
    WorkRequest req = send_req(a, ua, n), rep = send_req(b, ub, n);
    WorkRequest* bad = nullptr;
    ua.qp->post_send(&req, &bad);
    await_recv(b, ub);
    ub.qp->post_send(&rep, &bad);
    await_recv(a, ua);
    ++n;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SendRecvEcho);

}  // namespace
}  // namespace rdtx::rdma::test

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], rdtx::rdma::test::kPeerAgentFlag) == 0)
    return rdtx::rdma::test::peer_agent_main(argc, argv);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
