// lib/cluster/bootstrap: nodes as threads of this process, and as fork()ed
// processes where a node must die (SIGKILL) or stall (SIGSTOP), all on
// 127.0.0.1 with ports the kernel reported free. Raw sockets play strangers
// and misconfigured nodes; they speak the wire format of doc/bootstrap.md.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cluster/bootstrap.hpp"
#include "cluster/bootstrap_wire.hpp"
#include "cluster/wire_codec.hpp"
#include "../free_ports.hpp"

using namespace rdtx;
using cluster::Bootstrap;
using cluster::BootstrapOptions;
using Blob = std::vector<std::byte>;

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

using rdtx::test::free_ports;

BootstrapOptions options(uint32_t self, const std::vector<uint16_t>& ports, uint64_t connect_ms = 5000) {
  BootstrapOptions o;
  o.self = self;
  for (uint32_t i = 0; i < ports.size(); ++i) o.nodes.push_back({i, "127.0.0.1", ports[i]});
  o.connect_timeout_ms = connect_ms;
  o.op_timeout_ms = 5000;
  o.heartbeat_ms = 100;
  o.peer_dead_ms = 600;
  return o;
}

std::string addr(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

struct Joined {
  std::unique_ptr<Bootstrap> b;
  Error err;
};

// Connects every node of `opts` concurrently, one thread each.
std::vector<Joined> connect_nodes(const std::vector<BootstrapOptions>& opts) {
  std::vector<Joined> out(opts.size());
  std::vector<std::thread> ts;
  for (size_t i = 0; i < opts.size(); ++i)
    ts.emplace_back([&, i] {
      auto r = Bootstrap::connect(opts[i]);
      if (r.ok())
        out[i].b = std::move(*r);
      else
        out[i].err = r.error();
    });
  for (auto& t : ts) t.join();
  return out;
}

std::vector<Joined> connect_all(const std::vector<uint16_t>& ports) {
  std::vector<BootstrapOptions> opts;
  for (uint32_t i = 0; i < ports.size(); ++i) opts.push_back(options(i, ports));
  return connect_nodes(opts);
}

// Runs f(i) for every node at once (collectives block until all take part).
void on_all(size_t n, const std::function<void(uint32_t)>& f) {
  std::vector<std::thread> ts;
  for (uint32_t i = 0; i < n; ++i) ts.emplace_back(f, i);
  for (auto& t : ts) t.join();
}

Blob pattern(uint32_t node, size_t size) {
  Blob b(size);
  for (size_t j = 0; j < size; ++j) b[j] = std::byte(static_cast<uint8_t>(node * 31 + j * 7 + (j >> 12)));
  return b;
}

bool wait_for(const std::function<bool()>& cond, int64_t ms) {
  const int64_t deadline = now_ms() + ms;
  while (!cond()) {
    if (now_ms() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Whether msg says that `node` lost its connection (then `tail`): a process
// that exits with unread data in its socket resets the connection instead
// of closing it, which is up to timing.
testing::AssertionResult lost(const std::string& msg, const std::string& node, const std::string& tail = "") {
  if (msg.find(node + " closed the connection" + tail) != std::string::npos) return testing::AssertionSuccess();
  size_t at = msg.find(node + " reset the connection (");
  if (at != std::string::npos && msg.find(")" + tail, at) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << msg << "' does not say that " << node << " lost its connection" << tail;
}

// --- raw clients: the wire format of doc/bootstrap.md ---

struct Wire {
  std::vector<std::byte> b;
  Wire& u8(uint8_t v) {
    b.push_back(std::byte{v});
    return *this;
  }
  Wire& u16(uint16_t v) { return u8(static_cast<uint8_t>(v >> 8)).u8(static_cast<uint8_t>(v)); }
  Wire& u32(uint32_t v) { return u16(static_cast<uint16_t>(v >> 16)).u16(static_cast<uint16_t>(v)); }
  Wire& u64(uint64_t v) { return u32(static_cast<uint32_t>(v >> 32)).u32(static_cast<uint32_t>(v)); }
  Wire& text(std::string_view s) {
    for (char c : s) u8(static_cast<uint8_t>(c));
    return *this;
  }
};

std::vector<std::byte> frame(uint16_t type, uint32_t from, const std::vector<std::byte>& payload,
                             uint16_t version = 2) {
  Wire w;
  w.u32(0x52445442).u16(version).u16(type).u32(from).u32(static_cast<uint32_t>(payload.size()));
  w.b.insert(w.b.end(), payload.begin(), payload.end());
  return w.b;
}

uint64_t doc_fingerprint(const std::vector<uint16_t>& ports) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t i = 0; i < ports.size(); ++i)
    for (unsigned char c : std::to_string(i) + "=127.0.0.1:" + std::to_string(ports[i]) + ";") {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  return h;
}

// The run token as doc/bootstrap.md defines it.
uint64_t doc_token(uint32_t nodes, uint64_t fp, std::string_view run = "") {
  char head[80];
  std::snprintf(head, sizeof head, "rdtx-run v2 %u %016llx ", nodes, static_cast<unsigned long long>(fp));
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : std::string(head) + std::string(run)) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// A hello as doc/bootstrap.md lays it out, with the token of (nodes, fp, run)
// unless another is given.
std::vector<std::byte> hello(uint32_t id, uint32_t nodes, uint64_t fp, std::string_view run = "",
                             std::optional<uint64_t> token = std::nullopt) {
  Wire p;
  p.u64(token.value_or(doc_token(nodes, fp, run))).u32(nodes).u64(fp);
  p.u16(static_cast<uint16_t>(run.size())).text(run);
  return frame(1, id, p.b);
}

int raw_connect(uint16_t port) {
  for (int attempt = 0; attempt < 300; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

void send_bytes(int fd, const std::vector<std::byte>& b) {
  size_t off = 0;
  while (off < b.size()) {
    ssize_t r = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    if (r <= 0) return;  // the peer may already have dropped us
    off += static_cast<size_t>(r);
  }
}

// Reads until the peer closes (true) or ms pass (false); returns what came.
bool read_until_eof(int fd, int ms, std::string* got = nullptr) {
  const int64_t deadline = now_ms() + ms;
  char buf[4096];
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r <= 0) return true;
    if (got) got->append(buf, static_cast<size_t>(r));
  }
}

// A node in a child process: connects, starts its monitor, meets the parent's
// nodes at barrier "monitoring", then idles with its heartbeat thread running
// until killed. Forked before the parent starts any thread.
struct Child {
  pid_t pid = -1;
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

pid_t spawn_monitored_node(const BootstrapOptions& o) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  auto b = Bootstrap::connect(o);
  if (!b.ok()) _exit(2);
  (*b)->start_monitor();
  if (!(*b)->barrier("monitoring").ok()) _exit(3);
  for (int i = 0; i < 300; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  _exit(0);
}

}  // namespace

// --- collectives ---

TEST(Bootstrap, ThreeNodesAllGatherGatherBarrier) {
  auto ports = free_ports(3);
  auto nodes = connect_all(ports);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  EXPECT_EQ(nodes[1].b->self(), 1u);
  EXPECT_EQ(nodes[1].b->nodes(), 3u);
  EXPECT_EQ(nodes[2].b->address(0).port, ports[0]);

  const size_t sizes[3] = {0, 1 << 20, 17};  // empty, 1 MiB, odd
  std::vector<std::vector<Blob>> got(3), gathered(3);
  on_all(3, [&](uint32_t i) {
    Bootstrap& b = *nodes[i].b;
    Blob mine = pattern(i, sizes[i]);
    auto r = b.all_gather(mine, "qps");
    ASSERT_TRUE(r.ok()) << r.error().message;
    got[i] = *r;
    ASSERT_TRUE(b.barrier("loaded").ok());
    auto g = b.gather(pattern(i, 100 + i), "stats");
    ASSERT_TRUE(g.ok()) << g.error().message;
    gathered[i] = *g;
    ASSERT_TRUE(b.barrier("done").ok());
  });
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_EQ(got[i].size(), 3u) << "node " << i;
    for (uint32_t k = 0; k < 3; ++k) EXPECT_EQ(got[i][k], pattern(k, sizes[k])) << "node " << i << " blob " << k;
  }
  ASSERT_EQ(gathered[0].size(), 3u);
  for (uint32_t k = 0; k < 3; ++k) EXPECT_EQ(gathered[0][k], pattern(k, 100 + k));
  EXPECT_TRUE(gathered[1].empty());
  EXPECT_TRUE(gathered[2].empty());

  // Every node 1 MiB at once, then all empty.
  on_all(3, [&](uint32_t i) {
    auto r = nodes[i].b->all_gather(pattern(i + 5, 1 << 20), "big");
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->size(), 3u);
    for (uint32_t k = 0; k < 3; ++k) EXPECT_EQ((*r)[k], pattern(k + 5, 1 << 20));
    auto e = nodes[i].b->all_gather({}, "empty");
    ASSERT_TRUE(e.ok()) << e.error().message;
    EXPECT_EQ(*e, std::vector<Blob>(3));
  });
  for (auto& j : nodes) EXPECT_FALSE(j.b->failed());
}

TEST(Bootstrap, SingleNodeNeedsNoPeers) {
  auto ports = free_ports(1);
  auto b = Bootstrap::connect(options(0, ports));
  ASSERT_TRUE(b.ok()) << b.error().message;
  auto r = (*b)->all_gather(pattern(0, 10), "x");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, std::vector<Blob>{pattern(0, 10)});
  EXPECT_TRUE((*b)->barrier("b").ok());
  EXPECT_TRUE((*b)->agree({{"a", "1"}}).ok());
}

TEST(Bootstrap, CollectivesWhileMonitoring) {
  auto ports = free_ports(3);
  auto nodes = connect_all(ports);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  for (auto& j : nodes) j.b->start_monitor();
  on_all(3, [&](uint32_t i) {
    auto r = nodes[i].b->all_gather(pattern(i, (1 << 20) - i), "qps");
    ASSERT_TRUE(r.ok()) << r.error().message;
    for (uint32_t k = 0; k < 3; ++k) EXPECT_EQ((*r)[k], pattern(k, (1 << 20) - k));
    auto g = nodes[i].b->gather(pattern(i, 3), "stats");
    ASSERT_TRUE(g.ok()) << g.error().message;
    EXPECT_EQ(g->size(), i == 0 ? 3u : 0u);
    ASSERT_TRUE(nodes[i].b->barrier("done").ok());
    nodes[i].b->stop_monitor();
  });
  for (auto& j : nodes) EXPECT_FALSE(j.b->failed()) << j.b->failure();
}

TEST(Bootstrap, DifferentOperationsAreAnErrorOnEveryNode) {
  auto ports = free_ports(3);
  auto nodes = connect_all(ports);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  std::vector<std::string> err(3);
  on_all(3, [&](uint32_t i) {
    auto r = nodes[i].b->barrier(i == 2 ? "unloaded" : "loaded");
    if (!r.ok()) err[i] = r.error().message;
  });
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_NE(err[i].find("node 2 (" + addr(ports[2]) + ") is in barrier 'unloaded'"), std::string::npos) << err[i];
    EXPECT_NE(err[i].find("node 0 is in barrier 'loaded'"), std::string::npos) << err[i];
    EXPECT_TRUE(nodes[i].b->failed());
  }
  // Broken for good: later calls fail at once with the same error.
  EXPECT_EQ(nodes[1].b->barrier("again").error().message, err[1]);
}

