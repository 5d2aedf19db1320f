// SmallBank (H-Store's banking benchmark): two tables, savings and checking,
// one balance per customer, and six transactions. Two flavours
// (smallbank.flavor; doc/writing-a-workload.md "SmallBank" has the table of
// every parameter and the source line each follows):
//  - "hstore": as H-Store / OLTP-Bench define it: mix 15/15/15/25/15/15,
//    SendPayment and TransactSavings abort (user abort) on insufficient
//    funds, TransactSavings withdraws; `hot_percent`% of transactions draw
//    their accounts from the hot set, the others from outside it.
//  - "drtmh": as DrTM+H's code runs it (RCC's SmallBank is DrTM+H's):
//    SendPayment on insufficient funds commits without the transfer,
//    TransactSavings deposits, no transaction ever aborts by itself;
//    `tx_hot`% of transactions draw uniformly from all accounts, the others
//    from the hot set (RCC's meaning of tx_hot).
// Both: fixed amounts (5.00, 1.30, 20.20, 5.00), kept in cents so that the
// money invariant is exact; initial balances 10,000-50,000 (whole units)
// per account, a deterministic function of (table, account) so that any
// process can compute the initial total.
//
// Invariant: the total money in all accounts equals the initial total plus
// the sum of the deltas of committed transactions (DepositChecking and
// TransactSavings add or take money, WriteCheck takes it out; Amalgamate and
// SendPayment move it).
#pragma once

#include "config/config.hpp"
#include "txn/workload.hpp"

namespace rdtx::workloads {

class SmallBank final : public txn::Workload {
 public:
  enum Type : uint16_t { kAmalgamate, kBalance, kDepositChecking, kSendPayment, kTransactSavings, kWriteCheck };
  enum Table : txn::TableId { kSavings = 0, kChecking = 1 };
  enum class Flavor { kHStore, kDrtmh };
  // Initial balance of each account, whole units (H-Store's
  // SmallBankConstants MIN_BALANCE / MAX_BALANCE; DrTM+H's bank_schema.h).
  static constexpr int64_t kMinBalance = 10'000, kMaxBalance = 50'000;
  // Money is kept in cents: the benchmark's amounts are 1.30 and 20.20.
  static constexpr int64_t kCents = 100;
  static constexpr int64_t kSendPaymentAmount = 500, kDepositCheckingAmount = 130, kTransactSavingsAmount = 2020,
                           kWriteCheckAmount = 500;

  struct Params {
    Flavor flavor = Flavor::kHStore;
    uint64_t accounts_per_node = 100'000;
    uint64_t hot_accounts_per_node = 4'000;
    uint32_t hot_percent = 90;  // hstore: percent of transactions in the hot set
    uint32_t tx_hot = 90;       // drtmh: percent of transactions uniform over all accounts
    uint32_t mix[6] = {15, 15, 15, 25, 15, 15};  // percent per Type
    uint32_t nodes = 1;
  };
  // The initial balance (cents) of `key` in `table`.
  static int64_t initial_balance(txn::TableId table, uint64_t key);
  static void add_schema(config::Schema& s);
  static Params params_from(const config::Config& cfg, uint32_t nodes);

  explicit SmallBank(const Params& p) : p_(p) {}
  const char* name() const override { return "smallbank"; }
  std::vector<txn::TableDef> tables(uint32_t nodes) const override;
  Result<void> load(store::Store& s, uint32_t partition) const override;
  std::vector<std::string> type_names() const override;
  void generate(txn::Rng& rng, uint32_t home_node, txn::TxnInput& in) const override;
  runtime::Task<bool> execute(txn::Txn& t, const txn::TxnInput& in, int64_t* delta) const override;
  // The accesses execute() declares, from the input alone (every type does).
  bool declare(const txn::TxnInput& in, txn::DeclaredSet& out) const override;
  bool declares(uint16_t type) const override;
  uint32_t max_declared(uint16_t type) const override;
  Result<int64_t> check_node(txn::Database& db, uint32_t node) const override;
  Result<void> check_total(int64_t sum, uint32_t nodes, int64_t committed_delta) const override;

 private:
  // A customer on a random node; `hot`: from the node's hot set, else
  // (hstore) from outside it or (drtmh) from all of the node's accounts.
  uint64_t pick_account(txn::Rng& rng, bool hot) const;
  bool pick_hot(txn::Rng& rng) const;
  Params p_;
};

}  // namespace rdtx::workloads
