// The shm latency model (devargs latency_ns, bw_gbps), seen through the API:
// effects and completions no earlier than the model says, and not absurdly
// later (loosely: the machine is shared and noisy). Two nodes in one
// process, so the test can watch the target memory directly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "rdma/rdma.hpp"
#include "test_util.hpp"

namespace rdtx::rdma::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::nanoseconds;

struct Node {
  std::unique_ptr<Device> dev;
  std::unique_ptr<DeviceMemory> mem;
  MemoryRegion mr{};
  std::unique_ptr<CompletionQueue> cq;
  uint8_t* buf(size_t off = 0) const { return static_cast<uint8_t*>(mr.addr) + off; }
};

class ShmLatencyModel : public ::testing::Test {
 protected:
  void open(const std::string& devargs, uint32_t sq_depth = 64) {
    static std::atomic<unsigned> seq{0};
    std::string fabric = "lat" + std::to_string(getpid()) + "x" + std::to_string(seq.fetch_add(1));
    for (uint32_t id : {0u, 1u}) {
      Node& n = id == 0 ? a_ : b_;
      OpenOptions oo;
      oo.node_id = id;
      oo.fabric = fabric;
      auto dev = open_device(devargs, oo);
      ASSERT_TRUE(dev.ok()) << dev.error().message;
      n.dev = std::move(*dev);
      auto mem = n.dev->alloc_memory(1 << 20);
      ASSERT_TRUE(mem.ok());
      n.mem = std::move(*mem);
      std::memset(n.mem->data(), 0, 1 << 20);
      auto mr = n.dev->reg_mr(n.mem->data(), 1 << 20, kAccessAll);
      ASSERT_TRUE(mr.ok());
      n.mr = *mr;
      auto cq = n.dev->create_cq(256);
      ASSERT_TRUE(cq.ok());
      n.cq = std::move(*cq);
    }
    QpInit init;
    init.send_cq = a_.cq.get();
    init.max_send_wr = sq_depth;
    auto qa = a_.dev->create_qp(init);
    init.send_cq = b_.cq.get();
    auto qb = b_.dev->create_qp(init);
    ASSERT_TRUE(qa.ok() && qb.ok());
    qp_ = std::move(*qa);
    peer_qp_ = std::move(*qb);
    ASSERT_TRUE(qp_->connect(peer_qp_->address()).ok());
    ASSERT_TRUE(peer_qp_->connect(qp_->address()).ok());
  }

  WorkRequest wr(Opcode op, size_t local_off, size_t remote_off, uint32_t len, uint64_t id = 0) const {
    WorkRequest w;
    w.wr_id = id;
    w.opcode = op;
    w.local = a_.buf(local_off);
    w.length = len;
    w.lkey = a_.mr.lkey;
    w.remote_addr = b_.mr.remote_addr(remote_off);
    w.rkey = b_.mr.rkey;
    return w;
  }

  // Posts and polls until the completion; returns the time it took.
  nanoseconds timed(WorkRequest w, Status* st = nullptr) {
    w.flags |= kSignaled;
    WorkRequest* bad = nullptr;
    auto t0 = Clock::now();
    EXPECT_EQ(qp_->post_send(&w, &bad), 0);
    Completion c{};
    while (a_.cq->poll(&c, 1) == 0) {
    }
    auto dt = Clock::now() - t0;
    if (st != nullptr) *st = c.status;
    return std::chrono::duration_cast<nanoseconds>(dt);
  }

  static nanoseconds median(std::vector<nanoseconds> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }

  Node a_, b_;
  std::unique_ptr<QueuePair> qp_, peer_qp_;
};

TEST_F(ShmLatencyModel, ReadCompletesAfterARoundTrip) {
  open("shm,latency_ns=2000");
  std::vector<nanoseconds> samples;
  for (int i = 0; i < 300; ++i) {
    Status st;
    samples.push_back(timed(wr(Opcode::kRead, 0, 64, 64), &st));
    ASSERT_EQ(st, Status::kSuccess);
    ASSERT_GE(samples.back(), microseconds(4)) << "sample " << i << " completed before the round trip";
  }
  EXPECT_LT(median(samples), microseconds(1000));
}

