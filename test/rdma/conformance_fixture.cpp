#include "conformance_fixture.hpp"

#include <cstring>

namespace rdtx::rdma::test {

void ConformanceTest::SetUp() {
  auto topo = Topology::start(GetParam());
  // shm runs everywhere: its topologies failing to start (devargs it no
  // longer takes, say) is a failure, not a missing device.
  if (!topo.ok() && GetParam().devargs.starts_with("shm"))
    FAIL() << "topology " << GetParam().name << " failed to start: " << topo.error().message;
  if (!topo.ok()) GTEST_SKIP() << "topology " << GetParam().name << " unavailable: " << topo.error().message;
  topo_ = std::move(*topo);
  auto mem = dev().alloc_memory(kLocalBytes);
  ASSERT_TRUE(mem.ok()) << mem.error().message;
  lmem_ = std::move(*mem);
  std::memset(lmem_->data(), 0, kLocalBytes);
  auto mr = dev().reg_mr(lmem_->data(), kLocalBytes, kAccessAll);
  ASSERT_TRUE(mr.ok()) << mr.error().message;
  lmr_ = *mr;
}

void ConformanceTest::TearDown() {
  if (topo_) {
    EXPECT_EQ(topo_->stop(), 0) << "the peer agent (node 1) failed";
  }
}

RcLink ConformanceTest::connect_rc(uint32_t max_send_wr) {
  RcLink link;
  auto cq = dev().create_cq(max_send_wr);
  EXPECT_TRUE(cq.ok()) << cq.error().message;
  if (!cq.ok()) return link;
  link.cq = std::move(*cq);
  QpInit init;
  init.type = QpType::kRc;
  init.send_cq = link.cq.get();
  init.max_send_wr = max_send_wr;
  auto qp = dev().create_qp(init);
  EXPECT_TRUE(qp.ok()) << qp.error().message;
  if (!qp.ok()) return link;
  link.qp = std::move(*qp);
  auto remote = topo().remote_rc(link.qp->address());
  EXPECT_TRUE(remote.ok()) << remote.error().message;
  if (!remote.ok()) return link;
  link.remote_id = remote->first;
  link.remote = remote->second;
  auto c = link.qp->connect(link.remote);
  EXPECT_TRUE(c.ok()) << c.error().message;
  return link;
}

void ConformanceTest::reconnect(RcLink& link) {
  auto r = topo().remote_reconnect(link.remote_id, link.qp->address());
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto c = link.qp->connect(link.remote);
  ASSERT_TRUE(c.ok()) << c.error().message;
}

WorkRequest ConformanceTest::read_wr(size_t local_off, uint64_t raddr, uint32_t rkey, uint32_t len,
                                     uint64_t wr_id) const {
  WorkRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = Opcode::kRead;
  wr.local = static_cast<uint8_t*>(lmr_.addr) + local_off;
  wr.length = len;
  wr.lkey = lmr_.lkey;
  wr.remote_addr = raddr;
  wr.rkey = rkey;
  return wr;
}

WorkRequest ConformanceTest::write_wr(size_t local_off, uint64_t raddr, uint32_t rkey, uint32_t len,
                                      uint64_t wr_id) const {
  WorkRequest wr = read_wr(local_off, raddr, rkey, len, wr_id);
  wr.opcode = Opcode::kWrite;
  return wr;
}

WorkRequest ConformanceTest::faa_wr(size_t local_off, uint64_t raddr, uint32_t rkey, uint64_t add,
                                    uint64_t wr_id) const {
  WorkRequest wr = read_wr(local_off, raddr, rkey, 8, wr_id);
  wr.opcode = Opcode::kFetchAdd;
  wr.compare_add = add;
  return wr;
}

WorkRequest ConformanceTest::cas_wr(size_t local_off, uint64_t raddr, uint32_t rkey, uint64_t cmp, uint64_t swp,
                                    uint64_t wr_id) const {
  WorkRequest wr = read_wr(local_off, raddr, rkey, 8, wr_id);
  wr.opcode = Opcode::kCompareSwap;
  wr.compare_add = cmp;
  wr.swap = swp;
  return wr;
}

Status ConformanceTest::run(RcLink& link, WorkRequest wr) {
  wr.flags |= kSignaled;
  wr.next = nullptr;
  WorkRequest* bad = nullptr;
  int rc = link.qp->post_send(&wr, &bad);
  EXPECT_EQ(rc, 0) << "post_send";
  if (rc != 0) return Status::kGeneralError;
  auto wc = poll_for(*link.cq, 1);
  EXPECT_EQ(wc.size(), 1u) << "no completion";
  if (wc.size() != 1) return Status::kGeneralError;
  EXPECT_EQ(wc[0].wr_id, wr.wr_id);
  return wc[0].status;
}

ConformanceTest::Outcome ConformanceTest::try_run(RcLink& link, WorkRequest wr) {
  wr.flags |= kSignaled;
  wr.next = nullptr;
  WorkRequest* bad = nullptr;
  Outcome out;
  out.post_rc = link.qp->post_send(&wr, &bad);
  if (out.post_rc != 0) {
    EXPECT_EQ(bad, &wr) << "a refused request must be named in bad_wr";
    EXPECT_TRUE(stays_empty(*link.cq)) << "a refused request must not complete";
    return out;
  }
  auto wc = poll_for(*link.cq, 1);
  EXPECT_EQ(wc.size(), 1u) << "no completion";
  if (wc.size() != 1) return out;
  EXPECT_EQ(wc[0].wr_id, wr.wr_id);
  out.status = wc[0].status;
  return out;
}

std::vector<uint8_t> ConformanceTest::remote_read(RcLink& link, uint64_t raddr, uint32_t rkey, uint32_t len) {
  constexpr size_t kScratch = kLocalBytes / 2;  // tests keep their own data below
  EXPECT_LE(len, kLocalBytes - kScratch);
  std::memset(local_buf(kScratch), 0xee, len);
  EXPECT_EQ(run(link, read_wr(kScratch, raddr, rkey, len, 0x5eed)), Status::kSuccess) << "remote_read";
  return std::vector<uint8_t>(local_buf(kScratch), local_buf(kScratch) + len);
}

void ConformanceTest::remote_write(RcLink& link, uint64_t raddr, uint32_t rkey, const std::vector<uint8_t>& bytes) {
  constexpr size_t kScratch = kLocalBytes / 2;
  std::memcpy(local_buf(kScratch), bytes.data(), bytes.size());
  EXPECT_EQ(run(link, write_wr(kScratch, raddr, rkey, static_cast<uint32_t>(bytes.size()), 0x5eed)),
            Status::kSuccess)
      << "remote_write";
}

uint64_t ConformanceTest::remote_u64(RcLink& link, uint64_t raddr) {
  auto bytes = remote_read(link, raddr, topo().mem.rkey, 8);
  uint64_t v = 0;
  std::memcpy(&v, bytes.data(), 8);
  return v;
}

bool ConformanceTest::stays_empty(CompletionQueue& cq, std::chrono::milliseconds quiet) {
  return poll_for(cq, 1, quiet).empty();
}

}  // namespace rdtx::rdma::test
