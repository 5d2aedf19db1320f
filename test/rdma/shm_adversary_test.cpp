// The shm driver's adversarial modes (devargs read_order, write_order,
// ud_drop, ud_dup, ud_delay, seed, pause_node): each test proves its mode
// does what a real NIC or network may do and the default shm never does,
// so it fails if the mode is removed, and that nothing is lost beyond that.
// Nodes live in this process, so tests watch their memory directly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "drivers/rdma/shm/shm.hpp"
#include "rdma/rdma.hpp"
#include "test_util.hpp"

namespace rdtx::rdma::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string new_fabric(const char* what) {
  static std::atomic<unsigned> seq{0};
  return std::string(what) + std::to_string(getpid()) + "x" + std::to_string(seq.fetch_add(1));
}

std::unique_ptr<Device> open_node(const std::string& fabric, uint32_t node, const std::string& devargs) {
  OpenOptions oo;
  oo.fabric = fabric;
  oo.node_id = node;
  auto dev = open_device(devargs, oo);
  EXPECT_TRUE(dev.ok()) << dev.error().message;
  return dev.ok() ? std::move(*dev) : nullptr;
}

// A node with 1 MiB of registered memory and one CQ.
struct TestNode {
  std::unique_ptr<Device> dev;
  std::unique_ptr<DeviceMemory> mem;
  MemoryRegion mr{};
  std::unique_ptr<CompletionQueue> cq;

  static constexpr size_t kBytes = 1 << 20;
  TestNode(const std::string& fabric, uint32_t id, const std::string& devargs) {
    dev = open_node(fabric, id, devargs);
    if (dev == nullptr) return;
    mem = dev->alloc_memory(kBytes).value();
    std::memset(mem->data(), 0, kBytes);
    mr = dev->reg_mr(mem->data(), kBytes, kAccessAll).value();
    cq = dev->create_cq(8192).value();
  }
  uint8_t* buf(size_t off = 0) const { return static_cast<uint8_t*>(mem->data()) + off; }
  std::unique_ptr<QueuePair> rc(uint32_t max_send_wr = 64) const {
    QpInit init;
    init.send_cq = cq.get();
    init.max_send_wr = max_send_wr;
    return dev->create_qp(init).value();
  }
  std::unique_ptr<QueuePair> ud(uint32_t max_recv_wr = 4096) const {
    QpInit init;
    init.type = QpType::kUd;
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    init.max_send_wr = 64;
    init.max_recv_wr = max_recv_wr;
    return dev->create_qp(init).value();
  }
};

WorkRequest rdma_wr(Opcode op, const TestNode& from, size_t local_off, uint64_t remote_addr, uint32_t rkey,
                    uint32_t len) {
  WorkRequest wr;
  wr.opcode = op;
  wr.flags = kSignaled;
  wr.local = from.buf(local_off);
  wr.length = len;
  wr.lkey = from.mr.lkey;
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  return wr;
}

Status run(QueuePair& qp, CompletionQueue& cq, WorkRequest wr) {
  WorkRequest* bad = nullptr;
  EXPECT_EQ(qp.post_send(&wr, &bad), 0);
  auto wc = poll_for(cq, 1);
  return wc.size() == 1 ? wc[0].status : Status::kGeneralError;
}

uint64_t word(const uint8_t* p, size_t i) {
  uint64_t v;
  std::memcpy(&v, p + 8 * i, 8);
  return v;
}

// --- Word order -------------------------------------------------------------

// What a loopback READ (or WRITE) of words [0, n) onto [1, n + 1) of the same
// buffer leaves there tells the order the words moved in: ascending copies
// word 0 into every word (each copies the one just written), descending
// shifts them intact (as memmove), any other order gives something else.
enum class Overlap { kSmeared, kShifted, kOther };

class WordOrder : public ::testing::Test {
 protected:
  void open(const std::string& devargs) {
    node_ = std::make_unique<TestNode>(new_fabric("order"), 0, devargs);
    ASSERT_NE(node_->dev, nullptr);
    qp_ = node_->rc();
    ASSERT_TRUE(qp_->connect(qp_->address()).ok());
  }

