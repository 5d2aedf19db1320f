// Workload: what a benchmark provides to the engine. It declares its tables,
// loads each node's partition, generates transaction inputs and runs each
// transaction against the protocol-neutral Txn API, and checks its
// invariants after a run.
//
// An aborted transaction is retried with the same input (RCC's model), so
// inputs are generated once per transaction, outside execute().
// Thread-safety: generate() and execute() run on worker threads
// concurrently: they may only touch their arguments and immutable state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
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

struct TxnInput {
  uint16_t type = 0;
  uint32_t home_node = 0;
  uint64_t args[14] = {};
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual const char* name() const = 0;
  virtual std::vector<TableDef> tables(uint32_t nodes) const = 0;
  virtual Result<void> load(Database& db, uint32_t node) const = 0;
  virtual std::vector<std::string> type_names() const = 0;
  // The next transaction of a coordinator on `home_node`.
  virtual void generate(Rng& rng, uint32_t home_node, TxnInput& in) const = 0;
  // One attempt. Returns true if committed; on false the Txn has released
  // everything. `delta` (committed attempts only) adds to the run's
  // invariant sum (SmallBank: money created or destroyed).
  virtual runtime::Task<bool> execute(Txn& t, const TxnInput& in, int64_t* delta) const = 0;
  // Invariants after a run, in two parts so that each process of a
  // multi-process cluster checks the partitions it holds: check_node()
  // checks what node `node`'s partition holds and returns its share of the
  // run-wide sum; check_total() compares the sum of the shares of all
  // `nodes` nodes with the sum of committed deltas.
  virtual Result<int64_t> check_node(Database& db, uint32_t node) const = 0;
  virtual Result<void> check_total(int64_t sum, uint32_t nodes, int64_t committed_delta) const = 0;
  // Both, over every node of `db` (all in this process).
  Result<void> check(Database& db, int64_t committed_delta) const;
};

}  // namespace rdtx::txn
