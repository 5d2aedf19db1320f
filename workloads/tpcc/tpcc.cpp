#include "workloads/tpcc/tpcc.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/shutdown.hpp"
#include "store/loader.hpp"

namespace rdtx::workloads {

using runtime::Task;
using txn::Txn;

namespace {

// ---- Records (fixed size; money in cents, rates in 1/10000 so that the
// consistency conditions are exact sums) ----

struct Warehouse {
  int64_t ytd;
  int32_t tax;  // 1/10000
  char name[10], street_1[20], street_2[20], city[20], state[2], zip[9];
};
struct District {
  int64_t ytd;
  int32_t tax;
  uint32_t next_o_id;
  char name[10], street_1[20], street_2[20], city[20], state[2], zip[9];
};
struct Customer {
  int64_t balance, ytd_payment, credit_lim;
  int32_t discount;  // 1/10000
  uint32_t payment_cnt, delivery_cnt, since;
  char first[16], middle[2], last[16], street_1[20], street_2[20], city[20], state[2], zip[9], phone[16], credit[2];
  char data[500];
};
struct History {
  uint32_t c_id, c_d_id, c_w_id, d_id, w_id, date;
  int64_t amount;
  char data[24];
};
struct NewOrder {
  uint32_t o_id, d_id, w_id;
  uint32_t unused;  // 0 (the record is 12 bytes, stored in 16)
};
struct Order {
  uint32_t c_id, entry_d;
  uint32_t carrier_id;  // 0: null
  uint32_t ol_cnt, all_local;
};
struct OrderLine {
  uint32_t i_id, supply_w_id;
  uint32_t delivery_d;  // 0: null
  uint32_t quantity;
  int64_t amount;
  char dist_info[24];
};
struct Item {
  int64_t price;
  uint32_t im_id;
  char name[24], data[50];
};
struct Stock {
  int32_t quantity;
  uint32_t ytd, order_cnt, remote_cnt;
  char dist[Tpcc::kDistricts][24];
  char data[50];
};
struct CustomerName {
  uint32_t count;
  uint32_t ids[Tpcc::kMaxPerName];  // by C_FIRST, then C_ID
};
struct OrderRef {
  uint32_t o_id;
};

// ---- Keys: warehouse in bits 40..55 ----
constexpr uint64_t wkey(uint64_t w) { return w << 40; }
constexpr uint64_t dkey(uint64_t w, uint64_t d) { return w << 40 | d; }
constexpr uint64_t ckey(uint64_t w, uint64_t d, uint64_t c) { return w << 40 | d << 32 | c; }
constexpr uint64_t okey(uint64_t w, uint64_t d, uint64_t o) { return w << 40 | d << 32 | o; }
constexpr uint64_t olkey(uint64_t w, uint64_t d, uint64_t o, uint64_t ol) { return w << 40 | d << 32 | o << 4 | ol; }
constexpr uint64_t skey(uint64_t w, uint64_t i) { return w << 40 | i; }
// A history row inserted by attempt `id` for a payment to a warehouse of
// partition `part` (the row lives there: CC8 and CC9 sum a district's
// history on its node): bit 63 set, the partition in bits 48..54, and the
// attempt id's node (bits 48..53 of the id) in bits 55..60 above the rest
// of the id (worker, coroutine, sequence: bits 0..47), so that keys stay
// unique when coordinators of several nodes insert into one partition
// (compute nodes, cluster.memory_nodes).
constexpr uint64_t kHistoryRun = uint64_t{1} << 63;
constexpr uint64_t hkey_run(uint64_t id, uint32_t part) {
  return kHistoryRun | ((id >> 48) & 0x3f) << 55 | uint64_t{part & 0x7f} << 48 | (id & 0xffff'ffff'ffffull);
}
constexpr uint32_t kMaxOrderId = (1u << 28) - 1;  // olkey's room
constexpr uint32_t kLoadDate = 1, kRunDate = 2;  // dates: any non-null value

// node = (warehouse - 1) / warehouses_per_node; HISTORY rows of the run by
// the partition in their key (hkey_run). arg = warehouses_per_node | nodes << 32.
uint32_t partition_fn(uint64_t key, uint64_t arg) {
  const uint32_t wpn = static_cast<uint32_t>(arg), nodes = static_cast<uint32_t>(arg >> 32);
  uint64_t n;
  if (key & kHistoryRun) n = (key >> 48) & 0x7f;
  else n = (((key >> 40) & 0xffff) + wpn - 1) / wpn - ((key >> 40 & 0xffff) != 0);
  return n < nodes ? static_cast<uint32_t>(n) : nodes - 1;
}

// Uniform in [lo, hi].
uint32_t uniform(txn::Rng& r, uint32_t lo, uint32_t hi) { return lo + static_cast<uint32_t>(r() % (hi - lo + 1)); }

// NURand(A, x, y) with run constant C (clause 2.1.6).
uint32_t nurand(txn::Rng& r, uint32_t a, uint32_t x, uint32_t y, uint32_t c) {
  return (((uniform(r, 0, a) | uniform(r, x, y)) + c) % (y - x + 1)) + x;
}
// The specification's A for a range of `n` values, scaled down with it
// (255 for 1000 last names, 1023 for 3000 customers, 8191 for 100,000 items).
uint32_t nurand_a(uint32_t n, uint32_t spec_a, uint32_t spec_n) {
  if (n >= spec_n) return spec_a;
  uint32_t a = 1;
  while (a * 2 <= n / 3 + 1) a *= 2;
  return std::min(spec_a, a - 1 == 0 ? 1 : a - 1);
}

void astring(txn::Rng& r, char* out, uint32_t size, uint32_t min_len) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const uint32_t len = uniform(r, min_len, size);
  for (uint32_t i = 0; i < len; ++i) out[i] = kAlnum[r() % 62];
}
void nstring(txn::Rng& r, char* out, uint32_t size) {
  for (uint32_t i = 0; i < size; ++i) out[i] = static_cast<char>('0' + r() % 10);
}
// I_DATA / S_DATA: 10% contain "ORIGINAL" (clause 4.3.3.1).
void data_string(txn::Rng& r, char* out, uint32_t size) {
  astring(r, out, size, 26);
  if (r() % 10 == 0) {
    const uint32_t len = static_cast<uint32_t>(strnlen(out, size));
    std::memcpy(out + r() % (len - 8 + 1), "ORIGINAL", 8);
  }
}

// The address columns (clause 4.3.3.1: random strings, zip four digits
// then 11111), and with W_NAME/D_NAME.
template <typename Row>
void address(txn::Rng& r, Row& x) {
  astring(r, x.street_1, sizeof x.street_1, 10);
  astring(r, x.street_2, sizeof x.street_2, 10);
  astring(r, x.city, sizeof x.city, 10);
  astring(r, x.state, 2, 2);
  nstring(r, x.zip, 4);
  std::memcpy(x.zip + 4, "11111", 5);
}
template <typename Row>
void name_and_address(txn::Rng& r, Row& x) {
  astring(r, x.name, sizeof x.name, 6);
  address(r, x);
}

// C_LAST from a number 0..999: three syllables (clause 4.3.2.3).
void last_name(uint32_t n, char out[16]) {
  static constexpr const char* kSyl[10] = {"BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"};
  std::memset(out, 0, 16);
  size_t pos = 0;
  for (uint32_t k : {n / 100, (n / 10) % 10, n % 10}) {
    const size_t len = std::strlen(kSyl[k]);
    std::memcpy(out + pos, kSyl[k], std::min<size_t>(len, 16 - pos));
    pos = std::min<size_t>(16, pos + len);
  }
}

// The standard mix, in Type order.
constexpr uint32_t kStandardMix[5] = {45, 43, 4, 4, 4};

// Loaded orders per district are as many as its customers (3,000); the last
// 30% (900) are undelivered (clause 4.3.3.1).
uint32_t undelivered(uint32_t customers) { return customers * 9 / 30; }
// O_OL_CNT of a loaded order: uniform 5..15, a function of its key.
uint32_t loaded_ol_cnt(uint64_t w, uint64_t d, uint64_t o) { return 5 + txn::mix64(okey(w, d, o) ^ 0x011c) % 11; }

// New-Order's lines, from the input (an attempt is retried with the same
// input, so the lines are drawn again from the same seed).
struct Line {
  uint32_t i_id, supply_w, quantity;
};

template <typename R>
R record_of(const std::byte* tuple, const store::TupleLayout& l) {
  R r;
  std::memcpy(&r, tuple + l.record_offset(), sizeof r);
  return r;
}

}  // namespace

