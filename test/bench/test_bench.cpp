// rdtx-bench: the checks that decide whether a run passed.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "rdtx-bench/report.hpp"

using namespace rdtx;
using namespace rdtx::bench;

namespace {

const Check* find(const std::vector<Check>& checks, const std::string& key) {
  for (const Check& c : checks)
    if (key == c.key) return &c;
  return nullptr;
}

run::RunResult passing_run() {
  run::RunResult r;
  r.total.commits = 10;
  r.total.attempts = 10;
  return r;
}

bool all_ok(const std::vector<Check>& checks) {
  for (const Check& c : checks)
    if (!c.ok) return false;
  return true;
}

}  // namespace

TEST(Checks, ACleanRunPasses) { EXPECT_TRUE(all_ok(run_checks(passing_run(), false))); }

// A passive request (a passive COMMIT) does not tell its caller whether it
// landed: a lost one must fail the run, not pass silently.
TEST(Checks, PassiveTimeoutsAndFailuresFailTheRun) {
  run::RunResult r = passing_run();
  r.rpc_passive_timeouts = 1;
  auto checks = run_checks(r, false);
  const Check* c = find(checks, "rpc_passive_timeouts");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->ok);
  EXPECT_EQ(c->value, 1u);
  EXPECT_FALSE(all_ok(checks));

  r = passing_run();
  r.rpc_passive_failures = 3;
  checks = run_checks(r, false);
  c = find(checks, "rpc_passive_failures");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->ok);
  EXPECT_EQ(c->value, 3u);
  EXPECT_FALSE(all_ok(checks));
}

// The RNIC model serves a request its calendars cannot hold unaccounted.
// Queued past them, the run's figures are not the model's: it fails. Stamped
// before them, it fails in virtual time (a backlog that long) and is noted
// in real time (a poster that lost its CPU that long on a loaded machine:
// the three-process cluster on two busy cores has a few hundred). Without
// the model the check is not listed.
TEST(Checks, RequestsTheNicModelCouldNotAccountForFailTheRun) {
  run::RunResult r = passing_run();
  EXPECT_EQ(find(run_checks(r, false), "nic_unaccounted"), nullptr);
  r.nic_model = true;
  auto checks = run_checks(r, false);
  const Check* c = find(checks, "nic_unaccounted");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->ok);
  r.nic_overflow = 2;
  checks = run_checks(r, false);
  c = find(checks, "nic_unaccounted");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->ok);
  EXPECT_EQ(c->value, 2u);
  EXPECT_FALSE(all_ok(checks));

  r = passing_run();
  r.nic_model = true;
  r.nic_stale = 5;
  checks = run_checks(r, false);
  c = find(checks, "nic_unaccounted");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->ok) << "real time: noted";
  EXPECT_NE(c->message.find("5 request(s)"), std::string::npos) << c->message;
  r.virtual_time.on = true;
  c = find(checks = run_checks(r, false), "nic_unaccounted");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->ok) << "virtual time: a backlog as long as the calendars";
  EXPECT_EQ(c->value, 5u);
}

// A window of a few latencies measures no steady state: CALVIN on RCC's
// YCSB setting (30 ms a transaction, epochs as long) in a 50 ms window after
// 20 ms of warm-up moved by 9% with a 0.5 s window.
TEST(Checks, AWindowOfAFewMedianLatenciesIsNotASteadyState) {
  run::RunResult r = passing_run();
  r.tsc_hz = 1'000'000'000;
  for (int i = 0; i < 10; ++i) r.total.latency_tsc.record(30'000'000);  // 30 ms
  r.seconds = 0.05;
  auto checks = run_checks(r, false, nullptr, 0.02);
  const Check* c = find(checks, "steady_state");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->ok);
  EXPECT_NE(c->message.find("run.duration_s"), std::string::npos) << c->message;
  EXPECT_FALSE(all_ok(checks));
  r.seconds = 0.5;  // ten latencies and more; the warm-up is short
  c = find(checks = run_checks(r, false, nullptr, 0.02), "steady_state");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->ok);
  EXPECT_NE(c->message.find("run.warmup_s"), std::string::npos) << c->message;
  EXPECT_TRUE(all_ok(run_checks(r, false, nullptr, 0.1)));
  EXPECT_TRUE(all_ok(run_checks(r, false, nullptr, 0)));  // no warm-up asked for: the window alone
  EXPECT_TRUE(all_ok(run_checks(r, true, nullptr, 0.02)));  // interrupted: what there is
}

