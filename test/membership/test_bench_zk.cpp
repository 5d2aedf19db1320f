// rdtx-bench with cluster.coordinator (doc/membership.md "The run in
// ZooKeeper"): a 2-process cluster keeps configuration 1 and its members in
// a ZooKeeper server of the test's own while it runs and removes them at the
// end; a path of another run and a ZooKeeper that is not running end the run
// on every node with an error naming them. Leases and reconfiguration
// (doc/membership.md "Leases"): a member killed with SIGKILL in a 4-process
// cluster is suspected by the CM no sooner than a lease after, configuration
// 2 without it is written and acknowledged by every survivor, and the run
// ends naming the partition left without a primary; a member stopped for
// two leases fences itself. RDTX_BENCH is rdtx-bench's path.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "membership/config_store.hpp"
#include "membership/zk_client.hpp"
#include "zk_server.hpp"

namespace rdtx::membership {
namespace {

using testing::ZkTestServer;
using Clock = std::chrono::steady_clock;

struct Node {
  pid_t pid = -1;  // -1 once reaped
  int rc = -1;     // its exit status once reaped (128 + signal if killed)
  std::string log;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Starts `args` (a path, or a name on PATH) with `env` added and its output
// in `log`; killed if this test process dies. The pid, or -1.
pid_t spawn(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env,
            const std::string& log) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  if (std::FILE* out = std::fopen(log.c_str(), "w"); out != nullptr) {
    ::dup2(fileno(out), 1);
    ::dup2(fileno(out), 2);
  }
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  ::_exit(127);
}

class BenchZk : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string m = ZkTestServer::missing(); !m.empty()) GTEST_SKIP() << "needs " << m;
    const char* bench = std::getenv("RDTX_BENCH");
    ASSERT_NE(bench, nullptr) << "set RDTX_BENCH to rdtx-bench's path";
    bench_ = bench;
    dir_ = std::filesystem::temp_directory_path() / ("rdtx-bench-zk-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::string why;
    server_ = ZkTestServer::start(&why);
    ASSERT_NE(server_, nullptr) << why;
  }
  void TearDown() override {
    for (Node& n : nodes_)
      if (n.pid > 0) {
        ::kill(n.pid, SIGKILL);
        ::waitpid(n.pid, nullptr, 0);
      }
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // Starts `count` rdtx-bench processes of one cluster with `coordinator`.
  void start_cluster(int count, const std::string& coordinator, double duration_s,
                     const std::vector<std::string>& sets = {}) {
    std::string hosts;
    for (int i = 0; i < count; ++i)
      hosts += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(testing::free_loopback_port());
    for (int i = 0; i < count; ++i) {
      Node n;
      n.log = (dir_ / ("node" + std::to_string(i) + ".log")).string();
      const long cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
      const std::vector<std::string> args = {bench_,
                                             "-l",
                                             std::to_string(i % cpus),
                                             "--no-huge",
                                             "--no-pci",
                                             "--no-shconf",
                                             "-m",
                                             "256",
                                             "--",
                                             "-q",
                                             "--no-progress",
                                             "--node",
                                             std::to_string(i),
                                             "--duration",
                                             std::to_string(duration_s),
                                             "--warmup",
                                             "0.2",
                                             "--set",
                                             "cluster.mode=process",
                                             "--set",
                                             "cluster.nodes=" + std::to_string(count),
                                             "--set",
                                             "cluster.hosts=" + hosts,
                                             "--set",
                                             "cluster.connect_timeout_s=20",
                                             "--set",
                                             "smallbank.accounts_per_node=2000",
                                             "--set",
                                             "smallbank.hot_accounts_per_node=20",
                                             "--set",
                                             "cluster.coordinator=" + coordinator};
      std::vector<std::string> all = args;
      for (const std::string& x : sets) {
        all.push_back("--set");
        all.push_back(x);
      }
      n.pid = spawn(all, {}, n.log);
      ASSERT_GE(n.pid, 0);
      nodes_.push_back(n);
    }
  }

  // Reaps the nodes that have exited; whether any has.
  bool reap() {
    bool any = false;
    for (Node& n : nodes_) {
      int status = 0;
      if (n.pid > 0 && ::waitpid(n.pid, &status, WNOHANG) == n.pid) {
        n.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        n.pid = -1;
      }
      any = any || n.pid == -1;
    }
    return any;
  }

  // Every node's exit status (-1: still running after `timeout_s`; killed
  // by TearDown).
  std::vector<int> wait_all(double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    auto running = [&] {
      for (const Node& n : nodes_)
        if (n.pid > 0) return true;
      return false;
    };
    while (reap(), running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::vector<int> rcs;
    for (const Node& n : nodes_) rcs.push_back(n.rc);
    return rcs;
  }

  std::unique_ptr<ZkClient> client() {
    ZkOptions o;
    o.servers = server_->servers();
    auto c = ZkClient::connect(o);
    EXPECT_TRUE(c.ok()) << c.error().message;
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::string coordinator(const std::string& path) const { return "zk://" + server_->servers() + path; }

  // Runs `args` with `env` added to this process's environment; its exit
  // status (-1: still running after timeout_s, then killed), output in `log`.
  int run_with_env(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env,
                   const std::string& log, double timeout_s) {
    const pid_t pid = spawn(args, env, log);
    if (pid < 0) return -2;
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // rdtx-bench's arguments for a small SmallBank process run of `seconds`.
  std::vector<std::string> bench_args(double seconds, const std::vector<std::string>& sets) const {
    std::vector<std::string> a = {bench_, "--no-huge", "--no-pci", "--no-shconf", "-m", "256", "--", "-q",
                                  "--no-progress", "--duration", std::to_string(seconds), "--warmup", "0.2",
                                  "--set", "cluster.mode=process", "--set", "smallbank.accounts_per_node=2000",
                                  "--set", "smallbank.hot_accounts_per_node=20"};
    for (const std::string& s : sets) {
      a.push_back("--set");
      a.push_back(s);
    }
    return a;
  }

  // Waits until `count` members are registered under `root`, then `after_s`
  // more (the run under way); false if a node ended first or it took 60 s.
  bool wait_until_registered(ZkClient& zk, const std::string& root, size_t count, double after_s) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    size_t seen = 0;
    while (Clock::now() < deadline && seen < count) {
      if (reap()) return false;
      if (auto kids = zk.children(root + "/members"); kids.ok()) seen = kids->size();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (seen < count) return false;
    std::this_thread::sleep_for(std::chrono::duration<double>(after_s));
    return !reap();
  }

  std::string bench_;
  std::filesystem::path dir_;
  std::unique_ptr<ZkTestServer> server_;
  std::vector<Node> nodes_;
};

TEST_F(BenchZk, RunKeepsItsConfigurationAndMembersInZooKeeperAndRemovesThem) {
  const std::string root = "/rdtx/bench";
  start_cluster(2, coordinator(root), 2.0);
  auto zk = client();
  ASSERT_NE(zk, nullptr);
  // While the run goes on: both members registered under the run's root.
  std::vector<std::string> members;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline && members.size() < 2 && !reap()) {
    if (auto kids = zk->children(root + "/members"); kids.ok()) members = *kids;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(members, (std::vector<std::string>{"0", "1"})) << slurp(nodes_[0].log) << slurp(nodes_[1].log);
  auto claim = zk->get(root);
  ASSERT_TRUE(claim.ok()) << claim.error().message;
  const std::string head = "rdtx-run 1\nrun ";
  ASSERT_EQ(claim->data.compare(0, head.size(), head), 0) << claim->data;
  const std::string run_id = claim->data.substr(head.size(), claim->data.size() - head.size() - 1);
  auto store = ConfigStore::open(*zk, root, run_id);
  ASSERT_TRUE(store.ok()) << store.error().message;
  auto config = store->read();
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->config.number, 1u);
  EXPECT_EQ(config->config.cm, 0u);
  EXPECT_EQ(config->config.members.size(), 2u);
  ASSERT_EQ(config->config.partitions.size(), 2u);
  EXPECT_EQ(config->config.partitions[1].primary, 1u);
  const std::vector<int> rcs = wait_all(120);
  EXPECT_EQ(rcs, (std::vector<int>{0, 0})) << slurp(nodes_[0].log) << slurp(nodes_[1].log);
  EXPECT_NE(slurp(nodes_[0].log)
                .find("configuration 1 of run " + run_id + " in zookeeper " + server_->servers() + " at " + root +
                      ": CM node 0, 2 members registered, 2 partitions"),
            std::string::npos)
      << slurp(nodes_[0].log);
  // At the end: the run's znodes are gone.
  auto left = zk->exists(root);
  ASSERT_TRUE(left.ok());
  EXPECT_FALSE(*left) << "the run left " << root << " behind";
}

TEST_F(BenchZk, PathOfAnotherRunEndsTheRunOnEveryNode) {
  auto zk = client();
  ASSERT_NE(zk, nullptr);
  auto other = ConfigStore::open(*zk, "/rdtx/taken", "someone-else");
  ASSERT_TRUE(other.ok()) << other.error().message;
  start_cluster(2, coordinator("/rdtx/taken"), 1.0);
  const std::vector<int> rcs = wait_all(60);
  for (size_t i = 0; i < rcs.size(); ++i) {
    const std::string log = slurp(nodes_[i].log);
    EXPECT_NE(rcs[i], 0) << log;
    EXPECT_NE(rcs[i], -1) << "node " << i << " still ran after 60 s\n" << log;
    EXPECT_NE(log.find("zk path /rdtx/taken belongs to another run (run id someone-else, ours "), std::string::npos)
        << "node " << i << ":\n"
        << log;
  }
  auto data = zk->get("/rdtx/taken");
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(data->data, "rdtx-run 1\nrun someone-else\n") << "the other run's claim was changed";
}

TEST_F(BenchZk, ZooKeeperNotRunningEndsTheRunOnEveryNode) {
  const std::string nobody = "zk://127.0.0.1:" + std::to_string(testing::free_loopback_port()) + "/rdtx/x";
  start_cluster(2, nobody, 1.0);
  const std::vector<int> rcs = wait_all(60);
  for (size_t i = 0; i < rcs.size(); ++i) {
    const std::string log = slurp(nodes_[i].log);
    EXPECT_EQ(rcs[i], 1) << log;
    EXPECT_NE(log.find("connection not established within 5 s (is ZooKeeper running there?)"), std::string::npos)
        << "node " << i << ":\n"
        << log;
  }
}


double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The number after `key` in `log` (the first occurrence), or -1.
double number_after(const std::string& log, const std::string& key) {
  const size_t at = log.find(key);
  if (at == std::string::npos) return -1;
  return std::strtod(log.c_str() + at + key.size(), nullptr);
}

TEST_F(BenchZk, AKilledMemberIsSuspectedAndLeftOutOfConfigurationTwo) {
  const std::string root = "/rdtx/kill";
  start_cluster(4, coordinator(root), 8.0);
  auto zk = client();
  ASSERT_NE(zk, nullptr);
  ASSERT_TRUE(wait_until_registered(*zk, root, 4, 1.0)) << slurp(nodes_[0].log);
  const double killed = wall_now();
  ::kill(nodes_[3].pid, SIGKILL);
  const std::vector<int> rcs = wait_all(60);
  EXPECT_EQ(rcs[3], 128 + SIGKILL);
  for (int i = 0; i < 3; ++i) {
    const std::string log = slurp(nodes_[i].log);
    EXPECT_EQ(rcs[i], 1) << log;
    EXPECT_NE(log.find("configuration 2 removed node 3, which leaves partition 3 without a live primary"),
              std::string::npos)
        << "node " << i << ":\n" << log;
    if (i > 0)
      EXPECT_NE(log.find("node " + std::to_string(i) + " acknowledged configuration 2 (CM node 0, without node(s) 3)"),
                std::string::npos)
          << log;
  }
  const std::string cm = slurp(nodes_[0].log);
  EXPECT_NE(cm.find("acknowledged by every member"), std::string::npos) << cm;
  EXPECT_NE(cm.find("late renewals: node 1 "), std::string::npos) << "no lease figures: " << cm;
  // Suspected no sooner than its lease ended: the CM waits a lease and a
  // tick (31 ms) from its last grant, which answered a renewal sent at most
  // a tick before the kill; so at least a lease (250 ms) after the kill,
  // less the time this test took to note it (a tick of slack here).
  const double suspected = number_after(cm, ") at ");
  ASSERT_GT(suspected, 0) << cm;
  EXPECT_GE(suspected - killed, 0.25 - 0.031) << cm;
  EXPECT_LT(suspected - killed, 10.0) << cm;
  std::printf("kill -9 to suspicion: %.1f ms\n", (suspected - killed) * 1e3);
}

// The split layout (memory nodes 0 and 1, compute nodes 2 and 3), OCC
// with its log on both memory nodes: compute node 3 dies under load with
// its transactions in flight, cut at a point of the commit protocol
// (fault.kill_point). Every partition keeps its primary, so the survivors
// resolve node 3's transactions (txn/recovery.hpp) and the run goes on: no
// lock is left, and every backup equals its primary at the end (an image
// completed on a primary, or undone on a backup, that was wrong would show
// there). The sum over the survivors of `<what>` in their recovery lines.
class BenchZkRecovery : public BenchZk {
 protected:
  // Runs the 4-process cluster with node 3 dying at `point`; each
  // survivor's log.
  // `primitive`: every stage's ("onesided", "rpc"), or "farm": FaRM's
  // commit protocol (LOCK and COMMIT-PRIMARY through the message logs).
  std::vector<std::string> run_cut(const std::string& point, const std::string& primitive = "onesided") {
    std::vector<std::string> sets = {"cluster.memory_nodes=2", "cluster.replicas=2", "fault.kill_node=3",
                                     "fault.kill_at_s=1", "fault.kill_point=" + point};
    if (primitive == "farm") {
      for (const char* s : {"txn.protocol=farm", "txn.pipeline.fetch=onesided", "txn.pipeline.lock=mailbox",
                            "txn.pipeline.validate=onesided", "txn.pipeline.log=onesided", "txn.pipeline.commit=mailbox"})
        sets.push_back(s);
    } else {
      for (const char* stage : {"fetch", "lock", "validate", "log", "commit"})
        sets.push_back(std::string("txn.pipeline.") + stage + "=" + primitive);
    }
    start_cluster(4, coordinator("/rdtx/cut-" + point + "-" + primitive), 4.0, sets);
    const std::vector<int> rcs = wait_all(90);
    EXPECT_EQ(rcs[3], 128 + SIGKILL) << slurp(nodes_[3].log);
    EXPECT_NE(slurp(nodes_[3].log).find(point == "time" ? "kills itself (SIGKILL) 1.000 s into the measured window"
                                                          : "kills itself (SIGKILL) in the " + point + " stage"),
              std::string::npos)
        << slurp(nodes_[3].log);
    std::vector<std::string> logs;
    for (int i = 0; i < 3; ++i) {
      logs.push_back(slurp(nodes_[i].log));
      EXPECT_NE(logs[i].find("node " + std::to_string(i) + " resolved the transactions of node 3"), std::string::npos)
          << "node " << i << ":\n" << logs[i];
      EXPECT_NE(logs[i].find("the run goes on with 3 members"), std::string::npos) << logs[i];
    }
    return logs;
  }
  static uint64_t sum_of(const std::vector<std::string>& logs, const std::string& what) {
    uint64_t n = 0;
    const std::regex re("([0-9]+) " + what);
    for (const std::string& l : logs)
      for (auto it = std::sregex_iterator(l.begin(), l.end(), re); it != std::sregex_iterator(); ++it)
        n += std::stoull((*it)[1]);
    return n;
  }
  static void expect_clean(const std::vector<std::string>& logs) {
    for (size_t i = 0; i < logs.size(); ++i)
      for (const char* ok : {"locks left +0  OK", "replicas equal +OK", "log errors +0  OK", "tasks left running +0  OK"})
        EXPECT_TRUE(std::regex_search(logs[i], std::regex(ok))) << "node " << i << " lacks '" << ok << "':\n" << logs[i];
  }
};

// Cut in its commit stage: past its commit point, half written back; the
// survivors complete its writes.
TEST_F(BenchZkRecovery, ACoordinatorCutInItsCommitIsCompleted) {
  const auto logs = run_cut("commit");
  EXPECT_GE(sum_of(logs, "write\\(s\\) completed"), 1u) << logs[0];
  expect_clean(logs);
}

// Cut in its log stage: one backup of two has its entry; the survivors
// undo it there and release its locks.
TEST_F(BenchZkRecovery, ACoordinatorCutInItsLogIsUndone) {
  const auto logs = run_cut("log");
  EXPECT_GE(sum_of(logs, "backup image\\(s\\) undone"), 1u) << logs[0];
  expect_clean(logs);
}

// Every stage over RPC (the log by log.append, the commit by the owners),
// killed at a time: whatever the transactions were doing then, the run
// goes on clean.
TEST_F(BenchZkRecovery, ARemovedCoordinatorOverRpcIsResolved) {
  const auto logs = run_cut("time", "rpc");
  expect_clean(logs);
}

// FaRM (its LOCKs and COMMIT-PRIMARYs in the primaries' message logs, which
// the messengers process as far as they landed before recovery reads the
// locks), cut in its COMMIT-BACKUP: one backup of two has the entry.
TEST_F(BenchZkRecovery, AFarmCoordinatorCutInItsCommitBackupIsResolved) {
  const auto logs = run_cut("log", "farm");
  EXPECT_GE(sum_of(logs, "backup image\\(s\\) undone"), 1u) << logs[0];
  expect_clean(logs);
}

// The broken variant (fault.broken_recovery): recovery releases the
// committed writes without installing them. Recovery's own check (every
// backup of a record it resolved holds what the primary holds, before the
// locks go) catches it, and the run ends rather than go on with copies that
// differ. (The replicas check at the end would not always: the records'
// next writes make the copies converge again.)
TEST_F(BenchZkRecovery, ABrokenRecoveryIsCaught) {
  start_cluster(4, coordinator("/rdtx/cut-broken"), 4.0,
                {"cluster.memory_nodes=2", "cluster.replicas=2", "txn.pipeline.log=onesided", "fault.kill_node=3",
                 "fault.kill_at_s=1", "fault.kill_point=commit", "fault.broken_recovery=true"});
  const std::vector<int> rcs = wait_all(90);
  EXPECT_EQ(rcs[3], 128 + SIGKILL) << slurp(nodes_[3].log);
  for (int i = 0; i < 3; ++i) {
    const std::string log = slurp(nodes_[i].log);
    EXPECT_EQ(rcs[i], 1) << log;
    EXPECT_NE(log.find("resolving its transactions failed: recovery: the copies of a record it resolved differ: "
                       "transaction "),
              std::string::npos)
        << "node " << i << ":\n" << log;
    EXPECT_EQ(log.find("the run goes on"), std::string::npos) << log;
  }
}

TEST_F(BenchZk, AMemberStoppedForTwoLeasesFencesItself) {
  const std::string root = "/rdtx/stop";
  start_cluster(3, coordinator(root), 8.0);
  auto zk = client();
  ASSERT_NE(zk, nullptr);
  ASSERT_TRUE(wait_until_registered(*zk, root, 3, 1.0)) << slurp(nodes_[0].log);
  ::kill(nodes_[2].pid, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // 2 x the 250 ms lease
  ::kill(nodes_[2].pid, SIGCONT);
  const std::vector<int> rcs = wait_all(60);
  const std::string stopped = slurp(nodes_[2].log);
  EXPECT_EQ(rcs[2], 1) << stopped;
  EXPECT_NE(stopped.find("membership: node 2 fenced itself at "), std::string::npos) << stopped;
  EXPECT_NE(stopped.find(": node 2's lease ends: the newest grant from its CM, node 0"), std::string::npos) << stopped;
  // Its CM runs: its beat moves, so node 2 tries no take-over; it finds
  // itself left out of configuration 2, or the run ended already.
  EXPECT_EQ(stopped.find("takes over as CM"), std::string::npos) << stopped;
  EXPECT_TRUE(stopped.find("membership: node 2 was removed from the configuration (configuration 2)") !=
                  std::string::npos ||
              stopped.find("the run's configuration is gone from the store (its CM ended the run)") !=
                  std::string::npos)
      << stopped;
  for (int i = 0; i < 2; ++i) {
    const std::string log = slurp(nodes_[i].log);
    EXPECT_EQ(rcs[i], 1) << log;
    EXPECT_NE(log.find("configuration 2 removed node 2"), std::string::npos) << "node " << i << ":\n" << log;
  }
}


// The CM killed: its members fence themselves, find its beat standing
// still, and one of them (the store's compare-and-set decides) writes
// configuration 2 without it as the new CM; the other acknowledges it.
TEST_F(BenchZk, AKilledCmIsReplacedByAMember) {
  const std::string root = "/rdtx/killcm";
  start_cluster(3, coordinator(root), 8.0);
  auto zk = client();
  ASSERT_NE(zk, nullptr);
  ASSERT_TRUE(wait_until_registered(*zk, root, 3, 1.0)) << slurp(nodes_[0].log);
  ::kill(nodes_[0].pid, SIGKILL);
  const std::vector<int> rcs = wait_all(60);
  int took_over = 0;
  for (int i = 1; i < 3; ++i) {
    const std::string log = slurp(nodes_[i].log);
    EXPECT_EQ(rcs[i], 1) << log;
    EXPECT_NE(log.find("node " + std::to_string(i) + " fenced itself"), std::string::npos) << log;
    EXPECT_NE(log.find("which leaves partition 0 without a live primary"), std::string::npos) << log;
    if (log.find("node " + std::to_string(i) + " takes over as CM: the beat of CM node 0 stood still") !=
        std::string::npos) {
      ++took_over;
      EXPECT_NE(log.find("(members 2, CM node " + std::to_string(i) + ") acknowledged by every member"),
                std::string::npos)
          << log;
    } else {
      EXPECT_NE(log.find("acknowledged configuration 2 (CM node "), std::string::npos) << log;
    }
  }
  EXPECT_EQ(took_over, 1) << slurp(nodes_[1].log) << slurp(nodes_[2].log);
}

// The CM stopped for four leases: a member takes over meanwhile; the old CM,
// once it runs again, finds itself deposed in the store and stops serving.
TEST_F(BenchZk, AStoppedCmFindsItselfDeposed) {
  const std::string root = "/rdtx/stopcm";
  start_cluster(3, coordinator(root), 8.0);
  auto zk = client();
  ASSERT_NE(zk, nullptr);
  ASSERT_TRUE(wait_until_registered(*zk, root, 3, 1.0)) << slurp(nodes_[0].log);
  ::kill(nodes_[0].pid, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ::kill(nodes_[0].pid, SIGCONT);
  const std::vector<int> rcs = wait_all(60);
  const std::string old = slurp(nodes_[0].log);
  EXPECT_EQ(rcs[0], 1) << old;
  EXPECT_NE(old.find("membership: node 0 is no longer the CM: configuration 2 names node "), std::string::npos) << old;
  const std::string logs = slurp(nodes_[1].log) + slurp(nodes_[2].log);
  EXPECT_NE(logs.find("takes over as CM: the beat of CM node 0 stood still"), std::string::npos) << logs;
  EXPECT_EQ(rcs[1], 1);
  EXPECT_EQ(rcs[2], 1);
}

// The CM and one member stopped together: the other member sees its CM
// silent but only itself alive, no majority of three, so it does not take
// over; it ends with its fence, saying so.
TEST_F(BenchZk, AMemberWithoutAMajorityDoesNotTakeOver) {
  const std::string root = "/rdtx/nomajority";
  start_cluster(3, coordinator(root), 8.0);
  auto zk = client();
  ASSERT_NE(zk, nullptr);
  ASSERT_TRUE(wait_until_registered(*zk, root, 3, 1.0)) << slurp(nodes_[0].log);
  ::kill(nodes_[0].pid, SIGSTOP);
  ::kill(nodes_[2].pid, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));  // past node 1's eight leases
  ::kill(nodes_[0].pid, SIGCONT);
  ::kill(nodes_[2].pid, SIGCONT);
  const std::vector<int> rcs = wait_all(60);
  const std::string alone = slurp(nodes_[1].log);
  EXPECT_EQ(rcs[1], 1) << alone;
  EXPECT_EQ(alone.find("takes over as CM"), std::string::npos) << alone;
  EXPECT_NE(alone.find("its CM is silent, but only 1 of the 3 members answer, no majority to take over with"),
            std::string::npos)
      << alone;
}

// mpirun starts the cluster: no --node, no cluster.hosts; the ranks are the
// node ids and the endpoints meet in ZooKeeper (doc/deployment.md).
TEST_F(BenchZk, MpirunStartsAClusterWithoutAHostList) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "needs mpirun (Debian: openmpi-bin)";
  const std::string root = "/rdtx/mpirun", log = (dir_ / "mpirun.log").string();
  std::vector<std::string> args = {"mpirun", "--oversubscribe", "-np", "3"};
  if (::getuid() == 0) args.insert(args.begin() + 1, "--allow-run-as-root");
  for (const std::string& a : bench_args(1.0, {"cluster.host=127.0.0.1", "cluster.coordinator=" + coordinator(root)}))
    args.push_back(a);
  const int rc = run_with_env(args, {}, log, 120);
  const std::string out = slurp(log);
  ASSERT_EQ(rc, 0) << out;
  for (int i = 0; i < 3; ++i)
    EXPECT_NE(out.find("started by Open MPI as node " + std::to_string(i) + " of 3 (run ompi-"), std::string::npos)
        << out;
  EXPECT_NE(out.find("CM node 0, 3 members registered, 3 partitions"), std::string::npos) << out;
  EXPECT_NE(out.find(" late renewals: node 1 "), std::string::npos) << out;
  // The report's line (node 0's: the CM's).
  EXPECT_NE(out.find("leases         250.0 ms, this node the CM ("), std::string::npos) << out;
  auto zk = client();
  ASSERT_NE(zk, nullptr);
  auto left = zk->exists(root);
  ASSERT_TRUE(left.ok());
  EXPECT_FALSE(*left) << "the run left " << root << " behind";
}

// A launch whose other processes never publish: the rendezvous ends after
// cluster.connect_timeout_s naming the nodes missing.
TEST_F(BenchZk, ARendezvousMissingANodeNamesIt) {
  const std::string log = (dir_ / "alone.log").string();
  const int rc = run_with_env(
      bench_args(1.0, {"cluster.host=127.0.0.1", "cluster.connect_timeout_s=1",
                       "cluster.coordinator=" + coordinator("/rdtx/alone")}),
      {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_MCA_ess_base_jobid", "424242"}}, log, 60);
  const std::string out = slurp(log);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("rendezvous: 1 of 3 nodes published their endpoints within 1 s; missing: node(s) 1, 2"),
            std::string::npos)
      << out;
}

// Under a launcher: a --node or cluster.nodes other than the launcher's, and
// no cluster.coordinator, are refused naming them.
TEST_F(BenchZk, ALaunchRefusesWhatContradictsTheLauncher) {
  const std::vector<std::pair<std::string, std::string>> env = {
      {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "55"}};
  const std::string log = (dir_ / "refused.log").string();
  const std::string zk = "cluster.coordinator=" + coordinator("/rdtx/refused");
  std::vector<std::string> args = bench_args(1.0, {zk});
  args.push_back("--node");
  args.push_back("0");
  EXPECT_EQ(run_with_env(args, env, log, 60), 2);
  EXPECT_NE(slurp(log).find("--node 0, but Open MPI started this process as rank 1"), std::string::npos) << slurp(log);
  EXPECT_EQ(run_with_env(bench_args(1.0, {zk, "cluster.nodes=3"}), env, log, 60), 2);
  EXPECT_NE(slurp(log).find("cluster.nodes = 3 (--set), but Open MPI started 2 processes"), std::string::npos)
      << slurp(log);
  EXPECT_EQ(run_with_env(bench_args(1.0, {}), env, log, 60), 2);
  EXPECT_NE(slurp(log).find("cluster.hosts is empty: list host:port for every node, or start the nodes with mpirun"),
            std::string::npos)
      << slurp(log);
}

}  // namespace
}  // namespace rdtx::membership