  Overlap overlapping(Opcode op, size_t words) {
    for (size_t i = 0; i <= words; ++i) {
      uint64_t v = 1000 + i;
      std::memcpy(node_->buf(8 * i), &v, 8);
    }
    // READ: source words [0, n), destination [1, n + 1); WRITE the same way round.
    WorkRequest wr = op == Opcode::kRead ? rdma_wr(op, *node_, 8, node_->mr.remote_addr(0), node_->mr.rkey, 8 * words)
                                         : rdma_wr(op, *node_, 0, node_->mr.remote_addr(8), node_->mr.rkey, 8 * words);
    EXPECT_EQ(run(*qp_, *node_->cq, wr), Status::kSuccess);
    bool smeared = true, shifted = true;
    for (size_t i = 1; i <= words; ++i) {
      smeared &= word(node_->buf(), i) == 1000;
      shifted &= word(node_->buf(), i) == 1000 + i - 1;
    }
    return smeared ? Overlap::kSmeared : shifted ? Overlap::kShifted : Overlap::kOther;
  }

  // READs and WRITEs between two distinct areas return exactly what was
  // there, for aligned and unaligned sizes and offsets.
  void expect_exact_copies() {
    const size_t kSrc = 0, kMid = 1 << 18, kDst = 1 << 19;
    for (uint32_t len : {8u, 16u, 24u, 56u, 64u, 72u, 1000u, 4096u, 4104u, 65536u, 3u, 100u}) {
      for (size_t skew : {size_t{0}, size_t{8}, size_t{3}}) {
        SCOPED_TRACE(::testing::Message() << "length " << len << " offset " << skew);
        fill_pattern(node_->buf(kSrc + skew), len, len + skew);
        std::memset(node_->buf(kMid), 0xee, skew + len + 16);
        std::memset(node_->buf(kDst), 0xee, skew + len + 16);
        // WRITE src -> mid, READ mid -> dst.
        ASSERT_EQ(run(*qp_, *node_->cq,
                      rdma_wr(Opcode::kWrite, *node_, kSrc + skew, node_->mr.remote_addr(kMid + skew), node_->mr.rkey, len)),
                  Status::kSuccess);
        ASSERT_EQ(run(*qp_, *node_->cq,
                      rdma_wr(Opcode::kRead, *node_, kDst + skew, node_->mr.remote_addr(kMid + skew), node_->mr.rkey, len)),
                  Status::kSuccess);
        EXPECT_TRUE(check_pattern(node_->buf(kMid + skew), len, len + skew));
        EXPECT_TRUE(check_pattern(node_->buf(kDst + skew), len, len + skew));
        for (size_t i = 0; i < skew; ++i) EXPECT_EQ(node_->buf(kDst)[i], 0xee) << "wrote before the destination";
        for (size_t i = 0; i < 16; ++i) EXPECT_EQ(node_->buf(kDst + skew + len)[i], 0xee) << "wrote past the end";
      }
    }
  }

  std::unique_ptr<TestNode> node_;
  std::unique_ptr<QueuePair> qp_;
};

TEST_F(WordOrder, DefaultIsAscending) {
  open("shm");
  EXPECT_EQ(overlapping(Opcode::kRead, 64), Overlap::kSmeared);
  EXPECT_EQ(overlapping(Opcode::kWrite, 64), Overlap::kSmeared);
}

TEST_F(WordOrder, DescendingReadMovesWordsLastFirstAndKeepsEveryByte) {
  open("shm,read_order=descending");
  EXPECT_EQ(overlapping(Opcode::kRead, 64), Overlap::kShifted);
  EXPECT_EQ(overlapping(Opcode::kWrite, 64), Overlap::kSmeared) << "write_order stays ascending";
  expect_exact_copies();
}

TEST_F(WordOrder, RandomReadMovesWordsInNeitherOrderAndKeepsEveryByte) {
  open("shm,read_order=random,seed=1");
  for (size_t words : {7, 64, 513}) EXPECT_EQ(overlapping(Opcode::kRead, words), Overlap::kOther) << words << " words";
  EXPECT_EQ(overlapping(Opcode::kWrite, 64), Overlap::kSmeared) << "write_order stays ascending";
  expect_exact_copies();
}