TEST(Bootstrap, BarrierTimeoutNamesTheLateNode) {
  auto ports = free_ports(3);
  std::vector<BootstrapOptions> opts;
  for (uint32_t i = 0; i < 3; ++i) {
    opts.push_back(options(i, ports));
    opts.back().op_timeout_ms = 300;
  }
  auto nodes = connect_nodes(opts);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  std::vector<std::string> err(3);
  const int64_t t0 = now_ms();
  on_all(3, [&](uint32_t i) {
    if (i == 1) return;  // node 1 never comes
    auto r = nodes[i].b->barrier("loaded");
    if (!r.ok()) err[i] = r.error().message;
  });
  EXPECT_LT(now_ms() - t0, 2000);
  const std::string want = "node 1 (" + addr(ports[1]) + ") did not reach barrier 'loaded' within 0.3 s";
  EXPECT_NE(err[0].find(want), std::string::npos) << err[0];
  EXPECT_NE(err[2].find(want), std::string::npos) << err[2];
}

TEST(Bootstrap, PeerClosingDuringBarrierIsNamed) {
  auto ports = free_ports(3);
  auto nodes = connect_all(ports);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  nodes[1].b.reset();
  std::vector<std::string> err(3);
  on_all(3, [&](uint32_t i) {
    if (i == 1) return;
    auto r = nodes[i].b->barrier("loaded");
    if (!r.ok()) err[i] = r.error().message;
  });
  const std::string node1 = "node 1 (" + addr(ports[1]) + ")";
  EXPECT_TRUE(lost(err[0], node1, " during barrier 'loaded'"));
  EXPECT_TRUE(lost(err[2], node1, " during barrier 'loaded'"));
}

// --- configuration agreement ---

TEST(Bootstrap, AgreeAcceptsEqualConfigs) {
  auto ports = free_ports(3);
  auto nodes = connect_all(ports);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  on_all(3, [&](uint32_t i) {
    auto r = nodes[i].b->agree({{"txn.protocol", "\"occ\""}, {"txn.coroutines", "4"}});
    EXPECT_TRUE(r.ok()) << r.error().message;
  });
}

TEST(Bootstrap, AgreeMismatchNamesKeyValuesAndNodesOnEveryNode) {
  auto ports = free_ports(3);
  auto nodes = connect_all(ports);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  std::vector<std::string> err(3);
  on_all(3, [&](uint32_t i) {
    auto r = nodes[i].b->agree({{"txn.protocol", "\"occ\""}, {"txn.coroutines", i == 2 ? "8" : "4"}});
    if (!r.ok()) err[i] = r.error().message;
  });
  for (uint32_t i = 0; i < 3; ++i)
    EXPECT_EQ(err[i], "bootstrap: config mismatch: node 2 has txn.coroutines = 8, node 0 has 4") << "node " << i;
}

