// Workload: what a benchmark provides to the engine. It declares its tables,
// loads each node's partition, generates transaction inputs and runs each
// transaction against the protocol-neutral Txn API, and checks its
// invariants after a run. A workload registers itself with a WorkloadDef
// (RDTX_REGISTER_WORKLOAD in its own .cpp), as protocols do: apps offer,
// and the tests run, every registered workload without naming one.
//
// An aborted transaction is retried with the same input (RCC's model), so
// inputs are generated once per transaction, outside execute().
// Thread-safety: generate() and execute() run on worker threads
// concurrently: they may only touch their arguments and immutable state.
// The registry is written before main() and read-only after.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <span>
#include <vector>

#include "base/result.hpp"
#include "config/config.hpp"
#include "runtime/task.hpp"
#include "txn/database.hpp"
#include "txn/txn.hpp"

namespace rdtx::txn {

// The coordinators' random generator: xoshiro256** seeded by splitmix64.
// A UniformRandomBitGenerator, so <random> distributions work with it; a
// fraction of mt19937_64's cost on the path that generates every input.
class Rng {
 public:
  using result_type = uint64_t;
  explicit Rng(uint64_t seed = 1) {
    for (auto& w : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      w = z ^ (z >> 31);
    }
  }
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return UINT64_MAX; }
  uint64_t operator()() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// splitmix64's finalizer: a deterministic 64-bit hash, for loaded values
// that any process must be able to recompute (SmallBank's balances, TPC-C's
// rows).
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Parses a transaction mix "a,b,..." of `n` percentages summing to 100 into
// out[0..n): "" on success, else why not (for a key's error message).
std::string parse_mix(const std::string& text, uint32_t* out, size_t n);

struct TxnInput {
  uint16_t type = 0;
  uint32_t home_node = 0;
  uint64_t args[14] = {};
};

// A transaction's read and write set known before it runs, from its input
// alone (Workload::declare): what a deterministic protocol (CALVIN) locks
// and forwards before execute() starts. Exactly the accesses execute() will
// declare, same table, key and mode, in any order.
struct DeclaredSet {
  struct Entry {
    TableId table = 0;
    AccessMode mode = AccessMode::kRead;
    Key key = 0;
  };
  uint32_t n = 0;
  Entry e[Txn::kMaxAccesses];
  // False if full (the input declares more than Txn::kMaxAccesses).
  bool add(TableId t, Key k, AccessMode m) {
    if (n == Txn::kMaxAccesses) return false;
    e[n++] = {t, m, k};
    return true;
  }
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual const char* name() const = 0;
  virtual std::vector<TableDef> tables(uint32_t nodes) const = 0;
  // Loads partition `partition` (the one node `partition` is primary of)
  // into `s`: the primary's store, or a backup's copy (replication), whose
  // tables have the same ids and keys with another tuple layout.
  virtual Result<void> load(store::Store& s, uint32_t partition) const = 0;
  // Loads the replicated tables (TableDef::replicated) alone into `s`,
  // which holds no other table: a compute node's store (the split layout,
  // cluster::ClusterConfig::memory_nodes), whose coordinators read them
  // locally (Txn::replicated). Called only for a workload with replicated
  // tables; the default refuses (ENOTSUP), naming the workload.
  virtual Result<void> load_replicated(store::Store& s) const;
  virtual std::vector<std::string> type_names() const = 0;
  // The next transaction of a coordinator whose home partition is
  // `home_node` (< the `nodes` the workload was made for): its own node in
  // the symmetric layout; a compute node's coordinators are spread over the
  // memory nodes' partitions (Coordinator::home()). A transaction's "local"
  // rows (TPC-C's home warehouse) are that partition's.
  virtual void generate(Rng& rng, uint32_t home_node, TxnInput& in) const = 0;
  // One attempt. Returns true if committed; on false the Txn has released
  // everything. `delta` (committed attempts only) adds to the run's
  // invariant sum (SmallBank: money created or destroyed).
  virtual runtime::Task<bool> execute(Txn& t, const TxnInput& in, int64_t* delta) const = 0;
  // The read and write set execute() will declare for `in`, before it runs
  // (CALVIN locks and forwards them up front). False: this input's type does
  // not know its set in advance (it depends on values read, as TPC-C's
  // by-last-name lookups): the default. A workload that overrides it for
  // every type returns true for every input generate() makes.
  virtual bool declare(const TxnInput& in, DeclaredSet& out) const {
    (void)in;
    (void)out;
    return false;
  }
  // Whether some transaction moves rows (Txn::relocate): refused by a
  // protocol that cannot (ProtocolDef::relocates_rows).
  virtual bool relocates() const { return false; }
  // Whether every input of transaction type `type` declares (declare()
  // returns true): what a protocol that needs declared sets checks at
  // creation. The default: none does.
  virtual bool declares(uint16_t type) const {
    (void)type;
    return false;
  }
  // The most accesses declare() gives an input of type `type` (an upper
  // bound): what a deterministic protocol sizes its per-transaction buffers
  // by (CALVIN's calvin.max_accesses = 0). 0 for a type that does not
  // declare.
  virtual uint32_t max_declared(uint16_t type) const {
    (void)type;
    return 0;
  }
  // Invariants after a run, in two parts so that each process of a
  // multi-process cluster checks the partitions it holds: check_node()
  // checks what node `node`'s partition holds and returns its share of the
  // run-wide sum (called for nodes that hold data only); check_total()
  // compares the sum of the shares of all `nodes` partitions (the nodes
  // that hold data) with the sum of committed deltas.
  virtual Result<int64_t> check_node(Database& db, uint32_t node) const = 0;
  virtual Result<void> check_total(int64_t sum, uint32_t nodes, int64_t committed_delta) const = 0;
  // Both, over every node of `db` that holds data (all in this process).
  // ECANCELED when a stop request's grace ran out before the check ended
  // (runtime::stop_grace_over(), polled between nodes, and by a check_node()
  // that takes long, TPC-C's): the run was not checked.
  Result<void> check(Database& db, int64_t committed_delta) const;
  // The isolation level the run asks of its protocol (txn.isolation), which
  // the runner sets before the run in every process; serializable until
  // then. An invariant that only some levels keep (writeskew's: no pair of
  // rows below 0, which write skew breaks under snapshot isolation and read
  // committed) is checked at those; at the others the check passes and
  // check_note() reports what it found.
  void set_isolation(Isolation i) { isolation_ = i; }
  Isolation isolation() const { return isolation_; }
  // What the last check_total() found that isolation() allows and a
  // serializable run would have failed on, for the run's report
  // ("write skew: 3 pairs below 0 (allowed at snapshot isolation)"); "" if
  // nothing, the default.
  virtual std::string check_note() const { return ""; }
  // Shares add modulo 2^64 (TPC-C's are fingerprints that wrap; a sum of
  // money never gets near it): no signed overflow.
  static int64_t add_shares(int64_t a, int64_t b) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  }

