// Random serial histories for the checker tests and benchmarks: transactions
// run one at a time, in order, against a simulated store, so the history is
// serializable (and snapshot isolated, and read committed) by construction,
// while ids, nodes, workers, coroutines, types and keys are spread at random.
// The plant_* functions then change one access so that it is not.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "history/history.hpp"

namespace rdtx::history::test {

struct RandomHistoryOptions {
  uint32_t txns = 10'000;  // committed and aborted attempts
  uint32_t accesses = 4;   // per attempt, on distinct keys
  uint32_t tables = 2;
  uint64_t keys = 1'000;   // per table
  double read_only = 0.2;  // share of read-only attempts
  double writes = 0.5;     // share of the other attempts' accesses that write
  double blind = 0.2;      // share of writes that do not read first
  double aborts = 0.05;    // share of attempts that abort (recorded, with their accesses)
  uint16_t nodes = 2;
  uint16_t workers = 2;     // per node
  uint32_t coroutines = 4;  // per worker
  bool timestamps = true;   // serial start/commit timestamps
  uint64_t seed = 1;
};

History random_serial_history(const RandomHistoryOptions& o);

// Makes one committed read-modify-write read the version before the one it
// replaced, so that it overwrote a write it never saw. Returns (that
// transaction, the writer it overwrote), or nullopt if the history has no
// read-modify-write over a non-initial version.
std::optional<std::pair<TxnId, TxnId>> plant_lost_update(History& h, uint64_t seed);

// Makes a committed A, whose write a later B read, also read a version B
// wrote: information flows both ways (G1c). Returns (A, B), or nullopt if
// there is no such pair.
std::optional<std::pair<TxnId, TxnId>> plant_future_read(History& h, uint64_t seed);

}  // namespace rdtx::history::test