TEST(Bootstrap, AgreeMismatchOnKeyPresentOnOneSideOnly) {
  for (bool extra : {false, true}) {
    auto ports = free_ports(2);
    auto nodes = connect_all(ports);
    for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
    std::vector<std::string> err(2);
    on_all(2, [&](uint32_t i) {
      std::vector<std::pair<std::string, std::string>> c{{"a", "1"}};
      if ((i == 1) == extra) c.emplace_back("txn.x", "5");
      auto r = nodes[i].b->agree(c);
      if (!r.ok()) err[i] = r.error().message;
    });
    const std::string want = extra ? "config mismatch: node 1 has txn.x = 5, node 0 has no txn.x"
                                   : "config mismatch: node 1 has no txn.x, node 0 has txn.x = 5";
    for (uint32_t i = 0; i < 2; ++i) EXPECT_NE(err[i].find(want), std::string::npos) << err[i];
  }
}

// --- connecting ---

TEST(Bootstrap, PortInUseIsReported) {
  auto ports = free_ports(2);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(ports[1]);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  const int64_t t0 = now_ms();
  auto r = Bootstrap::connect(options(1, ports));
  ::close(fd);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EADDRINUSE);
  EXPECT_NE(r.error().message.find("port " + std::to_string(ports[1]) + " on 127.0.0.1 is already in use (node 1)"),
            std::string::npos)
      << r.error().message;
  EXPECT_LT(now_ms() - t0, 1000);  // at once, not after a timeout
}

TEST(Bootstrap, SecondProcessWithTheSameIdOnOneHostFails) {
  auto ports = free_ports(2);
  auto nodes = connect_all(ports);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  auto again = Bootstrap::connect(options(1, ports));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("already in use (node 1)"), std::string::npos) << again.error().message;
}

TEST(Bootstrap, PeerThatNeverShowsUpIsNamedWithinTheTimeout) {
  auto ports = free_ports(3);
  const int64_t t0 = now_ms();
  auto nodes = connect_nodes({options(0, ports, 300), options(1, ports, 300)});
  const int64_t took = now_ms() - t0;
  EXPECT_GE(took, 250);
  EXPECT_LT(took, 300 + 1500);
  const std::string want = "node 2 (" + addr(ports[2]) + ") did not connect within 0.3 s";
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_FALSE(nodes[i].b) << "node " << i;
    EXPECT_EQ(nodes[i].err.code, ETIMEDOUT);
    EXPECT_NE(nodes[i].err.message.find(want), std::string::npos) << nodes[i].err.message;
  }
}

TEST(Bootstrap, MissingNodeZeroIsNamedWithinTheTimeout) {
  auto ports = free_ports(2);
  const int64_t t0 = now_ms();
  auto r = Bootstrap::connect(options(1, ports, 300));
  EXPECT_LT(now_ms() - t0, 300 + 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ETIMEDOUT);
  EXPECT_NE(
      r.error().message.find("node 0 (" + addr(ports[0]) + ") did not accept a connection from node 1 within 0.3 s"),
      std::string::npos)
      << r.error().message;
}

TEST(Bootstrap, InvalidOptionsAreRejected) {
  auto ports = free_ports(3);
  auto o = options(3, ports);
  auto r = Bootstrap::connect(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("this node's id 3 is out of range"), std::string::npos) << r.error().message;

  o = options(0, ports);
  o.nodes[2].id = 1;
  r = Bootstrap::connect(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("node id 1 is listed twice"), std::string::npos) << r.error().message;

  o = options(0, ports);
  o.nodes[1].id = 5;
  r = Bootstrap::connect(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("node 1 is missing"), std::string::npos) << r.error().message;

  o = options(0, ports);
  o.peer_dead_ms = o.heartbeat_ms;
  EXPECT_FALSE(Bootstrap::connect(o).ok());
}

// Strangers on node 0's port are dropped; the run connects regardless.
TEST(Bootstrap, GarbageToNodeZeroIsDroppedAndRealNodesStillConnect) {
  auto ports = free_ports(2);
  Joined n0;
  std::thread t0([&] {
    auto r = Bootstrap::connect(options(0, ports));
    if (r.ok())
      n0.b = std::move(*r);
    else
      n0.err = r.error();
  });
  auto text = [](std::string_view s) { return Wire().text(s).b; };
  std::vector<std::vector<std::byte>> strangers = {
      text("GET / HTTP/1.0\r\n\r\n"),
      frame(1, 1, Blob(14), 9),                                       // another protocol version
      frame(1, 1, Blob(14), 1),                                       // the previous protocol version
      Wire().u32(0x52445442).u16(2).u16(1).u32(1).u32(0xffffffff).b,  // a huge length
      frame(99, 1, {}),                                               // an unknown type
      frame(4, 1, Blob(20)),                                          // a contribution before any hello
      frame(1, 1, Blob(3)),                                           // a truncated hello payload
  };
  for (const auto& s : strangers) {
    int fd = raw_connect(ports[0]);
    ASSERT_GE(fd, 0);
    send_bytes(fd, s);
    EXPECT_TRUE(read_until_eof(fd, 3000)) << "node 0 kept a stranger's connection";
    ::close(fd);
  }
  // Random bytes, some behind a valid magic, each on its own connection;
  // plus connections that stay idle or send half a header.
  std::mt19937 rng(12345);
  int idle = raw_connect(ports[0]);
  int half = raw_connect(ports[0]);
  send_bytes(half, Wire().u32(0x52445442).u8(0).b);
  for (int k = 0; k < 100; ++k) {
    Blob b(1 + rng() % 300);
    for (auto& x : b) x = std::byte(static_cast<uint8_t>(rng()));
    if (k % 2) {
      auto magic = Wire().u32(0x52445442).u16(2).u16(static_cast<uint16_t>(2 + rng() % 8)).b;
      b.resize(std::max(b.size(), magic.size()));
      std::copy(magic.begin(), magic.end(), b.begin());
    }
    int fd = raw_connect(ports[0]);
    ASSERT_GE(fd, 0);
    send_bytes(fd, b);
    ::close(fd);
  }
  auto n1 = Bootstrap::connect(options(1, ports));
  t0.join();
  ::close(idle);
  ::close(half);
  ASSERT_TRUE(n1.ok()) << n1.error().message;
  ASSERT_TRUE(n0.b) << n0.err.message;
  Bootstrap* bs[2] = {n0.b.get(), n1->get()};
  on_all(2, [&](uint32_t i) { EXPECT_TRUE(bs[i]->barrier("after garbage").ok()); });
}

TEST(Bootstrap, DroppedStrangerIsNamedWhenANodeIsMissing) {
  auto ports = free_ports(2);
  Joined n0;
  std::thread t0([&] {
    auto r = Bootstrap::connect(options(0, ports, 600));
    if (!r.ok()) n0.err = r.error();
  });
  int fd = raw_connect(ports[0]);
  send_bytes(fd, Wire().text("GET / HTTP/1.0\r\n\r\n").b);
  t0.join();
  ::close(fd);
  EXPECT_NE(n0.err.message.find("node 1 (" + addr(ports[1]) + ") did not connect within 0.6 s"), std::string::npos)
      << n0.err.message;
  EXPECT_NE(n0.err.message.find("bad magic 0x47455420"), std::string::npos) << n0.err.message;
}

