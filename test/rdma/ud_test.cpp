// Conformance: datagram QPs (SEND/RECV), echo through node 1, receive-buffer
// exhaustion and too-small buffers.
#include <cstring>

#include "conformance_fixture.hpp"

namespace rdtx::rdma::test {
namespace {

class Datagram : public ConformanceTest {
 protected:
  struct Endpoint {
    std::unique_ptr<CompletionQueue> cq;  // send and receive
    std::unique_ptr<QueuePair> qp;
  };

  Endpoint make_ud(uint32_t max_recv_wr = 64) {
    Endpoint ep;
    auto cq = dev().create_cq(256);
    EXPECT_TRUE(cq.ok()) << cq.error().message;
    if (!cq.ok()) return ep;
    ep.cq = std::move(*cq);
    QpInit init;
    init.type = QpType::kUd;
    init.send_cq = ep.cq.get();
    init.recv_cq = ep.cq.get();
    init.max_send_wr = 64;
    init.max_recv_wr = max_recv_wr;
    auto qp = dev().create_qp(init);
    EXPECT_TRUE(qp.ok()) << qp.error().message;
    if (qp.ok()) ep.qp = std::move(*qp);
    return ep;
  }

  int post_recv(Endpoint& ep, size_t off, uint32_t len, uint64_t wr_id, uint32_t lkey = 0) {
    RecvRequest r;
    r.wr_id = wr_id;
    r.addr = local_buf(off);
    r.length = len;
    r.lkey = lkey != 0 ? lkey : lmr().lkey;
    RecvRequest* bad = nullptr;
    return ep.qp->post_recv(&r, &bad);
  }

