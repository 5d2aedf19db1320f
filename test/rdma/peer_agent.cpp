#include "peer_agent.hpp"

#include <poll.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "rdma/rdma.hpp"
#include "test_util.hpp"

namespace rdtx::rdma::test {

namespace {

constexpr uint32_t kEchoBuffers = 64;
constexpr uint64_t kSendTag = 1ull << 63;
constexpr int kIdleBeforeSleep = 4096;  // empty polls before sleeping 1 ms between them

struct Region {
  std::unique_ptr<DeviceMemory> mem;
  MemoryRegion mr;
};

std::string describe(const MemoryRegion& mr) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%" PRIu64 ",%u,%zu", mr.remote_addr(), mr.rkey, mr.length);
  return buf;
}

class Agent {
 public:
  Agent(int in_fd, int out_fd) : in_(in_fd), out_(out_fd) {}
  Result<void> start(const AgentOptions& opts);
  int run();

 private:
  Result<Region> region(size_t bytes, uint32_t access, uint8_t fill);
  void reply(const std::string& line);
  void command(const std::string& line);
  void serve_echo();
  void repost_echo(uint64_t i);
  Result<const AddressHandle*> ah_for(const QpAddress& addr);
  Result<std::string> send_messages(const QpAddress& to, uint64_t n, uint32_t size, uint64_t seq);
  Result<std::string> peek(uint64_t addr, size_t len);

  int in_;
  int out_;
  std::unique_ptr<Device> dev_;
  Region mem_, ro_, dead_, echo_bufs_, send_bufs_;
  Region lazy_;  // reserve_memory(), on request ("lazy"), committed piecewise ("commit")
  std::vector<uint8_t> heap_;
  MemoryRegion heap_mr_{};
  uint32_t mtu_ = 0;
  int idle_ = 0;  // consecutive empty polls of the echo CQ
  std::unique_ptr<CompletionQueue> echo_cq_;
  std::unique_ptr<QueuePair> echo_qp_;
  std::unique_ptr<CompletionQueue> send_cq_;
  std::unique_ptr<QueuePair> send_qp_;
  std::vector<std::pair<QpAddress, std::unique_ptr<AddressHandle>>> ahs_;
  struct Rc {
    std::unique_ptr<CompletionQueue> cq;
    std::unique_ptr<QueuePair> qp;
  };
  std::vector<Rc> rcs_;
};

Result<Region> Agent::region(size_t bytes, uint32_t access, uint8_t fill) {
  auto mem = dev_->alloc_memory(bytes);
  if (!mem.ok()) return mem.error();
  std::memset((*mem)->data(), fill, bytes);
  auto mr = dev_->reg_mr((*mem)->data(), bytes, access);
  if (!mr.ok()) return mr.error();
  return Region{std::move(*mem), *mr};
}

Result<void> Agent::start(const AgentOptions& opts) {
  OpenOptions oo;
  oo.node_id = opts.node_id;
  oo.fabric = opts.fabric;
  auto dev = open_device(opts.devargs, oo);
  if (!dev.ok()) return dev.error();
  dev_ = std::move(*dev);
  mtu_ = dev_->caps().max_msg_size;
  auto mem = region(1 << 20, kAccessAll, 0);
  if (!mem.ok()) return mem.error();
  mem_ = std::move(*mem);
  auto ro = region(4096, kLocalWrite | kRemoteRead, 0xa5);
  if (!ro.ok()) return ro.error();
  ro_ = std::move(*ro);
  auto dead = region(4096, kAccessAll, 0x5a);
  if (!dead.ok()) return dead.error();
  dead_ = std::move(*dead);
  RDTX_TRY(dev_->dereg_mr(dead_.mr));
  heap_.assign(4096, 0x3c);
  auto heap = dev_->reg_mr(heap_.data(), heap_.size(), kAccessAll);
  if (!heap.ok()) return heap.error();
  heap_mr_ = *heap;

  auto bufs = region(size_t{kEchoBuffers} * mtu_, kAccessAll, 0);
  if (!bufs.ok()) return bufs.error();
  echo_bufs_ = std::move(*bufs);
  auto cq = dev_->create_cq(4 * kEchoBuffers);
  if (!cq.ok()) return cq.error();
  echo_cq_ = std::move(*cq);
  QpInit init;
  init.type = QpType::kUd;
  init.send_cq = echo_cq_.get();
  init.recv_cq = echo_cq_.get();
  init.max_send_wr = kEchoBuffers;
  init.max_recv_wr = kEchoBuffers;
  auto qp = dev_->create_qp(init);
  if (!qp.ok()) return qp.error();
  echo_qp_ = std::move(*qp);
  for (uint64_t i = 0; i < kEchoBuffers; ++i) repost_echo(i);

  std::ostringstream ready;
  ready << "ready mem=" << describe(mem_.mr) << " ro=" << describe(ro_.mr) << " dead=" << describe(dead_.mr)
        << " heap=" << describe(heap_mr_) << " echo=" << to_hex(echo_qp_->address())
        << " echo_qpn=" << echo_qp_->qp_num() << " pid=" << getpid();
  reply(ready.str());
  return {};
}

void Agent::reply(const std::string& line) {
  std::string s = line + "\n";
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(out_, s.data() + off, s.size() - off);
    if (n <= 0) return;  // the test went away; its end of input follows
    off += static_cast<size_t>(n);
  }
}