TEST(Bootstrap, OutOfRangeIdFromThePeerIsAnError) {
  auto ports = free_ports(3);
  Joined n0;
  std::thread t0([&] {
    auto r = Bootstrap::connect(options(0, ports));
    if (!r.ok()) n0.err = r.error();
  });
  int fd = raw_connect(ports[0]);
  ASSERT_GE(fd, 0);
  send_bytes(fd, hello(7, 3, doc_fingerprint(ports)));
  std::string got;
  EXPECT_TRUE(read_until_eof(fd, 3000, &got));  // the abort message, then EOF
  ::close(fd);
  t0.join();
  EXPECT_EQ(n0.err.code, EINVAL);
  EXPECT_NE(n0.err.message.find("claims node id 7, out of range for 3 nodes"), std::string::npos) << n0.err.message;
  EXPECT_NE(got.find(n0.err.message), std::string::npos) << "the peer was not told why";
}

TEST(Bootstrap, DuplicateIdIsAnErrorOnNodeZeroAndTheJoinedNode) {
  auto ports = free_ports(3);
  std::vector<Joined> nodes(2);
  std::thread t0([&] {
    auto r = Bootstrap::connect(options(0, ports));
    if (!r.ok()) nodes[0].err = r.error();
  });
  // An impostor claims node 1 (another host: no port clash), then node 1 comes.
  int fd = raw_connect(ports[0]);
  ASSERT_GE(fd, 0);
  send_bytes(fd, hello(1, 3, doc_fingerprint(ports)));
  auto r1 = Bootstrap::connect(options(1, ports));
  t0.join();
  ::close(fd);
  ASSERT_FALSE(r1.ok());
  for (const std::string& m : {nodes[0].err.message, r1.error().message})
    EXPECT_NE(m.find("node 1 joined twice, from 127.0.0.1:"), std::string::npos) << m;
}

// A process of another run (another cluster size, node list or run id) is
// refused at its hello and told why; node 0 keeps waiting for its own nodes
// and names the refused one if they do not come.
TEST(Bootstrap, HelloOfAnotherRunIsRefusedAndToldWhy) {
  auto ports = free_ports(4);
  std::vector<uint16_t> three(ports.begin(), ports.begin() + 3);
  struct Case {
    BootstrapOptions joiner;
    std::string want;
  };
  auto other_list = options(1, three);
  other_list.nodes[2].port = ports[3];
  auto other_run = options(1, three);
  other_run.run_id = "b";
  std::vector<Case> cases = {
      {options(1, ports), "it was started with 4 nodes, node 0 with 3"},
      {other_list, "it has a different node list (fingerprint "},
      {other_run, "it has run id 'b', node 0 has 'a'"},
  };
  for (auto& c : cases) {
    auto root = options(0, three, 800);
    root.run_id = "a";
    if (c.joiner.run_id.empty()) c.joiner.run_id = "a";
    const int64_t t0 = now_ms();
    auto nodes = connect_nodes({root, c.joiner});
    ASSERT_FALSE(nodes[1].b) << c.want;
    EXPECT_EQ(nodes[1].err.code, EINVAL);
    EXPECT_NE(nodes[1].err.message.find("node 0 (" + addr(three[0]) + ") refused node 1 (connecting from 127.0.0.1:"),
              std::string::npos)
        << nodes[1].err.message;
    EXPECT_NE(nodes[1].err.message.find("as not a node of its run: " + c.want), std::string::npos)
        << nodes[1].err.message;
    // Node 0 is not stopped by it: it waits out its timeout for node 1 and 2.
    ASSERT_FALSE(nodes[0].b);
    EXPECT_GE(now_ms() - t0, 700);
    EXPECT_EQ(nodes[0].err.code, ETIMEDOUT);
    EXPECT_NE(nodes[0].err.message.find("did not connect within 0.8 s"), std::string::npos) << nodes[0].err.message;
    EXPECT_NE(nodes[0].err.message.find("a hello from another run (node 1): " + c.want), std::string::npos)
        << nodes[0].err.message;
  }
}

// Strangers arriving while the nodes join — a hello with a wrong token
// claiming a real node's id, one of another run's Bootstrap, garbage — are
// dropped; the run forms and works.
TEST(Bootstrap, StrangersMidJoinAreDroppedAndTheRunForms) {
  auto ports = free_ports(3);
  std::vector<Joined> nodes(3);
  std::vector<std::thread> ts;
  for (uint32_t i : {0u, 1u})
    ts.emplace_back([&, i] {
      auto r = Bootstrap::connect(options(i, ports));
      if (r.ok())
        nodes[i].b = std::move(*r);
      else
        nodes[i].err = r.error();
    });
  // A forged hello: right node list, claims node 2, wrong token.
  int forged = raw_connect(ports[0]);
  ASSERT_GE(forged, 0);
  send_bytes(forged, hello(2, 3, doc_fingerprint(ports), "", 0x1234));
  std::string got;
  EXPECT_TRUE(read_until_eof(forged, 3000, &got)) << "node 0 kept a stranger's connection";
  ::close(forged);
  EXPECT_NE(got.find("as not a node of its run: its run token is 0000000000001234"), std::string::npos)
      << "the stranger was not told why: " << got;
  // Another run's node 2 (same addresses: its own port is taken by nobody
  // here, the real node 2 comes later), and garbage.
  auto other = options(2, ports, 2000);
  other.run_id = "yesterday";
  auto refused = Bootstrap::connect(other);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("it has run id 'yesterday', node 0 has ''"), std::string::npos)
      << refused.error().message;
  int garbage = raw_connect(ports[0]);
  send_bytes(garbage, Wire().text("\x16\x03\x01 not a hello at all").b);
  EXPECT_TRUE(read_until_eof(garbage, 3000));
  ::close(garbage);
  // The real node 2.
  auto n2 = Bootstrap::connect(options(2, ports));
  for (auto& t : ts) t.join();
  ASSERT_TRUE(n2.ok()) << n2.error().message;
  nodes[2].b = std::move(*n2);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  EXPECT_EQ(nodes[1].b->run_token(), nodes[0].b->run_token());
  EXPECT_EQ(nodes[0].b->run_token(), doc_token(3, doc_fingerprint(ports)));
  on_all(3, [&](uint32_t i) {
    auto r = nodes[i].b->all_gather(pattern(i, 40), "after strangers");
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->size(), 3u);
    for (uint32_t k = 0; k < 3; ++k) EXPECT_EQ((*r)[k], pattern(k, 40));
  });
  for (auto& j : nodes) EXPECT_FALSE(j.b->failed()) << j.b->failure();
}

// A node 0 that welcomes with another token is no node 0 of this run.
TEST(Bootstrap, WelcomeOfAnotherRunIsAnError) {
  auto ports = free_ports(2);
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(ports[0]);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  std::thread fake([&] {
    int fd = ::accept(lfd, nullptr, nullptr);
    char buf[256];
    (void)!::recv(fd, buf, sizeof buf, 0);  // the hello
    send_bytes(fd, frame(2, 0, Wire().u64(0xbad).b));
    read_until_eof(fd, 3000);
    ::close(fd);
  });
  auto r = Bootstrap::connect(options(1, ports, 2000));
  fake.join();
  ::close(lfd);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EPROTO);
  EXPECT_NE(r.error().message.find("sent a welcome for another run (run token 0000000000000bad"), std::string::npos)
      << r.error().message;
}

// --- liveness ---

