// Write skew: the smallest workload on which snapshot isolation and
// serializability differ. One table of `pairs` pairs of rows per node (keys
// 2p and 2p+1 are pair p, on one node), each row a signed balance starting
// at `initial`; the constraint is a + b >= 0 for every pair. Two types:
//  - Withdraw: reads both rows of a pair, and takes `amount` from one side
//    if the pair's sum stays >= 0; otherwise it commits without changing
//    anything (not a user abort: every issued Withdraw commits, so the
//    committed mix is the issued mix).
//  - Deposit: adds `amount` to one row (read-modify-write), so that pairs
//    do not stay drained.
// Two concurrent Withdraws of the two sides of one pair, each of which alone
// would keep the sum >= 0, are the classic write skew (Berenson et al.): they
// write different rows, so snapshot isolation commits both and the pair
// goes below 0; every serializable protocol aborts or orders one of them.
//
// Invariants (doc/workloads.md "Write skew"): money is conserved (the sum of
// all balances = initial total + committed deltas, at every level) and no
// pair is below 0, which is checked only when the run's isolation level
// (Workload::isolation()) forbids write skew (serializable, repeatable
// read); at snapshot isolation or read committed the pairs below 0 are the
// expected anomaly: counted and reported (check_note(), skewed_pairs()),
// not a failure.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.hpp"
#include "txn/workload.hpp"

namespace rdtx::workloads {

class WriteSkew final : public txn::Workload {
 public:
  enum Type : uint16_t { kWithdraw, kDeposit };
  enum Table : txn::TableId { kPairs = 0 };
  // The count of pairs below 0 rides in the low bits of each node's share
  // (check_node), the money above them: the shares of all nodes add up to
  // both at once, in one process or across processes. Hence at most
  // 2^kCountBits - 1 pairs in the cluster.
  static constexpr int kCountBits = 24;
  static constexpr uint64_t kMaxPairs = (uint64_t{1} << kCountBits) - 1;

  struct Params {
    uint64_t pairs_per_node = 1024;
    int64_t initial = 100;
    int64_t max_amount = 10;
    uint32_t mix[2] = {50, 50};  // percent per Type
    uint32_t nodes = 1;
  };
  static void add_schema(config::Schema& s);
  static Params params_from(const config::Config& cfg, uint32_t nodes);
  // Whether isolation level `i` forbids write skew (G2-item): then a pair
  // below 0 fails the check.
  static bool forbids_skew(txn::Isolation i);

  explicit WriteSkew(const Params& p) : p_(p) {}
  const char* name() const override { return "writeskew"; }
  std::vector<txn::TableDef> tables(uint32_t nodes) const override;
  Result<void> load(store::Store& s, uint32_t partition) const override;
  std::vector<std::string> type_names() const override;
  // args[0] the pair, args[1] the side (0: key 2p, 1: key 2p+1), args[2]
  // the amount (1..max_amount).
  void generate(txn::Rng& rng, uint32_t home_node, txn::TxnInput& in) const override;
  runtime::Task<bool> execute(txn::Txn& t, const txn::TxnInput& in, int64_t* delta) const override;
  bool declare(const txn::TxnInput& in, txn::DeclaredSet& out) const override;
  bool declares(uint16_t type) const override;
  uint32_t max_declared(uint16_t type) const override;
  // The share of node `node`: its money and (low kCountBits bits) its pairs
  // below 0. Fails, naming a pair, if any is below 0 and the run's level
  // forbids write skew.
  Result<int64_t> check_node(txn::Database& db, uint32_t node) const override;
  // Money: the shares' sum against the initial total + committed deltas
  // (a difference is exact up to 2^(63 - kCountBits), far beyond any run's).
  // Pairs below 0: remembered for skewed_pairs() and check_note().
  Result<void> check_total(int64_t sum, uint32_t nodes, int64_t committed_delta) const override;
  // "write skew: N pairs below 0 (allowed at snapshot isolation)", or "".
  std::string check_note() const override;
  // Pairs below 0 in the cluster, as the last check_total() found them.
  uint64_t skewed_pairs() const { return skewed_; }

 private:
  Params p_;
  // Written by check_total() on the thread that checks the run, after every
  // worker has stopped; read after it.
  mutable uint64_t skewed_ = 0;
};

}  // namespace rdtx::workloads
