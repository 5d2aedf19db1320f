// What only the shm driver has: its drop counter, its files in /dev/shm
// (cleanup, reclaiming a crashed owner's node), region key generations, and
// robustness against scribbled shared structures.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "drivers/rdma/shm/recv_queue.hpp"
#include "drivers/rdma/shm/shm.hpp"
#include "rdma/rdma.hpp"
#include "test_util.hpp"

extern char** environ;

namespace rdtx::rdma::test {
namespace {

std::string new_fabric(const char* what) {
  static std::atomic<unsigned> seq{0};
  return std::string(what) + std::to_string(getpid()) + "x" + std::to_string(seq.fetch_add(1));
}

std::vector<std::string> files_of(const std::string& fabric) {
  std::vector<std::string> out;
  std::string prefix = "rdtx." + fabric + ".";
  DIR* d = opendir("/dev/shm");
  while (dirent* e = d ? readdir(d) : nullptr)
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
  if (d) closedir(d);
  return out;
}

std::unique_ptr<Device> open_node(const std::string& fabric, uint32_t node, const std::string& devargs = "shm") {
  OpenOptions oo;
  oo.fabric = fabric;
  oo.node_id = node;
  auto dev = open_device(devargs, oo);
  EXPECT_TRUE(dev.ok()) << dev.error().message;
  return dev.ok() ? std::move(*dev) : nullptr;
}

// A UD QP with its CQ and registered buffers on one device.
struct Ud {
  std::unique_ptr<DeviceMemory> mem;
  MemoryRegion mr{};
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<QueuePair> qp;

  explicit Ud(Device& dev, uint32_t max_recv_wr = 16) {
    mem = dev.alloc_memory(1 << 16).value();
    mr = *dev.reg_mr(mem->data(), mem->size(), kAccessAll);
    cq = dev.create_cq(64).value();
    QpInit init;
    init.type = QpType::kUd;
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    init.max_send_wr = 16;
    init.max_recv_wr = max_recv_wr;
    qp = dev.create_qp(init).value();
  }
  uint8_t* buf(size_t off) const { return static_cast<uint8_t*>(mem->data()) + off; }
  void post_recv(size_t off, uint32_t len, uint64_t id) {
    RecvRequest r;
    r.wr_id = id;
    r.addr = buf(off);
    r.length = len;
    r.lkey = mr.lkey;
    RecvRequest* bad = nullptr;
    ASSERT_EQ(qp->post_recv(&r, &bad), 0);
  }
  Status send(const AddressHandle* ah, uint32_t len, uint64_t id) {
    WorkRequest wr;
    wr.wr_id = id;
    wr.opcode = Opcode::kSend;
    wr.flags = kSignaled;
    wr.local = buf(0);
    wr.length = len;
    wr.lkey = mr.lkey;
    wr.ah = ah;
    WorkRequest* bad = nullptr;
    EXPECT_EQ(qp->post_send(&wr, &bad), 0);
    auto wc = poll_for(*cq, 1);
    return wc.size() == 1 ? wc[0].status : Status::kGeneralError;
  }
};

TEST(ShmDriver, DropCounterCountsMessagesThatFoundNoBuffer) {
  std::string fabric = new_fabric("drop");
  auto a = open_node(fabric, 0), b = open_node(fabric, 1);
  Ud sender(*a), receiver(*b);
  receiver.post_recv(4096, 1024, 1);
  receiver.post_recv(8192, 1024, 2);
  auto ah = a->create_ah(receiver.qp->address());
  ASSERT_TRUE(ah.ok()) << ah.error().message;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sender.send(ah->get(), 64, i), Status::kSuccess);
  EXPECT_EQ(poll_for(*receiver.cq, 2).size(), 2u);
  auto stats = shm::ud_qp_stats(*receiver.qp);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->recv_dropped, 3u);
  EXPECT_EQ(shm::ud_qp_stats(*sender.qp)->recv_dropped, 0u);
}

