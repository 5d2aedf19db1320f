// lib/membership: the cluster.coordinator address, the configuration's text
// form, and the ZooKeeper store against a real ZooKeeper server of the
// test's own (zk_server.hpp): the compare-and-set between two would-be CMs,
// ephemeral registrations, and the errors a run must see (ZooKeeper not
// running, lost, a path of another run, a member with another configuration).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <thread>

#include "membership/config_store.hpp"
#include "membership/configuration.hpp"
#include "membership/coordinator.hpp"
#include "membership/zk_client.hpp"
#include "zk_server.hpp"

namespace rdtx::membership {
namespace {

using testing::ZkTestServer;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- cluster.coordinator -------------------------------------------------

TEST(Coordinator, ParsesServersAndPath) {
  auto a = parse_coordinator("zk://10.0.0.1:2181,zk2.example:2182,[fe80::1]:2183/rdtx/run-7");
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_EQ(a->servers.size(), 3u);
  EXPECT_EQ(a->servers[0].host, "10.0.0.1");
  EXPECT_EQ(a->servers[1].port, 2182);
  EXPECT_EQ(a->servers[2].host, "fe80::1");
  EXPECT_EQ(a->root, "/rdtx/run-7");
  EXPECT_EQ(a->connect_string(), "10.0.0.1:2181,zk2.example:2182,[fe80::1]:2183");
}

TEST(Coordinator, RefusesMalformedValuesSayingWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "must start with 'zk://'"},
      {"http://h:1/x", "must start with 'zk://'"},
      {"zk:///x", "no server"},
      {"zk://h/x", "server 0: 'h' is not host:port"},
      {"zk://h:0/x", "port must be a number 1..65535"},
      {"zk://h:65536/x", "port must be a number 1..65535"},
      {"zk://h:12ab/x", "port must be a number"},
      {"zk://h:1,,h:2/x", "server 1 is empty"},
      {"zk://fe80::1:2181/x", "[addr]:port"},
      {"zk://h:1", "no path"},
      {"zk://h:1/", "no path"},
      {"zk://h:1/a/", "ends with '/'"},
      {"zk://h:1/a//b", "empty component"},
      {"zk://h:1/a/../b", "'..' component"},
      {"zk://h:1/a b", "space"},
  };
  for (const auto& [url, what] : cases) {
    auto a = parse_coordinator(url);
    ASSERT_FALSE(a.ok()) << url;
    EXPECT_EQ(a.error().code, EINVAL);
    EXPECT_NE(a.error().message.find(what), std::string::npos) << url << ": " << a.error().message;
  }
}

// ---- the configuration's text form ----------------------------------------

Configuration three_nodes(const std::string& run = "run1") {
  Configuration c;
  c.run_id = run;
  c.number = 1;
  c.cm = 0;
  c.members = {{0, "127.0.0.1:7000"}, {1, "127.0.0.1:7001"}, {2, "127.0.0.1:7002"}};
  c.partitions = {{0, {1, 2}}, {1, {2, 0}}, {2, {0, 1}}};
  return c;
}

TEST(Configuration, RoundTripsThroughItsTextForm) {
  const Configuration c = three_nodes();
  const std::string text = encode(c);
  EXPECT_EQ(text,
            "rdtx-config 1\nrun run1\nnumber 1\ncm 0\nmember 0 127.0.0.1:7000\nmember 1 127.0.0.1:7001\n"
            "member 2 127.0.0.1:7002\npartition 0 0 1 2\npartition 1 1 2 0\npartition 2 2 0 1\n");
  auto back = decode(text);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, c);
}

