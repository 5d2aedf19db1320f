// TPC-C (tpcc.hpp): configuration, tables, the input mix and registration.
// The rest of the workload: tpcc_load.cpp, tpcc_txns.cpp, tpcc_check.cpp.
#include "workloads/tpcc/tpcc.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/shutdown.hpp"
#include "store/loader.hpp"
#include "workloads/tpcc/rows.hpp"

namespace rdtx::workloads {

using namespace tpcc;
using runtime::Task;
using txn::Txn;

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

std::vector<std::string> Tpcc::type_names() const {
  return {"NewOrder", "Payment", "OrderStatus", "Delivery", "StockLevel"};
}

// ---- Inputs (clause 2.x.1; one per transaction, kept across its retries) ----
// NewOrder:    args 0 w, 1 d, 2 c, 3 ol_cnt, 4 rollback, 5 seed of the lines
// Payment:     args 0 w, 1 d, 2 c_w, 3 c_d, 4 by name, 5 c or name, 6 amount
// OrderStatus: args 0 w, 1 d, 2 by name, 3 c or name
// Delivery:    args 0 w, 1 carrier
// StockLevel:  args 0 w, 1 d, 2 threshold

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