// ---- Configuration ----

void Tpcc::add_schema(config::Schema& s) {
  s.add_enum("tpcc.mode", "full", {"full", "neworder"},
             "full: the five transactions in tpcc.mix; neworder: New-Order only (DrTM+H's and RCC's TPC-C/no, "
             "which they run with tpcc.remote_item_percent = 100)");
  s.add_int("tpcc.warehouses_per_node", 1, 1, 1024, "warehouses each node holds");
  s.add_int("tpcc.customers_per_district", 3000, 30, 3000, "customers (and loaded orders) per district (spec: 3000)");
  s.add_int("tpcc.items", 100'000, 100, 100'000, "items (spec: 100,000)");
  s.add_int("tpcc.order_capacity", 20'000, 31, 1 << 27,
            "orders per district ORDER, NEW-ORDER, ORDER-LINE and HISTORY hold memory and index buckets for at "
            "first, loaded ones included; they grow past it as the run inserts (one-sided lookups then walk longer "
            "index chains)");
  s.add_string("tpcc.mix", "",
               "percent per type: NewOrder,Payment,OrderStatus,Delivery,StockLevel (\"\": 45,43,4,4,4)");
  s.add_int("tpcc.remote_item_percent", 1, 0, 100, "New-Order: percent of lines supplied by another warehouse");
  s.add_int("tpcc.remote_payment_percent", 15, 0, 100, "Payment: percent of customers of another warehouse");
  s.add_int("tpcc.by_name_percent", 60, 0, 100, "Payment and Order-Status: percent selecting the customer by last name");
  s.add_int("tpcc.rollback_percent", 1, 0, 100, "New-Order: percent rolled back on an unused item id");
  s.add_int("tpcc.seed", 42, 0, INT32_MAX, "the NURand run constants C (clause 2.1.6) and the loaded data");
  s.add_check([](const config::Config& c) -> std::string {
    if (const std::string& m = c.get_string("tpcc.mix"); !m.empty()) {
      uint32_t mix[5];
      if (std::string why = txn::parse_mix(m, mix, 5); !why.empty())
        return "tpcc.mix = \"" + m + "\" (" + c.origin("tpcc.mix") + "): " + why;
    }
    if (c.get_int("tpcc.order_capacity") <= c.get_int("tpcc.customers_per_district"))
      return "tpcc.order_capacity (" + c.origin("tpcc.order_capacity") +
             ") must exceed tpcc.customers_per_district (the orders loaded per district)";
    return "";
  });
}

Tpcc::Params Tpcc::params_from(const config::Config& cfg, uint32_t nodes) {
  Params p;
  p.mode = cfg.get_string("tpcc.mode") == "neworder" ? Mode::kNewOrderOnly : Mode::kFull;
  p.warehouses_per_node = static_cast<uint32_t>(cfg.get_int("tpcc.warehouses_per_node"));
  p.customers = static_cast<uint32_t>(cfg.get_int("tpcc.customers_per_district"));
  p.items = static_cast<uint32_t>(cfg.get_int("tpcc.items"));
  p.order_capacity = static_cast<uint32_t>(cfg.get_int("tpcc.order_capacity"));
  std::copy(kStandardMix, kStandardMix + 5, p.mix);
  if (const std::string& m = cfg.get_string("tpcc.mix"); !m.empty()) txn::parse_mix(m, p.mix, 5);  // checked above
  p.remote_item_percent = static_cast<uint32_t>(cfg.get_int("tpcc.remote_item_percent"));
  p.remote_payment_percent = static_cast<uint32_t>(cfg.get_int("tpcc.remote_payment_percent"));
  p.by_name_percent = static_cast<uint32_t>(cfg.get_int("tpcc.by_name_percent"));
  p.rollback_percent = static_cast<uint32_t>(cfg.get_int("tpcc.rollback_percent"));
  p.nodes = nodes;
  // C_RUN for C_LAST differs from C_LOAD by 65..119, not 96 or 112
  // (clause 2.1.6.1); C for C_ID and OL_I_ID is any value in [0, A].
  txn::Rng r(static_cast<uint64_t>(cfg.get_int("tpcc.seed")));
  const uint32_t c_load = uniform(r, 0, 255);
  uint32_t delta;
  do delta = uniform(r, 65, 119);
  while (delta == 96 || delta == 112);
  p.c_last_load = c_load;
  p.c_last_run = (c_load + delta) % 256;
  p.c_id_run = uniform(r, 0, 1023);
  p.ol_i_id_run = uniform(r, 0, 8191);
  return p;
}

Tpcc::Tpcc(const Params& p) : p_(p) {}

std::vector<txn::TableDef> Tpcc::tables(uint32_t nodes) const {
  const uint32_t wpn = p_.warehouses_per_node;
  auto part = store::Partitioner::custom(nodes, partition_fn, uint64_t{wpn} | uint64_t{nodes} << 32,
                                         "tpcc_warehouse").value();
  const uint32_t districts = wpn * kDistricts;
  const uint64_t orders = uint64_t{districts} * p_.order_capacity;
  auto cap = [](uint64_t n) { return static_cast<uint32_t>(std::min<uint64_t>(n, UINT32_MAX - 1)); };
  const double limit = growth_limit_ == 0 ? 0 : double(growth_limit_) / p_.order_capacity;
  std::vector<txn::TableDef> t = {
      {kWarehouse, "warehouse", sizeof(Warehouse), wpn, part},
      {kDistrict, "district", sizeof(District), districts, part},
      {kCustomer, "customer", sizeof(Customer), districts * p_.customers, part},
      // One loaded row per customer, then one per Payment.
      {kHistory, "history", sizeof(History), cap(orders + uint64_t{districts} * p_.customers), part},
      {kNewOrderT, "new_order", sizeof(NewOrder), cap(orders), part},
      {kOrder, "order", sizeof(Order), cap(orders), part},
      // 10 lines per order on average (5..15).
      {kOrderLine, "order_line", sizeof(OrderLine), cap(orders * 21 / 2), part},
      {kItem, "item", sizeof(Item), p_.items, part, true},
      {kStock, "stock", sizeof(Stock), wpn * p_.items, part},
      {kCustomerName, "customer_name", sizeof(CustomerName), districts * std::min(p_.customers, 1000u), part},
      {kLastOrder, "last_order", sizeof(OrderRef), districts * p_.customers, part},
      {kNoHead, "new_order_head", sizeof(OrderRef), districts, part},
  };
  // The tables the transactions insert into start at the sizes above and
  // grow as the run needs.
  for (txn::TableDef& d : t) {
    d.grows = d.id == kHistory || d.id == kNewOrderT || d.id == kOrder || d.id == kOrderLine;
    if (d.grows && limit > 0) d.max_capacity_per_node = std::max<uint64_t>(d.capacity_per_node, d.capacity_per_node * limit);
  }
  return t;
}