namespace {

// Nodes 0..2 with `child` in a forked process and the other two here, all
// monitoring; returns the two local ones (index = node id, child's empty).
std::vector<Joined> monitored_trio(const std::vector<uint16_t>& ports, uint32_t child, Child& proc) {
  proc.pid = spawn_monitored_node(options(child, ports));
  std::vector<BootstrapOptions> opts;
  for (uint32_t i = 0; i < 3; ++i)
    if (i != child) opts.push_back(options(i, ports));
  auto two = connect_nodes(opts);
  std::vector<Joined> nodes(3);
  for (uint32_t i = 0, k = 0; i < 3; ++i)
    if (i != child) nodes[i] = std::move(two[k++]);
  for (auto& j : nodes)
    if (j.b) j.b->start_monitor();
  on_all(3, [&](uint32_t i) {
    if (!nodes[i].b) return;
    auto r = nodes[i].b->barrier("monitoring");
    EXPECT_TRUE(r.ok()) << r.error().message;
  });
  return nodes;
}

}  // namespace

TEST(Bootstrap, KilledPeerIsDetectedOnEverySurvivor) {
  auto ports = free_ports(3);
  Child proc;
  auto nodes = monitored_trio(ports, 2, proc);
  ASSERT_TRUE(nodes[0].b && nodes[1].b);
  // Heartbeats keep a live run alive well past peer_dead_ms.
  std::this_thread::sleep_for(std::chrono::milliseconds(900));
  ASSERT_FALSE(nodes[0].b->failed()) << nodes[0].b->failure();
  ASSERT_FALSE(nodes[1].b->failed()) << nodes[1].b->failure();
  const int64_t t0 = now_ms();
  ::kill(proc.pid, SIGKILL);
  EXPECT_TRUE(wait_for([&] { return nodes[0].b->failed() && nodes[1].b->failed(); }, 3000));
  EXPECT_LT(now_ms() - t0, 600 + 100 + 1000);  // peer_dead_ms + heartbeat_ms, plus slack for a loaded machine
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(lost(nodes[i].b->failure(), "node 2 (" + addr(ports[2]) + ")", " while monitored"));
    nodes[i].b->stop_monitor();
  }
  EXPECT_FALSE(nodes[1].b->barrier("after").ok());
}

TEST(Bootstrap, StoppedPeerIsDetectedBySilence) {
  auto ports = free_ports(3);
  Child proc;
  auto nodes = monitored_trio(ports, 2, proc);
  ASSERT_TRUE(nodes[0].b && nodes[1].b);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int64_t t0 = now_ms();
  ::kill(proc.pid, SIGSTOP);
  EXPECT_TRUE(wait_for([&] { return nodes[0].b->failed() && nodes[1].b->failed(); }, 5000));
  const int64_t took = now_ms() - t0;
  EXPECT_GE(took, 600 - 2 * 100 - 50);  // silence, not something else
  EXPECT_LT(took, 600 + 100 + 1000);
  for (uint32_t i = 0; i < 2; ++i) {
    const std::string f = nodes[i].b->failure();
    EXPECT_NE(f.find("node 2 (" + addr(ports[2]) + ") has been silent"), std::string::npos) << f;
  }
}

TEST(Bootstrap, KilledNodeZeroIsDetectedByTheOthers) {
  auto ports = free_ports(3);
  Child proc;
  auto nodes = monitored_trio(ports, 0, proc);
  ASSERT_TRUE(nodes[1].b && nodes[2].b);
  ::kill(proc.pid, SIGKILL);
  EXPECT_TRUE(wait_for([&] { return nodes[1].b->failed() && nodes[2].b->failed(); }, 2000));
  for (uint32_t i = 1; i < 3; ++i)
    EXPECT_TRUE(lost(nodes[i].b->failure(), "node 0 (" + addr(ports[0]) + ")", " while monitored"));
}

TEST(Bootstrap, StopMonitorThenExitIsNoFailure) {
  auto ports = free_ports(3);
  auto nodes = connect_all(ports);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  for (auto& j : nodes) j.b->start_monitor();
  on_all(3, [&](uint32_t i) { EXPECT_TRUE(nodes[i].b->barrier("monitoring").ok()); });
  nodes[2].b->stop_monitor();
  nodes[2].b.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(900));  // > peer_dead_ms
  EXPECT_FALSE(nodes[0].b->failed()) << nodes[0].b->failure();
  EXPECT_FALSE(nodes[1].b->failed()) << nodes[1].b->failure();
  // But a collective that needs it names it.
  std::vector<std::string> err(2);
  on_all(2, [&](uint32_t i) {
    auto r = nodes[i].b->barrier("done");
    if (!r.ok()) err[i] = r.error().message;
  });
  for (uint32_t i = 0; i < 2; ++i)
    EXPECT_TRUE(lost(err[i], "node 2 (" + addr(ports[2]) + ")", " during barrier 'done'"));
}

TEST(Bootstrap, PeerGoneBeforeTheMonitorStartsIsAFailure) {
  auto ports = free_ports(3);
  auto nodes = connect_all(ports);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  nodes[2].b.reset();  // exits without stop_monitor(), e.g. on an error path
  nodes[0].b->start_monitor();
  nodes[1].b->start_monitor();
  EXPECT_TRUE(wait_for([&] { return nodes[0].b->failed() && nodes[1].b->failed(); }, 2000));
  EXPECT_TRUE(lost(nodes[1].b->failure(), "node 2 (" + addr(ports[2]) + ")"));
}

// --- excluding a node (a membership service removed it; the run goes on) ---

TEST(Bootstrap, ExcludedNodeIsLeftOutOfCollectives) {
  auto ports = free_ports(3);
  auto nodes = connect_all(ports);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  nodes[2].b.reset();  // gone, as a killed compute node
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(nodes[i].b->exclude(2).ok());
    EXPECT_TRUE(nodes[i].b->exclude(2).ok()) << "excluding twice is no error";
    EXPECT_EQ(nodes[i].b->excluded(), uint64_t{1} << 2);
  }
  on_all(2, [&](uint32_t i) {
    Bootstrap& b = *nodes[i].b;
    auto r = b.all_gather(pattern(i, 100 + i), "qps");
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->size(), 3u);
    EXPECT_EQ((*r)[0], pattern(0, 100));
    EXPECT_EQ((*r)[1], pattern(1, 101));
    EXPECT_TRUE((*r)[2].empty());
    auto g = b.gather(pattern(i, 7), "results");
    ASSERT_TRUE(g.ok()) << g.error().message;
    if (i == 0) {
      ASSERT_EQ(g->size(), 3u);
      EXPECT_EQ((*g)[1], pattern(1, 7));
      EXPECT_TRUE((*g)[2].empty());
    }
    auto d = b.barrier("drained");
    EXPECT_TRUE(d.ok()) << d.error().message;
    auto a = b.agree({{"a", "1"}});
    EXPECT_TRUE(a.ok()) << a.error().message;
  });
  for (uint32_t i = 0; i < 2; ++i) EXPECT_FALSE(nodes[i].b->failed()) << nodes[i].b->failure();
}