TEST_F(WordOrder, RandomWriteMovesWordsInNeitherOrderAndKeepsEveryByte) {
  open("shm,write_order=random,seed=1");
  for (size_t words : {7, 64, 513}) EXPECT_EQ(overlapping(Opcode::kWrite, words), Overlap::kOther) << words;
  EXPECT_EQ(overlapping(Opcode::kRead, 64), Overlap::kSmeared) << "read_order stays ascending";
  expect_exact_copies();
}

TEST_F(WordOrder, RandomOrderDiffersFromOneRequestToTheNext) {
  open("shm,read_order=random,seed=3");
  std::vector<std::vector<uint64_t>> seen;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(overlapping(Opcode::kRead, 64), Overlap::kOther);
    seen.emplace_back(reinterpret_cast<uint64_t*>(node_->buf()), reinterpret_cast<uint64_t*>(node_->buf(8 * 65)));
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end()) << "the same permutation twice in 4 READs";
}

// A page alternating between all-zero and all-one words, copied while it
// changes. Word by word in ascending order on both sides, a snapshot can
// switch between the two values only where the copy and the change cross,
// a few times at most; a random order on either side scatters them.
constexpr size_t kPageWords = 2048;
constexpr int kTornTransitions = 64;

int transitions(const uint64_t* w) {
  int n = 0;
  for (size_t i = 1; i < kPageWords; ++i) n += w[i] != w[i - 1];
  return n;
}

TEST(ShmTornPages, RandomReadOrderShowsAConcurrentWriterTorn) {
  std::string fabric = new_fabric("tornr");
  TestNode reader(fabric, 0, "shm,read_order=random,seed=5"), page(fabric, 1, "shm,read_order=random,seed=5");
  ASSERT_NE(reader.dev, nullptr);
  ASSERT_NE(page.dev, nullptr);
  auto qp = reader.rc(), peer = page.rc();
  ASSERT_TRUE(qp->connect(peer->address()).ok());
  std::atomic<bool> stop{false};
  // The target's CPU rewrites the page in ascending order, as plain stores.
  std::thread writer([&] {
    auto* w = reinterpret_cast<uint64_t*>(page.buf());
    for (uint64_t v = 0; !stop.load(std::memory_order_relaxed); v = ~v)
      for (size_t i = 0; i < kPageWords; ++i) std::atomic_ref<uint64_t>(w[i]).store(v, std::memory_order_relaxed);
  });
  int most = 0;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (most < kTornTransitions && Clock::now() < deadline) {
    ASSERT_EQ(run(*qp, *reader.cq,
                  rdma_wr(Opcode::kRead, reader, 0, page.mr.remote_addr(0), page.mr.rkey, kPageWords * 8)),
              Status::kSuccess);
    most = std::max(most, transitions(reinterpret_cast<const uint64_t*>(reader.buf())));
  }
  stop = true;
  writer.join();
  EXPECT_GE(most, kTornTransitions) << "no READ saw the page torn in a random order";
}

TEST(ShmTornPages, RandomWriteOrderShowsAConcurrentReaderTorn) {
  std::string fabric = new_fabric("tornw");
  TestNode writer_node(fabric, 0, "shm,write_order=random,seed=5"), page(fabric, 1, "shm,write_order=random,seed=5");
  ASSERT_NE(writer_node.dev, nullptr);
  ASSERT_NE(page.dev, nullptr);
  auto qp = writer_node.rc(), peer = page.rc();
  ASSERT_TRUE(qp->connect(peer->address()).ok());
  // Source pages: all zeros at 0, all ones after them.
  std::memset(writer_node.buf(kPageWords * 8), 0xff, kPageWords * 8);
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};
  std::thread writer([&] {
    for (size_t src = 0; !stop.load(std::memory_order_relaxed); src ^= kPageWords * 8)
      if (run(*qp, *writer_node.cq,
              rdma_wr(Opcode::kWrite, writer_node, src, page.mr.remote_addr(0), page.mr.rkey, kPageWords * 8)) !=
          Status::kSuccess) {
        failed = true;
        return;
      }
  });
  // The target's CPU reads the page in ascending order.
  std::vector<uint64_t> snap(kPageWords);
  const auto* w = reinterpret_cast<const uint64_t*>(page.buf());
  int most = 0;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (most < kTornTransitions && Clock::now() < deadline && !failed) {
    for (size_t i = 0; i < kPageWords; ++i)
      snap[i] = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(w[i])).load(std::memory_order_relaxed);
    most = std::max(most, transitions(snap.data()));
  }
  stop = true;
  writer.join();
  EXPECT_FALSE(failed);
  EXPECT_GE(most, kTornTransitions) << "no snapshot saw a WRITE land in a random order";
}

