// TPC-C's five transactions (clauses 2.4-2.8) on the Txn API, and the
// read/write sets they declare up front (CALVIN).
#include "workloads/tpcc/tpcc.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "workloads/tpcc/rows.hpp"

namespace rdtx::workloads {

using namespace tpcc;
using runtime::Task;
using txn::Txn;

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

}  // namespace rdtx::workloads