 private:
  Isolation isolation_ = Isolation::kSerializable;
};

// The largest Workload::max_declared() of any of its types (0: none
// declares).
uint32_t max_declared(const Workload& w);

// Another contended setting of a workload (e.g. another flavour): the
// generated tests run it as a workload of its own, named
// "<workload>/<name>", with `overrides` applied instead of
// WorkloadDef::contended.
struct WorkloadVariant {
  const char* name;
  std::span<const char* const> overrides;
};

// A workload the `workload` key can name. Its keys live in a section of its
// own name ([smallbank], [ycsb]).
// Written with designated initializers and constant-initialized, as
// ProtocolDef: the lists are constexpr arrays beside the definition.
struct WorkloadDef {
  const char* name = nullptr;
  const char* summary = nullptr;
  // Adds the workload's keys (and their cross-key checks) to `s`.
  void (*add_schema)(config::Schema& s) = nullptr;
  // The workload for a cluster of `nodes` nodes, from a Config loaded with
  // a schema that holds its keys. Fails with a message naming the key.
  Result<std::unique_ptr<Workload>> (*create)(const config::Config& cfg, uint32_t nodes) = nullptr;
  // "key=value" overrides of the workload's own keys that make a small,
  // heavily contended instance: what the protocol, stress and chaos tests
  // run (a tiny hot set, so that coroutines conflict all the time).
  std::span<const char* const> contended = {};
  // More contended settings the tests run too (one per flavour, say).
  std::span<const WorkloadVariant> variants = {};
  // Overrides applied after `contended` (or a variant's) for runs of at
  // most kShortRunSeconds, the generated test suites' runs: room for what a
  // short run inserts and no more, so that its tables load and map quickly
  // (TPC-C: orders a district). Empty if the contended setting is small.
  std::span<const char* const> short_run = {};
  static constexpr double kShortRunSeconds = 0.5;
  // False: the stress suites leave the workload out (test_stress,
  // test_chaos, and the multi-process stress, which reads `rdtx-bench
  // --list-workloads=stress`); test_protocols (fast) still runs it with
  // every protocol and primitive. For a workload that shows one thing
  // the fast suite already shows (writeskew's anomaly), not worth their
  // time.
  bool stress_suites = true;
};

void register_workload(const WorkloadDef* def);
// Every registered workload, sorted by name.
const std::vector<const WorkloadDef*>& workloads();
// nullptr if no workload has this name.
const WorkloadDef* find_workload(std::string_view name);

}  // namespace rdtx::txn

// Registers `var` (a constant-initialized WorkloadDef of the same .cpp)
// before main(), as RDTX_REGISTER_PROTOCOL does.
#define RDTX_REGISTER_WORKLOAD(var)                               \
  [[gnu::constructor]] static void rdtx_register_workload_##var() { \
    ::rdtx::txn::register_workload(&(var));                       \
  }