  uint32_t mtu() { return dev().caps().max_msg_size; }
};

INSTANTIATE_TEST_SUITE_P(Topologies, Datagram, ::testing::ValuesIn(all_topologies()), topology_name);

TEST_P(Datagram, EchoRoundTrips) {
  Endpoint ep = make_ud();
  auto ah = dev().create_ah(topo().echo);
  ASSERT_TRUE(ah.ok()) << ah.error().message;
  const QpAddress me = ep.qp->address();
  const size_t kSendOff = 0, kRecvOff = 65536;
  const uint32_t sizes[] = {48, 64, 100, 1000, mtu()};
  for (uint64_t i = 0; i < 200; ++i) {
    uint32_t size = sizes[i % 5];
    ASSERT_EQ(post_recv(ep, kRecvOff, mtu(), 1000 + i), 0);
    std::memcpy(local_buf(kSendOff), me.bytes, sizeof me.bytes);
    fill_pattern(local_buf(kSendOff + sizeof me.bytes), size - sizeof me.bytes, i);
    WorkRequest wr;
    wr.wr_id = i;
    wr.opcode = Opcode::kSend;
    wr.flags = kSignaled;
    wr.local = local_buf(kSendOff);
    wr.length = size;
    wr.lkey = lmr().lkey;
    wr.ah = ah->get();
    WorkRequest* bad = nullptr;
    ASSERT_EQ(ep.qp->post_send(&wr, &bad), 0);
    auto wc = poll_for(*ep.cq, 2);
    ASSERT_EQ(wc.size(), 2u) << "round trip " << i;
    const Completion& recv = wc[0].opcode == Opcode::kRecv ? wc[0] : wc[1];
    const Completion& send = wc[0].opcode == Opcode::kRecv ? wc[1] : wc[0];
    EXPECT_EQ(send.opcode, Opcode::kSend);
    EXPECT_EQ(send.wr_id, i);
    EXPECT_EQ(send.status, Status::kSuccess);
    ASSERT_EQ(recv.status, Status::kSuccess);
    EXPECT_EQ(recv.wr_id, 1000 + i);
    EXPECT_EQ(recv.byte_len, size);
    EXPECT_EQ(recv.src_qp, topo().echo_qpn);
    ASSERT_EQ(std::memcmp(local_buf(kRecvOff), local_buf(kSendOff), size), 0) << "round trip " << i;
  }
}

TEST_P(Datagram, RecvCompletionCarriesLengthAndSource) {
  Endpoint ep = make_ud();
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(post_recv(ep, i * 4096, 4096, i), 0);
  auto sent = topo().remote_send(ep.qp->address(), 3, 100, 500);
  ASSERT_TRUE(sent.ok()) << sent.error().message;
  EXPECT_EQ(sent->first, 3u);
  auto wc = poll_for(*ep.cq, 3);
  ASSERT_EQ(wc.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wc[i].opcode, Opcode::kRecv);
    EXPECT_EQ(wc[i].status, Status::kSuccess);
    EXPECT_EQ(wc[i].wr_id, i);
    EXPECT_EQ(wc[i].byte_len, 100u);
    EXPECT_EQ(wc[i].src_qp, sent->second);
    EXPECT_TRUE(check_pattern(local_buf(i * 4096), 100, 500 + i));
  }
}

TEST_P(Datagram, ReceiveIntoMemoryAllocatedAfterThePeerConnected) {
  Endpoint ep = make_ud();
  ASSERT_EQ(post_recv(ep, 0, 256, 1), 0);
  auto sent = topo().remote_send(ep.qp->address(), 1, 64, 1);  // node 1 now has its address handle
  ASSERT_TRUE(sent.ok()) << sent.error().message;
  ASSERT_EQ(poll_for(*ep.cq, 1).size(), 1u);
  auto mem = dev().alloc_memory(1 << 16);
  ASSERT_TRUE(mem.ok());
  auto mr = dev().reg_mr((*mem)->data(), 1 << 16, kAccessAll);
  ASSERT_TRUE(mr.ok());
  RecvRequest r;
  r.wr_id = 2;
  r.addr = static_cast<uint8_t*>((*mem)->data()) + 4096;
  r.length = 256;
  r.lkey = mr->lkey;
  RecvRequest* bad = nullptr;
  ASSERT_EQ(ep.qp->post_recv(&r, &bad), 0);
  sent = topo().remote_send(ep.qp->address(), 1, 200, 2);
  ASSERT_TRUE(sent.ok()) << sent.error().message;
  auto wc = poll_for(*ep.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, Status::kSuccess);
  EXPECT_TRUE(check_pattern(static_cast<uint8_t*>(r.addr), 200, 2));
}

TEST_P(Datagram, ExhaustedReceiveQueueDropsAndRecovers) {
  constexpr uint32_t kBuffers = 4, kBufLen = 256, kStride = 512, kMsg = 100;
  Endpoint ep = make_ud(kBuffers);
  std::memset(local_buf(0), 0xee, kBuffers * kStride);
  for (uint32_t i = 0; i < kBuffers; ++i) ASSERT_EQ(post_recv(ep, i * kStride, kBufLen, i), 0);
  // More messages than buffers: the sender is not affected...
  auto sent = topo().remote_send(ep.qp->address(), 10, kMsg, 0);
  ASSERT_TRUE(sent.ok()) << sent.error().message;
  EXPECT_EQ(sent->first, 10u) << "SENDs to a receiver without buffers must still succeed";
  // ...and the receiver gets what it had room for, intact, and nothing else.
  auto wc = poll_for(*ep.cq, kBuffers);
  ASSERT_EQ(wc.size(), kBuffers);
  EXPECT_TRUE(stays_empty(*ep.cq, std::chrono::milliseconds(200)));
  for (uint32_t i = 0; i < kBuffers; ++i) {
    EXPECT_EQ(wc[i].status, Status::kSuccess);
    EXPECT_EQ(wc[i].wr_id, i);
    EXPECT_EQ(wc[i].byte_len, kMsg);
    EXPECT_TRUE(check_pattern(local_buf(i * kStride), kMsg, i)) << "buffer " << i;
    EXPECT_EQ(std::vector<uint8_t>(local_buf(i * kStride + kMsg), local_buf((i + 1) * kStride)),
              std::vector<uint8_t>(kStride - kMsg, 0xee))
        << "bytes after message " << i << " were written";
  }
  // Buffers posted again take later messages.
  for (uint32_t i = 0; i < kBuffers; ++i) ASSERT_EQ(post_recv(ep, i * kStride, kBufLen, 10 + i), 0);
  sent = topo().remote_send(ep.qp->address(), 3, kMsg, 100);
  ASSERT_TRUE(sent.ok()) << sent.error().message;
  wc = poll_for(*ep.cq, 3);
  ASSERT_EQ(wc.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wc[i].status, Status::kSuccess);
    EXPECT_EQ(wc[i].wr_id, 10 + i);
    EXPECT_TRUE(check_pattern(local_buf(i * kStride), kMsg, 100 + i));
  }
  EXPECT_TRUE(stays_empty(*ep.cq));
}