// Replicas that differ, or a log entry that never got in, fail the run.
TEST(Checks, UnequalReplicasAndLogErrorsFailTheRun) {
  run::RunResult r = passing_run();
  r.replicas = 3;
  EXPECT_TRUE(all_ok(run_checks(r, false)));
  r.replicas_equal = make_error(EIO, "replicas differ: partition 1 of table 'usertable' on backup node 2");
  auto checks = run_checks(r, false);
  const Check* c = find(checks, "replicas");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->ok);
  EXPECT_NE(c->message.find("partition 1"), std::string::npos);
  r = passing_run();
  r.replicas = 3;
  r.total.log_errors = 2;
  checks = run_checks(r, false);
  ASSERT_NE(find(checks, "log_errors"), nullptr);
  EXPECT_FALSE(find(checks, "log_errors")->ok);
}

// ---------------------------------------------------------------------------
// Resources: configurations that cannot fit are refused before allocating.

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "rdma/rdma.hpp"
#include "rdtx-bench/bench_config.hpp"
#include "rdtx-bench/resources.hpp"

namespace {

struct Loaded {
  config::Config cfg;
  Plan plan;
  rdma::DeviceCaps caps;
};

Loaded load(const std::vector<std::string>& overrides) {
  static const config::Schema schema = make_schema();
  auto cfg = config::Config::parse(schema, "workload = \"ycsb\"\n", "test", overrides);
  EXPECT_TRUE(cfg.ok()) << cfg.error().message;
  auto plan = plan_from(*cfg);
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  auto dev = rdma::open_device(cfg->get_string("cluster.devargs"));
  EXPECT_TRUE(dev.ok()) << dev.error().message;
  return {std::move(*cfg), std::move(*plan), (*dev)->caps()};
}

// The report rdtx-bench would print for `r` under the loaded configuration.
Report report_of(const Loaded& l, const run::RunResult& r) {
  Report rep;
  rep.cfg = &l.cfg;
  rep.run = &l.plan.run;
  rep.result = &r;
  rep.device = l.caps;
  rep.checks = run_checks(r, false);
  return rep;
}

Result<void> check(const Loaded& l, const HostLimits& limits) {
  const Footprint fp = footprint(l.plan.run, l.caps, l.plan.run.cluster.nodes);
  return check_resources(l.cfg, l.plan.run, l.caps, fp, limits);
}

HostLimits plenty() {
  HostLimits h;
  h.memory = uint64_t{1} << 50;
  h.memory_source = "test";
  h.shm_free = uint64_t{1} << 50;
  return h;
}

}  // namespace

TEST(Resources, TheDefaultsFit) {
  Loaded l = load({});
  EXPECT_TRUE(check(l, plenty()).ok());
  HostLimits small = plenty();
  small.memory = uint64_t{1} << 30;
  small.shm_free = uint64_t{1} << 30;
  auto r = check(l, small);
  EXPECT_TRUE(r.ok()) << r.error().message;
}

// 64 nodes x 2^26 YCSB records: hundreds of GiB, which used to grow until
// the OOM killer ended the process.
TEST(Resources, TablesLargerThanMemoryAreRefusedWithKeysAndSize) {
  Loaded l = load({"cluster.nodes=64", "ycsb.records_per_node=67108864"});
  const Footprint fp = footprint(l.plan.run, l.caps, 64);
  EXPECT_GT(fp.tables, uint64_t{500} << 30);  // 64 x 2^26 x (64 B record + metadata)
  HostLimits h = plenty();
  h.memory = uint64_t{16} << 30;
  auto r = check(l, h);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ENOMEM);
  EXPECT_NE(r.error().message.find("cluster.nodes = 64"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("ycsb.records_per_node = 67108864"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("16.0 GiB"), std::string::npos) << r.error().message;
}

// Each RPC endpoint posts two credits of buffers for every endpoint of the
// cluster, more than rpc.recv_buffers in a large one. Counting the setting
// alone put DrTM+H's 16 x 24 SmallBank at 22.3 GiB, under this host's 23;
// it took more and the OOM killer ended it. It needs 31.3 GiB.
TEST(Resources, RpcBuffersCountTwoCreditsForEveryEndpoint) {
  Loaded l = load({"cluster.nodes=16", "cluster.workers_per_node=24"});
  const Footprint fp = footprint(l.plan.run, l.caps, 16);
  const auto& rpc = l.plan.run.cluster.rpc;
  const uint64_t recv = 2ull * rpc.credits * 384 + 16;
  ASSERT_GT(recv, rpc.recv_buffers);
  EXPECT_EQ(fp.rpc, (recv + rpc.send_buffers) * l.caps.max_msg_size * 384);
}

// The shm driver keeps the store in /dev/shm: a store larger than it died
// of SIGBUS on first touch.
TEST(Resources, AStoreLargerThanDevShmIsRefused) {
  Loaded l = load({"ycsb.records_per_node=4000000"});
  HostLimits h = plenty();
  h.shm_free = uint64_t{64} << 20;
  auto r = check(l, h);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ENOSPC);
  EXPECT_NE(r.error().message.find("/dev/shm"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("ycsb.records_per_node = 4000000"), std::string::npos) << r.error().message;
}

TEST(Resources, HistoryBuffersCount) {
  Loaded l = load({"history.record=true", "history.capacity_mb=1024", "cluster.nodes=4"});
  HostLimits h = plenty();
  h.memory = uint64_t{2} << 30;
  auto r = check(l, h);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("history.capacity_mb = 1024"), std::string::npos) << r.error().message;
}

