// The workload registry drives the test lists. This binary registers one
// more workload of its own, `counters` (RDTX_REGISTER_WORKLOAD below: it
// exists in this test binary only, never in rdtx-bench), and checks that,
// with no test list edited, the registry lists it beside SmallBank and YCSB,
// primitive_combos() (what the protocol, stress and chaos suites run) pairs
// it with every protocol and every primitive its stages accept, exactly as
// it pairs SmallBank, and the contended run builds it in its contended
// setting and runs it to a checked, certified end. A hand-written workload
// list in contention.hpp would leave `counters` out and fail here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "store/loader.hpp"
#include "test/txn/contention.hpp"

using namespace rdtx;
using namespace rdtx::txn;
using namespace rdtx::testing_contention;

namespace {

// Counters: one table of 8-byte counters; each transaction adds 1 to two
// distinct counters (on any nodes). Invariant: the counters add up to the
// increments of the committed transactions.
class Counters final : public Workload {
 public:
  Counters(uint64_t rows, uint64_t hot, uint32_t nodes) : rows_(rows), hot_(hot), nodes_(nodes) {}
  const char* name() const override { return "counters"; }
  std::vector<TableDef> tables(uint32_t nodes) const override {
    auto part = store::Partitioner::range(nodes, rows_ * nodes);
    return {{0, "counters", 8, static_cast<uint32_t>(rows_), part.value()}};
  }
  Result<void> load(store::Store& s, uint32_t partition) const override {
    const uint64_t base = partition * rows_;
    return store::load(*s.table(0), rows_, [base](uint64_t row, std::span<std::byte> rec) {
      std::memset(rec.data(), 0, rec.size());
      return base + row;
    });
  }
  std::vector<std::string> type_names() const override { return {"Increment"}; }
  void generate(Rng& rng, uint32_t home_node, TxnInput& in) const override {
    in.home_node = home_node;
    in.type = 0;
    in.args[0] = pick(rng);
    do {
      in.args[1] = pick(rng);
    } while (in.args[1] == in.args[0]);
  }
  runtime::Task<bool> execute(Txn& t, const TxnInput& in, int64_t* delta) const override {
    const int a = t.write(0, in.args[0]), b = t.write(0, in.args[1]);
    if (!co_await t.fetch()) co_return false;
    t.get_mut<int64_t>(a) += 1;
    t.get_mut<int64_t>(b) += 1;
    const bool ok = co_await t.commit();
    *delta = ok ? 2 : 0;
    co_return ok;
  }
  // Its set is known from the input: CALVIN runs it too.
  bool declare(const TxnInput& in, DeclaredSet& out) const override {
    out.n = 0;
    return out.add(0, in.args[0], AccessMode::kWrite) && out.add(0, in.args[1], AccessMode::kWrite);
  }
  bool declares(uint16_t type) const override { return type == 0; }
  Result<int64_t> check_node(Database& db, uint32_t n) const override {
    int64_t total = 0;
    store::Table* tab = db.store(n).table(0);
    for (uint64_t k = n * rows_; k < (n + 1) * rows_; ++k) {
      store::TupleRef ref;
      if (tab->lookup(k, &ref) != 0)
        return make_error(EIO, "counters: row %llu missing on node %u", static_cast<unsigned long long>(k), n);
      int64_t v;
      std::memcpy(&v, ref.tuple + tab->layout().record_offset(), sizeof v);
      total += v;
    }
    return total;
  }
  Result<void> check_total(int64_t sum, uint32_t, int64_t committed_delta) const override {
    if (sum != committed_delta)
      return make_error(EIO, "counters: sum %lld, committed increments %lld", static_cast<long long>(sum),
                        static_cast<long long>(committed_delta));
    return {};
  }

  uint64_t rows() const { return rows_; }