TEST_P(Datagram, MessageLargerThanThePostedBufferFailsTheRecv) {
  Endpoint ep = make_ud();
  std::memset(local_buf(0), 0xee, 256);
  ASSERT_EQ(post_recv(ep, 0, 64, 1), 0);
  auto sent = topo().remote_send(ep.qp->address(), 1, 128, 9);
  ASSERT_TRUE(sent.ok()) << sent.error().message;
  auto wc = poll_for(*ep.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, Status::kLocalLengthError);
  EXPECT_EQ(std::vector<uint8_t>(local_buf(64), local_buf(256)), std::vector<uint8_t>(192, 0xee))
      << "the message overflowed its buffer";
  // The receiver keeps working.
  ASSERT_EQ(post_recv(ep, 1024, 256, 2), 0);
  sent = topo().remote_send(ep.qp->address(), 1, 128, 10);
  ASSERT_TRUE(sent.ok());
  wc = poll_for(*ep.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, Status::kSuccess);
  EXPECT_TRUE(check_pattern(local_buf(1024), 128, 10));
}

TEST_P(Datagram, SendLargerThanTheMtuFails) {
  Endpoint ep = make_ud();
  auto ah = dev().create_ah(topo().echo);
  ASSERT_TRUE(ah.ok()) << ah.error().message;
  WorkRequest wr;
  wr.opcode = Opcode::kSend;
  wr.flags = kSignaled;
  wr.local = local_buf(0);
  wr.length = mtu() + 1;
  wr.lkey = lmr().lkey;
  wr.ah = ah->get();
  WorkRequest* bad = nullptr;
  int rc = ep.qp->post_send(&wr, &bad);
  // Either refused at post time or failed with a completion.
  if (rc == 0) {
    auto wc = poll_for(*ep.cq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, Status::kLocalLengthError);
  } else {
    EXPECT_EQ(rc, -EINVAL);
    EXPECT_EQ(bad, &wr);
  }
}

TEST_P(Datagram, ReceiveBuffersMustBeRegistered) {
  Endpoint ep = make_ud();
  std::memset(local_buf(0), 0xee, 256);
  int rc = post_recv(ep, 0, 256, 1, lmr().lkey ^ 0x80000000u);
  if (rc == 0) {  // accepted now, fails when a message arrives
    auto sent = topo().remote_send(ep.qp->address(), 1, 64, 1);
    ASSERT_TRUE(sent.ok());
    auto wc = poll_for(*ep.cq, 1);
    ASSERT_EQ(wc.size(), 1u);
    // The specification's local protection error, or the local QP
    // operation error Soft-RoCE reports for it.
    EXPECT_TRUE(wc[0].status == Status::kLocalProtectionError || wc[0].status == Status::kLocalQpOperationError)
        << to_string(wc[0].status);
  } else {
    EXPECT_EQ(rc, -EINVAL);
  }
  EXPECT_EQ(std::vector<uint8_t>(local_buf(0), local_buf(256)), std::vector<uint8_t>(256, 0xee));
}

TEST_P(Datagram, ReceiveQueueOverflowIsRefused) {
  Endpoint ep = make_ud(4);
  RecvRequest rs[5];
  for (int i = 0; i < 5; ++i) {
    rs[i].wr_id = i;
    rs[i].addr = local_buf(i * 256);
    rs[i].length = 256;
    rs[i].lkey = lmr().lkey;
    rs[i].next = i < 4 ? &rs[i + 1] : nullptr;
  }
  RecvRequest* bad = nullptr;
  EXPECT_EQ(ep.qp->post_recv(rs, &bad), -ENOMEM);
  EXPECT_EQ(bad, &rs[4]);
  // The first four were posted.
  auto sent = topo().remote_send(ep.qp->address(), 4, 32, 0);
  ASSERT_TRUE(sent.ok());
  EXPECT_EQ(poll_for(*ep.cq, 4).size(), 4u);
}

}  // namespace
}  // namespace rdtx::rdma::test