TEST(Bootstrap, ExcludeReleasesACollectiveWaitingForTheNode) {
  auto ports = free_ports(3);
  auto nodes = connect_all(ports);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  for (auto& j : nodes) j.b->start_monitor();
  on_all(3, [&](uint32_t i) { EXPECT_TRUE(nodes[i].b->barrier("monitoring").ok()); });
  // Node 2 lives (its heartbeats go on) but never enters the barrier; the
  // others are waiting in it when a membership thread excludes node 2,
  // node 1 first (which alone releases nothing: node 0 decides).
  std::vector<std::string> err(2, "not returned");
  std::vector<int64_t> took(2);
  const int64_t t0 = now_ms();
  std::thread membership([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(nodes[1].b->exclude(2).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(nodes[0].b->exclude(2).ok());
  });
  on_all(2, [&](uint32_t i) {
    auto r = nodes[i].b->barrier("drained");
    err[i] = r.ok() ? "" : r.error().message;
    took[i] = now_ms() - t0;
  });
  membership.join();
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_EQ(err[i], "") << "node " << i;
    EXPECT_GE(took[i], 550) << "node " << i << " returned before node 0 excluded node 2";
    EXPECT_LT(took[i], 3000) << "node " << i << ": not released by the exclusion (op_timeout_ms is 5 s)";
    EXPECT_FALSE(nodes[i].b->failed()) << nodes[i].b->failure();
  }
  // Node 2's heartbeats are dropped, and the monitor no longer expects them.
  nodes[2].b->stop_monitor();
  nodes[2].b.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(900));  // > peer_dead_ms
  on_all(2, [&](uint32_t i) {
    auto r = nodes[i].b->all_gather(pattern(i, 5), "after");
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE((*r)[2].empty());
    nodes[i].b->stop_monitor();
  });
  for (uint32_t i = 0; i < 2; ++i) EXPECT_FALSE(nodes[i].b->failed()) << nodes[i].b->failure();
}

TEST(Bootstrap, ExcludeRefusesNodeZeroItselfAndOutOfRangeIds) {
  auto ports = free_ports(3);
  auto nodes = connect_all(ports);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  auto zero = nodes[1].b->exclude(0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().code, EINVAL);
  EXPECT_EQ(zero.error().message, "bootstrap: cannot exclude node 0 (" + addr(ports[0]) +
                                      "): every collective goes through node 0, so losing it ends the run");
  EXPECT_FALSE(nodes[0].b->exclude(0).ok());
  auto self = nodes[1].b->exclude(1);
  ASSERT_FALSE(self.ok());
  EXPECT_EQ(self.error().code, EINVAL);
  EXPECT_NE(self.error().message.find("node 1 (" + addr(ports[1]) + ") cannot exclude itself"), std::string::npos)
      << self.error().message;
  auto far = nodes[2].b->exclude(99);
  ASSERT_FALSE(far.ok());
  EXPECT_EQ(far.error().code, EINVAL);
  EXPECT_EQ(far.error().message, "bootstrap: cannot exclude node 99: out of range for 3 nodes (0..2)");
  for (auto& j : nodes) EXPECT_EQ(j.b->excluded(), 0u);
  // Refusals break nothing.
  on_all(3, [&](uint32_t i) { EXPECT_TRUE(nodes[i].b->barrier("still").ok()); });
  for (auto& j : nodes) EXPECT_FALSE(j.b->failed());
}

TEST(Bootstrap, LateMessagesOfAnExcludedNodeAreDropped) {
  auto ports = free_ports(3);
  std::atomic<int> signal2{0};
  std::vector<BootstrapOptions> opts;
  for (uint32_t i = 0; i < 3; ++i) opts.push_back(options(i, ports));
  opts[2].op_timeout_ms = 200;
  opts[2].stop_signal = [&] { return signal2.load(); };
  auto nodes = connect_nodes(opts);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  for (uint32_t i = 0; i < 2; ++i) ASSERT_TRUE(nodes[i].b->exclude(2).ok());
  // Node 2, which does not know, contributes to the barrier the others
  // run, then, while it waits there, a signal makes it send a stop notice
  // (which would otherwise end the run on every node, doc/bootstrap.md
  // "Signals"), and it exits.
  std::thread late([&] {
    std::thread signaller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      signal2 = SIGTERM;
    });
    auto r = nodes[2].b->barrier("drained");
    signaller.join();
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("node 2 (" + addr(ports[2]) + ") stopped by SIGTERM"), std::string::npos)
        << r.error().message;
    nodes[2].b.reset();  // flushes the notice, then closes
  });
  on_all(2, [&](uint32_t i) {
    auto d = nodes[i].b->barrier("drained");
    EXPECT_TRUE(d.ok()) << d.error().message;
  });
  late.join();
  on_all(2, [&](uint32_t i) {
    auto r = nodes[i].b->all_gather(pattern(i, 9), "results");
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE((*r)[2].empty());
    EXPECT_TRUE(nodes[i].b->barrier("history written").ok());
  });
  for (uint32_t i = 0; i < 2; ++i) EXPECT_FALSE(nodes[i].b->failed()) << nodes[i].b->failure();
}

namespace {

// Nodes 0..2 monitoring with lost_peer_fatal = false (a membership service
// judges lost peers); node 2 then dies without stop_monitor().
std::vector<Joined> trio_losing_node_two(const std::vector<uint16_t>& ports) {
  std::vector<BootstrapOptions> opts;
  for (uint32_t i = 0; i < 3; ++i) {
    opts.push_back(options(i, ports));
    opts.back().op_timeout_ms = 1500;
    opts.back().lost_peer_fatal = false;
  }
  auto nodes = connect_nodes(opts);
  for (auto& j : nodes)
    if (j.b) j.b->start_monitor();
  on_all(3, [&](uint32_t i) {
    if (!nodes[i].b) return;
    EXPECT_TRUE(nodes[i].b->barrier("monitoring").ok());
  });
  if (nodes[2].b) nodes[2].b.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its EOF seen
  return nodes;
}

}  // namespace

// Node 0 in a collective before its membership thread excluded the dead
// node: it waits for the exclusion (up to op_timeout_ms) rather than fail.
TEST(Bootstrap, ANodeLostToTheMembershipIsAwaitedUntilExcluded) {
  auto ports = free_ports(3);
  auto nodes = trio_losing_node_two(ports);
  ASSERT_TRUE(nodes[0].b && nodes[1].b);
  std::thread membership([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(nodes[0].b->exclude(2).ok());
    EXPECT_TRUE(nodes[1].b->exclude(2).ok());
  });
  on_all(2, [&](uint32_t i) {
    auto r = nodes[i].b->barrier("drained");
    EXPECT_TRUE(r.ok()) << r.error().message;
  });
  membership.join();
  for (uint32_t i = 0; i < 2; ++i) EXPECT_FALSE(nodes[i].b->failed()) << nodes[i].b->failure();
}

// The same for a node that falls silent (stopped, hung): the monitor closes
// its connection, and node 0's barrier waits for the exclusion.
TEST(Bootstrap, ASilentNodeLeftToTheMembershipIsAwaitedUntilExcluded) {
  auto ports = free_ports(3);
  std::vector<BootstrapOptions> opts;
  for (uint32_t i = 0; i < 3; ++i) {
    opts.push_back(options(i, ports));
    opts.back().op_timeout_ms = 3000;
    opts.back().lost_peer_fatal = false;
  }
  Child proc;
  proc.pid = spawn_monitored_node(opts[2]);
  auto two = connect_nodes({opts[0], opts[1]});
  ASSERT_TRUE(two[0].b && two[1].b);
  for (auto& j : two) j.b->start_monitor();
  on_all(2, [&](uint32_t i) { EXPECT_TRUE(two[i].b->barrier("monitoring").ok()); });
  ::kill(proc.pid, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(600 + 500));  // > peer_dead_ms: declared silent
  std::thread membership([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(two[0].b->exclude(2).ok());
    EXPECT_TRUE(two[1].b->exclude(2).ok());
  });
  on_all(2, [&](uint32_t i) {
    auto r = two[i].b->barrier("drained");
    EXPECT_TRUE(r.ok()) << r.error().message;
  });
  membership.join();
  for (auto& j : two) EXPECT_FALSE(j.b->failed()) << j.b->failure();
}