void Agent::repost_echo(uint64_t i) {
  RecvRequest r;
  r.wr_id = i;
  r.addr = static_cast<uint8_t*>(echo_bufs_.mr.addr) + i * mtu_;
  r.length = mtu_;
  r.lkey = echo_bufs_.mr.lkey;
  RecvRequest* bad = nullptr;
  echo_qp_->post_recv(&r, &bad);
}

Result<const AddressHandle*> Agent::ah_for(const QpAddress& addr) {
  for (auto& [a, ah] : ahs_)
    if (a == addr) return ah.get();
  auto ah = dev_->create_ah(addr);
  if (!ah.ok()) return ah.error();
  ahs_.emplace_back(addr, std::move(*ah));
  return ahs_.back().second.get();
}

void Agent::serve_echo() {
  Completion wc[32];
  int n = echo_cq_->poll(wc, 32);
  for (int k = 0; k < n; ++k) {
    const Completion& c = wc[k];
    if (c.opcode != Opcode::kRecv) {  // an echo sent: its buffer may take the next request
      repost_echo(c.wr_id & ~kSendTag);
      continue;
    }
    uint8_t* buf = static_cast<uint8_t*>(echo_bufs_.mr.addr) + c.wr_id * mtu_;
    QpAddress reply_to;
    if (c.status != Status::kSuccess || c.byte_len < sizeof reply_to.bytes) {
      repost_echo(c.wr_id);
      continue;
    }
    std::memcpy(reply_to.bytes, buf, sizeof reply_to.bytes);
    auto ah = ah_for(reply_to);
    if (!ah.ok()) {
      repost_echo(c.wr_id);
      continue;
    }
    WorkRequest wr;
    wr.wr_id = kSendTag | c.wr_id;
    wr.opcode = Opcode::kSend;
    wr.flags = kSignaled;
    wr.local = buf;
    wr.length = c.byte_len;
    wr.lkey = echo_bufs_.mr.lkey;
    wr.ah = *ah;
    WorkRequest* bad = nullptr;
    if (echo_qp_->post_send(&wr, &bad) != 0) repost_echo(c.wr_id);
  }
  idle_ = n > 0 ? 0 : idle_ + 1;
}

Result<std::string> Agent::send_messages(const QpAddress& to, uint64_t n, uint32_t size, uint64_t seq) {
  if (size > mtu_) return make_error(EINVAL, "send: size %u exceeds the MTU %u", size, mtu_);
  if (!send_qp_) {
    auto cq = dev_->create_cq(64);
    if (!cq.ok()) return cq.error();
    send_cq_ = std::move(*cq);
    QpInit init;
    init.type = QpType::kUd;
    init.send_cq = send_cq_.get();
    init.recv_cq = send_cq_.get();
    init.max_send_wr = 16;
    init.max_recv_wr = 1;
    auto qp = dev_->create_qp(init);
    if (!qp.ok()) return qp.error();
    send_qp_ = std::move(*qp);
    auto bufs = region(mtu_, kAccessAll, 0);
    if (!bufs.ok()) return bufs.error();
    send_bufs_ = std::move(*bufs);
  }
  auto ah = ah_for(to);
  if (!ah.ok()) return ah.error();
  uint64_t ok = 0;
  for (uint64_t i = 0; i < n; ++i) {
    auto* buf = static_cast<uint8_t*>(send_bufs_.mr.addr);
    fill_pattern(buf, size, seq + i);
    WorkRequest wr;
    wr.wr_id = seq + i;
    wr.opcode = Opcode::kSend;
    wr.flags = kSignaled;
    wr.local = buf;
    wr.length = size;
    wr.lkey = send_bufs_.mr.lkey;
    wr.ah = *ah;
    WorkRequest* bad = nullptr;
    int rc = send_qp_->post_send(&wr, &bad);
    if (rc != 0) return make_error(-rc, "send: post_send failed: %s", std::strerror(-rc));
    auto wc = poll_for(*send_cq_, 1);
    if (wc.size() != 1) return make_error(ETIMEDOUT, "send: no completion for message %" PRIu64, seq + i);
    if (wc[0].status == Status::kSuccess) ++ok;
  }
  return std::to_string(ok) + " " + std::to_string(send_qp_->qp_num());
}