// Mappings of `fabric`'s files in this process (/proc/self/maps).
size_t mappings_of(const std::string& fabric) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return 0;
  size_t n = 0;
  char line[4096];
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::strstr(line, fabric.c_str()) != nullptr && std::strstr(line, ".q") != nullptr) ++n;
  std::fclose(f);
  return n;
}

// A node maps a peer's receive queue once for all its address handles: a
// mapping per handle took 384 x 384 mappings for 16 nodes x 24 workers in
// one process, past the default vm.max_map_count, and the run failed.
TEST(ShmDriver, AddressHandlesOfANodeShareOneMappingOfAQueue) {
  std::string fabric = new_fabric("ahmap");
  auto a = open_node(fabric, 0), b = open_node(fabric, 1);
  Ud sender(*a), receiver(*b);
  const size_t before = mappings_of(fabric);  // the two queues' owners
  std::vector<std::unique_ptr<AddressHandle>> ahs;
  for (int i = 0; i < 50; ++i) {
    auto ah = a->create_ah(receiver.qp->address());
    ASSERT_TRUE(ah.ok()) << ah.error().message;
    ahs.push_back(std::move(*ah));
  }
  EXPECT_EQ(mappings_of(fabric), before + 1);
  // Each handle still delivers to the queue.
  receiver.post_recv(4096, 1024, 1);
  receiver.post_recv(8192, 1024, 2);
  EXPECT_EQ(sender.send(ahs.front().get(), 64, 1), Status::kSuccess);
  EXPECT_EQ(sender.send(ahs.back().get(), 64, 2), Status::kSuccess);
  EXPECT_EQ(poll_for(*receiver.cq, 2).size(), 2u);
  ahs.clear();
  EXPECT_EQ(mappings_of(fabric), before) << "the last handle unmaps it";
  // A new handle maps it again.
  auto again = a->create_ah(receiver.qp->address());
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(mappings_of(fabric), before + 1);
}

TEST(ShmDriver, UdStatsRefuseOtherQps) {
  auto dev = open_node(new_fabric("stats"), 0);
  auto cq = dev->create_cq(8);
  QpInit init;
  init.send_cq = cq->get();
  init.max_send_wr = 8;
  auto rc = dev->create_qp(init);
  ASSERT_TRUE(rc.ok());
  EXPECT_FALSE(shm::ud_qp_stats(**rc).ok());
}

TEST(ShmDriver, FilesAreRemovedWhenEverythingIsClosed) {
  std::string fabric = new_fabric("files");
  {
    auto dev = open_node(fabric, 7);
    Ud ud(*dev);
    // Control segment, one memory file, one receive queue.
    EXPECT_EQ(files_of(fabric).size(), 3u) << ::testing::PrintToString(files_of(fabric));
  }
  EXPECT_THAT(files_of(fabric), ::testing::IsEmpty());
}

TEST(ShmDriver, ObjectsMayOutliveTheirDevice) {
  std::string fabric = new_fabric("outlive");
  auto dev = open_node(fabric, 0);
  Ud ud(*dev);
  auto ah = dev->create_ah(ud.qp->address());
  ASSERT_TRUE(ah.ok());
  dev.reset();
  // The QP, CQ, memory and AH still work: they keep the node alive.
  ud.post_recv(4096, 256, 1);
  EXPECT_EQ(ud.send(ah->get(), 32, 2), Status::kSuccess);
  EXPECT_EQ(poll_for(*ud.cq, 1).size(), 1u);
  std::memset(ud.mem->data(), 1, 64);
  ud = Ud(*open_node(new_fabric("other"), 0));  // releases everything of the first node
  ah->reset();
  EXPECT_THAT(files_of(fabric), ::testing::IsEmpty());
}

