#include "workloads/smallbank/smallbank.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "store/loader.hpp"

namespace rdtx::workloads {

using txn::Txn;
using runtime::Task;

namespace {
struct Balance {
  int64_t value;
};
}  // namespace

namespace {

// The standard mix (H-Store SmallBankConstants FREQUENCY_*), and the one
// RCC's SmallBank runs (its co2.bank: sp 17, dc 17, payment [Balance] 17,
// ts 16, wc 17, aml 16), both in Type order: Amalgamate, Balance,
// DepositChecking, SendPayment, TransactSavings, WriteCheck.
constexpr uint32_t kHStoreMix[6] = {15, 15, 15, 25, 15, 15};
constexpr uint32_t kDrtmhMix[6] = {16, 17, 17, 17, 16, 17};

}  // namespace

int64_t SmallBank::initial_balance(txn::TableId table, uint64_t key) {
  // Uniform over [kMinBalance, kMaxBalance] whole units, as DrTM+H's loader
  // draws it; a hash of (table, key) rather than a generator's stream, so
  // that check_total() can recompute the initial total of every node.
  const uint64_t span = static_cast<uint64_t>(kMaxBalance - kMinBalance + 1);
  return (kMinBalance + static_cast<int64_t>(txn::mix64(key * 2 + table) % span)) * kCents;
}

void SmallBank::add_schema(config::Schema& s) {
  s.add_enum("smallbank.flavor", "hstore", {"hstore", "drtmh"},
             "hstore: H-Store/OLTP-Bench (user aborts on insufficient funds, hot_percent); drtmh: DrTM+H/RCC "
             "(no user aborts, tx_hot)");
  s.add_int("smallbank.accounts_per_node", 100'000, 2, 1 << 26, "customers (savings + checking rows) per node");
  s.add_int("smallbank.hot_accounts_per_node", 4'000, 1, 1 << 26, "hot customers per node");
  s.add_int("smallbank.hot_percent", 90, 0, 100,
            "hstore: percent of transactions whose accounts are hot (the others avoid the hot set)");
  s.add_int("smallbank.tx_hot", 90, 0, 100,
            "drtmh (RCC's meaning): percent of transactions whose accounts are uniform over all accounts (the "
            "others are hot)");
  s.add_string("smallbank.mix", "",
               "percent per type: Amalgamate,Balance,DepositChecking,SendPayment,TransactSavings,WriteCheck (\"\": "
               "the flavour's)");
  s.add_check([](const config::Config& c) -> std::string {
    if (c.get_int("smallbank.hot_accounts_per_node") > c.get_int("smallbank.accounts_per_node"))
      return "smallbank.hot_accounts_per_node (" + c.origin("smallbank.hot_accounts_per_node") +
             ") exceeds smallbank.accounts_per_node";
    // The two hot keys mean opposite things: setting only the one the
    // flavour does not read is a mistake (when both are set, as a preset
    // and a --set may do, the flavour's own key is used).
    const bool drtmh = c.get_string("smallbank.flavor") == "drtmh";
    const bool hot_percent_set = c.origin("smallbank.hot_percent") != "default";
    const bool tx_hot_set = c.origin("smallbank.tx_hot") != "default";
    if (drtmh && hot_percent_set && !tx_hot_set)
      return "smallbank.hot_percent (" + c.origin("smallbank.hot_percent") +
             ") is the hstore flavour's key; smallbank.flavor = \"drtmh\" reads smallbank.tx_hot (percent of "
             "transactions that are NOT hot)";
    if (!drtmh && tx_hot_set && !hot_percent_set)
      return "smallbank.tx_hot (" + c.origin("smallbank.tx_hot") +
             ") is the drtmh flavour's key; smallbank.flavor = \"hstore\" reads smallbank.hot_percent";
    if (const std::string& m = c.get_string("smallbank.mix"); !m.empty()) {
      uint32_t mix[6];
      if (std::string why = txn::parse_mix(m, mix, 6); !why.empty())
        return "smallbank.mix = \"" + m + "\" (" + c.origin("smallbank.mix") + "): " + why;
    }
    return "";
  });
}

SmallBank::Params SmallBank::params_from(const config::Config& cfg, uint32_t nodes) {
  Params p;
  p.flavor = cfg.get_string("smallbank.flavor") == "drtmh" ? Flavor::kDrtmh : Flavor::kHStore;
  p.accounts_per_node = static_cast<uint64_t>(cfg.get_int("smallbank.accounts_per_node"));
  p.hot_accounts_per_node = static_cast<uint64_t>(cfg.get_int("smallbank.hot_accounts_per_node"));
  p.hot_percent = static_cast<uint32_t>(cfg.get_int("smallbank.hot_percent"));
  p.tx_hot = static_cast<uint32_t>(cfg.get_int("smallbank.tx_hot"));
  const uint32_t* mix = p.flavor == Flavor::kDrtmh ? kDrtmhMix : kHStoreMix;
  std::copy(mix, mix + 6, p.mix);
  if (const std::string& m = cfg.get_string("smallbank.mix"); !m.empty()) txn::parse_mix(m, p.mix, 6);  // checked above
  p.nodes = nodes;
  return p;
}

std::vector<txn::TableDef> SmallBank::tables(uint32_t nodes) const {
  auto part = store::Partitioner::range(nodes, p_.accounts_per_node * nodes);
  std::vector<txn::TableDef> t;
  for (auto [id, name] : {std::pair{kSavings, "savings"}, std::pair{kChecking, "checking"}})
    t.push_back({id, name, sizeof(Balance), static_cast<uint32_t>(p_.accounts_per_node), part.value()});
  return t;
}

Result<void> SmallBank::load(store::Store& s, uint32_t partition) const {
  const uint64_t base = partition * p_.accounts_per_node;
  for (txn::TableId id : {kSavings, kChecking}) {
    RDTX_TRY(store::load(*s.table(id), p_.accounts_per_node, [base, id](uint64_t row, std::span<std::byte> rec) {
      Balance b{initial_balance(id, base + row)};
      std::memcpy(rec.data(), &b, sizeof b);
      return base + row;
    }));
  }
  return {};
}

std::vector<std::string> SmallBank::type_names() const {
  return {"Amalgamate", "Balance", "DepositChecking", "SendPayment", "TransactSavings", "WriteCheck"};
}

bool SmallBank::pick_hot(txn::Rng& rng) const {
  // One draw per transaction, as both references do (H-Store
  // SmallBankClient: is_hotspot once for all of a transaction's accounts;
  // DrTM+H GetTwoAccount: one tx_hot draw for both).
  const uint32_t x = static_cast<uint32_t>(rng() % 100);
  return p_.flavor == Flavor::kDrtmh ? !(x < p_.tx_hot) : x < p_.hot_percent;
}

uint64_t SmallBank::pick_account(txn::Rng& rng, bool hot) const {
  const uint64_t node = rng() % p_.nodes;
  const uint64_t hot_n = p_.hot_accounts_per_node, n = p_.accounts_per_node;
  uint64_t row;
  if (hot) row = rng() % hot_n;
  else if (p_.flavor == Flavor::kHStore && n > hot_n) row = hot_n + rng() % (n - hot_n);  // outside the hot set
  else row = rng() % n;                                                                 // drtmh: all accounts
  return node * n + row;
}

void SmallBank::generate(txn::Rng& rng, uint32_t home_node, txn::TxnInput& in) const {
  in.home_node = home_node;
  uint32_t x = static_cast<uint32_t>(rng() % 100);
  uint16_t type = 0;
  while (type < 5 && x >= p_.mix[type]) x -= p_.mix[type++];
  in.type = type;
  const bool hot = pick_hot(rng);
  in.args[0] = pick_account(rng, hot);
  // Two distinct customers; a hot set of one customer in all gives up on
  // the hot draw rather than loop.
  for (int tries = 0;; ++tries) {
    in.args[1] = pick_account(rng, hot && tries < 16);
    if (in.args[1] != in.args[0]) break;
  }
  in.args[2] = 0;  // amounts are fixed per type (kSendPaymentAmount...)
}

Task<bool> SmallBank::execute(Txn& t, const txn::TxnInput& in, int64_t* delta) const {
  const uint64_t a = in.args[0], b = in.args[1];
  const bool hstore = p_.flavor == Flavor::kHStore;
  switch (in.type) {
    case kAmalgamate: {
      int sa = t.write(kSavings, a), ca = t.write(kChecking, a), cb = t.write(kChecking, b);
      if (!co_await t.fetch()) co_return false;
      int64_t total = t.get<Balance>(sa).value + t.get<Balance>(ca).value;
      t.get_mut<Balance>(sa).value = 0;
      t.get_mut<Balance>(ca).value = 0;
      t.get_mut<Balance>(cb).value += total;
      break;
    }
    case kBalance: {
      t.read(kSavings, a);
      t.read(kChecking, a);
      if (!co_await t.fetch()) co_return false;
      break;
    }
    case kDepositChecking: {
      int ca = t.write(kChecking, a);
      if (!co_await t.fetch()) co_return false;
      t.get_mut<Balance>(ca).value += kDepositCheckingAmount;
      *delta = kDepositCheckingAmount;
      break;
    }
    case kSendPayment: {
      int ca = t.write(kChecking, a), cb = t.write(kChecking, b);
      if (!co_await t.fetch()) co_return false;
      const int64_t v = kSendPaymentAmount;
      if (t.get<Balance>(ca).value < v) {  // insufficient funds
        if (hstore) {  // H-Store SendPayment: VoltAbortException
          co_await t.user_abort();
          co_return false;
        }
        break;  // DrTM+H txn_sp_new_api: commits both records unchanged
      }
      t.get_mut<Balance>(ca).value -= v;
      t.get_mut<Balance>(cb).value += v;
      break;
    }
    case kTransactSavings: {
      int sa = t.write(kSavings, a);
      if (!co_await t.fetch()) co_return false;
      // OLTP-Bench TransactSavings: bal = bal - amount, aborting if that
      // goes negative; DrTM+H txn_ts_new_api: s_balance += amount.
      const int64_t v = hstore ? -kTransactSavingsAmount : kTransactSavingsAmount;
      if (t.get<Balance>(sa).value + v < 0) {
        co_await t.user_abort();
        co_return false;
      }
      t.get_mut<Balance>(sa).value += v;
      *delta = v;
      break;
    }
    case kWriteCheck: {
      int sa = t.read(kSavings, a), ca = t.write(kChecking, a);
      if (!co_await t.fetch()) co_return false;
      int64_t total = t.get<Balance>(sa).value + t.get<Balance>(ca).value;
      // Both references' code: on overdraft, amount - 1 is taken (H-Store
      // WriteCheck.java and DrTM+H txn_wc_new_api alike), not the paper's
      // amount + 1 penalty.
      const int64_t v = kWriteCheckAmount;
      int64_t amount = total < v ? v - kCents : v;
      t.get_mut<Balance>(ca).value -= amount;
      *delta = -amount;
      break;
    }
    default:
      co_await t.user_abort();
      co_return false;
  }
  bool ok = co_await t.commit();
  if (!ok) *delta = 0;
  co_return ok;
}

// Mirrors execute(): the same table, key and mode per access (a change to
// one must be made to the other; CALVIN fails the run on a mismatch).
bool SmallBank::declare(const txn::TxnInput& in, txn::DeclaredSet& out) const {
  using M = txn::AccessMode;
  const uint64_t a = in.args[0], b = in.args[1];
  out.n = 0;
  switch (in.type) {
    case kAmalgamate:
      return out.add(kSavings, a, M::kWrite) && out.add(kChecking, a, M::kWrite) && out.add(kChecking, b, M::kWrite);
    case kBalance: return out.add(kSavings, a, M::kRead) && out.add(kChecking, a, M::kRead);
    case kDepositChecking: return out.add(kChecking, a, M::kWrite);
    case kSendPayment: return out.add(kChecking, a, M::kWrite) && out.add(kChecking, b, M::kWrite);
    case kTransactSavings: return out.add(kSavings, a, M::kWrite);
    case kWriteCheck: return out.add(kSavings, a, M::kRead) && out.add(kChecking, a, M::kWrite);
    default: return true;  // execute() declares nothing and gives up
  }
}

bool SmallBank::declares(uint16_t type) const { return type <= kWriteCheck; }

uint32_t SmallBank::max_declared(uint16_t type) const {
  switch (type) {
    case kAmalgamate: return 3;
    case kBalance: case kSendPayment: case kWriteCheck: return 2;
    case kDepositChecking: case kTransactSavings: return 1;
    default: return 0;
  }
}

Result<int64_t> SmallBank::check_node(txn::Database& db, uint32_t n) const {
  int64_t total = 0;
  for (txn::TableId id : {kSavings, kChecking}) {
    store::Table* tab = db.store(n).table(id);
    for (uint64_t k = n * p_.accounts_per_node; k < (n + 1) * p_.accounts_per_node; ++k) {
      store::TupleRef ref;
      if (tab->lookup(k, &ref) != 0)
        return make_error(EIO, "smallbank: account %llu missing from %s on node %u", static_cast<unsigned long long>(k),
                          tab->name().c_str(), n);
      Balance b;
      std::memcpy(&b, ref.tuple + tab->layout().record_offset(), sizeof b);
      total += b.value;
    }
  }
  return total;
}

Result<void> SmallBank::check_total(int64_t total, uint32_t nodes, int64_t committed_delta) const {
  int64_t initial = 0;
  for (uint64_t k = 0; k < p_.accounts_per_node * nodes; ++k)
    initial += initial_balance(kSavings, k) + initial_balance(kChecking, k);
  const int64_t expect = initial + committed_delta;
  if (total != expect)
    return make_error(EIO, "smallbank: total money is %lld, expected %lld (initial + committed deltas %lld)",
                      static_cast<long long>(total), static_cast<long long>(expect),
                      static_cast<long long>(committed_delta));
  return {};
}

namespace {

Result<std::unique_ptr<txn::Workload>> create_smallbank(const config::Config& cfg, uint32_t nodes) {
  return std::unique_ptr<txn::Workload>(std::make_unique<SmallBank>(SmallBank::params_from(cfg, nodes)));
}

// 4 of 200 customers per node get 90% of the transactions.
constexpr const char* kContended[] = {"smallbank.flavor=hstore", "smallbank.accounts_per_node=200",
                                      "smallbank.hot_accounts_per_node=4", "smallbank.hot_percent=90"};
// The drtmh flavour too (RCC's meaning: tx_hot = 10 keeps 90% hot).
constexpr const char* kDrtmh[] = {"smallbank.flavor=drtmh", "smallbank.accounts_per_node=200",
                                  "smallbank.hot_accounts_per_node=4", "smallbank.tx_hot=10"};
constexpr txn::WorkloadVariant kVariants[] = {{"drtmh", kDrtmh}};

constexpr txn::WorkloadDef kSmallBank = {
    .name = "smallbank",
    .summary = "SmallBank: six banking transactions on savings and checking accounts",
    .add_schema = SmallBank::add_schema,
    .create = create_smallbank,
    .contended = kContended,
    .variants = kVariants,
};
RDTX_REGISTER_WORKLOAD(kSmallBank)

}  // namespace

}  // namespace rdtx::workloads