 private:
  uint64_t pick(Rng& rng) const { return (rng() % nodes_) * rows_ + rng() % hot_; }
  uint64_t rows_, hot_;
  uint32_t nodes_;
};

void add_counters_schema(config::Schema& s) {
  s.add_int("counters.rows_per_node", 1000, 2, 1 << 20, "counters per node");
  s.add_int("counters.hot_rows", 1000, 1, 1 << 20, "the first this many counters of each node get every increment");
}

// The one cross-key rule is left to create(), to show its error naming the key.
Result<std::unique_ptr<Workload>> create_counters(const config::Config& cfg, uint32_t nodes) {
  const int64_t rows = cfg.get_int("counters.rows_per_node"), hot = cfg.get_int("counters.hot_rows");
  if (hot > rows)
    return make_error(EINVAL, "counters.hot_rows = %lld (%s) exceeds counters.rows_per_node = %lld",
                      static_cast<long long>(hot), cfg.origin("counters.hot_rows").c_str(),
                      static_cast<long long>(rows));
  return std::unique_ptr<Workload>(
      std::make_unique<Counters>(static_cast<uint64_t>(rows), static_cast<uint64_t>(hot), nodes));
}

constexpr const char* kCountersContended[] = {"counters.rows_per_node=64", "counters.hot_rows=4"};

constexpr WorkloadDef kCounters = {
    .name = "counters",
    .summary = "TEST ONLY: two increments per transaction",
    .add_schema = add_counters_schema,
    .create = create_counters,
    .contended = kCountersContended,
};
RDTX_REGISTER_WORKLOAD(kCounters)

using Pipeline = std::tuple<std::string, Primitive, Primitive, Primitive, Primitive>;

// primitive_combos() of one workload: protocol and primitives of each run.
std::vector<Pipeline> pipelines_of(const std::string& workload) {
  std::vector<Pipeline> v;
  for (const Combo& c : primitive_combos())
    if (c.workload == workload) v.emplace_back(c.protocol, c.fetch, c.lock, c.validate, c.commit);
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST(WorkloadRegistry, ListsEveryRegisteredWorkloadSortedByName) {
  std::vector<std::string> names = workload_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  // The workloads library (linked whole) and this binary's own.
  for (const char* n : {"counters", "smallbank", "ycsb"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n << " is not registered";
  EXPECT_EQ(find_workload("counters"), &kCounters);
  EXPECT_EQ(find_workload("nope"), nullptr);
}

// Every registered workload x every protocol x every primitive: the test
// workload gets the same runs as SmallBank, and every protocol has runs.
TEST(WorkloadRegistry, PrimitiveCombosCoverEveryWorkloadAndProtocol) {
  const std::vector<Pipeline> counters = pipelines_of("counters");
  EXPECT_EQ(counters, pipelines_of("smallbank"));
  // Every workload gets the same runs, less those refused by design
  // (refusal(): TPC-C refuses CALVIN).
  size_t total = 0;
  for (const std::string& w : workload_names()) {
    std::vector<Pipeline> expect;
    for (const Pipeline& p : counters) {
      Combo cb{w, std::get<0>(p), std::get<1>(p), std::get<2>(p), std::get<3>(p), std::get<4>(p)};
      if (!refused(cb)) expect.push_back(p);
    }
    EXPECT_EQ(pipelines_of(w), expect) << w;
    total += expect.size();
  }
  std::map<std::string, size_t> per_protocol;
  for (const Pipeline& p : counters) ++per_protocol[std::get<0>(p)];
  for (const std::string& p : protocol_names()) EXPECT_GT(per_protocol[p], 0u) << p << " has no run of counters";
  EXPECT_EQ(primitive_combos().size(), total);
}

TEST(WorkloadRegistry, ContendedSettingIsApplied) {
  auto w = contended_workload("counters", kNodes);
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ(static_cast<const Counters&>(**w).rows(), 64u) << "counters.rows_per_node=64 not applied";
  auto nope = contended_workload("nope", kNodes);
  ASSERT_FALSE(nope.ok());
  EXPECT_NE(nope.error().message.find("'nope'"), std::string::npos) << nope.error().message;
}

TEST(WorkloadRegistry, CreateErrorNamesTheKey) {
  config::Schema s;
  kCounters.add_schema(s);
  auto cfg = config::Config::parse(s, "", "test", {"counters.rows_per_node=8", "counters.hot_rows=9"});
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  auto w = kCounters.create(*cfg, kNodes);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("counters.hot_rows = 9 (--set"), std::string::npos) << w.error().message;
}

// The contended run takes the test workload as it takes SmallBank: one run
// per protocol keeps the invariant, leaves no lock and is certified.
TEST(WorkloadRegistry, ContendedRunRunsARegisteredWorkload) {
  for (const std::string& p : protocol_names()) {
    SCOPED_TRACE(p);
    Combo c;
    c.workload = "counters";
    c.protocol = p;
    auto out = run_contended(c, 1, 0.1);
    ASSERT_TRUE(out.ok()) << out.error().message;
    const run::RunResult& r = out->run;
    SCOPED_TRACE(summary(r));
    EXPECT_TRUE(r.invariants.ok()) << r.invariants.error().message;
    EXPECT_EQ(r.locks_left, 0u);
    EXPECT_GT(r.total.commits, 0u);
    EXPECT_EQ(conflicts_unseen(r, p), "");
    EXPECT_TRUE(out->check.certified) << out->check_text;
  }
}

namespace {

// Counters whose transactions also move their second counter to another
// tuple (Txn::relocate), with `slack` spare tuples per node.
class MovingCounters final : public Workload {
 public:
  MovingCounters(uint32_t nodes, uint32_t slack) : c_(64, 4, nodes), slack_(slack) {}
  const char* name() const override { return "moving-counters"; }
  std::vector<TableDef> tables(uint32_t nodes) const override {
    auto t = c_.tables(nodes);
    t[0].capacity_per_node += slack_;
    return t;
  }
  Result<void> load(store::Store& s, uint32_t p) const override { return c_.load(s, p); }
  std::vector<std::string> type_names() const override { return c_.type_names(); }
  void generate(Rng& rng, uint32_t home, TxnInput& in) const override { c_.generate(rng, home, in); }
  runtime::Task<bool> execute(Txn& t, const TxnInput& in, int64_t* delta) const override {
    const int a = t.write(0, in.args[0]), b = t.write(0, in.args[1]);
    if (!co_await t.fetch()) co_return false;
    t.get_mut<int64_t>(a) += 1;
    t.get_mut<int64_t>(b) += 1;
    t.relocate(b);
    const bool ok = co_await t.commit();
    *delta = ok ? 2 : 0;
    co_return ok;
  }
  bool relocates() const override { return true; }
  Result<int64_t> check_node(Database& db, uint32_t n) const override { return c_.check_node(db, n); }
  Result<void> check_total(int64_t sum, uint32_t n, int64_t d) const override { return c_.check_total(sum, n, d); }

 private:
  Counters c_;
  uint32_t slack_;
};

run::RunResult run_moving(MovingCounters& w, uint32_t nodes, const char* protocol, std::string* error = nullptr) {
  run::RunConfig rc;
  rc.workload = &w;
  rc.cluster.nodes = nodes;
  rc.cluster.devargs = "shm,latency_ns=1000";
  rc.protocol = find_protocol(protocol);
  if (rc.protocol != nullptr) rc.options.isolation = rc.protocol->isolation;
  rc.options.coroutines = 4;
  rc.duration_s = 0.1;
  rc.warmup_s = 0;
  rc.seed = 3;
  rc.single_thread = true;
  auto r = run::run(rc);
  if (!r.ok()) {
    if (error) *error = r.error().message;
    return {};
  }
  return std::move(*r);
}

}  // namespace

// A row of another node moves on its owner (the engine's `rows` RPC, as a
// compute node's every row does): half the relocations here are remote,
// and none fails, none leaves a lock, every counter stays right.
TEST(RowChanges, AnotherNodesRowMovesOnItsOwner) {
  for (const char* p : {"occ", "nowait"}) {
    SCOPED_TRACE(p);
    MovingCounters w(2, 64);
    run::RunResult r = run_moving(w, 2, p);
    EXPECT_EQ(r.total.insert_errors, 0u);
    EXPECT_EQ(r.total.commit_errors, 0u);
    EXPECT_GT(r.total.commits, 0u);
    EXPECT_TRUE(r.invariants.ok()) << r.invariants.error().message;
    EXPECT_EQ(r.locks_left, 0u);
  }
}

// No free tuple to move into: the row stays, written in place; the run
// fails ("the table is full") and loses nothing, under each kind of commit.
TEST(RowChanges, FullTableLeavesTheRowInPlace) {
  for (const char* p : {"occ", "nowait", "farm"}) {
    SCOPED_TRACE(p);
    MovingCounters w(1, 0);
    run::RunResult r = run_moving(w, 1, p);
    EXPECT_GT(r.total.insert_errors, 0u);
    EXPECT_GT(r.total.commits, 0u);
    EXPECT_TRUE(r.invariants.ok()) << r.invariants.error().message;
    EXPECT_EQ(r.locks_left, 0u);
    EXPECT_EQ(r.total.commit_errors, 0u);
  }
}

// A protocol that cannot move rows refuses the workload by name, before
// anything is loaded.
TEST(RowChanges, ProtocolsThatCannotRelocateRefuse) {
  for (const char* p : {"mvcc", "sundial"}) {
    SCOPED_TRACE(p);
    MovingCounters w(1, 64);
    std::string err;
    run_moving(w, 1, p, &err);
    EXPECT_NE(err.find(std::string("protocol ") + p + " cannot relocate rows"), std::string::npos) << err;
    EXPECT_NE(err.find("moving-counters"), std::string::npos) << err;
  }
}

namespace {

// Counters whose table has a partition level and takes inserts: 2PL's lock
// hierarchy takes no intention lock for an insert.
class PartitionedGrowingCounters final : public Workload {
 public:
  explicit PartitionedGrowingCounters(uint32_t nodes) : c_(64, 4, nodes) {}
  const char* name() const override { return "partitioned-counters"; }
  std::vector<TableDef> tables(uint32_t nodes) const override {
    auto t = c_.tables(nodes);
    t[0].parent_keys = 16;
    t[0].grows = true;
    return t;
  }
  Result<void> load(store::Store& s, uint32_t p) const override { return c_.load(s, p); }
  std::vector<std::string> type_names() const override { return c_.type_names(); }
  void generate(Rng& rng, uint32_t home, TxnInput& in) const override { c_.generate(rng, home, in); }
  runtime::Task<bool> execute(Txn& t, const TxnInput& in, int64_t* delta) const override {
    return c_.execute(t, in, delta);
  }
  Result<int64_t> check_node(Database& db, uint32_t n) const override { return c_.check_node(db, n); }
  Result<void> check_total(int64_t sum, uint32_t n, int64_t d) const override { return c_.check_total(sum, n, d); }

 private:
  Counters c_;
};

}  // namespace

// 2PL at serializable refuses a partitioned table that takes inserts,
// naming it, before the run starts (an insert would need its partition's
// IX lock); with 2pl.granularity = record it runs.
TEST(LockHierarchy, APartitionedTableWithInsertsIsRefused) {
  PartitionedGrowingCounters w(1);
  run::RunConfig rc;
  rc.workload = &w;
  rc.cluster.nodes = 1;
  rc.cluster.devargs = "shm";
  rc.protocol = find_protocol("2pl");
  rc.options.coroutines = 2;
  rc.duration_s = 0.05;
  rc.warmup_s = 0;
  rc.single_thread = true;
  auto r = run::run(rc);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("table 'counters' has partitions (scans) and takes inserts"), std::string::npos)
      << r.error().message;
  rc.options.protocol_settings = {{"2pl.granularity", "record"}};
  auto ok = run::run(rc);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_GT(ok->total.commits, 0u);
  EXPECT_TRUE(ok->invariants.ok()) << ok->invariants.error().message;
}