TEST(Configuration, DecodeRefusesWhatIsNoConfigurationOfThisFormat) {
  const std::pair<std::string, const char*> cases[] = {
      {"", "empty"},
      {"hello\n", "is not an rdtx configuration"},
      {"rdtx-config 2\n", "this build reads format 1"},
      {"rdtx-config 1\nrun r\nnumber 1\ncm 0\nmember 0 a:1\npartition 1 0\n", "out of order"},
      {"rdtx-config 1\nrun r\nnumber 1\ncm 5\nmember 0 a:1\n", "the CM, node 5, is not a member"},
      {"rdtx-config 1\nrun r\nnumber 1\ncm 0\nmember 0 a:1\npartition 0 0 0\n", "names node 0 twice"},
      {"rdtx-config 1\nrun r\ncm 0\nmember 0 a:1\n", "missing 'number'"},
      {"rdtx-config 1\nrun r\nnumber 1\ncm 0\nmember 0 a:1", "truncated"},
  };
  for (const auto& [text, what] : cases) {
    auto c = decode(text);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.error().message.find(what), std::string::npos) << text << ": " << c.error().message;
  }
}

TEST(Configuration, FirstDifferenceNamesTheField) {
  Configuration a = three_nodes(), b = three_nodes();
  EXPECT_EQ(first_difference(a, b, "A", "B"), "");
  b.members[2] = "127.0.0.1:7999";
  EXPECT_EQ(first_difference(a, b, "A", "B"), "member 2 is 127.0.0.1:7002 in A, 127.0.0.1:7999 in B");
  b = three_nodes();
  b.partitions[1].backups = {0};
  EXPECT_EQ(first_difference(a, b, "A", "B"), "partition 1 is primary 1, backups 2 0 in A, primary 1, backups 0 in B");
}

// ---- the store, on a ZooKeeper server of this test's own --------------------

class ZkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!ZkTestServer::missing().empty()) return;
    std::string why;
    server_ = ZkTestServer::start(&why).release();
    if (server_ == nullptr) start_error_ = new std::string(why);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (const std::string m = ZkTestServer::missing(); !m.empty()) GTEST_SKIP() << "needs " << m;
    ASSERT_NE(server_, nullptr) << *start_error_;
  }

  static std::unique_ptr<ZkClient> client(uint32_t session_ms = 4000, const std::string& servers = "") {
    ZkOptions o;
    o.servers = servers.empty() ? server_->servers() : servers;
    o.session_timeout_ms = session_ms;
    auto c = ZkClient::connect(o);
    EXPECT_TRUE(c.ok()) << c.error().message;
    return c.ok() ? std::move(*c) : nullptr;
  }
  // A root of this test's own, so that the tests share one server.
  static std::string root() {
    return std::string("/rdtx-test/") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  static ZkTestServer* server_;
  static std::string* start_error_;
};

ZkTestServer* ZkTest::server_ = nullptr;
std::string* ZkTest::start_error_ = nullptr;

TEST_F(ZkTest, ClientCreatesGetsSetsAndDeletes) {
  auto zk = client();
  ASSERT_NE(zk, nullptr);
  const std::string p = root();
  ASSERT_TRUE(zk->create_path(p).ok());
  ASSERT_TRUE(zk->create(p + "/a", "one").ok());
  auto dup = zk->create(p + "/a", "again");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().code, EEXIST);
  EXPECT_NE(dup.error().message.find("zookeeper " + server_->servers() + ": create " + p + "/a: exists already"),
            std::string::npos)
      << dup.error().message;
  auto n = zk->get(p + "/a");
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(n->data, "one");
  EXPECT_EQ(n->version, 0);
  const std::string big(100'000, 'x');  // larger than the first read's buffer
  auto v = zk->set(p + "/a", big, 0);
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_EQ(*v, 1);
  EXPECT_EQ(zk->get(p + "/a")->data, big);
  auto stale = zk->set(p + "/a", "two", 0);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().code, ESTALE);
  auto kids = zk->children(p);
  ASSERT_TRUE(kids.ok());
  EXPECT_EQ(*kids, std::vector<std::string>{"a"});
  ASSERT_TRUE(zk->remove(p + "/a").ok());
  EXPECT_FALSE(*zk->exists(p + "/a"));
  auto gone = zk->get(p + "/a");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, ENOENT);
}