TEST_F(ShmLatencyModel, WriteTakesEffectAfterTheOneWayDelay) {
  open("shm,latency_ns=2000");
  auto* target = reinterpret_cast<uint64_t*>(b_.buf(128));
  uint64_t one = 1;
  std::memcpy(a_.buf(0), &one, 8);
  WorkRequest w = wr(Opcode::kWrite, 0, 128, 8, 7);
  w.flags = kSignaled;
  WorkRequest* bad = nullptr;
  auto t0 = Clock::now();
  ASSERT_EQ(qp_->post_send(&w, &bad), 0);
  EXPECT_EQ(std::atomic_ref<uint64_t>(*target).load(std::memory_order_acquire), 0u) << "landed at post time";
  Clock::time_point landed{}, completed{};
  Completion c{};
  while (completed == Clock::time_point{}) {
    // One poll may both execute the WRITE and return its completion when the
    // thread was descheduled for a round trip: look at memory first.
    bool got = a_.cq->poll(&c, 1) == 1;
    auto now = Clock::now();
    if (landed == Clock::time_point{} && std::atomic_ref<uint64_t>(*target).load(std::memory_order_acquire) == 1)
      landed = now;
    if (got) completed = now;
  }
  ASSERT_NE(landed, Clock::time_point{}) << "completed before it took effect";
  EXPECT_GE(landed - t0, microseconds(2));
  EXPECT_GE(completed - t0, microseconds(4));
  EXPECT_LE(landed, completed);
  EXPECT_LT(completed - t0, microseconds(1000));
}

TEST_F(ShmLatencyModel, SendIsVisibleAfterTheOneWayDelay) {
  open("shm,latency_ns=2000");
  QpInit init;
  init.type = QpType::kUd;
  init.send_cq = a_.cq.get();
  init.recv_cq = a_.cq.get();
  init.max_send_wr = 16;
  init.max_recv_wr = 16;
  auto sender = a_.dev->create_qp(init);
  init.send_cq = b_.cq.get();
  init.recv_cq = b_.cq.get();
  auto receiver = b_.dev->create_qp(init);
  ASSERT_TRUE(sender.ok() && receiver.ok());
  auto ah = a_.dev->create_ah((*receiver)->address());
  ASSERT_TRUE(ah.ok()) << ah.error().message;
  std::vector<nanoseconds> samples;
  for (int i = 0; i < 100; ++i) {
    RecvRequest r;
    r.wr_id = i;
    r.addr = b_.buf(0);
    r.length = 4096;
    r.lkey = b_.mr.lkey;
    RecvRequest* rbad = nullptr;
    ASSERT_EQ((*receiver)->post_recv(&r, &rbad), 0);
    fill_pattern(a_.buf(0), 256, i);
    WorkRequest s;
    s.wr_id = i;
    s.opcode = Opcode::kSend;
    s.flags = kSignaled;
    s.local = a_.buf(0);
    s.length = 256;
    s.lkey = a_.mr.lkey;
    s.ah = ah->get();
    WorkRequest* bad = nullptr;
    auto t0 = Clock::now();
    ASSERT_EQ((*sender)->post_send(&s, &bad), 0);
    Completion c{};
    while (b_.cq->poll(&c, 1) == 0) {
    }
    samples.push_back(std::chrono::duration_cast<nanoseconds>(Clock::now() - t0));
    ASSERT_GE(samples.back(), microseconds(2)) << "message " << i << " visible before the one-way delay";
    ASSERT_EQ(c.status, Status::kSuccess);
    ASSERT_TRUE(check_pattern(b_.buf(0), 256, i));
    ASSERT_EQ(poll_for(*a_.cq, 1).size(), 1u) << "send completion";
  }
  EXPECT_LT(median(samples), microseconds(1000));
}

