#include "workloads/writeskew/writeskew.hpp"

#include <cstring>
#include <string>

#include "store/loader.hpp"

namespace rdtx::workloads {

using runtime::Task;
using txn::Txn;

namespace {
struct Balance {
  int64_t value;
};

// The low kCountBits bits of a share (the count of pairs below 0) and the
// money above them, both modulo 2^64 as shares add (Workload::add_shares).
int64_t make_share(int64_t money, uint64_t skewed) {
  return static_cast<int64_t>((static_cast<uint64_t>(money) << WriteSkew::kCountBits) + skewed);
}
}  // namespace

void WriteSkew::add_schema(config::Schema& s) {
  s.add_int("writeskew.pairs", 1024, 1, 1 << 20,
            "pairs of rows per node (keys 2p and 2p+1 are pair p, on one node; constraint: their sum >= 0)");
  s.add_int("writeskew.initial", 100, 0, 1'000'000'000, "every row's balance after loading");
  s.add_int("writeskew.max_amount", 10, 1, 1'000'000, "a Withdraw or Deposit moves an amount uniform in 1..max_amount");
  s.add_string("writeskew.mix", "50,50", "percent per type: Withdraw,Deposit");
  s.add_check([](const config::Config& c) -> std::string {
    const std::string& m = c.get_string("writeskew.mix");
    uint32_t mix[2];
    if (std::string why = txn::parse_mix(m, mix, 2); !why.empty())
      return "writeskew.mix = \"" + m + "\" (" + c.origin("writeskew.mix") + "): " + why;
    return "";
  });
}

WriteSkew::Params WriteSkew::params_from(const config::Config& cfg, uint32_t nodes) {
  Params p;
  p.pairs_per_node = static_cast<uint64_t>(cfg.get_int("writeskew.pairs"));
  p.initial = cfg.get_int("writeskew.initial");
  p.max_amount = cfg.get_int("writeskew.max_amount");
  txn::parse_mix(cfg.get_string("writeskew.mix"), p.mix, 2);  // checked by the schema
  p.nodes = nodes;
  return p;
}

bool WriteSkew::forbids_skew(txn::Isolation i) {
  // Write skew is G2-item: PL-3 and PL-2.99 forbid it (on item reads, which
  // is all this workload does); snapshot isolation and read committed do not.
  return i == txn::Isolation::kSerializable || i == txn::Isolation::kRepeatableRead;
}

std::vector<txn::TableDef> WriteSkew::tables(uint32_t nodes) const {
  // Range partitioning by key: node n holds keys [2nP, 2(n+1)P), so both
  // rows of a pair are on one node.
  const uint64_t rows = 2 * p_.pairs_per_node;
  auto part = store::Partitioner::range(nodes, rows * nodes);
  return {{kPairs, "pairs", sizeof(Balance), static_cast<uint32_t>(rows), part.value()}};
}

Result<void> WriteSkew::load(store::Store& s, uint32_t partition) const {
  const uint64_t rows = 2 * p_.pairs_per_node, base = partition * rows;
  const int64_t initial = p_.initial;
  return store::load(*s.table(kPairs), rows, [base, initial](uint64_t row, std::span<std::byte> rec) {
    const Balance b{initial};
    std::memcpy(rec.data(), &b, sizeof b);
    return base + row;
  });
}

std::vector<std::string> WriteSkew::type_names() const { return {"Withdraw", "Deposit"}; }

void WriteSkew::generate(txn::Rng& rng, uint32_t home_node, txn::TxnInput& in) const {
  in.home_node = home_node;
  in.type = rng() % 100 < p_.mix[kWithdraw] ? kWithdraw : kDeposit;
  // A pair uniform over the cluster's (a node, then one of its pairs).
  in.args[0] = (rng() % p_.nodes) * p_.pairs_per_node + rng() % p_.pairs_per_node;
  in.args[1] = rng() % 2;
  in.args[2] = 1 + rng() % static_cast<uint64_t>(p_.max_amount);
}

Task<bool> WriteSkew::execute(Txn& t, const txn::TxnInput& in, int64_t* delta) const {
  const uint64_t pair = in.args[0], side = in.args[1];
  const int64_t amount = static_cast<int64_t>(in.args[2]);
  const txn::Key mine = 2 * pair + side, other = 2 * pair + (1 - side);
  switch (in.type) {
    case kWithdraw: {
      const int m = t.write(kPairs, mine), o = t.read(kPairs, other);
      if (!co_await t.fetch()) co_return false;
      // The check that write skew defeats: each of two concurrent Withdraws
      // sees the other side unchanged. Too little: commit with the row as
      // it was (a refused Withdraw is still a committed Withdraw that read
      // the pair), rather than a user abort, which is not retried and would
      // make the committed mix drift from the issued one as pairs drain.
      if (t.get<Balance>(m).value + t.get<Balance>(o).value - amount >= 0) {
        t.get_mut<Balance>(m).value -= amount;
        *delta = -amount;
      }
      break;
    }
    case kDeposit: {
      const int m = t.write(kPairs, mine);
      if (!co_await t.fetch()) co_return false;
      t.get_mut<Balance>(m).value += amount;
      *delta = amount;
      break;
    }
    default:
      co_await t.user_abort();
      co_return false;
  }
  const bool ok = co_await t.commit();
  if (!ok) *delta = 0;
  co_return ok;
}

// Mirrors execute(): the same table, key and mode per access.
bool WriteSkew::declare(const txn::TxnInput& in, txn::DeclaredSet& out) const {
  using M = txn::AccessMode;
  const uint64_t pair = in.args[0], side = in.args[1];
  const txn::Key mine = 2 * pair + side, other = 2 * pair + (1 - side);
  out.n = 0;
  switch (in.type) {
    case kWithdraw:
      return out.add(kPairs, mine, M::kWrite) && out.add(kPairs, other, M::kRead);
    case kDeposit:
      return out.add(kPairs, mine, M::kWrite);
    default:
      return true;  // execute() declares nothing and gives up
  }
}

bool WriteSkew::declares(uint16_t type) const { return type <= kDeposit; }

uint32_t WriteSkew::max_declared(uint16_t type) const { return type == kWithdraw ? 2 : type == kDeposit ? 1 : 0; }

Result<int64_t> WriteSkew::check_node(txn::Database& db, uint32_t n) const {
  store::Table* tab = db.store(n).table(kPairs);
  int64_t money = 0;
  uint64_t skewed = 0, first = 0;
  int64_t first_a = 0, first_b = 0;
  for (uint64_t p = n * p_.pairs_per_node; p < (n + 1) * p_.pairs_per_node; ++p) {
    int64_t v[2];
    for (uint64_t s = 0; s < 2; ++s) {
      store::TupleRef ref;
      if (tab->lookup(2 * p + s, &ref) != 0)
        return make_error(EIO, "writeskew: row %llu missing on node %u", static_cast<unsigned long long>(2 * p + s), n);
      Balance b;
      std::memcpy(&b, ref.tuple + tab->layout().record_offset(), sizeof b);
      v[s] = b.value;
    }
    money += v[0] + v[1];
    if (v[0] + v[1] < 0 && skewed++ == 0) {
      first = p;
      first_a = v[0];
      first_b = v[1];
    }
  }
  if (skewed > 0 && forbids_skew(isolation()))
    return make_error(EIO,
                      "writeskew: %llu %s below 0 on node %u, e.g. pair %llu: %lld + %lld < 0 (write skew, which "
                      "%s forbids)",
                      static_cast<unsigned long long>(skewed), skewed == 1 ? "pair" : "pairs", n,
                      static_cast<unsigned long long>(first), static_cast<long long>(first_a),
                      static_cast<long long>(first_b), txn::to_string(isolation()));
  return make_share(money, skewed);
}

Result<void> WriteSkew::check_total(int64_t sum, uint32_t nodes, int64_t committed_delta) const {
  constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
  skewed_ = static_cast<uint64_t>(sum) & kCountMask;
  // The money, modulo 2^(64 - kCountBits), against the expected: their
  // difference, sign-extended, is exact for any |difference| below
  // 2^(63 - kCountBits).
  const int64_t expect = static_cast<int64_t>(2 * p_.pairs_per_node * nodes) * p_.initial + committed_delta;
  const int64_t diff =
      static_cast<int64_t>((static_cast<uint64_t>(sum) - static_cast<uint64_t>(make_share(expect, 0))) & ~kCountMask) >>
      kCountBits;
  if (diff != 0)
    return make_error(EIO, "writeskew: total money is %lld, expected %lld (initial + committed deltas %lld)",
                      static_cast<long long>(expect + diff), static_cast<long long>(expect),
                      static_cast<long long>(committed_delta));
  // check_node() failed already if the level forbids it.
  return {};
}

std::string WriteSkew::check_note() const {
  if (skewed_ == 0) return "";
  return "write skew: " + std::to_string(skewed_) + (skewed_ == 1 ? " pair" : " pairs") + " below 0 (allowed at " +
         txn::to_string(isolation()) + ")";
}

namespace {

Result<std::unique_ptr<txn::Workload>> create_writeskew(const config::Config& cfg, uint32_t nodes) {
  WriteSkew::Params p = WriteSkew::params_from(cfg, nodes);
  if (p.pairs_per_node * nodes > WriteSkew::kMaxPairs)
    return make_error(EINVAL, "writeskew.pairs = %llu (%s) x %u nodes exceeds %llu pairs in all",
                      static_cast<unsigned long long>(p.pairs_per_node), cfg.origin("writeskew.pairs").c_str(), nodes,
                      static_cast<unsigned long long>(WriteSkew::kMaxPairs));
  return std::unique_ptr<txn::Workload>(std::make_unique<WriteSkew>(p));
}

// 4 pairs per node holding little, and more Withdraws than Deposits: pairs
// stay near 0, so two Withdraws of one pair that together take too much
// meet all the time.
constexpr const char* kContended[] = {"writeskew.pairs=4", "writeskew.initial=10", "writeskew.max_amount=10",
                                      "writeskew.mix=75,25"};

constexpr txn::WorkloadDef kWriteSkew = {
    .name = "writeskew",
    .summary = "Write skew: Withdraws that read a pair of rows and write one (snapshot isolation lets a pair go "
               "below 0)",
    .add_schema = WriteSkew::add_schema,
    .create = create_writeskew,
    .contended = kContended,
    // Out of the stress suites (CI time): test_protocols runs it with every
    // protocol x primitive, test_writeskew at 2 nodes x 2 workers.
    .stress_suites = false,
};
RDTX_REGISTER_WORKLOAD(kWriteSkew)

}  // namespace

}  // namespace rdtx::workloads