// Replication: backups and log rings count; the memory error names the keys.
TEST(Resources, BackupsAndLogRingsCount) {
  Loaded one = load({"cluster.nodes=3"});
  Loaded three = load({"cluster.nodes=3", "cluster.replicas=3", "txn.pipeline.log=onesided", "txn.log_ring_kb=65536"});
  const Footprint a = footprint(one.plan.run, one.caps, 3), b = footprint(three.plan.run, three.caps, 3);
  EXPECT_GT(b.tables, 2 * a.tables);            // two backup copies per node (with no protocol metadata)
  EXPECT_GE(b.log, uint64_t{3} * 3 * (64 << 20));  // 3 workers x 3 senders x 64 MiB rings
  EXPECT_EQ(a.log, 0u);
  HostLimits h = plenty();
  h.memory = b.total() - 1;
  EXPECT_TRUE(check(one, h).ok());
  auto r = check(three, h);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("txn.log_ring_kb = 65536"), std::string::npos) << r.error().message;
  // A worker's region has a ring per node, not per worker of the cluster:
  // only the worker of its index on each node logs to it.
  Loaded four = load({"cluster.nodes=3", "cluster.workers_per_node=4", "cluster.replicas=3", "txn.pipeline.log=rpc",
                      "txn.log_ring_kb=1024"});
  const Footprint c = footprint(four.plan.run, four.caps, 3);
  EXPECT_EQ(c.log, uint64_t{12} * (3 * (1024 << 10) + 3 * 8 + 64));  // 12 workers x (3 rings, their heads)
}

// cluster.replicas and the log stage go together, and fit the cluster.
TEST(Replicas, NeedTheLogStageAndEnoughNodes) {
  static const config::Schema schema = make_schema();
  auto error_of = [](std::vector<std::string> sets) {
    auto c = config::Config::parse(schema, "", "test", sets);
    return c.ok() ? std::string() : c.error().message;
  };
  EXPECT_NE(error_of({"cluster.nodes=3", "cluster.replicas=3"}).find("needs the log stage"), std::string::npos);
  EXPECT_NE(error_of({"txn.pipeline.log=rpc"}).find("needs backups: set cluster.replicas > 1"), std::string::npos);
  EXPECT_NE(error_of({"cluster.nodes=2", "cluster.replicas=3", "txn.pipeline.log=rpc"})
                .find("cluster.replicas = 3 (--set) exceeds cluster.nodes = 2"),
            std::string::npos);
  EXPECT_EQ(error_of({"cluster.nodes=3", "cluster.replicas=3", "txn.pipeline.log=onesided"}), "");
}

// The split layout's keys: either gives the other, both must add up to
// cluster.nodes, each side keeps a node, backups fit the memory nodes, and
// CALVIN is refused; every error names the keys.
TEST(Roles, KeysAreCheckedAndNamed) {
  static const config::Schema schema = make_schema();
  auto error_of = [](std::vector<std::string> sets) {
    auto c = config::Config::parse(schema, "", "test", sets);
    return c.ok() ? std::string() : c.error().message;
  };
  auto memory_of = [](std::vector<std::string> sets) {
    auto c = config::Config::parse(schema, "", "test", sets);
    EXPECT_TRUE(c.ok()) << c.error().message;
    return c.ok() ? memory_nodes_of(*c) : 99u;
  };
  EXPECT_EQ(memory_of({"cluster.nodes=4"}), 0u);
  EXPECT_EQ(memory_of({"cluster.nodes=4", "cluster.memory_nodes=1"}), 1u);
  EXPECT_EQ(memory_of({"cluster.nodes=4", "cluster.compute_nodes=1"}), 3u);
  EXPECT_EQ(memory_of({"cluster.nodes=4", "cluster.memory_nodes=3", "cluster.compute_nodes=1"}), 3u);
  EXPECT_NE(error_of({"cluster.nodes=4", "cluster.memory_nodes=2", "cluster.compute_nodes=1"})
                .find("cluster.memory_nodes = 2 (--set) and cluster.compute_nodes = 1 (--set) do not add up to "
                      "cluster.nodes = 4 (--set)"),
            std::string::npos);
  EXPECT_NE(error_of({"cluster.nodes=2", "cluster.memory_nodes=2"})
                .find("cluster.memory_nodes = 2 (--set) leaves no compute node: it must be below cluster.nodes = 2"),
            std::string::npos);
  EXPECT_NE(error_of({"cluster.compute_nodes=2"})
                .find("cluster.compute_nodes = 2 (--set) leaves no memory node: it must be below cluster.nodes = 2 "
                      "(default)"),
            std::string::npos);
  EXPECT_NE(error_of({"cluster.nodes=4", "cluster.memory_nodes=2", "cluster.replicas=3", "txn.pipeline.log=rpc"})
                .find("cluster.replicas = 3 (--set) exceeds the 2 memory node(s)"),
            std::string::npos);
  EXPECT_EQ(error_of({"cluster.nodes=4", "cluster.memory_nodes=2", "cluster.replicas=2", "txn.pipeline.log=rpc"}), "");
  const std::string calvin =
      error_of({"cluster.nodes=4", "cluster.memory_nodes=2", "txn.protocol=calvin", "txn.pipeline.fetch=rpc",
                "txn.pipeline.commit=onesided", "txn.pipeline.lock=off", "txn.pipeline.validate=off",
                "txn.pipeline.sequence=rpc"});
  EXPECT_NE(calvin.find("txn.protocol = \"calvin\" (--set) cannot run with compute nodes apart (cluster.memory_nodes "
                        "= 2 (--set)): its coordinators also execute"),
            std::string::npos)
      << calvin;
}

