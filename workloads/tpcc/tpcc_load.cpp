// TPC-C's initial database (clause 4.3.3.1): every table of a partition, and
// the replicated ITEM table.
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

}  // namespace rdtx::workloads