// Two would-be CMs read configuration c and both write c+1: the one that
// comes second loses, whatever it writes.
TEST_F(ZkTest, SecondOfTwoWouldBeCmsLosesTheRace) {
  auto zk_a = client(), zk_b = client();
  ASSERT_TRUE(zk_a && zk_b);
  auto a = ConfigStore::open(*zk_a, root(), "run1");
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = ConfigStore::open(*zk_b, root(), "run1");
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_TRUE(a->create_initial(three_nodes()).ok());
  auto seen_a = a->read(), seen_b = b->read();
  ASSERT_TRUE(seen_a.ok() && seen_b.ok());
  Configuration next_a = seen_a->config, next_b = seen_b->config;
  next_a.number = next_b.number = 2;
  next_a.cm = 1;
  next_b.cm = 2;
  next_a.members.erase(0);
  next_b.members.erase(0);
  for (Placement& p : next_a.partitions) p = {p.primary == 0 ? 1u : p.primary, {}};
  next_b.partitions = next_a.partitions;
  auto won = a->propose(*seen_a, next_a);
  ASSERT_TRUE(won.ok()) << won.error().message;
  auto lost = b->propose(*seen_b, next_b);
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.error().code, ESTALE);
  EXPECT_NE(lost.error().message.find("zk path " + root() +
                                      "/config lost the race for configuration 2: it holds "
                                      "configuration 2 (CM node 1, version 1)"),
            std::string::npos)
      << lost.error().message;
  auto stored = b->read();
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->config, next_a);
  ASSERT_TRUE(a->remove_all().ok());
  EXPECT_FALSE(*zk_a->exists(root()));
}

// The same at once, from two threads with their own sessions, many times:
// every round exactly one wins, and the store holds the winner's c+1.
TEST_F(ZkTest, TwoWouldBeCmsWritingAtOnceExactlyOneWins) {
  auto zk_a = client(), zk_b = client();
  ASSERT_TRUE(zk_a && zk_b);
  auto a = ConfigStore::open(*zk_a, root(), "run1");
  auto b = ConfigStore::open(*zk_b, root(), "run1");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->create_initial(three_nodes()).ok());
  ConfigStore* stores[2] = {&*a, &*b};
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    std::latch both_read(2);
    std::atomic<int> wins{0}, losses{0};
    std::atomic<uint32_t> winner{99};
    auto cm = [&](uint32_t who) {
      auto seen = stores[who]->read();
      both_read.arrive_and_wait();  // both hold the same c before either writes
      if (!seen.ok()) return;
      Configuration next = seen->config;
      ++next.number;
      next.cm = who + 1;
      auto r = stores[who]->propose(*seen, next);
      if (r.ok()) {
        ++wins;
        winner = who + 1;
      } else if (r.error().code == ESTALE) {
        ++losses;
      }
    };
    std::thread ta(cm, 0), tb(cm, 1);
    ta.join();
    tb.join();
    ASSERT_EQ(wins.load(), 1) << "round " << round;
    ASSERT_EQ(losses.load(), 1) << "round " << round;
    auto stored = a->read();
    ASSERT_TRUE(stored.ok());
    EXPECT_EQ(stored->config.number, static_cast<uint64_t>(round + 2));
    EXPECT_EQ(stored->config.cm, winner.load());
  }
}

TEST_F(ZkTest, RegistrationDisappearsWhenTheSessionCloses) {
  auto zk_cm = client();
  ASSERT_NE(zk_cm, nullptr);
  auto cm = ConfigStore::open(*zk_cm, root(), "run1");
  ASSERT_TRUE(cm.ok());
  ASSERT_TRUE(cm->create_initial(three_nodes()).ok());
  {
    auto zk_member = client();
    ASSERT_NE(zk_member, nullptr);
    auto member = ConfigStore::open(*zk_member, root(), "run1");
    ASSERT_TRUE(member.ok());
    ASSERT_TRUE(member->register_member(three_nodes(), 1).ok());
    auto twice = member->register_member(three_nodes(), 1);
    ASSERT_FALSE(twice.ok());
    EXPECT_EQ(twice.error().code, EEXIST);
    EXPECT_NE(twice.error().message.find("node 1 is registered already"), std::string::npos);
    auto regs = cm->registered();
    ASSERT_TRUE(regs.ok()) << regs.error().message;
    ASSERT_EQ(regs->size(), 1u);
    EXPECT_EQ(regs->at(1).endpoint, "127.0.0.1:7001");
    EXPECT_EQ(regs->at(1).config, 1u);
  }  // the member's session closes here
  auto regs = cm->registered();
  ASSERT_TRUE(regs.ok());
  EXPECT_TRUE(regs->empty()) << "node 1's registration outlived its session";
}