TEST(Bootstrap, ANodeLostToTheMembershipAndNeverExcludedFailsTheCollective) {
  auto ports = free_ports(3);
  auto nodes = trio_losing_node_two(ports);
  ASSERT_TRUE(nodes[0].b && nodes[1].b);
  std::vector<std::string> err(2);
  const int64_t t0 = now_ms();
  on_all(2, [&](uint32_t i) {
    auto r = nodes[i].b->barrier("drained");
    if (!r.ok()) err[i] = r.error().message;
  });
  EXPECT_GE(now_ms() - t0, 1400);  // waited for the membership service
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(lost(err[i], "node 2 (" + addr(ports[2]) + ")", " during barrier 'drained'"));
    EXPECT_NE(err[i].find("the membership service did not exclude it within the operation's 1.5 s"),
              std::string::npos)
        << err[i];
  }
}

// --- the wire codec and the message decoders (no sockets) ---

namespace {

struct Words {  // a "word struct", like stats::Histogram
  uint64_t a[3] = {};
  uint64_t b = 0;
};

Blob bytes_of(std::initializer_list<int> v) {
  Blob b;
  for (int x : v) b.push_back(std::byte(static_cast<uint8_t>(x)));
  return b;
}

}  // namespace

TEST(WireCodec, IntegersAreBigEndianWhateverTheHost) {
  cluster::WireWriter w;
  w.u16(0x0102);
  w.u32(0x03040506);
  w.put<int64_t>(-2);
  w.put<uint8_t>(0xff);
  EXPECT_EQ(w.take(), bytes_of({1, 2, 3, 4, 5, 6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 0xff}));
  Blob b = bytes_of({1, 2, 3, 4, 5, 6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe});
  cluster::WireReader r(b);
  EXPECT_EQ(r.u16(), 0x0102);
  EXPECT_EQ(r.u32(), 0x03040506u);
  EXPECT_EQ(r.get<int64_t>(), -2);
  EXPECT_TRUE(r.done());
}

TEST(WireCodec, WordStructsArraysStringsAndVectorsRoundTrip) {
  Words in{{1, 0x0102030405060708ull, UINT64_MAX}, 42};
  uint64_t arr[2] = {7, 8};
  std::vector<Words> vec{in, Words{}};
  cluster::WireWriter w;
  w.put(in);
  w.put(arr);
  w.put_vector(vec);
  w.str16("run");
  w.str32("a longer text");
  w.blob(pattern(1, 33));
  Blob b = w.take();
  // Each word big-endian: the second word of `in` starts at byte 8.
  EXPECT_EQ(Blob(b.begin() + 8, b.begin() + 16), bytes_of({1, 2, 3, 4, 5, 6, 7, 8}));
  cluster::WireReader r(b);
  Words out;
  uint64_t arr_out[2] = {};
  std::vector<Words> vec_out;
  ASSERT_TRUE(r.get(&out));
  ASSERT_TRUE(r.get(&arr_out));
  ASSERT_TRUE(r.get_vector(&vec_out));
  EXPECT_EQ(std::memcmp(&out, &in, sizeof in), 0);
  EXPECT_EQ(arr_out[0], 7u);
  EXPECT_EQ(arr_out[1], 8u);
  ASSERT_EQ(vec_out.size(), 2u);
  EXPECT_EQ(vec_out[0].a[1], in.a[1]);
  EXPECT_EQ(r.str16(), "run");
  EXPECT_EQ(r.str32(), "a longer text");
  auto blob = r.blob();
  EXPECT_EQ(Blob(blob.begin(), blob.end()), pattern(1, 33));
  EXPECT_TRUE(r.done());
}

TEST(WireCodec, ShortReadsFailForGoodAndLeaveTheTargetAlone) {
  cluster::WireWriter w;
  w.u32(5);
  w.text("abc");  // a str32 of 5 bytes with only 3 there
  Blob b = w.take();
  cluster::WireReader r(b);
  EXPECT_EQ(r.str32(), "");
  EXPECT_FALSE(r.ok());
  uint64_t v = 99;
  EXPECT_FALSE(r.get(&v));
  EXPECT_EQ(v, 99u);
  EXPECT_EQ(r.u8(), 0);
  EXPECT_FALSE(r.done());
  // An empty message, and a message with a byte too many.
  cluster::WireReader empty{std::span<const std::byte>{}};
  EXPECT_EQ(empty.u64(), 0u);
  EXPECT_FALSE(empty.ok());
  Blob extra = bytes_of({0, 0, 0, 1, 9});
  cluster::WireReader r2(extra);
  EXPECT_EQ(r2.u32(), 1u);
  EXPECT_TRUE(r2.ok());
  EXPECT_FALSE(r2.done());
}

TEST(WireCodec, VectorCountsAreCheckedBeforeAllocating) {
  // Four billion 8-byte elements claimed, eight bytes there: refused at
  // once (a resize first would try to allocate 32 GiB).
  Blob b = bytes_of({0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8});
  cluster::WireReader r(b);
  std::vector<uint64_t> v;
  EXPECT_FALSE(r.get_vector(&v));
  EXPECT_TRUE(v.empty());
  EXPECT_FALSE(r.ok());
  // Within the bytes but above the caller's limit.
  cluster::WireWriter w;
  w.put_vector(std::vector<uint32_t>{1, 2, 3});
  Blob three = w.take();
  cluster::WireReader r2(three);
  EXPECT_FALSE(r2.get_vector(&v, 2));
  cluster::WireReader r3(three);
  std::vector<uint32_t> ok;
  EXPECT_TRUE(r3.get_vector(&ok, 3));
  EXPECT_EQ(ok, (std::vector<uint32_t>{1, 2, 3}));
}