// cluster.coordinator (doc/membership.md): checked where the cluster keys
// are, naming what is wrong.
TEST(Coordinator, KeyIsChecked) {
  static const config::Schema schema = make_schema();
  auto error_of = [](std::vector<std::string> sets) {
    auto c = config::Config::parse(schema, "", "test", sets);
    return c.ok() ? std::string() : c.error().message;
  };
  const std::string process = "cluster.mode=process", hosts = "cluster.hosts=127.0.0.1:7000,127.0.0.1:7001";
  EXPECT_EQ(error_of({process, hosts}), "");
  EXPECT_NE(error_of({"cluster.coordinator=zk://127.0.0.1:2181/rdtx/a"})
                .find("cluster.coordinator = 'zk://127.0.0.1:2181/rdtx/a' (--set) needs cluster.mode = \"process\""),
            std::string::npos);
  EXPECT_NE(error_of({process, hosts, "cluster.coordinator=zk://127.0.0.1:0/rdtx/a"})
                .find("cluster.coordinator = 'zk://127.0.0.1:0/rdtx/a' (--set): server 0: '127.0.0.1:0': the port "
                      "must be a number 1..65535"),
            std::string::npos);
  EXPECT_NE(error_of({process, hosts, "cluster.coordinator=127.0.0.1:2181"}).find("must start with 'zk://'"),
            std::string::npos);
  EXPECT_EQ(error_of({process, hosts, "cluster.coordinator=zk://127.0.0.1:2181,[::1]:2182/rdtx/a"}), "");
}