// Runs a child process that opens node `node` of `fabric` and exits without
// closing it, as a crash would.
void abandon_node(std::string fabric, std::string node) {
  std::string exe = "/proc/self/exe", flag = "--rdtx-abandon-node", devargs = "shm";
  char* argv[] = {exe.data(), flag.data(), devargs.data(), fabric.data(), node.data(), nullptr};
  pid_t child;
  ASSERT_EQ(posix_spawn(&child, exe.c_str(), nullptr, nullptr, argv, environ), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// Abandons node `node` of a new fabric named after `tag` and returns the
// fabric once its files are seen in /dev/shm. Any process that opens a node
// reclaims dead owners' nodes, and the suite's other test processes open
// nodes all the time: one may reclaim ours before we look, so try again (a
// handful of times; it is rare).
std::string abandoned_fabric(const char* tag, const char* node) {
  std::string fabric;
  for (int attempt = 0; attempt < 5; ++attempt) {
    fabric = new_fabric(tag);
    abandon_node(fabric, node);
    if (::testing::Test::HasFatalFailure() || files_of(fabric).size() == 2) break;
  }
  return fabric;
}

TEST(ShmDriver, AStaleNodeOfACrashedProcessIsReclaimed) {
  std::string fabric = abandoned_fabric("stale", "4");
  ASSERT_FALSE(HasFatalFailure());
  auto left = files_of(fabric);
  ASSERT_EQ(left.size(), 2u) << "the crashed owner left its control segment and memory file";
  // A peer is told the node is gone.
  auto peer = open_node(fabric, 0);
  {
    auto dev = open_node(fabric, 4);  // reclaims
    ASSERT_NE(dev, nullptr);
    auto now = files_of(fabric);
    EXPECT_EQ(now.size(), 2u) << "control segments of nodes 0 and 4 only";
  }
  peer.reset();
  EXPECT_THAT(files_of(fabric), ::testing::IsEmpty());
}

// A run killed outright (SIGKILL, the OOM killer) leaves its nodes' files in
// /dev/shm, and later runs meet in fabrics of their own: opening any node
// reclaims them, or they would fill /dev/shm run after run.
TEST(ShmDriver, NodesOfADeadProcessInAnyFabricAreReclaimed) {
  std::string fabric = abandoned_fabric("dead", "2");
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(files_of(fabric).size(), 2u) << "the dead owner left its control segment and memory file";
  // A live node of a third fabric is left alone.
  std::string live = new_fabric("live");
  auto keep = open_node(live, 0);
  auto dev = open_node(new_fabric("later"), 0);
  ASSERT_NE(dev, nullptr);
  EXPECT_THAT(files_of(fabric), ::testing::IsEmpty());
  EXPECT_EQ(files_of(live).size(), 1u) << "a live node keeps its files";
}

TEST(ShmDriver, ANodeOfAnotherFabricIsUnreachable) {
  auto a = open_node(new_fabric("fa"), 0), b = open_node(new_fabric("fb"), 0);
  auto cq = a->create_cq(8);
  QpInit init;
  init.send_cq = cq->get();
  init.max_send_wr = 8;
  auto qa = a->create_qp(init);
  auto cqb = b->create_cq(8);
  init.send_cq = cqb->get();
  auto qb = b->create_qp(init);
  auto r = (*qa)->connect((*qb)->address());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message, ::testing::HasSubstr("another fabric"));
}

class ShmLoopback : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = open_node(new_fabric("loop"), 0);
    auto mem = dev_->alloc_memory(1 << 16);
    ASSERT_TRUE(mem.ok());
    mem_ = std::move(*mem);
    mr_ = *dev_->reg_mr(mem_->data(), mem_->size(), kAccessAll);
    cq_ = dev_->create_cq(16).value();
    QpInit init;
    init.send_cq = cq_.get();
    init.max_send_wr = 16;
    qp_ = dev_->create_qp(init).value();
    ASSERT_TRUE(qp_->connect(qp_->address()).ok());  // to itself
  }
  Status read(uint64_t addr, uint32_t rkey) {
    WorkRequest wr;
    wr.opcode = Opcode::kRead;
    wr.flags = kSignaled;
    wr.local = mem_->data();
    wr.length = 8;
    wr.lkey = mr_.lkey;
    wr.remote_addr = addr;
    wr.rkey = rkey;
    WorkRequest* bad = nullptr;
    EXPECT_EQ(qp_->post_send(&wr, &bad), 0);
    auto wc = poll_for(*cq_, 1);
    Status st = wc.size() == 1 ? wc[0].status : Status::kGeneralError;
    if (st != Status::kSuccess) {
      EXPECT_TRUE(qp_->connect(qp_->address()).ok());
    }
    return st;
  }

  std::unique_ptr<Device> dev_;
  std::unique_ptr<DeviceMemory> mem_;
  MemoryRegion mr_{};
  std::unique_ptr<CompletionQueue> cq_;
  std::unique_ptr<QueuePair> qp_;
};