TEST(BootstrapWire, DecodersRejectMalformedPayloads) {
  namespace d = cluster::detail;
  const Blob hello = d::encode_hello({9, 3, 0x1122334455667788ull, "run-a"});
  auto h = d::decode_hello(hello);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->token, 9u);
  EXPECT_EQ(h->nodes, 3u);
  EXPECT_EQ(h->run_id, "run-a");
  for (size_t cut = 0; cut < hello.size(); ++cut)
    EXPECT_FALSE(d::decode_hello(std::span(hello).first(cut))) << "a hello cut at " << cut;
  Blob longer = hello;
  longer.push_back(std::byte{0});
  EXPECT_FALSE(d::decode_hello(longer));

  // A config claiming more pairs than its bytes can hold; a value cut short.
  EXPECT_FALSE(d::decode_config(bytes_of({0x7f, 0xff, 0xff, 0xff})));
  Blob config = d::encode_config({{"a", "1"}, {"b", "22"}});
  ASSERT_TRUE(d::decode_config(config));
  config.pop_back();
  EXPECT_FALSE(d::decode_config(config));

  // all_gather results: another node count, a blob longer than the rest.
  Blob blobs = d::encode_blobs({pattern(0, 5), {}, pattern(2, 7)});
  ASSERT_TRUE(d::decode_blobs(blobs, 3));
  EXPECT_EQ((*d::decode_blobs(blobs, 3))[2], pattern(2, 7));
  EXPECT_FALSE(d::decode_blobs(blobs, 2));
  blobs.pop_back();
  EXPECT_FALSE(d::decode_blobs(blobs, 3));

  EXPECT_FALSE(d::decode_abort(bytes_of({0, 0})));
  auto abort = d::decode_abort(d::encode_abort(Error{0, "why"}));
  ASSERT_TRUE(abort);
  EXPECT_EQ(abort->code, ECONNABORTED);  // an errno of 0 is no errno
  EXPECT_EQ(abort->message, "why");

  EXPECT_FALSE(d::parse_op(bytes_of({0, 0, 0, 0, 0, 0, 0, 1, 3, 0, 9, 'x'})).ok);  // name cut short
  const Blob header = d::op_header(d::OpKind::kBarrier, "loaded", 4);              // parse_op returns views into it
  auto op = d::parse_op(header);
  EXPECT_TRUE(op.ok && op.is(4, d::OpKind::kBarrier, "loaded"));
}

TEST(BootstrapWire, FramesAreValidatedBeforeTheirPayloadIsRead) {
  namespace d = cluster::detail;
  auto take = [](const Blob& in, std::string* why) {
    size_t off = 0;
    d::Frame f;
    return d::take_frame(in, off, 100, f, *why);
  };
  std::string why;
  EXPECT_EQ(take(d::make_frame(d::kContrib, 1, pattern(0, 100)), &why), 1) << why;
  EXPECT_EQ(take(d::make_frame(d::kHeartbeat, 1, pattern(0, 101)), &why), -1);
  EXPECT_NE(why.find("more than the limit of 100"), std::string::npos) << why;
  Blob partial = d::make_frame(d::kHeartbeat, 1, pattern(0, 10));
  partial.pop_back();
  EXPECT_EQ(take(partial, &why), 0);                          // more bytes needed
  EXPECT_EQ(take(bytes_of({'G', 'E', 'T', ' '}), &why), -1);  // bad magic after four bytes
  EXPECT_NE(why.find("bad magic 0x47455420"), std::string::npos) << why;
  Blob unknown = d::make_frame(d::kHeartbeat, 1, {});
  unknown[7] = std::byte{99};
  EXPECT_EQ(take(unknown, &why), -1);
  EXPECT_NE(why.find("unknown message type 99"), std::string::npos) << why;
}

// --- stop signals (options.stop_signal stands in for the signal handler) ---

namespace {

// Three nodes whose stop_signal reads signals[i].
std::vector<Joined> signalled_trio(const std::vector<uint16_t>& ports, std::atomic<int> (&signals)[3]) {
  std::vector<BootstrapOptions> opts;
  for (uint32_t i = 0; i < 3; ++i) {
    opts.push_back(options(i, ports));
    opts.back().stop_signal = [&signals, i] { return signals[i].load(); };
  }
  return connect_nodes(opts);
}

}  // namespace

TEST(Bootstrap, SignalOnNodeZeroWhileMonitoringEndsEveryNodeNamingIt) {
  auto ports = free_ports(3);
  std::atomic<int> signals[3] = {0, 0, 0};
  auto nodes = signalled_trio(ports, signals);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  for (auto& j : nodes) j.b->start_monitor();
  on_all(3, [&](uint32_t i) { EXPECT_TRUE(nodes[i].b->barrier("monitoring").ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (auto& j : nodes) ASSERT_FALSE(j.b->failed()) << j.b->failure();
  const int64_t t0 = now_ms();
  signals[0] = SIGTERM;
  EXPECT_TRUE(wait_for([&] { return nodes[0].b->failed() && nodes[1].b->failed() && nodes[2].b->failed(); }, 2000));
  EXPECT_LT(now_ms() - t0, 600);  // a notice, not a timeout (peer_dead_ms = 600)
  const std::string want = "bootstrap: node 0 (" + addr(ports[0]) + ") stopped by SIGTERM";
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(nodes[i].b->failure(), want) << "node " << i;
  // The collective that would have timed out fails at once with it.
  auto r = nodes[1].b->barrier("drained");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ECANCELED);
  EXPECT_EQ(r.error().message, want);
}

TEST(Bootstrap, SignalOnAJoinerDuringABarrierIsNamedOnEveryNode) {
  auto ports = free_ports(3);
  std::atomic<int> signals[3] = {0, 0, 0};
  auto nodes = signalled_trio(ports, signals);
  for (auto& j : nodes) ASSERT_TRUE(j.b) << j.err.message;
  signals[2] = SIGINT;
  std::vector<std::string> err(3);
  const int64_t t0 = now_ms();
  on_all(3, [&](uint32_t i) {
    auto r = nodes[i].b->barrier("drained");
    if (!r.ok()) err[i] = r.error().message;
  });
  EXPECT_LT(now_ms() - t0, 2000);  // not op_timeout_ms (5 s)
  for (uint32_t i = 0; i < 3; ++i)
    EXPECT_EQ(err[i], "bootstrap: node 2 (" + addr(ports[2]) + ") stopped by SIGINT") << "node " << i;
}

TEST(Bootstrap, SignalWhileNodeZeroWaitsForJoinersIsReported) {
  auto ports = free_ports(3);
  std::atomic<int> sig{0};
  auto o0 = options(0, ports, 5000);
  o0.stop_signal = [&sig] { return sig.load(); };
  Joined n0, n1;
  std::thread t0([&] {
    auto r = Bootstrap::connect(o0);
    if (!r.ok()) n0.err = r.error();
  });
  std::thread t1([&] {
    auto r = Bootstrap::connect(options(1, ports, 5000));
    if (!r.ok()) n1.err = r.error();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // node 1 joined, node 2 never comes
  const int64_t t = now_ms();
  sig = SIGTERM;
  t0.join();
  t1.join();
  EXPECT_LT(now_ms() - t, 2000);
  const std::string want = "bootstrap: node 0 (" + addr(ports[0]) + ") stopped by SIGTERM";
  EXPECT_EQ(n0.err.code, ECANCELED);
  EXPECT_EQ(n0.err.message, want);
  EXPECT_EQ(n1.err.message, want);  // forwarded to the node already joined
}

TEST(BootstrapWire, StopNoticesAndWelcomesAreValidated) {
  namespace d = cluster::detail;
  EXPECT_EQ(d::decode_stop(d::encode_stop(SIGTERM)), SIGTERM);
  EXPECT_FALSE(d::decode_stop(d::encode_stop(0)));
  EXPECT_FALSE(d::decode_stop(d::encode_stop(65)));
  EXPECT_FALSE(d::decode_stop(bytes_of({0, 0, 15})));
  EXPECT_EQ(d::signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(d::signal_name(40), "signal 40");
  EXPECT_EQ(d::decode_welcome(d::encode_welcome(77)), 77u);
  EXPECT_FALSE(d::decode_welcome(bytes_of({0, 0, 0, 0, 0, 0, 0})));
}
