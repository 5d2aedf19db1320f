// SmallBank (H-Store's banking benchmark, as RCC and DrTM+H run it): two
// tables, savings and checking, one balance per customer, and six
// transactions in the standard mix — Amalgamate 15%, Balance 15%,
// DepositChecking 15%, SendPayment 25%, TransactSavings 15%, WriteCheck 15%.
// Skew: `hot_accounts_per_node` accounts of each node receive
// `hot_percent`% of the accesses.
//
// Invariant: the total money in all accounts equals the initial total plus
// the sum of the deltas of committed transactions (DepositChecking and
// TransactSavings add money, WriteCheck takes it out; Amalgamate and
// SendPayment move it).
#pragma once

#include "config/config.hpp"
#include "txn/workload.hpp"

namespace rdtx::workloads {

class SmallBank final : public txn::Workload {
 public:
  enum Type : uint16_t { kAmalgamate, kBalance, kDepositChecking, kSendPayment, kTransactSavings, kWriteCheck };
  enum Table : txn::TableId { kSavings = 0, kChecking = 1 };
  static constexpr int64_t kInitialBalance = 10'000;

  struct Params {
    uint64_t accounts_per_node = 100'000;
    uint64_t hot_accounts_per_node = 4'000;
    uint32_t hot_percent = 90;
    uint32_t nodes = 1;
  };
  static void add_schema(config::Schema& s);
  static Params params_from(const config::Config& cfg, uint32_t nodes);

  explicit SmallBank(const Params& p) : p_(p) {}
  const char* name() const override { return "smallbank"; }
  std::vector<txn::TableDef> tables(uint32_t nodes) const override;
  Result<void> load(txn::Database& db, uint32_t node) const override;
  std::vector<std::string> type_names() const override;
  void generate(txn::Rng& rng, uint32_t home_node, txn::TxnInput& in) const override;
  runtime::Task<bool> execute(txn::Txn& t, const txn::TxnInput& in, int64_t* delta) const override;
  // The accesses execute() declares, from the input alone (every type does).
  bool declare(const txn::TxnInput& in, txn::DeclaredSet& out) const override;
  bool declares(uint16_t type) const override;
  Result<int64_t> check_node(txn::Database& db, uint32_t node) const override;
  Result<void> check_total(int64_t sum, uint32_t nodes, int64_t committed_delta) const override;

 private:
  uint64_t pick_account(txn::Rng& rng) const;
  Params p_;
};

}  // namespace rdtx::workloads