Result<std::string> Agent::peek(uint64_t addr, size_t len) {
  for (const MemoryRegion* mr : {&mem_.mr, &ro_.mr, &dead_.mr, &heap_mr_, &lazy_.mr}) {
    if (mr->length == 0) continue;
    uint64_t base = mr->remote_addr();
    if (addr >= base && len <= mr->length && addr - base <= mr->length - len)
      return to_hex(reinterpret_cast<const void*>(addr), len);
  }
  return make_error(EINVAL, "peek: [%" PRIu64 ", +%zu) is not memory of this agent", addr, len);
}

void Agent::command(const std::string& line) {
  std::istringstream in(line);
  std::string cmd;
  in >> cmd;
  auto fail = [&](const std::string& why) { reply("err " + cmd + ": " + why); };
  if (cmd == "rc" || cmd == "reconnect") {
    size_t id = rcs_.size();
    if (cmd == "reconnect") in >> id;
    std::string hex;
    in >> hex;
    QpAddress addr;
    if (!from_hex(hex, &addr) || id > rcs_.size() || (cmd == "reconnect" && id == rcs_.size()))
      return fail("bad arguments");
    if (cmd == "rc") {
      auto cq = dev_->create_cq(16);
      if (!cq.ok()) return fail(cq.error().message);
      QpInit init;
      init.type = QpType::kRc;
      init.send_cq = cq->get();
      init.max_send_wr = 16;
      auto qp = dev_->create_qp(init);
      if (!qp.ok()) return fail(qp.error().message);
      rcs_.push_back(Rc{std::move(*cq), std::move(*qp)});
    }
    auto r = rcs_[id].qp->connect(addr);
    if (!r.ok()) return fail(r.error().message);
    return reply(cmd == "rc" ? "ok " + std::to_string(id) + " " + to_hex(rcs_[id].qp->address()) : "ok");
  }
  if (cmd == "send") {
    std::string hex;
    uint64_t n = 0, seq = 0;
    uint32_t size = 0;
    in >> hex >> n >> size >> seq;
    QpAddress addr;
    if (!in || !from_hex(hex, &addr)) return fail("bad arguments");
    auto r = send_messages(addr, n, size, seq);
    return r.ok() ? reply("ok " + *r) : fail(r.error().message);
  }
  if (cmd == "peek") {
    uint64_t addr = 0;
    size_t len = 0;
    in >> addr >> len;
    if (!in) return fail("bad arguments");
    auto r = peek(addr, len);
    return r.ok() ? reply("ok " + *r) : fail(r.error().message);
  }
  if (cmd == "lazy") {  // reserve, register all of it, commit a prefix
    size_t reserve = 0, commit = 0;
    in >> reserve >> commit;
    if (!in || lazy_.mem) return fail("bad arguments");
    auto mem = dev_->reserve_memory(reserve, commit);
    if (!mem.ok()) return fail(mem.error().message);
    auto mr = dev_->reg_mr((*mem)->data(), reserve, kAccessAll);
    if (!mr.ok()) return fail(mr.error().message);
    lazy_ = Region{std::move(*mem), *mr};
    return reply("ok " + describe(lazy_.mr));
  }
  if (cmd == "commit") {
    size_t offset = 0, length = 0;
    in >> offset >> length;
    if (!in || !lazy_.mem) return fail("bad arguments");
    auto r = lazy_.mem->commit(offset, length);
    return r.ok() ? reply("ok") : fail(r.error().message);
  }
  fail("unknown command");
}

int Agent::run() {
  std::string pending;
  int since_check = 0;
  for (;;) {
    serve_echo();
    // Check for commands every 64 busy polls, or at every idle one; sleep a
    // millisecond at a time once idle for long, to leave the cores to others.
    if (idle_ == 0 && ++since_check < 64) continue;
    since_check = 0;
    pollfd p{in_, POLLIN, 0};
    if (poll(&p, 1, idle_ > kIdleBeforeSleep ? 1 : 0) <= 0) continue;
    char buf[4096];
    ssize_t n = read(in_, buf, sizeof buf);
    if (n <= 0) return 0;  // end of input: the test is done with us
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      command(line);
      idle_ = 0;
    }
  }
}

}  // namespace

int run_peer_agent(int in_fd, int out_fd, const AgentOptions& opts) {
  Agent agent(in_fd, out_fd);
  auto r = agent.start(opts);
  if (!r.ok()) {
    std::string line = "err " + r.error().message + "\n";
    (void)!write(out_fd, line.data(), line.size());
    return 1;
  }
  return agent.run();
}

}  // namespace rdtx::rdma::test