// A member process that dies without closing its session: ZooKeeper
// removes its registration when the session expires.
TEST_F(ZkTest, RegistrationDisappearsWhenTheMemberProcessDies) {
  {
    auto zk_cm = client();
    ASSERT_NE(zk_cm, nullptr);
    auto cm = ConfigStore::open(*zk_cm, root(), "run1");
    ASSERT_TRUE(cm.ok());
    ASSERT_TRUE(cm->create_initial(three_nodes()).ok());
  }
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ZkOptions o;
    o.servers = server_->servers();
    o.session_timeout_ms = 400;
    auto zk = ZkClient::connect(o);
    if (!zk.ok()) ::_exit(1);
    auto member = ConfigStore::open(**zk, root(), "run1");
    if (!member.ok() || !member->register_member(three_nodes(), 2).ok()) ::_exit(2);
    char ok = 1;
    if (::write(ready[1], &ok, 1) != 1) ::_exit(3);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char ok = 0;
  const bool registered = ::read(ready[0], &ok, 1) == 1;
  ::close(ready[0]);
  auto zk = client();
  ASSERT_NE(zk, nullptr);
  auto store = ConfigStore::open(*zk, root(), "run1");
  ASSERT_TRUE(store.ok());
  auto before = store->registered();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_TRUE(registered) << "the child could not register";
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->count(2), 1u);
  const auto killed = Clock::now();
  bool gone = false;
  while (!gone && seconds_since(killed) < 5.0) {
    auto regs = store->registered();
    ASSERT_TRUE(regs.ok());
    gone = regs->count(2) == 0;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone) << "node 2's registration outlived its 400 ms session by 5 s";
}

TEST_F(ZkTest, NotRunningIsAClearErrorWithinTheBoundedWait) {
  const uint16_t port = testing::free_loopback_port();
  ZkOptions o;
  o.servers = "127.0.0.1:" + std::to_string(port);
  o.connect_timeout_ms = 1000;
  const auto t0 = Clock::now();
  auto zk = ZkClient::connect(o);
  const double took = seconds_since(t0);
  ASSERT_FALSE(zk.ok());
  EXPECT_EQ(zk.error().code, ETIMEDOUT);
  EXPECT_EQ(zk.error().message,
            "zookeeper " + o.servers + ": connection not established within 1 s (is ZooKeeper running there?)");
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 3.0);
}

TEST_F(ZkTest, PathOfAnotherRunIsRefused) {
  auto zk = client();
  ASSERT_NE(zk, nullptr);
  auto mine = ConfigStore::open(*zk, root(), "runA");
  ASSERT_TRUE(mine.ok()) << mine.error().message;
  auto again = ConfigStore::open(*zk, root(), "runA");  // the same run joins
  ASSERT_TRUE(again.ok()) << again.error().message;
  auto other = ConfigStore::open(*zk, root(), "runB");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, EEXIST);
  EXPECT_NE(other.error().message.find("zookeeper " + server_->servers() + ": zk path " + root() +
                                       " belongs to another run (run id runA, ours runB)"),
            std::string::npos)
      << other.error().message;
  // A path that holds something else than an rdtx run.
  ASSERT_TRUE(zk->create(root() + "-foreign", "not ours").ok());
  auto foreign = ConfigStore::open(*zk, root() + "-foreign", "runA");
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.error().message.find("holds data that is no rdtx run's claim"), std::string::npos)
      << foreign.error().message;
}

