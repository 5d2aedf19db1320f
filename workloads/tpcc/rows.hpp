// TPC-C's rows, keys and random values (clauses 1.3, 4.3.2, 2.1.6), shared
// by the workload's parts: configuration and inputs (tpcc.cpp), loading
// (tpcc_load.cpp), the five transactions (tpcc_txns.cpp) and the
// consistency conditions (tpcc_check.cpp).
//
// Thread-safety: types and pure functions (a txn::Rng is its caller's).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "store/tuple.hpp"
#include "workloads/tpcc/tpcc.hpp"

namespace rdtx::workloads::tpcc {

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
inline uint32_t partition_fn(uint64_t key, uint64_t arg) {
  const uint32_t wpn = static_cast<uint32_t>(arg), nodes = static_cast<uint32_t>(arg >> 32);
  uint64_t n;
  if (key & kHistoryRun) n = (key >> 48) & 0x7f;
  else n = (((key >> 40) & 0xffff) + wpn - 1) / wpn - ((key >> 40 & 0xffff) != 0);
  return n < nodes ? static_cast<uint32_t>(n) : nodes - 1;
}

// Uniform in [lo, hi].
inline uint32_t uniform(txn::Rng& r, uint32_t lo, uint32_t hi) {
  return lo + static_cast<uint32_t>(r() % (hi - lo + 1));
}

// NURand(A, x, y) with run constant C (clause 2.1.6).
inline uint32_t nurand(txn::Rng& r, uint32_t a, uint32_t x, uint32_t y, uint32_t c) {
  return (((uniform(r, 0, a) | uniform(r, x, y)) + c) % (y - x + 1)) + x;
}
// The specification's A for a range of `n` values, scaled down with it
// (255 for 1000 last names, 1023 for 3000 customers, 8191 for 100,000 items).
inline uint32_t nurand_a(uint32_t n, uint32_t spec_a, uint32_t spec_n) {
  if (n >= spec_n) return spec_a;
  uint32_t a = 1;
  while (a * 2 <= n / 3 + 1) a *= 2;
  return std::min(spec_a, a - 1 == 0 ? 1 : a - 1);
}

inline void astring(txn::Rng& r, char* out, uint32_t size, uint32_t min_len) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const uint32_t len = uniform(r, min_len, size);
  for (uint32_t i = 0; i < len; ++i) out[i] = kAlnum[r() % 62];
}
inline void nstring(txn::Rng& r, char* out, uint32_t size) {
  for (uint32_t i = 0; i < size; ++i) out[i] = static_cast<char>('0' + r() % 10);
}
// I_DATA / S_DATA: 10% contain "ORIGINAL" (clause 4.3.3.1).
inline void data_string(txn::Rng& r, char* out, uint32_t size) {
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
inline void last_name(uint32_t n, char out[16]) {
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
inline uint32_t undelivered(uint32_t customers) { return customers * 9 / 30; }
// O_OL_CNT of a loaded order: uniform 5..15, a function of its key.
inline uint32_t loaded_ol_cnt(uint64_t w, uint64_t d, uint64_t o) {
  return 5 + txn::mix64(okey(w, d, o) ^ 0x011c) % 11;
}

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

// Lines of a New-Order input (clause 2.4.1.5): a line's supplying
// warehouse is another one with remote_item_percent% (DrTM+H and RCC run
// TPC-C/no with 100: every line remote).
inline void lines_of(const Tpcc::Params& p, const txn::TxnInput& in, Line* out) {
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

}  // namespace rdtx::workloads::tpcc