// --- Datagram faults --------------------------------------------------------

// Node 0 sends kMessages numbered datagrams to a UD QP of node 1 that has a
// buffer posted for each (and for each possible duplicate).
class DatagramFaults : public ::testing::Test {
 protected:
  static constexpr uint64_t kMessages = 2000;
  static constexpr uint32_t kSlot = 64;

  void open(const std::string& devargs) {
    std::string fabric = new_fabric("udf");
    a_ = std::make_unique<TestNode>(fabric, 0, devargs);
    b_ = std::make_unique<TestNode>(fabric, 1, devargs);
    ASSERT_NE(a_->dev, nullptr);
    ASSERT_NE(b_->dev, nullptr);
    sender_ = a_->ud();
    receiver_ = b_->ud();
    std::vector<RecvRequest> recvs(4096);
    for (size_t i = 0; i < recvs.size(); ++i) {
      recvs[i].wr_id = i;
      recvs[i].addr = b_->buf(i * kSlot);
      recvs[i].length = kSlot;
      recvs[i].lkey = b_->mr.lkey;
      recvs[i].next = i + 1 < recvs.size() ? &recvs[i + 1] : nullptr;
    }
    RecvRequest* bad = nullptr;
    ASSERT_EQ(receiver_->post_recv(recvs.data(), &bad), 0);
    ah_ = a_->dev->create_ah(receiver_->address()).value();
  }

  // Sends messages 0 .. n - 1 (signaled every 16th, polling the sender's CQ
  // so its queue drains); returns when all were posted.
  void send_all(uint64_t n = kMessages) {
    size_t outstanding = 0;
    for (uint64_t seq = 0; seq < n; ++seq) {
      std::memcpy(a_->buf(0), &seq, 8);
      WorkRequest wr;
      wr.wr_id = seq;
      wr.opcode = Opcode::kSend;
      wr.flags = kInline | (seq % 16 == 15 ? kSignaled : 0u);
      wr.local = a_->buf(0);
      wr.length = 8;
      wr.ah = ah_.get();
      WorkRequest* bad = nullptr;
      ASSERT_EQ(sender_->post_send(&wr, &bad), 0) << "message " << seq;
      if ((wr.flags & kSignaled) != 0 && ++outstanding == 2) {
        Completion c;
        while (a_->cq->poll(&c, 1) == 0) {
        }
        ASSERT_EQ(c.status, Status::kSuccess);
        --outstanding;
      }
    }
  }

  // Polls both ends (the sender's poll releases held-back datagrams) until
  // `until`, appending the sequence numbers received.
  void receive(Clock::time_point until, std::vector<uint64_t>* got) {
    Completion wc[64];
    do {
      a_->cq->poll(wc, 64);
      int n = b_->cq->poll(wc, 64);
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(wc[i].opcode, Opcode::kRecv);
        ASSERT_EQ(wc[i].status, Status::kSuccess);
        ASSERT_EQ(wc[i].byte_len, 8u);
        got->push_back(word(b_->buf(wc[i].wr_id * kSlot), 0));
      }
    } while (Clock::now() < until);
  }

  shm::UdQpStats stats() const { return shm::ud_qp_stats(*receiver_).value(); }

  // What a run with `devargs` delivers, for comparing runs.
  std::vector<uint64_t> delivered(const std::string& devargs) {
    open(devargs);
    send_all();
    std::vector<uint64_t> got;
    receive(Clock::now() + milliseconds(20), &got);
    return got;
  }

  std::unique_ptr<TestNode> a_, b_;
  std::unique_ptr<QueuePair> sender_, receiver_;
  std::unique_ptr<AddressHandle> ah_;
};

// A binomial count of kMessages draws of probability 1/4 (mean 500, standard
// deviation 19) lies in this range but with odds below 1e-6.
constexpr uint64_t kQuarterLo = 400, kQuarterHi = 600;