TEST_F(ShmLoopback, AKeyOfAReusedSlotIsStale) {
  uint8_t* p = static_cast<uint8_t*>(mem_->data()) + 4096;
  auto old = dev_->reg_mr(p, 4096, kAccessAll);
  ASSERT_TRUE(old.ok());
  ASSERT_TRUE(dev_->dereg_mr(*old).ok());
  auto fresh = dev_->reg_mr(p, 4096, kAccessAll);
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(fresh->rkey, old->rkey);
  EXPECT_EQ(read(old->remote_addr(), old->rkey), Status::kRemoteAccessError);
  EXPECT_EQ(read(fresh->remote_addr(), fresh->rkey), Status::kSuccess);
  EXPECT_FALSE(dev_->dereg_mr(*old).ok()) << "deregistering a stale key";
}

TEST_F(ShmLoopback, FreeingMemoryDeregistersItsRegions) {
  auto other = dev_->alloc_memory(8192);
  ASSERT_TRUE(other.ok());
  auto mr = dev_->reg_mr((*other)->data(), 8192, kAccessAll);
  ASSERT_TRUE(mr.ok());
  EXPECT_EQ(read(mr->remote_addr(), mr->rkey), Status::kSuccess);
  other->reset();  // unmapped: the region must be gone, not dangling
  EXPECT_EQ(read(mr->remote_addr(), mr->rkey), Status::kRemoteAccessError);
}

// Scribbles on a receive queue as a buggy peer process could: senders must
// neither crash nor write outside the receiver's registered memory.
TEST(ShmDriver, AScribbledReceiveQueueNeverCrashesASender) {
  std::string fabric = new_fabric("scrib");
  auto a = open_node(fabric, 0), b = open_node(fabric, 1);
  Ud sender(*a), receiver(*b, 4);
  auto ah = a->create_ah(receiver.qp->address());
  ASSERT_TRUE(ah.ok());
  std::string path = "/dev/shm/rdtx." + fabric + ".n1.q" + std::to_string(receiver.qp->qp_num());
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  struct stat st {};
  fstat(fd, &st);
  void* map = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(map, MAP_FAILED);
  auto* h = static_cast<shm::RecvQueueHeader*>(map);
  auto* slots = reinterpret_cast<shm::RecvSlot*>(static_cast<uint8_t*>(map) + shm::kRecvSlotsOffset);

  // Counters that make no sense: messages are dropped.
  h->claimed = h->posted + 1000;
  EXPECT_EQ(sender.send(ah->get(), 64, 1), Status::kSuccess);
  h->claimed = 0;
  h->posted = 1u << 30;
  EXPECT_EQ(sender.send(ah->get(), 64, 2), Status::kSuccess);
  h->posted = 0;
  EXPECT_EQ(shm::ud_qp_stats(*receiver.qp)->recv_dropped, 2u);

  // Descriptors pointing outside the receiver's region: the receive fails.
  std::memset(receiver.buf(0), 0xee, 1 << 16);
  receiver.post_recv(1024, 256, 10);
  slots[0].addr = 0x1000;
  EXPECT_EQ(sender.send(ah->get(), 64, 3), Status::kSuccess);
  receiver.post_recv(1024, 256, 11);
  slots[1].addr = reinterpret_cast<uint64_t>(receiver.buf((1 << 16) - 16));
  slots[1].length = UINT32_MAX;
  EXPECT_EQ(sender.send(ah->get(), 64, 4), Status::kSuccess);
  receiver.post_recv(1024, 256, 12);
  slots[2].lkey = receiver.mr.lkey + 1;
  EXPECT_EQ(sender.send(ah->get(), 64, 5), Status::kSuccess);
  auto wc = poll_for(*receiver.cq, 3);
  ASSERT_EQ(wc.size(), 3u);
  for (const Completion& c : wc) EXPECT_EQ(c.status, Status::kLocalProtectionError) << c.wr_id;
  EXPECT_EQ(std::vector<uint8_t>(receiver.buf(0), receiver.buf(1 << 16)), std::vector<uint8_t>(1 << 16, 0xee));

  // A completion with a status a receive cannot have is reported as an error.
  receiver.post_recv(1024, 256, 13);
  EXPECT_EQ(sender.send(ah->get(), 64, 6), Status::kSuccess);
  slots[3].status = 200;
  slots[3].byte_len = 100000;
  wc = poll_for(*receiver.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, Status::kGeneralError);
  munmap(map, st.st_size);
}

