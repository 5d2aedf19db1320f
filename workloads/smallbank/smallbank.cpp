#include "workloads/smallbank/smallbank.hpp"

#include "store/loader.hpp"

namespace rdtx::workloads {

using txn::Txn;
using runtime::Task;

namespace {
struct Balance {
  int64_t value;
};
}  // namespace

void SmallBank::add_schema(config::Schema& s) {
  s.add_int("smallbank.accounts_per_node", 100'000, 2, 1 << 26, "customers (savings + checking rows) per node");
  s.add_int("smallbank.hot_accounts_per_node", 4'000, 1, 1 << 26, "hot customers per node");
  s.add_int("smallbank.hot_percent", 90, 0, 100, "percent of accesses that go to hot customers");
  s.add_check([](const config::Config& c) -> std::string {
    if (c.get_int("smallbank.hot_accounts_per_node") > c.get_int("smallbank.accounts_per_node"))
      return "smallbank.hot_accounts_per_node (" + c.origin("smallbank.hot_accounts_per_node") +
             ") exceeds smallbank.accounts_per_node";
    return "";
  });
}

SmallBank::Params SmallBank::params_from(const config::Config& cfg, uint32_t nodes) {
  Params p;
  p.accounts_per_node = static_cast<uint64_t>(cfg.get_int("smallbank.accounts_per_node"));
  p.hot_accounts_per_node = static_cast<uint64_t>(cfg.get_int("smallbank.hot_accounts_per_node"));
  p.hot_percent = static_cast<uint32_t>(cfg.get_int("smallbank.hot_percent"));
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

Result<void> SmallBank::load(txn::Database& db, uint32_t node) const {
  const uint64_t base = node * p_.accounts_per_node;
  for (txn::TableId id : {kSavings, kChecking}) {
    RDTX_TRY(store::load(*db.store(node).table(id), p_.accounts_per_node, [base](uint64_t row, std::span<std::byte> rec) {
      Balance b{kInitialBalance};
      std::memcpy(rec.data(), &b, sizeof b);
      return base + row;
    }));
  }
  return {};
}

std::vector<std::string> SmallBank::type_names() const {
  return {"Amalgamate", "Balance", "DepositChecking", "SendPayment", "TransactSavings", "WriteCheck"};
}

uint64_t SmallBank::pick_account(txn::Rng& rng) const {
  uint64_t node = rng() % p_.nodes;
  bool hot = rng() % 100 < p_.hot_percent;
  uint64_t n = hot ? p_.hot_accounts_per_node : p_.accounts_per_node;
  return node * p_.accounts_per_node + rng() % n;
}

void SmallBank::generate(txn::Rng& rng, uint32_t home_node, txn::TxnInput& in) const {
  in.home_node = home_node;
  uint32_t x = static_cast<uint32_t>(rng() % 100);
  in.type = x < 15 ? kAmalgamate : x < 30 ? kBalance : x < 45 ? kDepositChecking : x < 70 ? kSendPayment
          : x < 85 ? kTransactSavings : kWriteCheck;
  in.args[0] = pick_account(rng);
  do {
    in.args[1] = pick_account(rng);
  } while (in.args[1] == in.args[0]);
  in.args[2] = 1 + rng() % 100;  // amount
}

Task<bool> SmallBank::execute(Txn& t, const txn::TxnInput& in, int64_t* delta) const {
  const uint64_t a = in.args[0], b = in.args[1];
  const int64_t v = static_cast<int64_t>(in.args[2]);
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
      t.get_mut<Balance>(ca).value += v;
      *delta = v;
      break;
    }
    case kSendPayment: {
      int ca = t.write(kChecking, a), cb = t.write(kChecking, b);
      if (!co_await t.fetch()) co_return false;
      if (t.get<Balance>(ca).value < v) {  // insufficient funds
        co_await t.user_abort();
        co_return false;
      }
      t.get_mut<Balance>(ca).value -= v;
      t.get_mut<Balance>(cb).value += v;
      break;
    }
    case kTransactSavings: {
      int sa = t.write(kSavings, a);
      if (!co_await t.fetch()) co_return false;
      t.get_mut<Balance>(sa).value += v;
      *delta = v;
      break;
    }
    case kWriteCheck: {
      int sa = t.read(kSavings, a), ca = t.write(kChecking, a);
      if (!co_await t.fetch()) co_return false;
      int64_t total = t.get<Balance>(sa).value + t.get<Balance>(ca).value;
      int64_t amount = total < v ? v + 1 : v;  // overdraft penalty
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
  const int64_t expect = 2 * kInitialBalance * static_cast<int64_t>(p_.accounts_per_node * nodes) + committed_delta;
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

const txn::WorkloadDef kSmallBank = {
    "smallbank",
    "SmallBank: six banking transactions on savings and checking accounts",
    SmallBank::add_schema,
    create_smallbank,
    // 4 of 200 customers per node get 90% of the accesses.
    {"smallbank.accounts_per_node=200", "smallbank.hot_accounts_per_node=4", "smallbank.hot_percent=90"},
};
RDTX_REGISTER_WORKLOAD(kSmallBank)

}  // namespace

}  // namespace rdtx::workloads