// ---- Loading (clause 4.3.3.1) ----

// ITEM, the one replicated table: every node holds all of it (a compute
// node of the split layout too, whose coordinators read it locally).
Result<void> Tpcc::load_replicated(store::Store& s) const {
  return store::load(*s.table(kItem), p_.items, [](uint64_t row, std::span<std::byte> rec) {
    txn::Rng r(txn::mix64((row + 1) * 31 + kItem));
    Item it{};
    it.im_id = uniform(r, 1, 10'000);
    astring(r, it.name, sizeof it.name, 14);
    it.price = uniform(r, 100, 10'000);
    data_string(r, it.data, sizeof it.data);
    std::memcpy(rec.data(), &it, sizeof it);
    return row + 1;
  });
}

Result<void> Tpcc::load(store::Store& s, uint32_t partition) const {
  const uint32_t wpn = p_.warehouses_per_node, C = p_.customers, I = p_.items;
  const uint32_t first_w = partition * wpn + 1;
  const uint32_t names = std::min(C, 1000u);
  const uint32_t c_load = p_.c_last_load;  // C for C_LAST at load; the run's differs by 65..119 (params_from)
  auto rng_of = [](uint32_t table, uint64_t key) { return txn::Rng(txn::mix64(key * 31 + table)); };
  auto put = [](std::span<std::byte> rec, const auto& r) { std::memcpy(rec.data(), &r, sizeof r); };

  RDTX_TRY(load_replicated(s));
  RDTX_TRY(store::load(*s.table(kWarehouse), wpn, [&](uint64_t row, std::span<std::byte> rec) {
    const uint64_t w = first_w + row;
    txn::Rng r = rng_of(kWarehouse, w);
    Warehouse x{};
    name_and_address(r, x);
    x.tax = static_cast<int32_t>(uniform(r, 0, 2000));
    x.ytd = int64_t{kDistricts} * C * 10 * 100;  // 300,000.00 with 3,000 customers: the loaded history
    put(rec, x);
    return wkey(w);
  }));
  RDTX_TRY(store::load(*s.table(kDistrict), wpn * kDistricts, [&](uint64_t row, std::span<std::byte> rec) {
    const uint64_t w = first_w + row / kDistricts, d = row % kDistricts + 1;
    txn::Rng r = rng_of(kDistrict, dkey(w, d));
    District x{};
    name_and_address(r, x);
    x.tax = static_cast<int32_t>(uniform(r, 0, 2000));
    x.ytd = int64_t{C} * 10 * 100;  // 30,000.00 with 3,000 customers
    x.next_o_id = C + 1;
    put(rec, x);
    return dkey(w, d);
  }));
  // Customers' names first: the last-name index needs them all.
  auto customer_of = [&](uint64_t w, uint64_t d, uint64_t c) {
    txn::Rng r = rng_of(kCustomer, ckey(w, d, c));
    Customer x{};
    astring(r, x.first, sizeof x.first, 8);
    std::memcpy(x.middle, "OE", 2);
    last_name(c <= names ? static_cast<uint32_t>(c - 1) : nurand(r, nurand_a(names, 255, 1000), 0, names - 1, c_load),
              x.last);
    address(r, x);
    nstring(r, x.phone, sizeof x.phone);
    x.since = kLoadDate;
    std::memcpy(x.credit, r() % 10 == 0 ? "BC" : "GC", 2);
    x.credit_lim = 50'000 * 100;
    x.discount = static_cast<int32_t>(uniform(r, 0, 5000));
    x.balance = -10 * 100;
    x.ytd_payment = 10 * 100;
    x.payment_cnt = 1;
    x.delivery_cnt = 0;
    astring(r, x.data, sizeof x.data, 300);
    return x;
  };
  RDTX_TRY(store::load(*s.table(kCustomer), uint64_t{wpn} * kDistricts * C, [&](uint64_t row, std::span<std::byte> rec) {
    const uint64_t w = first_w + row / (kDistricts * C), d = row / C % kDistricts + 1, c = row % C + 1;
    put(rec, customer_of(w, d, c));
    return ckey(w, d, c);
  }));
  // Per district: the last-name index, the orders' customers (a random
  // permutation), each customer's order.
  std::vector<CustomerName> by_name(size_t{wpn} * kDistricts * names);
  std::vector<uint32_t> order_customer(size_t{wpn} * kDistricts * C);
  std::vector<uint32_t> customer_order(size_t{wpn} * kDistricts * C);
  for (uint32_t wi = 0; wi < wpn; ++wi)
    for (uint32_t d = 1; d <= kDistricts; ++d) {
      // A few ms a district: a signal stops the load between them.
      if (runtime::shutdown_requested())
        return make_error(ECANCELED, "tpcc: loading stopped by %s", runtime::shutdown_cause());
      const size_t dist = size_t{wi} * kDistricts + (d - 1);
      struct Named {
        uint32_t name;
        std::string first;
        uint32_t c;
      };
      std::vector<Named> all;
      all.reserve(C);
      for (uint32_t c = 1; c <= C; ++c) {
        const Customer x = customer_of(first_w + wi, d, c);
        uint32_t n = 0;
        for (; n < names; ++n) {
          char ln[16];
          last_name(n, ln);
          if (std::memcmp(ln, x.last, 16) == 0) break;
        }
        all.push_back({n, std::string(x.first, strnlen(x.first, 16)), c});
      }
      std::sort(all.begin(), all.end(), [](const Named& a, const Named& b) {
        return a.name != b.name ? a.name < b.name : a.first != b.first ? a.first < b.first : a.c < b.c;
      });
      for (const Named& n : all) {
        CustomerName& e = by_name[dist * names + n.name];
        if (e.count == kMaxPerName)
          return make_error(ENOSPC, "tpcc: more than %u customers of warehouse %u district %u share a last name",
                            kMaxPerName, first_w + wi, d);
        e.ids[e.count++] = n.c;
      }
      txn::Rng r(txn::mix64(dkey(first_w + wi, d) ^ 0x0bde7));
      uint32_t* perm = &order_customer[dist * C];
      for (uint32_t k = 0; k < C; ++k) perm[k] = k + 1;
      for (uint32_t k = C - 1; k > 0; --k) std::swap(perm[k], perm[r() % (k + 1)]);
      for (uint32_t o = 1; o <= C; ++o) customer_order[dist * C + perm[o - 1] - 1] = o;
    }
  RDTX_TRY(store::load(*s.table(kCustomerName), uint64_t{wpn} * kDistricts * names,
                       [&](uint64_t row, std::span<std::byte> rec) {
                         const uint64_t w = first_w + row / (kDistricts * names), d = row / names % kDistricts + 1;
                         put(rec, by_name[row]);
                         return ckey(w, d, row % names);
                       }));
  RDTX_TRY(store::load(*s.table(kHistory), uint64_t{wpn} * kDistricts * C, [&](uint64_t row, std::span<std::byte> rec) {
    const uint32_t w = static_cast<uint32_t>(first_w + row / (kDistricts * C));
    const uint32_t d = static_cast<uint32_t>(row / C % kDistricts + 1), c = static_cast<uint32_t>(row % C + 1);
    txn::Rng r = rng_of(kHistory, ckey(w, d, c));
    History h{c, d, w, d, w, kLoadDate, 10 * 100, {}};
    astring(r, h.data, sizeof h.data, 12);
    put(rec, h);
    return ckey(w, d, c);  // bit 63 clear: a loaded row
  }));
  const uint32_t first_new = C - undelivered(C) + 1;  // 2101 of 3000
  RDTX_TRY(store::load(*s.table(kOrder), uint64_t{wpn} * kDistricts * C, [&](uint64_t row, std::span<std::byte> rec) {
    const uint32_t w = static_cast<uint32_t>(first_w + row / (kDistricts * C));
    const uint32_t d = static_cast<uint32_t>(row / C % kDistricts + 1), o = static_cast<uint32_t>(row % C + 1);
    txn::Rng r = rng_of(kOrder, okey(w, d, o));
    Order x{order_customer[row], kLoadDate, o < first_new ? uniform(r, 1, 10) : 0, loaded_ol_cnt(w, d, o), 1};
    put(rec, x);
    return okey(w, d, o);
  }));
  RDTX_TRY(store::load(*s.table(kLastOrder), uint64_t{wpn} * kDistricts * C, [&](uint64_t row, std::span<std::byte> rec) {
    const uint64_t w = first_w + row / (kDistricts * C), d = row / C % kDistricts + 1, c = row % C + 1;
    put(rec, OrderRef{customer_order[row]});
    return ckey(w, d, c);
  }));
  RDTX_TRY(store::load(*s.table(kNewOrderT), uint64_t{wpn} * kDistricts * undelivered(C),
                       [&](uint64_t row, std::span<std::byte> rec) {
                         const uint32_t u = undelivered(C);
                         const uint32_t w = static_cast<uint32_t>(first_w + row / (kDistricts * u));
                         const uint32_t d = static_cast<uint32_t>(row / u % kDistricts + 1);
                         const uint32_t o = static_cast<uint32_t>(first_new + row % u);
                         put(rec, NewOrder{o, d, w, 0});
                         return okey(w, d, o);
                       }));
  RDTX_TRY(store::load(*s.table(kNoHead), uint64_t{wpn} * kDistricts, [&](uint64_t row, std::span<std::byte> rec) {
    put(rec, OrderRef{first_new});
    return dkey(first_w + row / kDistricts, row % kDistricts + 1);
  }));
  // Order lines: the orders' line counts, summed, number the rows.
  std::vector<uint64_t> line_start(size_t{wpn} * kDistricts * C + 1, 0);
  for (size_t k = 0; k < size_t{wpn} * kDistricts * C; ++k) {
    const uint64_t w = first_w + k / (kDistricts * C), d = k / C % kDistricts + 1, o = k % C + 1;
    line_start[k + 1] = line_start[k] + loaded_ol_cnt(w, d, o);
  }
  RDTX_TRY(store::load(*s.table(kOrderLine), line_start.back(), [&](uint64_t row, std::span<std::byte> rec) {
    const size_t k = static_cast<size_t>(std::upper_bound(line_start.begin(), line_start.end(), row) - line_start.begin() - 1);
    const uint32_t w = static_cast<uint32_t>(first_w + k / (kDistricts * C));
    const uint32_t d = static_cast<uint32_t>(k / C % kDistricts + 1), o = static_cast<uint32_t>(k % C + 1);
    const uint32_t ol = static_cast<uint32_t>(row - line_start[k] + 1);
    txn::Rng r = rng_of(kOrderLine, olkey(w, d, o, ol));
    OrderLine x{};
    x.i_id = uniform(r, 1, I);
    x.supply_w_id = w;
    x.delivery_d = o < first_new ? kLoadDate : 0;
    x.quantity = 5;
    x.amount = o < first_new ? 0 : uniform(r, 1, 999'999);
    astring(r, x.dist_info, sizeof x.dist_info, 24);
    put(rec, x);
    return olkey(w, d, o, ol);
  }));
  RDTX_TRY(store::load(*s.table(kStock), uint64_t{wpn} * I, [&](uint64_t row, std::span<std::byte> rec) {
    const uint64_t w = first_w + row / I, i = row % I + 1;
    txn::Rng r = rng_of(kStock, skey(w, i));
    Stock x{};
    x.quantity = static_cast<int32_t>(uniform(r, 10, 100));
    for (auto& dist : x.dist) astring(r, dist, 24, 24);
    data_string(r, x.data, sizeof x.data);
    put(rec, x);
    return skey(w, i);
  }));
  return {};
}

std::vector<std::string> Tpcc::type_names() const {
  return {"NewOrder", "Payment", "OrderStatus", "Delivery", "StockLevel"};
}

// ---- Inputs (clause 2.x.1; one per transaction, kept across its retries) ----
// NewOrder:    args 0 w, 1 d, 2 c, 3 ol_cnt, 4 rollback, 5 seed of the lines
// Payment:     args 0 w, 1 d, 2 c_w, 3 c_d, 4 by name, 5 c or name, 6 amount
// OrderStatus: args 0 w, 1 d, 2 by name, 3 c or name
// Delivery:    args 0 w, 1 carrier
// StockLevel:  args 0 w, 1 d, 2 threshold

namespace {
// Lines of a New-Order input (clause 2.4.1.5): a line's supplying
// warehouse is another one with remote_item_percent% (DrTM+H and RCC run
// TPC-C/no with 100: every line remote).
void lines_of(const Tpcc::Params& p, const txn::TxnInput& in, Line* out) {
  txn::Rng r(in.args[5]);
  const uint32_t w = static_cast<uint32_t>(in.args[0]), n = static_cast<uint32_t>(in.args[3]);
  const uint32_t W = p.warehouses_per_node * p.nodes;
  const uint32_t a = nurand_a(p.items, 8191, 100'000);
  for (uint32_t k = 0; k < n; ++k) {
    Line& l = out[k];
    l.i_id = nurand(r, a, 1, p.items, p.ol_i_id_run % (a + 1));
    l.supply_w = w;
    if (W > 1 && r() % 100 < p.remote_item_percent) {
      l.supply_w = uniform(r, 1, W - 1);
      if (l.supply_w >= w) ++l.supply_w;
    }
    l.quantity = uniform(r, 1, 10);
  }
  if (in.args[4]) out[n - 1].i_id = p.items + 1;  // unused: the order rolls back (clause 2.4.1.4)
}
}  // namespace

void Tpcc::generate(txn::Rng& rng, uint32_t home_node, txn::TxnInput& in) const {
  in.home_node = home_node;
  uint16_t type = kNewOrder;
  if (p_.mode == Mode::kFull) {
    uint32_t x = static_cast<uint32_t>(rng() % 100);
    while (type < kStockLevel && x >= p_.mix[type]) x -= p_.mix[type++];
  }
  in.type = type;
  const uint32_t W = warehouses();
  const uint32_t w = home_node * p_.warehouses_per_node + uniform(rng, 1, p_.warehouses_per_node);
  const uint32_t d = uniform(rng, 1, kDistricts);
  const uint32_t names = std::min(p_.customers, 1000u);
  const uint32_t a_c = nurand_a(p_.customers, 1023, 3000), a_name = nurand_a(names, 255, 1000);
  auto customer = [&] { return nurand(rng, a_c, 1, p_.customers, p_.c_id_run % (a_c + 1)); };
  auto name = [&] { return nurand(rng, a_name, 0, names - 1, p_.c_last_run % (a_name + 1)); };
  in.args[0] = w;
  switch (type) {
    case kNewOrder:
      in.args[1] = d;
      in.args[2] = customer();
      in.args[3] = uniform(rng, 5, kMaxLines);
      in.args[4] = rng() % 100 < p_.rollback_percent;
      in.args[5] = rng();
      break;
    case kPayment: {
      uint32_t c_w = w, c_d = d;
      if (W > 1 && rng() % 100 < p_.remote_payment_percent) {
        c_w = uniform(rng, 1, W - 1);
        if (c_w >= w) ++c_w;
        c_d = uniform(rng, 1, kDistricts);
      }
      in.args[1] = d;
      in.args[2] = c_w;
      in.args[3] = c_d;
      in.args[4] = rng() % 100 < p_.by_name_percent;
      in.args[5] = in.args[4] ? name() : customer();
      in.args[6] = uniform(rng, 100, 500'000);
      break;
    }
    case kOrderStatus:
      in.args[1] = d;
      in.args[2] = rng() % 100 < p_.by_name_percent;
      in.args[3] = in.args[2] ? name() : customer();
      break;
    case kDelivery: in.args[1] = uniform(rng, 1, 10); break;
    case kStockLevel:
      in.args[1] = d;
      in.args[2] = uniform(rng, 10, 20);
      break;
  }
}

Task<bool> Tpcc::execute(Txn& t, const txn::TxnInput& in, int64_t* delta) const {
  *delta = 0;
  switch (in.type) {
    case kNewOrder: return new_order(t, in);
    case kPayment: return payment(t, in);
    case kOrderStatus: return order_status(t, in);
    case kDelivery: return delivery(t, in);
    case kStockLevel: return stock_level(t, in);
  }
  return [](Txn& tx) -> Task<bool> {
    co_await tx.user_abort();
    co_return false;
  }(t);
}

// Clause 2.4.2.2.
Task<bool> Tpcc::new_order(Txn& t, const txn::TxnInput& in) const {
  const uint32_t w = static_cast<uint32_t>(in.args[0]), d = static_cast<uint32_t>(in.args[1]);
  const uint32_t c = static_cast<uint32_t>(in.args[2]), n = static_cast<uint32_t>(in.args[3]);
  Line lines[kMaxLines];
  lines_of(p_, in, lines);
  const int iw = t.read(kWarehouse, wkey(w));
  const int id = t.write(kDistrict, dkey(w, d));
  const int ic = t.read(kCustomer, ckey(w, d, c));
  const int ilast = t.write(kLastOrder, ckey(w, d, c));
  const Item* items[kMaxLines];
  int is[kMaxLines];
  bool missing = false, all_local = true;
  for (uint32_t k = 0; k < n; ++k) {
    items[k] = t.replicated<Item>(kItem, lines[k].i_id);
    all_local &= lines[k].supply_w == w;
    if (items[k] == nullptr) {
      missing = true;
      continue;
    }
    is[k] = t.write(kStock, skey(lines[k].supply_w, lines[k].i_id));
  }
  if (!co_await t.fetch()) co_return false;
  if (missing) {  // "Item number is not valid": the whole order rolls back
    co_await t.user_abort();
    co_return false;
  }
  District& dist = t.get_mut<District>(id);
  const uint32_t o = dist.next_o_id;
  if (o > kMaxOrderId) {
    co_await t.user_abort();
    co_return false;
  }
  dist.next_o_id = o + 1;
  const int32_t w_tax = t.get<Warehouse>(iw).tax, d_tax = dist.tax, discount = t.get<Customer>(ic).discount;
  t.get_mut<OrderRef>(ilast).o_id = o;
  t.inserted<Order>(t.insert(kOrder, okey(w, d, o))) = Order{c, kRunDate, 0, n, all_local ? 1u : 0u};
  t.inserted<NewOrder>(t.insert(kNewOrderT, okey(w, d, o))) = NewOrder{o, d, w, 0};
  int64_t total = 0;
  for (uint32_t k = 0; k < n; ++k) {
    Stock& s = t.get_mut<Stock>(is[k]);
    const int32_t q = static_cast<int32_t>(lines[k].quantity);
    s.quantity = s.quantity >= q + 10 ? s.quantity - q : s.quantity - q + 91;
    s.ytd += lines[k].quantity;
    ++s.order_cnt;
    if (lines[k].supply_w != w) ++s.remote_cnt;
    OrderLine& ol = t.inserted<OrderLine>(t.insert(kOrderLine, olkey(w, d, o, k + 1)));
    ol.i_id = lines[k].i_id;
    ol.supply_w_id = lines[k].supply_w;
    ol.delivery_d = 0;
    ol.quantity = lines[k].quantity;
    ol.amount = static_cast<int64_t>(lines[k].quantity) * items[k]->price;
    std::memcpy(ol.dist_info, s.dist[d - 1], sizeof ol.dist_info);
    total += ol.amount;
  }
  // The order's total (the terminal's output): amount x (1 - discount) x (1 + taxes).
  total = total * (10'000 - discount) / 10'000 * (10'000 + w_tax + d_tax) / 10'000;
  (void)total;
  co_return co_await t.commit();
}

// Mirrors new_order(): the same table, key and mode per access, each once
// (Txn::write of a stock two lines supply is one access), in any order (a
// change to one must be made to the other; CALVIN fails the run on a
// mismatch). A line whose item does not exist declares nothing: the order
// rolls back after its fetch, on every member alike. The rows it inserts
// are keyed by D_NEXT_O_ID, read under the district's lock: no other
// transaction can insert or, in New-Order-only runs, read them.
bool Tpcc::declare(const txn::TxnInput& in, txn::DeclaredSet& out) const {
  using M = txn::AccessMode;
  out.n = 0;
  if (in.type != kNewOrder) return false;
  const uint32_t w = static_cast<uint32_t>(in.args[0]), d = static_cast<uint32_t>(in.args[1]);
  const uint32_t c = static_cast<uint32_t>(in.args[2]), n = static_cast<uint32_t>(in.args[3]);
  Line lines[kMaxLines];
  lines_of(p_, in, lines);
  if (!out.add(kWarehouse, wkey(w), M::kRead) || !out.add(kDistrict, dkey(w, d), M::kWrite) ||
      !out.add(kCustomer, ckey(w, d, c), M::kRead) || !out.add(kLastOrder, ckey(w, d, c), M::kWrite))
    return false;
  for (uint32_t k = 0; k < n; ++k) {
    if (lines[k].i_id < 1 || lines[k].i_id > p_.items) continue;
    const txn::Key s = skey(lines[k].supply_w, lines[k].i_id);
    bool seen = false;
    for (uint32_t j = 4; j < out.n && !seen; ++j) seen = out.e[j].key == s;
    if (!seen && !out.add(kStock, s, M::kWrite)) return false;
  }
  return true;
}

// New-Order declares; a type this run never generates (tpcc.mode =
// neworder, or a mix that gives it 0%) needs no set.
bool Tpcc::declares(uint16_t type) const {
  return type == kNewOrder || p_.mode == Mode::kNewOrderOnly || (type < 5 && p_.mix[type] == 0);
}

// New-Order: warehouse, district, customer, last order, a stock per line.
uint32_t Tpcc::max_declared(uint16_t type) const { return type == kNewOrder ? 4 + kMaxLines : 0; }

// Clause 2.5.2.2.
Task<bool> Tpcc::payment(Txn& t, const txn::TxnInput& in) const {
  const uint32_t w = static_cast<uint32_t>(in.args[0]), d = static_cast<uint32_t>(in.args[1]);
  const uint32_t c_w = static_cast<uint32_t>(in.args[2]), c_d = static_cast<uint32_t>(in.args[3]);
  const bool by_name = in.args[4] != 0;
  const int64_t amount = static_cast<int64_t>(in.args[6]);
  const int iw = t.write(kWarehouse, wkey(w));
  const int id = t.write(kDistrict, dkey(w, d));
  uint32_t c = static_cast<uint32_t>(in.args[5]);
  if (by_name) {
    const int in_ = t.read(kCustomerName, ckey(c_w, c_d, in.args[5]));
    if (!co_await t.fetch()) co_return false;
    const CustomerName& e = t.get<CustomerName>(in_);
    if (e.count == 0 || e.count > kMaxPerName) {
      co_await t.user_abort();
      co_return false;
    }
    c = e.ids[(e.count - 1) / 2];  // position ceil(n/2) of the sorted set
  }
  const int ic = t.write(kCustomer, ckey(c_w, c_d, c));
  if (!co_await t.fetch()) co_return false;
  t.get_mut<Warehouse>(iw).ytd += amount;
  t.get_mut<District>(id).ytd += amount;
  Customer& cu = t.get_mut<Customer>(ic);
  cu.balance -= amount;
  cu.ytd_payment += amount;
  ++cu.payment_cnt;
  if (std::memcmp(cu.credit, "BC", 2) == 0) {
    char head[64];
    const int len = std::snprintf(head, sizeof head, "%u %u %u %u %u %lld|", c, c_d, c_w, d, w,
                                  static_cast<long long>(amount));
    const size_t keep = sizeof cu.data - static_cast<size_t>(len);
    std::memmove(cu.data + len, cu.data, keep);
    std::memcpy(cu.data, head, static_cast<size_t>(len));
  }
  History& h = t.inserted<History>(t.insert(kHistory, hkey_run(t.id(), (w - 1) / p_.warehouses_per_node)));
  h = History{c, c_d, c_w, d, w, kRunDate, amount, {}};
  std::memcpy(h.data, "payment    ", 11);
  co_return co_await t.commit();
}

// Clause 2.6.2.2 (read-only).
Task<bool> Tpcc::order_status(Txn& t, const txn::TxnInput& in) const {
  const uint32_t w = static_cast<uint32_t>(in.args[0]), d = static_cast<uint32_t>(in.args[1]);
  uint32_t c = static_cast<uint32_t>(in.args[3]);
  if (in.args[2] != 0) {
    const int in_ = t.read(kCustomerName, ckey(w, d, in.args[3]));
    if (!co_await t.fetch()) co_return false;
    const CustomerName& e = t.get<CustomerName>(in_);
    if (e.count == 0 || e.count > kMaxPerName) {
      co_await t.user_abort();
      co_return false;
    }
    c = e.ids[(e.count - 1) / 2];
  }
  t.read(kCustomer, ckey(w, d, c));
  const int il = t.read(kLastOrder, ckey(w, d, c));
  if (!co_await t.fetch()) co_return false;
  const uint32_t o = t.get<OrderRef>(il).o_id;
  const int io = t.read(kOrder, okey(w, d, o));
  if (!co_await t.fetch()) co_return false;
  const uint32_t n = std::min(t.get<Order>(io).ol_cnt, kMaxLines);
  for (uint32_t k = 1; k <= n; ++k) t.read(kOrderLine, olkey(w, d, o, k));
  if (!co_await t.fetch()) co_return false;
  co_return co_await t.commit();
}

// Clause 2.7.4.2: the ten districts in one transaction.
Task<bool> Tpcc::delivery(Txn& t, const txn::TxnInput& in) const {
  const uint32_t w = static_cast<uint32_t>(in.args[0]), carrier = static_cast<uint32_t>(in.args[1]);
  int idist[kDistricts], ihead[kDistricts], ino[kDistricts] = {}, io[kDistricts] = {};
  uint32_t o[kDistricts] = {};
  for (uint32_t d = 1; d <= kDistricts; ++d) {
    idist[d - 1] = t.read(kDistrict, dkey(w, d));  // the guard: orders are < D_NEXT_O_ID
    ihead[d - 1] = t.write(kNoHead, dkey(w, d));
  }
  if (!co_await t.fetch()) co_return false;
  for (uint32_t d = 1; d <= kDistricts; ++d) {
    const uint32_t head = t.get<OrderRef>(ihead[d - 1]).o_id;
    if (head >= t.get<District>(idist[d - 1]).next_o_id) continue;  // no undelivered order: skipped
    o[d - 1] = head;
    ino[d - 1] = t.write(kNewOrderT, okey(w, d, head));
    io[d - 1] = t.write(kOrder, okey(w, d, head));
  }
  if (!co_await t.fetch()) co_return false;
  int ic[kDistricts] = {}, iol[kDistricts][kMaxLines] = {};
  for (uint32_t d = 1; d <= kDistricts; ++d) {
    if (o[d - 1] == 0) continue;
    const Order& ord = t.get<Order>(io[d - 1]);
    const uint32_t n = std::min(ord.ol_cnt, kMaxLines);
    for (uint32_t k = 1; k <= n; ++k) iol[d - 1][k - 1] = t.write(kOrderLine, olkey(w, d, o[d - 1], k));
    ic[d - 1] = t.write(kCustomer, ckey(w, d, ord.c_id));
  }
  if (!co_await t.fetch()) co_return false;
  for (uint32_t d = 1; d <= kDistricts; ++d) {
    if (o[d - 1] == 0) continue;
    if (!broken_delivery_) t.erase(ino[d - 1]);  // clause 2.7.4.2: the NEW-ORDER row is deleted
    t.get_mut<OrderRef>(ihead[d - 1]).o_id = o[d - 1] + 1;
    Order& ord = t.get_mut<Order>(io[d - 1]);
    ord.carrier_id = carrier;
    int64_t sum = 0;
    for (uint32_t k = 1; k <= std::min(ord.ol_cnt, kMaxLines); ++k) {
      OrderLine& ol = t.get_mut<OrderLine>(iol[d - 1][k - 1]);
      ol.delivery_d = kRunDate;
      sum += ol.amount;
    }
    Customer& cu = t.get_mut<Customer>(ic[d - 1]);
    cu.balance += sum;
    ++cu.delivery_cnt;
  }
  co_return co_await t.commit();
}

// Clause 2.8.2.2 (read-only), run serializable.
Task<bool> Tpcc::stock_level(Txn& t, const txn::TxnInput& in) const {
  const uint32_t w = static_cast<uint32_t>(in.args[0]), d = static_cast<uint32_t>(in.args[1]);
  const int32_t threshold = static_cast<int32_t>(in.args[2]);
  const int id = t.read(kDistrict, dkey(w, d));
  if (!co_await t.fetch()) co_return false;
  const uint32_t next = t.get<District>(id).next_o_id, lo = next > 20 ? next - 20 : 1;
  int io[20];
  for (uint32_t o = lo; o < next; ++o) io[o - lo] = t.read(kOrder, okey(w, d, o));
  if (!co_await t.fetch()) co_return false;
  int iol[20][kMaxLines];
  uint32_t nl[20];
  for (uint32_t o = lo; o < next; ++o) {
    nl[o - lo] = std::min(t.get<Order>(io[o - lo]).ol_cnt, kMaxLines);
    for (uint32_t k = 1; k <= nl[o - lo]; ++k) iol[o - lo][k - 1] = t.read(kOrderLine, olkey(w, d, o, k));
  }
  if (!co_await t.fetch()) co_return false;
  // Distinct items: declaring a key twice gives its first access back.
  const uint32_t first_stock = t.size();
  for (uint32_t o = lo; o < next; ++o)
    for (uint32_t k = 0; k < nl[o - lo]; ++k) t.read(kStock, skey(w, t.get<OrderLine>(iol[o - lo][k]).i_id));
  if (!co_await t.fetch()) co_return false;
  uint32_t low = 0;
  for (uint32_t i = first_stock; i < t.size(); ++i) low += t.get<Stock>(static_cast<int>(i)).quantity < threshold;
  (void)low;  // the terminal's output
  co_return co_await t.commit();
}

// ---- Consistency conditions (clause 3.3.2) ----

namespace {
// What a node's scan of its tables gathers, per district of its warehouses.
struct DistrictScan {
  uint32_t max_o = 0, orders = 0;
  uint64_t ol_cnt_sum = 0, lines = 0;
  uint32_t no_count = 0, no_min = UINT32_MAX, no_max = 0;
  int64_t history_sum = 0;
};

// Calls fn(key, tuple) for every live tuple of `tab`. False if the check
// must give up first: a stop request's grace ran out (polled every 64 Ki
// tuples; a check of many warehouses takes seconds).
template <typename Fn>
bool for_each_live(store::Table& tab, Fn&& fn) {
  const store::TupleLayout& l = tab.layout();
  for (uint32_t i = 0; i < tab.high_water(); ++i) {
    if ((i & 0xffff) == 0 && runtime::stop_grace_over()) return false;
    const std::byte* tp = tab.tuple(i);
    const store::TupleHeader h = store::read_header(tp, l);
    if (store::is_live(h.state)) fn(h.key, tp);
  }
  return true;
}

Error check_stopped() {
  return make_error(ECANCELED, "tpcc: consistency check stopped by %s", runtime::shutdown_cause());
}

uint64_t customer_fingerprint(uint64_t c_key) { return txn::mix64(c_key ^ 0xcc10) | 1; }
}  // namespace

Result<int64_t> Tpcc::check_node(txn::Database& db, uint32_t node) const {
  store::Store& s = db.store(node);
  const uint32_t wpn = p_.warehouses_per_node, first_w = node * wpn + 1, C = p_.customers;
  auto err = [](const char* cc, const std::string& what) {
    return make_error(EIO, "tpcc: consistency condition %s failed: %s", cc, what.c_str());
  };
  auto local_w = [&](uint64_t w) { return w >= first_w && w < first_w + wpn; };
  std::vector<DistrictScan> ds(size_t{wpn} * kDistricts);
  auto dist_of = [&](uint64_t w, uint64_t d) -> DistrictScan& { return ds[(w - first_w) * kDistricts + (d - 1)]; };
  // Delivered order-line amounts per customer (CC10, CC12), and the newest
  // order of each customer (LAST_ORDER, rdtx's index).
  std::vector<int64_t> delivered(size_t{wpn} * kDistricts * C, 0);
  std::vector<uint32_t> newest(size_t{wpn} * kDistricts * C, 0);
  auto cust = [&](uint64_t w, uint64_t d, uint64_t c) { return ((w - first_w) * kDistricts + (d - 1)) * C + (c - 1); };
  uint64_t fingerprint = 0;  // CC10 across nodes: sum of fp(customer) x (balance - delivered + history)

  store::Table& no_t = *s.table(kNewOrderT);
  const bool no_scanned = for_each_live(no_t, [&](uint64_t key, const std::byte* tp) {
    const NewOrder r = record_of<NewOrder>(tp, no_t.layout());
    DistrictScan& x = dist_of(key >> 40, key >> 32 & 0xff);
    ++x.no_count;
    x.no_min = std::min(x.no_min, r.o_id);
    x.no_max = std::max(x.no_max, r.o_id);
  });
  if (!no_scanned) return check_stopped();
  store::Table& o_t = *s.table(kOrder);
  store::Table& ol_t = *s.table(kOrderLine);
  std::string bad;
  const bool o_scanned = for_each_live(o_t, [&](uint64_t key, const std::byte* tp) {
    if (!bad.empty()) return;
    const Order r = record_of<Order>(tp, o_t.layout());
    const uint64_t w = key >> 40, d = key >> 32 & 0xff, o = key & 0xffffffff;
    DistrictScan& x = dist_of(w, d);
    ++x.orders;
    x.max_o = std::max<uint32_t>(x.max_o, static_cast<uint32_t>(o));
    x.ol_cnt_sum += r.ol_cnt;
    // CC5: O_CARRIER_ID is null iff a NEW-ORDER row names the order.
    store::TupleRef ref;
    const bool has_no = no_t.lookup(okey(w, d, o), &ref) == 0;
    if ((r.carrier_id == 0) != has_no) {
      bad = "5: order " + std::to_string(o) + " of warehouse " + std::to_string(w) + " district " + std::to_string(d) +
            (has_no ? " has a carrier and a new-order row" : " has no carrier and no new-order row");
      return;
    }
    // CC6: O_OL_CNT lines; CC7: OL_DELIVERY_D null iff O_CARRIER_ID null.
    for (uint32_t k = 1; k <= r.ol_cnt + 1; ++k) {
      const bool present = ol_t.lookup(olkey(w, d, o, k), &ref) == 0;
      if (present != (k <= r.ol_cnt)) {
        bad = "6: order " + std::to_string(o) + " of warehouse " + std::to_string(w) + " district " +
              std::to_string(d) + " has O_OL_CNT " + std::to_string(r.ol_cnt) + " but line " + std::to_string(k) +
              (present ? " exists" : " is missing");
        return;
      }
      if (!present) break;
      const OrderLine l = record_of<OrderLine>(ref.tuple, ol_t.layout());
      if ((l.delivery_d == 0) != (r.carrier_id == 0)) {
        bad = "7: line " + std::to_string(k) + " of order " + std::to_string(o) + " (warehouse " + std::to_string(w) +
              " district " + std::to_string(d) + ") has a delivery date " + (l.delivery_d ? "but" : "and") +
              " its order " + (r.carrier_id ? "a carrier" : "none");
        return;
      }
      if (l.delivery_d != 0) delivered[cust(w, d, r.c_id)] += l.amount;
    }
    uint32_t& nw = newest[cust(w, d, r.c_id)];
    nw = std::max<uint32_t>(nw, static_cast<uint32_t>(o));
  });
  if (!bad.empty()) return err(bad.substr(0, bad.find(':')).c_str(), bad.substr(bad.find(':') + 2));
  if (!o_scanned) return check_stopped();
  if (!for_each_live(ol_t, [&](uint64_t key, const std::byte*) { ++dist_of(key >> 40, key >> 32 & 0xff).lines; }))
    return check_stopped();
  store::Table& h_t = *s.table(kHistory);
  const bool h_scanned = for_each_live(h_t, [&](uint64_t, const std::byte* tp) {
    const History h = record_of<History>(tp, h_t.layout());
    if (local_w(h.w_id) && h.d_id >= 1 && h.d_id <= kDistricts) dist_of(h.w_id, h.d_id).history_sum += h.amount;
    fingerprint += customer_fingerprint(ckey(h.c_w_id, h.c_d_id, h.c_id)) * static_cast<uint64_t>(h.amount);
  });
  if (!h_scanned) return check_stopped();

  for (uint32_t w = first_w; w < first_w + wpn; ++w) {
    const std::string wd = "warehouse " + std::to_string(w);
    store::TupleRef ref;
    if (s.table(kWarehouse)->lookup(wkey(w), &ref) != 0) return err("1", wd + " is missing");
    const Warehouse wh = record_of<Warehouse>(ref.tuple, s.table(kWarehouse)->layout());
    int64_t d_ytd = 0, w_history = 0;
    for (uint32_t d = 1; d <= kDistricts; ++d) {
      const std::string where = wd + " district " + std::to_string(d);
      if (s.table(kDistrict)->lookup(dkey(w, d), &ref) != 0) return err("1", where + " is missing");
      const District di = record_of<District>(ref.tuple, s.table(kDistrict)->layout());
      if (s.table(kNoHead)->lookup(dkey(w, d), &ref) != 0) return err("3", where + ": its new-order head is missing");
      const uint32_t head = record_of<OrderRef>(ref.tuple, s.table(kNoHead)->layout()).o_id;
      const DistrictScan& x = dist_of(w, d);
      d_ytd += di.ytd;
      w_history += x.history_sum;
      auto n = [](uint64_t v) { return std::to_string(v); };
      // CC2: D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID).
      if (di.next_o_id - 1 != x.max_o || (x.no_count > 0 && x.no_max != x.max_o))
        return err("2", where + ": D_NEXT_O_ID - 1 = " + n(di.next_o_id - 1) + ", max(O_ID) = " + n(x.max_o) +
                            ", max(NO_O_ID) = " + n(x.no_max));
      // CC3: max(NO_O_ID) - min(NO_O_ID) + 1 = rows in NEW-ORDER; and the
      // head (rdtx's index of the oldest) is min(NO_O_ID).
      if (x.no_count > 0 && (x.no_max - x.no_min + 1 != x.no_count || head != x.no_min))
        return err("3", where + ": NEW-ORDER holds " + n(x.no_count) + " rows from " + n(x.no_min) + " to " +
                            n(x.no_max) + ", head " + n(head));
      if (x.no_count == 0 && head != di.next_o_id)
        return err("3", where + ": no NEW-ORDER row, head " + n(head) + ", D_NEXT_O_ID " + n(di.next_o_id));
      // CC4: sum(O_OL_CNT) = rows in ORDER-LINE.
      if (x.ol_cnt_sum != x.lines)
        return err("4", where + ": sum(O_OL_CNT) = " + n(x.ol_cnt_sum) + ", ORDER-LINE rows " + n(x.lines));
      // CC9: D_YTD = sum(H_AMOUNT) of the district's history.
      if (di.ytd != x.history_sum)
        return err("9", where + ": D_YTD = " + std::to_string(di.ytd) + ", sum(H_AMOUNT) = " +
                            std::to_string(x.history_sum));
      // CC11 as it holds after any run: the delivered orders are 1..head-1
      // (the specification states it for the initial 2,100).
      if (x.orders - x.no_count != head - 1)
        return err("11", where + ": " + n(x.orders) + " orders, " + n(x.no_count) + " undelivered, head " + n(head));
    }
    // CC1: W_YTD = sum(D_YTD); CC8: W_YTD = sum(H_AMOUNT).
    if (wh.ytd != d_ytd)
      return err("1", wd + ": W_YTD = " + std::to_string(wh.ytd) + ", sum(D_YTD) = " + std::to_string(d_ytd));
    if (wh.ytd != w_history)
      return err("8", wd + ": W_YTD = " + std::to_string(wh.ytd) + ", sum(H_AMOUNT) = " + std::to_string(w_history));
  }
  // CC12 per customer (its orders are in its warehouse), CC10 by fingerprint
  // (its history rows may be on other nodes), LAST_ORDER = its newest order.
  store::Table& c_t = *s.table(kCustomer);
  store::Table& lo_t = *s.table(kLastOrder);
  for (uint32_t w = first_w; w < first_w + wpn; ++w)
    for (uint32_t d = 1; d <= kDistricts; ++d) {
      if (runtime::stop_grace_over()) return check_stopped();
      for (uint32_t c = 1; c <= C; ++c) {
        store::TupleRef ref;
        if (c_t.lookup(ckey(w, d, c), &ref) != 0) return err("10", "customer " + std::to_string(c) + " is missing");
        const Customer cu = record_of<Customer>(ref.tuple, c_t.layout());
        const int64_t dl = delivered[cust(w, d, c)];
        if (cu.balance + cu.ytd_payment != dl)
          return err("12", "customer " + std::to_string(c) + " of warehouse " + std::to_string(w) + " district " +
                               std::to_string(d) + ": C_BALANCE + C_YTD_PAYMENT = " +
                               std::to_string(cu.balance + cu.ytd_payment) + ", delivered OL_AMOUNT " +
                               std::to_string(dl));
        fingerprint += customer_fingerprint(ckey(w, d, c)) * static_cast<uint64_t>(cu.balance - dl);
        if (lo_t.lookup(ckey(w, d, c), &ref) != 0 ||
            record_of<OrderRef>(ref.tuple, lo_t.layout()).o_id != newest[cust(w, d, c)])
          return make_error(EIO, "tpcc: customer %u of warehouse %u district %u: LAST_ORDER is not its newest order %u",
                            c, w, d, newest[cust(w, d, c)]);
      }
    }
  return static_cast<int64_t>(fingerprint);
}

Result<void> Tpcc::check_total(int64_t sum, uint32_t nodes, int64_t committed_delta) const {
  (void)nodes;
  (void)committed_delta;
  // CC10: C_BALANCE = sum(delivered OL_AMOUNT) - sum(H_AMOUNT) for every
  // customer; each node adds fp(customer) x (C_BALANCE - delivered) for its
  // customers and fp(customer) x H_AMOUNT for its history rows: the total is
  // 0 (mod 2^64) when every customer's condition holds.
  if (sum != 0)
    return make_error(EIO,
                      "tpcc: consistency condition 10 failed: some customer's C_BALANCE differs from its delivered "
                      "OL_AMOUNT minus its H_AMOUNT (cluster fingerprint %llx, not 0)",
                      static_cast<unsigned long long>(sum));
  return {};
}

namespace {

Result<std::unique_ptr<txn::Workload>> create_tpcc(const config::Config& cfg, uint32_t nodes) {
  if (nodes * cfg.get_int("tpcc.warehouses_per_node") > 65535)
    return make_error(EINVAL, "tpcc.warehouses_per_node (%s) x %u nodes exceeds 65535 warehouses",
                      cfg.origin("tpcc.warehouses_per_node").c_str(), nodes);
  return std::unique_ptr<txn::Workload>(std::make_unique<Tpcc>(Tpcc::params_from(cfg, nodes)));
}

// Four warehouses per node, 30 customers and 1,000 items: coroutines meet on
// warehouse, district and stock rows. (With one warehouse per node,
// one-sided WAITDIE makes almost no progress with 16 coordinators a node:
// doc/txn.md "WAITDIE".) 1,000 orders a district at first (the tables grow
// past it).
constexpr const char* kContended[] = {"tpcc.warehouses_per_node=4", "tpcc.customers_per_district=30",
                                      "tpcc.items=1000", "tpcc.order_capacity=1000"};
// TPC-C/no: New-Order only, every line remote (as DrTM+H and RCC run it);
// 5,000 items, as with 1,000 every order's ten remote stock rows meet on a
// few hot items of the other nodes.
constexpr const char* kNewOrder[] = {"tpcc.mode=neworder",         "tpcc.remote_item_percent=100",
                                     "tpcc.warehouses_per_node=4", "tpcc.customers_per_district=30",
                                     "tpcc.items=5000",            "tpcc.order_capacity=600"};
constexpr txn::WorkloadVariant kVariants[] = {{"neworder", kNewOrder}};
// Runs of at most 0.5 s (the generated suites'): room for 10 orders a
// district past the 30 loaded, so that ORDER, NEW-ORDER, ORDER-LINE and
// HISTORY grow during every generated run, under every protocol and
// primitive (a run makes 50-250 New-Orders a district: the store commits
// their memory as they come); small tables also load and map quickly.
constexpr const char* kShortRun[] = {"tpcc.order_capacity=40"};

constexpr txn::WorkloadDef kTpcc = {
    .name = "tpcc",
    .summary = "TPC-C: New-Order, Payment, Order-Status, Delivery, Stock-Level on the nine tables, consistency "
               "checked",
    .add_schema = Tpcc::add_schema,
    .create = create_tpcc,
    .contended = kContended,
    .variants = kVariants,
    .short_run = kShortRun,
};
RDTX_REGISTER_WORKLOAD(kTpcc)

}  // namespace

}  // namespace rdtx::workloads