// atomics=hca (hca_atomics.hpp): a node's memory with a word, and RC QPs of
// any node connected to a QP of node 0, one per thread that posts atomics.
struct HcaNode {
  std::string fabric = new_fabric("hca");
  std::unique_ptr<Device> dev = open_node(fabric, 0, "shm,atomics=hca");
  std::unique_ptr<DeviceMemory> mem;
  MemoryRegion mr{};
  uint64_t* word() const { return static_cast<uint64_t*>(mem->data()); }

  // A poster: its own QP (on `on`) connected to a fresh QP of node 0, a CQ
  // and an 8-byte result buffer. A QP belongs to one thread.
  struct Poster {
    std::unique_ptr<DeviceMemory> mem;
    MemoryRegion mr{};
    std::unique_ptr<CompletionQueue> cq, peer_cq;
    std::unique_ptr<QueuePair> qp, peer;
    // One atomic, awaited: the old value, or UINT64_MAX on a failure.
    uint64_t atomic(Opcode op, uint64_t* target, uint32_t rkey, uint64_t compare_add, uint64_t swap = 0) {
      WorkRequest wr;
      wr.opcode = op;
      wr.flags = kSignaled;
      wr.local = mem->data();
      wr.length = 8;
      wr.lkey = mr.lkey;
      wr.remote_addr = reinterpret_cast<uint64_t>(target);
      wr.rkey = rkey;
      wr.compare_add = compare_add;
      wr.swap = swap;
      WorkRequest* bad = nullptr;
      if (qp->post_send(&wr, &bad) != 0) return UINT64_MAX;
      auto wc = poll_for(*cq, 1);
      if (wc.size() != 1 || wc[0].status != Status::kSuccess) return UINT64_MAX;
      uint64_t old;
      std::memcpy(&old, mem->data(), 8);
      return old;
    }
  };
  Poster poster(Device& on) {
    Poster p;
    p.mem = on.alloc_memory(4096).value();
    p.mr = *on.reg_mr(p.mem->data(), 4096, kAccessAll);
    p.cq = on.create_cq(8).value();
    p.peer_cq = dev->create_cq(8).value();
    QpInit init;
    init.max_send_wr = 4;
    init.send_cq = p.cq.get();
    p.qp = on.create_qp(init).value();
    init.send_cq = p.peer_cq.get();
    p.peer = dev->create_qp(init).value();
    EXPECT_TRUE(p.qp->connect(p.peer->address()).ok());
    EXPECT_TRUE(p.peer->connect(p.qp->address()).ok());
    return p;
  }
  HcaNode() {
    mem = dev->alloc_memory(4096).value();
    mr = *dev->reg_mr(mem->data(), 4096, kAccessAll);
  }
};