TEST_F(DatagramFaults, DropLosesAboutTheGivenShareAndCountsEachLoss) {
  auto got = delivered("shm,ud_drop=0.25,seed=11");
  shm::UdQpStats st = stats();
  EXPECT_GE(st.injected_drop, kQuarterLo);
  EXPECT_LE(st.injected_drop, kQuarterHi);
  EXPECT_EQ(got.size(), kMessages - st.injected_drop) << "every message not counted as lost arrives";
  EXPECT_EQ(st.recv_dropped, 0u) << "injected losses are not buffer shortages";
  EXPECT_EQ(st.injected_dup, 0u);
  EXPECT_EQ(st.injected_delay, 0u);
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
  EXPECT_EQ(std::adjacent_find(got.begin(), got.end()), got.end()) << "a message arrived twice";
}

TEST_F(DatagramFaults, TheSameSeedLosesTheSameMessages) {
  auto first = delivered("shm,ud_drop=0.25,seed=11");
  auto again = delivered("shm,ud_drop=0.25,seed=11");
  auto other = delivered("shm,ud_drop=0.25,seed=12");
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
}

TEST_F(DatagramFaults, DupDeliversAboutTheGivenShareTwice) {
  auto got = delivered("shm,ud_dup=0.25,seed=11");
  shm::UdQpStats st = stats();
  EXPECT_GE(st.injected_dup, kQuarterLo);
  EXPECT_LE(st.injected_dup, kQuarterHi);
  ASSERT_EQ(got.size(), kMessages + st.injected_dup);
  std::map<uint64_t, int> times;
  for (uint64_t seq : got) ++times[seq];
  uint64_t twice = 0;
  for (uint64_t seq = 0; seq < kMessages; ++seq) {
    ASSERT_TRUE(times[seq] == 1 || times[seq] == 2) << "message " << seq << " arrived " << times[seq] << " times";
    twice += times[seq] == 2;
  }
  EXPECT_EQ(twice, st.injected_dup);
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end())) << "without ud_delay a duplicate follows its original";
  EXPECT_EQ(st.injected_drop, 0u);
  EXPECT_EQ(st.recv_dropped, 0u);
}

TEST_F(DatagramFaults, DelayHoldsMessagesBackSoThatLaterOnesOvertakeThem) {
  // A QP holds back at most 256 datagrams at once: 800 messages at 1/4 hold
  // back 200 (standard deviation 12).
  constexpr uint64_t kDelayMs = 400, kSent = 800;
  open("shm,ud_delay=0.25,ud_delay_ns=" + std::to_string(kDelayMs * 1'000'000) + ",seed=11");
  auto start = Clock::now();
  send_all(kSent);
  std::vector<uint64_t> early;
  receive(start + milliseconds(kDelayMs / 2), &early);
  ASSERT_LT(Clock::now(), start + milliseconds(kDelayMs)) << "too slow to tell early from late";
  shm::UdQpStats st = stats();
  std::vector<uint64_t> all = early;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (all.size() < kSent && Clock::now() < deadline) receive(Clock::now() + milliseconds(10), &all);
  receive(Clock::now() + milliseconds(10), &all);  // and nothing more
  EXPECT_GE(st.injected_delay, 140u);
  EXPECT_LE(st.injected_delay, 256u);
  EXPECT_EQ(early.size(), kSent - st.injected_delay) << "a held-back message arrived early, or one was lost";
  EXPECT_TRUE(std::is_sorted(early.begin(), early.end()));
  ASSERT_EQ(all.size(), kSent) << "every message arrives exactly once";
  std::vector<uint64_t> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t seq = 0; seq < kSent; ++seq) ASSERT_EQ(sorted[seq], seq);
  EXPECT_EQ(stats().injected_delay, st.injected_delay) << "delivering a held-back message counts it again";
  EXPECT_FALSE(std::is_sorted(all.begin(), all.end())) << "no message was overtaken";
  EXPECT_EQ(st.injected_drop, 0u);
  EXPECT_EQ(st.injected_dup, 0u);
}

// --- Pause --------------------------------------------------------------------