TEST_F(ShmLatencyModel, BandwidthAddsTransferTimeAndSerialisesAQp) {
  open("shm,bw_gbps=8");  // 1 byte per ns
  EXPECT_GE(timed(wr(Opcode::kWrite, 0, 0, 65536)), microseconds(65));
  // Two 32 KiB writes back to back share the wire: the second completes
  // after both transfers.
  WorkRequest w1 = wr(Opcode::kWrite, 0, 0, 32768, 1), w2 = wr(Opcode::kWrite, 32768, 32768, 32768, 2);
  w2.flags = kSignaled;
  w1.next = &w2;
  WorkRequest* bad = nullptr;
  auto t0 = Clock::now();
  ASSERT_EQ(qp_->post_send(&w1, &bad), 0);
  auto wc = poll_for(*a_.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_GE(Clock::now() - t0, microseconds(65));
}

TEST_F(ShmLatencyModel, InlinePayloadIsCopiedAtPostTime) {
  open("shm,latency_ns=5000");
  uint8_t payload[32];
  fill_pattern(payload, sizeof payload, 3);
  WorkRequest w = wr(Opcode::kWrite, 0, 512, sizeof payload, 1);
  w.flags = kSignaled | kInline;
  w.local = payload;
  WorkRequest* bad = nullptr;
  ASSERT_EQ(qp_->post_send(&w, &bad), 0);
  std::memset(payload, 0, sizeof payload);  // before the write takes effect
  ASSERT_EQ(poll_for(*a_.cq, 1).size(), 1u);
  EXPECT_TRUE(check_pattern(b_.buf(512), sizeof payload, 3));
}

TEST_F(ShmLatencyModel, OrderIsKeptOnAQp) {
  open("shm,latency_ns=1000,bw_gbps=100");
  std::vector<WorkRequest> wrs;
  wrs.reserve(33);
  for (int k = 0; k < 32; ++k) {
    std::memset(a_.buf(k * 64), k + 1, 64);
    // Sizes differ, so transfer times do too: order must hold regardless.
    wrs.push_back(wr(Opcode::kWrite, k * 64, 4096, k % 2 ? 64 : 8, k));
  }
  wrs.push_back(wr(Opcode::kRead, 8192, 4096, 64, 32));
  wrs.back().flags = kSignaled;
  for (size_t i = 0; i + 1 < wrs.size(); ++i) wrs[i].next = &wrs[i + 1];
  WorkRequest* bad = nullptr;
  ASSERT_EQ(qp_->post_send(wrs.data(), &bad), 0);
  auto wc = poll_for(*a_.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 32u);
  // The last write (k = 31, 64 bytes of 32) is what the read saw.
  EXPECT_EQ(std::vector<uint8_t>(a_.buf(8192), a_.buf(8192 + 64)), std::vector<uint8_t>(64, 32));
}

TEST_F(ShmLatencyModel, ErrorFlushesLaterRequests) {
  open("shm,latency_ns=1000");
  std::memset(a_.buf(0), 0x77, 64);
  WorkRequest w1 = wr(Opcode::kWrite, 0, 0, 64, 1), w2 = wr(Opcode::kWrite, 0, 64, 64, 2);
  w1.rkey ^= 0x80000000u;
  w1.next = &w2;
  WorkRequest* bad = nullptr;
  ASSERT_EQ(qp_->post_send(&w1, &bad), 0);
  auto wc = poll_for(*a_.cq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, Status::kRemoteAccessError);
  EXPECT_EQ(wc[1].status, Status::kFlushed);
  EXPECT_EQ(std::vector<uint8_t>(b_.buf(0), b_.buf(128)), std::vector<uint8_t>(128, 0));
  ASSERT_TRUE(qp_->connect(peer_qp_->address()).ok());
  Status st;
  timed(wr(Opcode::kWrite, 0, 64, 64), &st);
  EXPECT_EQ(st, Status::kSuccess);
}

TEST_F(ShmLatencyModel, SendQueueSlotsFollowPolledSignaledCompletions) {
  open("shm,latency_ns=1000", 4);
  WorkRequest ws[5];
  for (int i = 0; i < 5; ++i) {
    ws[i] = wr(Opcode::kWrite, 0, 0, 8, i);
    ws[i].next = i < 4 ? &ws[i + 1] : nullptr;
  }
  ws[3].flags = kSignaled;
  WorkRequest* bad = nullptr;
  EXPECT_EQ(qp_->post_send(ws, &bad), -ENOMEM);
  EXPECT_EQ(bad, &ws[4]);
  auto wc = poll_for(*a_.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 3u);
  ws[4].flags = kSignaled;
  EXPECT_EQ(qp_->post_send(&ws[4], &bad), 0);
  EXPECT_EQ(poll_for(*a_.cq, 1).size(), 1u);
}

TEST_F(ShmLatencyModel, ReconnectFlushesWhatHasNotTakenEffect) {
  open("shm,latency_ns=20000");
  std::memset(a_.buf(0), 0x55, 64);
  WorkRequest w = wr(Opcode::kWrite, 0, 0, 64, 9);
  WorkRequest* bad = nullptr;
  ASSERT_EQ(qp_->post_send(&w, &bad), 0);  // unsignaled: the flush still completes it
  ASSERT_TRUE(qp_->connect(peer_qp_->address()).ok());
  auto wc = poll_for(*a_.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, Status::kFlushed);
  std::this_thread::sleep_for(std::chrono::microseconds(50));
  EXPECT_TRUE(poll_for(*a_.cq, 1, std::chrono::milliseconds(1)).empty());
  EXPECT_EQ(std::vector<uint8_t>(b_.buf(0), b_.buf(64)), std::vector<uint8_t>(64, 0));
}

}  // namespace
}  // namespace rdtx::rdma::test