TEST_F(ZkTest, MemberWithAnotherConfigurationIsRefused) {
  auto zk = client();
  ASSERT_NE(zk, nullptr);
  auto store = ConfigStore::open(*zk, root(), "run1");
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(store->create_initial(three_nodes()).ok());
  Configuration moved = three_nodes();
  moved.members[2] = "127.0.0.1:7999";
  auto r = store->register_member(moved, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_NE(r.error().message.find("zk path " + root() +
                                   "/config refuses node 2: its configuration differs from "
                                   "the stored one: member 2 is 127.0.0.1:7002 in the store, 127.0.0.1:7999 in node "
                                   "2's"),
            std::string::npos)
      << r.error().message;
  Configuration older = three_nodes();
  auto cur = store->read();
  ASSERT_TRUE(cur.ok());
  Configuration next = cur->config;
  next.number = 2;
  ASSERT_TRUE(store->propose(*cur, next).ok());
  auto stale = store->register_member(older, 1);
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.error().message.find("the configuration number is 2 in the store, 1 in node 1's"), std::string::npos)
      << stale.error().message;
  auto regs = store->registered();
  ASSERT_TRUE(regs.ok());
  EXPECT_TRUE(regs->empty()) << "a refused member was registered";
  auto first_again = store->create_initial(three_nodes());
  ASSERT_FALSE(first_again.ok());
  EXPECT_EQ(first_again.error().code, EEXIST);
}

// The server dies in the middle of a session: calls fail with an error
// naming the server within the bounded wait, they do not hang.
TEST_F(ZkTest, LostConnectionIsAClearErrorNotAHang) {
  std::string why;
  auto own = ZkTestServer::start(&why);
  ASSERT_NE(own, nullptr) << why;
  ZkOptions o;
  o.servers = own->servers();
  o.session_timeout_ms = 2000;
  o.op_timeout_ms = 1000;
  auto zk = ZkClient::connect(o);
  ASSERT_TRUE(zk.ok()) << zk.error().message;
  auto store = ConfigStore::open(**zk, "/rdtx/lost", "run1");
  ASSERT_TRUE(store.ok()) << store.error().message;
  ASSERT_TRUE(store->create_initial(three_nodes()).ok());
  own->stop();
  const auto t0 = Clock::now();
  auto r = store->read();
  const double took = seconds_since(t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ENOTCONN) << r.error().message;
  EXPECT_NE(r.error().message.find("zookeeper " + own->servers() + ": get /rdtx/lost/config: connection lost"),
            std::string::npos)
      << r.error().message;
  EXPECT_LT(took, 4.0) << r.error().message;
  // Later calls too: the session cannot come back.
  const auto t1 = Clock::now();
  auto again = (*zk)->get("/rdtx/lost/config");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, ENOTCONN) << again.error().message;
  EXPECT_LT(seconds_since(t1), 4.0);
}

// A server that is back within op_timeout_ms: the call waits for the
// reconnection instead of failing, and the session (with its ephemeral
// registration) survives.
TEST_F(ZkTest, CallWaitsForAConnectionThatComesBackInTime) {
  std::string why;
  auto own = ZkTestServer::start(&why);
  ASSERT_NE(own, nullptr) << why;
  ZkOptions o;
  o.servers = own->servers();
  o.session_timeout_ms = 4000;  // longer than the server's restart
  o.op_timeout_ms = 15000;
  auto zk = ZkClient::connect(o);
  ASSERT_TRUE(zk.ok()) << zk.error().message;
  ASSERT_TRUE((*zk)->create("/eph", "x", NodeKind::kEphemeral).ok());
  own->stop();
  // Until the C client notices the loss, it still counts as connected.
  const auto lost = Clock::now();
  while ((*zk)->connected() && seconds_since(lost) < 5.0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_FALSE((*zk)->connected()) << "the client did not notice the server's death within 5 s";
  // The call waits on another thread while this one restarts the server
  // (the server dies with the thread that started it: zk_server.hpp).
  Result<ZkNode> r = Error{};
  std::thread call([&] { r = (*zk)->get("/eph"); });
  const bool restarted = own->restart(&why);
  call.join();
  ASSERT_TRUE(restarted) << why;
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->data, "x");
}

}  // namespace
}  // namespace rdtx::membership