// Node 1 stops from 500 ms to 1100 ms after it was opened. During the
// window its CQ reports nothing and nothing it posts takes effect, while
// node 0 keeps reading and writing its memory; afterwards everything that
// was posted completes, and what was sent to it is delivered.
TEST(ShmPause, APausedNodeCompletesNothingDuringItsWindowAndEverythingAfter) {
  constexpr int kAtMs = 500, kForMs = 600;
  const std::string devargs =
      "shm,pause_node=1,pause_at_ms=" + std::to_string(kAtMs) + ",pause_ms=" + std::to_string(kForMs);
  std::string fabric = new_fabric("pause");
  TestNode a(fabric, 0, devargs);
  auto before_open = Clock::now();
  TestNode b(fabric, 1, devargs);
  auto after_open = Clock::now();
  ASSERT_NE(a.dev, nullptr);
  ASSERT_NE(b.dev, nullptr);
  // The window lies within [after_open + at, before_open + at + for).
  const auto window_start = after_open + milliseconds(kAtMs);
  const auto window_end = before_open + milliseconds(kAtMs + kForMs);
  const auto surely_over = after_open + milliseconds(kAtMs + kForMs);

  auto a_rc = a.rc(), b_rc = b.rc();
  ASSERT_TRUE(a_rc->connect(b_rc->address()).ok());
  ASSERT_TRUE(b_rc->connect(a_rc->address()).ok());
  auto a_ud = a.ud(), b_ud = b.ud();
  auto a_to_b = a.dev->create_ah(b_ud->address()).value();
  auto b_to_a = b.dev->create_ah(a_ud->address()).value();
  auto post_recv = [](QueuePair& qp, const TestNode& n, size_t off, uint64_t id) {
    RecvRequest r;
    r.wr_id = id;
    r.addr = n.buf(off);
    r.length = 64;
    r.lkey = n.mr.lkey;
    RecvRequest* bad = nullptr;
    ASSERT_EQ(qp.post_recv(&r, &bad), 0);
  };
  post_recv(*a_ud, a, 8192, 100);
  post_recv(*b_ud, b, 8192, 200);
  auto send = [](QueuePair& qp, const TestNode& n, const AddressHandle* ah, uint64_t id) {
    WorkRequest wr;
    wr.wr_id = id;
    wr.opcode = Opcode::kSend;
    wr.flags = kSignaled | kInline;
    wr.local = n.buf(0);
    wr.length = 16;
    wr.ah = ah;
    WorkRequest* bad = nullptr;
    ASSERT_EQ(qp.post_send(&wr, &bad), 0);
  };
  ASSERT_LT(Clock::now(), window_start) << "setup took longer than " << kAtMs << " ms";
  std::this_thread::sleep_until(window_start + milliseconds(20));

  // In the window. Node 1 posts a WRITE of 42 into node 0 and a SEND to it.
  uint64_t v = 42;
  std::memcpy(b.buf(0), &v, 8);
  WorkRequest w = rdma_wr(Opcode::kWrite, b, 0, a.mr.remote_addr(4096), a.mr.rkey, 8);
  w.wr_id = 1;
  WorkRequest* bad = nullptr;
  ASSERT_EQ(b_rc->post_send(&w, &bad), 0);
  send(*b_ud, b, b_to_a.get(), 2);
  // Node 0 reaches node 1's memory as ever, and sends it a datagram.
  v = 7;
  std::memcpy(a.buf(0), &v, 8);
  EXPECT_EQ(run(*a_rc, *a.cq, rdma_wr(Opcode::kWrite, a, 0, b.mr.remote_addr(4096), b.mr.rkey, 8)),
            Status::kSuccess);
  EXPECT_EQ(word(b.buf(4096), 0), 7u) << "a one-sided WRITE to the paused node did not land";
  EXPECT_EQ(run(*a_rc, *a.cq, rdma_wr(Opcode::kRead, a, 64, b.mr.remote_addr(4096), b.mr.rkey, 8)),
            Status::kSuccess);
  EXPECT_EQ(word(a.buf(64), 0), 7u);
  send(*a_ud, a, a_to_b.get(), 3);
  ASSERT_EQ(poll_for(*a.cq, 1).size(), 1u) << "node 0's SEND completes";

  // Until the window ends node 1 sees nothing and node 0 nothing of node 1.
  Completion c[8];
  int b_completions = 0, a_completions = 0;
  while (Clock::now() < window_end - milliseconds(100)) {
    b_completions += b.cq->poll(c, 8);
    a_completions += a.cq->poll(c, 8);
    ASSERT_EQ(word(a.buf(4096), 0), 0u) << "the paused node's WRITE took effect during its pause";
  }
  EXPECT_EQ(b_completions, 0) << "the paused node's CQ reported completions";
  EXPECT_EQ(a_completions, 0) << "the paused node's SEND arrived during its pause";

  // After it, everything.
  std::this_thread::sleep_until(surely_over + milliseconds(10));
  auto wc = poll_for(*b.cq, 3, std::chrono::seconds(5));
  ASSERT_EQ(wc.size(), 3u) << "the paused node's WRITE, SEND and RECV complete after the pause";
  std::map<uint64_t, Status> by_id;
  for (const Completion& x : wc) by_id[x.wr_id] = x.status;
  EXPECT_EQ(by_id.count(1), 1u);
  EXPECT_EQ(by_id.count(2), 1u);
  EXPECT_EQ(by_id.count(200), 1u) << "node 0's datagram was delivered";
  for (const auto& [id, st] : by_id) EXPECT_EQ(st, Status::kSuccess) << id;
  EXPECT_EQ(word(a.buf(4096), 0), 42u) << "the paused node's WRITE landed";
  wc = poll_for(*a.cq, 1, std::chrono::seconds(5));
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 100u) << "node 1's SEND was delivered";
  EXPECT_EQ(shm::ud_qp_stats(*b_ud)->recv_dropped, 0u);
  EXPECT_EQ(shm::ud_qp_stats(*a_ud)->recv_dropped, 0u);
}