// What atomics=hca models, and why the engine needs owner atomics on such a
// device: a CPU CAS that lands inside a remote FAA's read-modify-write is
// lost (the FAA writes back what it read, plus one). The two threads must
// overlap for it to show: up to 50 rounds.
TEST(ShmDriver, HcaRemoteAtomicsLoseCpuCasesThatLandInside) {
  HcaNode n;
  ASSERT_FALSE(n.dev->caps().atomics_coherent_with_cpu);
  auto nic = n.poster(*n.dev);  // loopback: node 0 onto its own memory
  uint64_t lost = 0;
  int round = 0;
  for (; round < 50 && lost == 0; ++round) {
    *n.word() = 0;
    std::atomic<bool> stop{false};
    uint64_t cpu_ops = 0;
    std::thread cpu([&] {
      std::atomic_ref<uint64_t> w(*n.word());
      while (!stop.load(std::memory_order_relaxed)) {
        uint64_t v = w.load(std::memory_order_relaxed);
        while (!w.compare_exchange_weak(v, v + 1)) {
        }
        ++cpu_ops;
      }
    });
    int failed = 0;
    for (int i = 0; i < 2000; ++i) failed += nic.atomic(Opcode::kFetchAdd, n.word(), n.mr.rkey, 1) == UINT64_MAX;
    stop.store(true);
    cpu.join();
    ASSERT_EQ(failed, 0);
    lost = cpu_ops + 2000 - *n.word();
  }
  EXPECT_GT(lost, 0u) << "no CPU CAS lost in " << round << " rounds: the model would model nothing";
}

// ... while remote atomics stay atomic with respect to each other, from any
// node (here node 1's QP and node 0's own, in two threads).
TEST(ShmDriver, HcaRemoteAtomicsAreAtomicAmongThemselves) {
  HcaNode n;
  OpenOptions oo;
  oo.fabric = n.fabric;
  oo.node_id = 1;
  auto other = open_device("shm,atomics=hca", oo);
  ASSERT_TRUE(other.ok()) << other.error().message;
  auto far = n.poster(**other), near = n.poster(*n.dev);
  *n.word() = 0;
  constexpr int kOps = 3000;
  std::atomic<int> failed{0};
  std::thread t([&] {
    for (int i = 0; i < kOps; ++i) failed += far.atomic(Opcode::kFetchAdd, n.word(), n.mr.rkey, 1) == UINT64_MAX;
  });
  // CAS increments: each retried until it matches.
  for (int i = 0; i < kOps;) {
    const uint64_t v = std::atomic_ref<uint64_t>(*n.word()).load();
    const uint64_t old = near.atomic(Opcode::kCompareSwap, n.word(), n.mr.rkey, v, v + 1);
    if (old == UINT64_MAX) {
      ++failed;
      break;
    }
    i += old == v;
  }
  t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(*n.word(), uint64_t{2 * kOps});
}

// Every node of a fabric runs the same atomics: a node with atomics=hca
// refuses to reach one without an atomic unit, naming the devarg.
TEST(ShmDriver, HcaNeedsEveryNodeInTheSameMode) {
  HcaNode n;
  OpenOptions oo;
  oo.fabric = n.fabric;
  oo.node_id = 1;
  auto plain = open_device("shm", oo);
  ASSERT_TRUE(plain.ok());
  auto cq = (*plain)->create_cq(8).value();
  auto mine = n.dev->create_cq(8).value();
  QpInit init;
  init.max_send_wr = 4;
  init.send_cq = cq.get();
  auto theirs = (*plain)->create_qp(init).value();
  init.send_cq = mine.get();
  auto qp = n.dev->create_qp(init).value();
  auto r = qp->connect(theirs->address());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message, ::testing::HasSubstr("runs with atomics=cpu"));
}

}  // namespace
}  // namespace rdtx::rdma::test
