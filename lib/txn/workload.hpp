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
#include <random>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "runtime/task.hpp"
#include "txn/database.hpp"
#include "txn/txn.hpp"

namespace rdtx::txn {

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
  virtual void generate(std::mt19937_64& rng, uint32_t home_node, TxnInput& in) const = 0;
  // One attempt. Returns true if committed; on false the Txn has released
  // everything. `delta` (committed attempts only) adds to the run's
  // invariant sum (SmallBank: money created or destroyed).
  virtual runtime::Task<bool> execute(Txn& t, const TxnInput& in, int64_t* delta) const = 0;
  // Invariants after a run, given the sum of committed deltas.
  virtual Result<void> check(Database& db, int64_t committed_delta) const = 0;
};

}  // namespace rdtx::txn
