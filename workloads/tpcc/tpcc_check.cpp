// TPC-C's consistency conditions (clause 3.3.2) after a run: per node, then
// summed over the cluster.
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

}  // namespace rdtx::workloads