// Virtual time's keys: refused with what it cannot run (process mode, a
// driver other than shm, an idle policy), its cost keys refused without it,
// and the plan carries them.
TEST(VirtualTime, KeysAreCheckedAndCarried) {
  static const config::Schema schema = make_schema();
  auto error_of = [](std::vector<std::string> sets) {
    auto c = config::Config::parse(schema, "", "test", sets);
    return c.ok() ? std::string() : c.error().message;
  };
  EXPECT_NE(error_of({"run.virtual_time=true", "cluster.mode=process", "cluster.hosts=a:1,b:2"})
                .find("run.virtual_time (--set) runs every node in this process on one thread: it needs "
                      "cluster.mode = \"inproc\""),
            std::string::npos);
  EXPECT_NE(error_of({"run.virtual_time=true", "cluster.devargs=verbs,dev=mlx5_0"})
                .find("run.virtual_time (--set) needs the shm driver"),
            std::string::npos)
      << error_of({"run.virtual_time=true", "cluster.devargs=verbs,dev=mlx5_0"});
  EXPECT_NE(error_of({"run.virtual_time=true", "run.idle=spin"})
                .find("run.idle = 'spin' (--set) does not apply to run.virtual_time"),
            std::string::npos);
  EXPECT_NE(error_of({"run.virtual_cost=model"}).find("run.virtual_cost (--set) needs run.virtual_time = true"),
            std::string::npos);
  EXPECT_NE(error_of({"run.virtual_work_ns=100"}).find("run.virtual_work_ns (--set) needs run.virtual_time = true"),
            std::string::npos);
  EXPECT_EQ(error_of({"run.virtual_time=true", "run.virtual_cost=model", "run.virtual_pass_ns=50"}), "");
  // Below the floors a 0.5 s run took hours (issue 46 item 4).
  EXPECT_NE(error_of({"run.virtual_time=true", "run.virtual_cost=model", "run.virtual_pass_ns=1"})
                .find("run.virtual_pass_ns = 1 is out of range [50, "),
            std::string::npos)
      << error_of({"run.virtual_time=true", "run.virtual_cost=model", "run.virtual_pass_ns=1"});
  EXPECT_NE(error_of({"run.virtual_time=true", "run.virtual_max_pass_us=0.001"}).find("run.virtual_max_pass_us"),
            std::string::npos);

  Loaded l = load({"run.virtual_time=true", "run.virtual_cost=model", "run.virtual_pass_ns=60",
                   "run.virtual_work_ns=20", "run.virtual_resume_ns=30", "run.virtual_max_pass_us=5"});
  const run::RunConfig::VirtualTime& vt = l.plan.run.virtual_time;
  EXPECT_TRUE(vt.on);
  EXPECT_EQ(vt.cost, env::VirtualCost::kModel);
  EXPECT_EQ(vt.model.pass_ns, 60u);
  EXPECT_EQ(vt.model.work_ns, 20u);
  EXPECT_EQ(vt.model.resume_ns, 30u);
  EXPECT_EQ(vt.max_pass_ns, 5'000u);
  EXPECT_FALSE(load({}).plan.run.virtual_time.on);
}

// A split layout's plan: the workload is made for the memory nodes, and the
// footprint counts tables on them alone (a compute node holds none of
// YCSB's).
TEST(Roles, PlanAndFootprintFollowTheMemoryNodes) {
  Loaded sym = load({"cluster.nodes=4"});
  Loaded split = load({"cluster.nodes=4", "cluster.memory_nodes=1"});
  EXPECT_EQ(split.plan.run.cluster.memory_nodes, 1u);
  EXPECT_EQ(split.plan.run.workload->tables(1).front().partitioner.nodes(), 1u);
  const Footprint a = footprint(sym.plan.run, sym.caps, 4), b = footprint(split.plan.run, split.caps, 4);
  EXPECT_EQ(b.tables * 4, a.tables);
  EXPECT_EQ(b.workers, a.workers);
}

// 64 nodes x 64 coroutines needed a CQ deeper than the device allows: the
// run got as far as create_cq(1048592) and exited 1. (Now 1050640: 64 nodes
// x (2 x 128 x 64 coordinator requests + 32 of the services') + 16.)
TEST(Resources, ACompletionQueueDeeperThanTheDeviceAllowsNamesTheKeys) {
  Loaded l = load({"cluster.nodes=64", "txn.coroutines=64"});
  auto r = check(l, plenty());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("1050640"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("txn.coroutines = 64"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("cluster.nodes = 64"), std::string::npos) << r.error().message;
}

// ---------------------------------------------------------------------------
// Command line and configuration checks made before the run.

TEST(HistoryDir, AnUnwritableDirectoryFailsBeforeTheRun) {
  const std::string base = "/tmp/rdtx-test-bench-" + std::to_string(getpid());
  std::filesystem::create_directories(base);
  {
    Loaded l = load({"history.record=true", "history.dir=" + base + "/new/sub"});
    EXPECT_TRUE(check_history_dir(l.cfg).ok());
    EXPECT_TRUE(std::filesystem::is_directory(base + "/new/sub"));
    EXPECT_TRUE(std::filesystem::is_empty(base + "/new/sub")) << "the write probe is removed";
  }
  {
    // A regular file where the directory should be.
    std::FILE* f = std::fopen((base + "/file").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
    Loaded l = load({"history.record=true", "history.dir=" + base + "/file/h"});
    auto r = check_history_dir(l.cfg);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("history.dir"), std::string::npos) << r.error().message;
  }
  {
    // Another run's history files: refused, naming them (rdtx-check would
    // merge them with this run's); an empty directory is fine.
    std::filesystem::create_directories(base + "/used");
    Loaded l = load({"history.record=true", "history.dir=" + base + "/used"});
    EXPECT_TRUE(check_history_dir(l.cfg).ok());
    std::ofstream(base + "/used/history-n0-w0.rdtxh") << "x";
    auto r = check_history_dir(l.cfg);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("holds another run's history files (history-n0-w0.rdtxh)"), std::string::npos)
        << r.error().message;
  }
  if (geteuid() != 0) {  // root writes anywhere
    std::filesystem::create_directories(base + "/ro");
    std::filesystem::permissions(base + "/ro", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    Loaded l = load({"history.record=true", "history.dir=" + base + "/ro"});
    EXPECT_FALSE(check_history_dir(l.cfg).ok());
    std::filesystem::permissions(base + "/ro", std::filesystem::perms::owner_all);
  }
  std::filesystem::remove_all(base);
}

TEST(FilePrefix, APathSeparatorIsRefused) {
  EXPECT_TRUE(check_file_prefix({"-l", "0", "--file-prefix=rdtx-a"}).ok());
  EXPECT_TRUE(check_file_prefix({"--file-prefix", "rdtx-b"}).ok());
  auto r = check_file_prefix({"-l", "0", "--file-prefix=../x"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("../x"), std::string::npos);
  EXPECT_FALSE(check_file_prefix({"--file-prefix", "a/b"}).ok());
}

TEST(Hosts, NodesOnThisHostAreCounted) {
  auto h = parse_hosts("127.0.0.1:7100,127.0.0.1:7101,localhost:7102,10.9.9.9:7103");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(nodes_on_host_of(*h, 0), 3u);
  EXPECT_EQ(nodes_on_host_of(*h, 3), 1u);
}

TEST(Messages, OversizedValuesAreShortened) {
  const std::string big(100'000, 'x');
  const std::string s = shortened(big);
  EXPECT_LT(s.size(), 100u);
  EXPECT_NE(s.find("100000 bytes"), std::string::npos);
  EXPECT_EQ(shortened("shm,latency_ns=2000"), "shm,latency_ns=2000");
}

// ---------------------------------------------------------------------------
// The report: every counter of txn::kWorkerCounters appears, by its key, in
// the JSON and the CSV, and by its text in the table.

#include <fstream>

#include "env/virtual_clock.hpp"

TEST(Report, EveryCounterAppearsInTextJsonAndCsv) {
  Loaded l = load({});
  run::RunResult r = passing_run();
  for (size_t k = 0; k < txn::kWorkerCounterCount; ++k) {
    const txn::WorkerCounter& c = txn::kWorkerCounters[k];
    const int64_t v = 1000 * static_cast<int64_t>(k + 1) + 7;
    c.set_bits(r.total, static_cast<uint64_t>(c.is_signed() ? -v : v));
  }
  const Report rep = report_of(l, r);

  const std::string json = report_json(rep);
  const size_t at = json.find("\"counters\" : {");
  ASSERT_NE(at, std::string::npos) << json;
  const std::string counters = json.substr(at, json.find('}', at) - at);
  for (const txn::WorkerCounter& c : txn::kWorkerCounters)
    EXPECT_NE(counters.find("\"" + std::string(c.key) + "\" : " + std::to_string(c.value(r.total))),
              std::string::npos)
        << c.key << ": " << counters;

  char path[] = "/tmp/rdtx-test-bench-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  auto csv = append_csv(path, rep);
  ASSERT_TRUE(csv.ok()) << csv.error().message;
  std::ifstream in(path);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  std::remove(path);
  std::vector<std::string> names, values;
  for (std::string* line : {&header, &row}) {
    std::istringstream fields(*line);
    for (std::string f; std::getline(fields, f, ',');) (line == &header ? names : values).push_back(f);
  }
  ASSERT_EQ(names.size(), values.size()) << header << "\n" << row;
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << "a column twice: " << header;
  for (const txn::WorkerCounter& c : txn::kWorkerCounters) {
    auto it = std::find(names.begin(), names.end(), c.key);
    ASSERT_NE(it, names.end()) << c.key << ": " << header;
    EXPECT_EQ(values[static_cast<size_t>(it - names.begin())], std::to_string(c.value(r.total))) << c.key;
  }

  char* text = nullptr;
  size_t text_len = 0;
  std::FILE* out = open_memstream(&text, &text_len);
  print_report(out, rep);
  std::fclose(out);
  const std::string table(text, text_len);
  std::free(text);
  for (const txn::WorkerCounter& c : txn::kWorkerCounters)
    EXPECT_NE(table.find(c.text), std::string::npos) << c.text << ": " << table;
  EXPECT_NE(json.find("\"time\" : {\n        \"mode\" : \"real\""), std::string::npos) << json;
  EXPECT_EQ(values.back(), "real") << header;
}

std::string report_text(const Report& rep) {
  char* text = nullptr;
  size_t text_len = 0;
  std::FILE* out = open_memstream(&text, &text_len);
  print_report(out, rep);
  std::fclose(out);
  std::string s(text, text_len);
  std::free(text);
  return s;
}

// A virtual-time run says so: its figures are in virtual seconds, the
// latencies converted at the virtual clock's rate (1 GHz), not the TSC's.
TEST(Report, VirtualTimeIsSaidAndItsTicksAreNanoseconds) {
  Loaded l = load({"run.virtual_time=true"});
  run::RunResult r = passing_run();
  r.seconds = 1;
  r.tsc_hz = env::VirtualClock::kHz;
  r.total.latency_tsc.record(20'000);  // 20 us at 1 GHz
  r.virtual_time.on = true;
  r.virtual_time.virtual_seconds = 1.2;
  r.virtual_time.wall_seconds = 30;
  r.virtual_time.passes = 1000;
  r.virtual_time.workers.resize(4);
  const Report rep = report_of(l, r);
  const std::string text = report_text(rep);
  EXPECT_NE(text.find("(10 in 1.00 s of virtual time)"), std::string::npos) << text;
  EXPECT_NE(text.find("time           virtual (measured cost): 1.200 s virtual in 30.00 s wall, 4 worker(s) on one "
                      "thread"),
            std::string::npos)
      << text;
  const std::string json = report_json(rep);
  EXPECT_NE(json.find("\"mode\" : \"virtual\""), std::string::npos) << json;
  // The p50 of one 20,000-tick sample, within the histogram's 6.25 %.
  const size_t at = json.find("\"p50\" : ", json.find("\n    \"latency_us\" : {"));  // the top-level one
  ASSERT_NE(at, std::string::npos) << json;
  const double p50 = std::stod(json.substr(at + std::string("\"p50\" : ").size()));
  EXPECT_NEAR(p50, 20.0, 20.0 * 0.0625) << json;
}

// A run that went on without a node the membership service removed
// (cluster::Bootstrap::exclude): the report names it and says its figures
// are missing, the JSON lists it, and the history is not checked.
TEST(Report, RemovedNodesAreNamedAndTheirHistoryIsNotChecked) {
  char dir[] = "/tmp/rdtx-test-removed-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Loaded l = load({"history.record=true", std::string("history.dir=") + dir});
  run::RunResult r = passing_run();
  r.removed = {3};
  history::RecorderOptions ro;
  ro.node = 1;
  ro.node_workers = 1;
  ro.cluster_nodes = 4;
  auto rec = history::Recorder::create(ro);
  ASSERT_TRUE(rec.ok()) << rec.error().message;
  r.histories.push_back(std::move(*rec));
  HistoryResult h = handle_history(l.cfg, r, nullptr);
  EXPECT_FALSE(h.checked);
  EXPECT_EQ(h.error, "not checked: node 3 was removed during the run, and its history files went with it");
  EXPECT_EQ(h.dir, dir) << "the survivors' files are still written";
  EXPECT_FALSE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);

  Report rep = report_of(l, r);
  rep.history = &h;
  rep.checks = run_checks(r, false, &h);
  const Check* hc = find(rep.checks, "history");
  ASSERT_NE(hc, nullptr);
  EXPECT_FALSE(hc->ok);
  EXPECT_FALSE(rep.passed());
  const std::string text = report_text(rep);
  EXPECT_NE(text.find("removed       node 3 during the run, which went on without it: its figures up to its removal "
                      "are not in the totals\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  history              FAILED: not checked: node 3 was removed during the run, and its history "
                      "files went with it\n"),
            std::string::npos)
      << text;
  const std::string json = report_json(rep);
  EXPECT_NE(json.find("\"removed\" : [\n        3\n    ],"), std::string::npos) << json;

  // Several, and none.
  r.removed = {2, 3};
  r.histories.clear();
  const std::string two = report_text(report_of(l, r));
  EXPECT_NE(two.find("removed       nodes 2 and 3 during the run, which went on without them: their figures up to "
                     "their removal are not in the totals\n"),
            std::string::npos)
      << two;
  r.removed.clear();
  EXPECT_EQ(report_text(report_of(l, r)).find("removed  "), std::string::npos);
  EXPECT_NE(report_json(report_of(l, r)).find("\"removed\" : []"), std::string::npos);
}

#include <sys/stat.h>

// --csv FILE: a device or a FIFO would never end the read of its header
// line (issue 46 item 1), a missing directory would fail after the run:
// both are refused before it; an existing regular file and a new one pass.
TEST(Csv, OnlyRegularFilesAreAcceptedBeforeTheRun) {
  EXPECT_FALSE(check_csv_path("/dev/full").ok());
  EXPECT_FALSE(check_csv_path("/dev/zero").ok());
  auto missing = check_csv_path("/nonexistent-rdtx/x.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("--csv /nonexistent-rdtx/x.csv: no directory"), std::string::npos)
      << missing.error().message;
  char dir[] = "/tmp/rdtx-test-csv-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/fifo.csv";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto r = check_csv_path(fifo);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("not a regular file"), std::string::npos) << r.error().message;
  EXPECT_TRUE(check_csv_path(std::string(dir) + "/new.csv").ok());
  std::ofstream(std::string(dir) + "/old.csv") << "a,b\n";
  EXPECT_TRUE(check_csv_path(std::string(dir) + "/old.csv").ok());
  std::filesystem::remove_all(dir);
}

// A file whose first line does not end within 64 KiB is not read whole
// (a 300 MB file without a newline was): refused, naming the bound.
TEST(Csv, AnOverlongFirstLineIsRefusedNotReadWhole) {
  Loaded l = load({});
  const run::RunResult r = passing_run();  // the report points to it: it must outlive the report
  const Report rep = report_of(l, r);
  char path[] = "/tmp/rdtx-test-bench-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string chunk(1 << 20, 'x');
  ASSERT_EQ(write(fd, chunk.data(), chunk.size()), static_cast<ssize_t>(chunk.size()));
  close(fd);
  auto csv = append_csv(path, rep);
  ASSERT_FALSE(csv.ok());
  EXPECT_NE(csv.error().message.find("first line is longer than 64 KiB"), std::string::npos) << csv.error().message;
  struct stat st;
  ASSERT_EQ(stat(path, &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(chunk.size())) << "nothing appended";
  std::remove(path);
}

// What a configuration asks of the protocol and the device is checked
// before the EAL starts and the tables load (issue 46 items 7 and 8): each
// refusal names the key.
TEST(CheckPlan, ProtocolRegionDeviceAndPauseNodeAreCheckedBeforeTheRun) {
  auto error_of = [](std::vector<std::string> sets) -> std::string {
    Loaded l = load(sets);
    auto r = check_plan(l.cfg, l.plan, l.caps);
    return r.ok() ? std::string() : r.error().message;
  };
  EXPECT_EQ(error_of({}), "");
  EXPECT_NE(error_of({"txn.protocol=namdb", "cluster.nodes=4", "namdb.oracle_node=5"})
                .find("namdb.oracle_node = 5, but the cluster has 4 nodes"),
            std::string::npos);
  EXPECT_NE(error_of({"txn.protocol=calvin", "ycsb.ops_per_txn=8", "calvin.max_accesses=4"})
                .find("calvin.max_accesses = 4 is below the largest read/write set the workload declares (8"),
            std::string::npos)
      << error_of({"txn.protocol=calvin", "ycsb.ops_per_txn=8", "calvin.max_accesses=4"});
  EXPECT_EQ(error_of({"txn.protocol=calvin", "ycsb.ops_per_txn=8", "calvin.max_accesses=8"}), "");
  const std::vector<std::string> rpc = {"txn.pipeline.fetch=rpc", "txn.pipeline.lock=rpc", "txn.pipeline.validate=rpc",
                                        "txn.pipeline.commit=rpc"};
  auto with = [&rpc](std::vector<std::string> more) {
    more.insert(more.begin(), rpc.begin(), rpc.end());
    return more;
  };
  const std::string big = error_of(with({"cluster.devargs=shm,mtu=64", "ycsb.record_bytes=4096"}));
  EXPECT_NE(big.find("does not fit the device's 64-byte datagrams"), std::string::npos) << big;
  EXPECT_NE(big.find("(cluster.devargs = 'shm,mtu=64'"), std::string::npos) << big;
  EXPECT_EQ(error_of(with({"cluster.devargs=shm,mtu=4096", "ycsb.record_bytes=1024"})), "");
  // RPC reads and locks carry the whole tuple: MVCC's holds 4 versions, so
  // a record that fits a 1024-byte datagram alone does not in its tuple.
  EXPECT_EQ(error_of(with({"cluster.devargs=shm,mtu=1024", "ycsb.record_bytes=400"})), "");
  const std::string mvcc = error_of({"txn.protocol=mvcc", "txn.pipeline.fetch=rpc", "txn.pipeline.commit=rpc",
                                     "cluster.devargs=shm,mtu=1024", "ycsb.record_bytes=400"});
  EXPECT_NE(mvcc.find("a 400-byte record of table"), std::string::npos) << mvcc;
  EXPECT_NE(mvcc.find("protocol mvcc's metadata and versions"), std::string::npos) << mvcc;
  EXPECT_NE(mvcc.find("does not fit the device's 1024-byte datagrams"), std::string::npos) << mvcc;
  // One-sided stages send no records over RPC.
  EXPECT_EQ(error_of({"cluster.devargs=shm,mtu=64", "ycsb.record_bytes=4096", "txn.pipeline.fetch=onesided",
                      "txn.pipeline.lock=onesided", "txn.pipeline.validate=onesided",
                      "txn.pipeline.commit=onesided"}),
            "");
  EXPECT_NE(error_of({"cluster.devargs=shm,pause_node=5,pause_at_ms=1,pause_ms=1"})
                .find("pause_node=5 is not a node of the cluster (0..1)"),
            std::string::npos)
      << error_of({"cluster.devargs=shm,pause_node=5,pause_at_ms=1,pause_ms=1"});
  EXPECT_EQ(error_of({"cluster.devargs=shm,pause_node=1,pause_at_ms=1,pause_ms=1"}), "");
}

// Two nodes at one address: refused at once, not after a 30 s wait for a
// node that could never listen there.
TEST(Hosts, ADuplicateAddressIsRefused) {
  auto dup = parse_hosts("127.0.0.1:17301,127.0.0.1:17301");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().message.find("node 1: '127.0.0.1:17301' is node 0's address too"), std::string::npos)
      << dup.error().message;
  EXPECT_FALSE(parse_hosts("localhost:9000,a:1,127.0.0.1:9000").ok());
  EXPECT_TRUE(parse_hosts("127.0.0.1:17301,127.0.0.1:17302,b:17301").ok());
}