// A buffer the paused node posts during its window is not there for
// senders: a datagram then finds no buffer, as with a stopped process.
TEST(ShmPause, ReceiveBuffersPostedDuringThePauseArePublishedAfterIt) {
  const std::string devargs = "shm,pause_node=1,pause_at_ms=0,pause_ms=400";
  std::string fabric = new_fabric("pausr");
  TestNode a(fabric, 0, devargs);
  TestNode b(fabric, 1, devargs);
  auto opened = Clock::now();
  ASSERT_NE(a.dev, nullptr);
  ASSERT_NE(b.dev, nullptr);
  auto a_ud = a.ud(), b_ud = b.ud();
  auto ah = a.dev->create_ah(b_ud->address()).value();
  RecvRequest r;
  r.wr_id = 9;
  r.addr = b.buf(0);
  r.length = 64;
  r.lkey = b.mr.lkey;
  RecvRequest* bad_recv = nullptr;
  ASSERT_EQ(b_ud->post_recv(&r, &bad_recv), 0);
  WorkRequest wr;
  wr.opcode = Opcode::kSend;
  wr.flags = kSignaled | kInline;
  wr.local = a.buf(0);
  wr.length = 8;
  wr.ah = ah.get();
  WorkRequest* bad = nullptr;
  ASSERT_EQ(a_ud->post_send(&wr, &bad), 0);
  ASSERT_EQ(poll_for(*a.cq, 1).size(), 1u);
  ASSERT_LT(Clock::now(), opened + milliseconds(300)) << "too slow to stay inside the window";
  EXPECT_EQ(shm::ud_qp_stats(*b_ud)->recv_dropped, 1u) << "a buffer posted during the pause was used";
  std::this_thread::sleep_until(opened + milliseconds(450));
  Completion c;
  EXPECT_EQ(b.cq->poll(&c, 1), 0);  // node 1 resumes: its first poll publishes the buffer
  ASSERT_EQ(a_ud->post_send(&wr, &bad), 0);
  ASSERT_EQ(poll_for(*a.cq, 1).size(), 1u);
  auto wc = poll_for(*b.cq, 1);
  ASSERT_EQ(wc.size(), 1u) << "the buffer was published when the pause ended";
  EXPECT_EQ(wc[0].wr_id, 9u);
  EXPECT_EQ(shm::ud_qp_stats(*b_ud)->recv_dropped, 1u);
}

}  // namespace
}  // namespace rdtx::rdma::test
