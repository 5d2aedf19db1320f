#include "workloads/ycsb/ycsb.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>

#include "env/tsc.hpp"
#include "env/virtual_clock.hpp"
#include "runtime/worker.hpp"
#include "store/loader.hpp"

namespace rdtx::workloads {

using runtime::Task;
using txn::Txn;

namespace {

struct RecordHead {
  uint64_t writes;
  uint64_t check;
};

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Fills a record as the `writes`-th version of `key`.
void fill(std::span<std::byte> rec, uint64_t key, uint64_t writes) {
  RecordHead h{writes, mix(key * 31 + writes)};
  std::memcpy(rec.data(), &h, sizeof h);
  for (size_t off = sizeof h; off + 8 <= rec.size(); off += 8) {
    uint64_t w = mix(h.check + off);
    std::memcpy(rec.data() + off, &w, 8);
  }
}

bool consistent(std::span<const std::byte> rec, uint64_t key, uint64_t* writes) {
  RecordHead h;
  std::memcpy(&h, rec.data(), sizeof h);
  *writes = h.writes;
  if (h.check != mix(key * 31 + h.writes)) return false;
  for (size_t off = sizeof h; off + 8 <= rec.size(); off += 8) {
    uint64_t w;
    std::memcpy(&w, rec.data() + off, 8);
    if (w != mix(h.check + off)) return false;
  }
  return true;
}

double zeta(uint64_t n, double theta) {
  double s = 0;
  for (uint64_t i = 1; i <= n; ++i) s += 1.0 / std::pow(static_cast<double>(i), theta);
  return s;
}

}  // namespace

void Ycsb::add_schema(config::Schema& s) {
  s.add_int("ycsb.records_per_node", 100'000, 16, 1 << 26, "records per node");
  s.add_int("ycsb.record_bytes", 64, 16, 4096, "record size in bytes (>= 16: write counter and check word)");
  s.add_int("ycsb.ops_per_txn", 10, 1, kMaxOps, "operations per transaction");
  s.add_int("ycsb.read_percent", 50, 0, 100, "percent of operations that only read (the rest read-modify-write)");
  s.add_enum("ycsb.distribution", "uniform", {"uniform", "hotspot", "rcc_hotspot", "zipfian"},
             "key choice (rcc_hotspot: RCC's hot area, read with tx_hot)");
  s.add_int("ycsb.hot_records_per_node", 100, 1, 1 << 26, "hotspot, rcc_hotspot: hot records per node");
  s.add_int("ycsb.hot_percent", 90, 0, 100, "hotspot: percent of accesses to hot records");
  s.add_int("ycsb.tx_hot", 90, 0, 100,
            "rcc_hotspot (RCC's meaning): percent of accesses uniform over all records; the rest go to hot records");
  s.add_float("ycsb.zipf_theta", 0.99, 0.01, 0.9999, "zipfian: skew (theta < 1)");
  s.add_int("ycsb.compute_ns", 0, 0, 100'000'000,
            "local computation per transaction (ns): calibrated CPU work, other coroutines wait");
  s.add_int("ycsb.compute_percent", 0, 0, 95,
            "local computation as a percent of the transaction's latency (RCC: 5), calibrated per worker");
  s.add_bool("ycsb.compute_yield", false, "spend the computation in a sleep that lets the other coroutines run");
  s.add_int("ycsb.relocate_percent", 0, 0, 100,
            "percent of read-modify-writes of the coordinator's own records that also move the record to another "
            "tuple (delete and reinsert: peers' locations go stale; tests)");
  s.add_int("ycsb.scan_percent", 0, 0, 100,
            "percent of transactions that are a Scan: the records from a start key on, within one partition "
            "(YCSB's workload E; a read-modify-write of the first with probability 1 - read_percent)");
  s.add_int("ycsb.scan_length", 100, 1, kMaxScanLength,
            "a scan's length is uniform in 1..scan_length (YCSB's maxscanlength, workload E: 100)");
  s.add_int("ycsb.partition_records", 1000, 1, 1 << 26,
            "with scans: records per partition, the lock hierarchy's level under the table (a scan stays in "
            "its start's partition; 2PL at serializable takes one S lock on it)");
  s.add_check([](const config::Config& c) -> std::string {
    if (c.get_int("ycsb.compute_ns") > 0 && c.get_int("ycsb.compute_percent") > 0)
      return "ycsb.compute_ns (" + c.origin("ycsb.compute_ns") + ") and ycsb.compute_percent (" +
             c.origin("ycsb.compute_percent") + ") are both set: choose one";
    const std::string& d = c.get_string("ycsb.distribution");
    // The two hot keys mean opposite things: setting only the one the
    // distribution does not read is a mistake.
    if (d == "rcc_hotspot" && c.origin("ycsb.hot_percent") != "default" && c.origin("ycsb.tx_hot") == "default")
      return "ycsb.hot_percent (" + c.origin("ycsb.hot_percent") +
             ") is read by distribution = \"hotspot\"; \"rcc_hotspot\" reads ycsb.tx_hot (percent of accesses "
             "that are NOT hot)";
    if (d == "hotspot" && c.origin("ycsb.tx_hot") != "default" && c.origin("ycsb.hot_percent") == "default")
      return "ycsb.tx_hot (" + c.origin("ycsb.tx_hot") +
             ") is read by distribution = \"rcc_hotspot\"; \"hotspot\" reads ycsb.hot_percent";
    if ((d == "hotspot" || d == "rcc_hotspot") &&
        c.get_int("ycsb.hot_records_per_node") > c.get_int("ycsb.records_per_node"))
      return "ycsb.hot_records_per_node (" + c.origin("ycsb.hot_records_per_node") + ") exceeds ycsb.records_per_node";
    if (c.get_int("ycsb.record_bytes") % 8 != 0)
      return "ycsb.record_bytes = " + std::to_string(c.get_int("ycsb.record_bytes")) + " (" +
             c.origin("ycsb.record_bytes") + ") must be a multiple of 8";
    return "";
  });
}

Ycsb::Params Ycsb::params_from(const config::Config& cfg, uint32_t nodes) {
  Params p;
  p.records_per_node = static_cast<uint64_t>(cfg.get_int("ycsb.records_per_node"));
  p.record_bytes = static_cast<uint32_t>(cfg.get_int("ycsb.record_bytes"));
  p.ops_per_txn = static_cast<uint32_t>(cfg.get_int("ycsb.ops_per_txn"));
  p.read_percent = static_cast<uint32_t>(cfg.get_int("ycsb.read_percent"));
  const std::string& d = cfg.get_string("ycsb.distribution");
  p.distribution = d == "hotspot"       ? Distribution::kHotspot
                   : d == "rcc_hotspot" ? Distribution::kRccHotspot
                   : d == "zipfian"     ? Distribution::kZipfian
                                        : Distribution::kUniform;
  p.hot_records_per_node = static_cast<uint64_t>(cfg.get_int("ycsb.hot_records_per_node"));
  p.hot_percent = static_cast<uint32_t>(cfg.get_int("ycsb.hot_percent"));
  p.tx_hot = static_cast<uint32_t>(cfg.get_int("ycsb.tx_hot"));
  p.zipf_theta = cfg.get_float("ycsb.zipf_theta");
  p.compute_ns = static_cast<uint64_t>(cfg.get_int("ycsb.compute_ns"));
  p.compute_percent = static_cast<uint32_t>(cfg.get_int("ycsb.compute_percent"));
  p.compute_yield = cfg.get_bool("ycsb.compute_yield");
  p.relocate_percent = static_cast<uint32_t>(cfg.get_int("ycsb.relocate_percent"));
  p.scan_percent = static_cast<uint32_t>(cfg.get_int("ycsb.scan_percent"));
  p.scan_length = static_cast<uint32_t>(cfg.get_int("ycsb.scan_length"));
  p.partition_records = static_cast<uint64_t>(cfg.get_int("ycsb.partition_records"));
  p.nodes = nodes;
  return p;
}

namespace {
std::atomic<uint64_t> g_ycsb_ids{0};
}  // namespace

Ycsb::Ycsb(const Params& p) : id_(++g_ycsb_ids), p_(p), n_(p.records_per_node * p.nodes) {
  if (p_.distribution == Distribution::kZipfian) {
    zeta_n_ = zeta(n_, p_.zipf_theta);
    zeta2_ = zeta(2, p_.zipf_theta);
    alpha_ = 1.0 / (1.0 - p_.zipf_theta);
    eta_ = (1 - std::pow(2.0 / static_cast<double>(n_), 1 - p_.zipf_theta)) / (1 - zeta2_ / zeta_n_);
  }
}

std::vector<txn::TableDef> Ycsb::tables(uint32_t nodes) const {
  auto part = store::Partitioner::range(nodes, p_.records_per_node * nodes);
  // Relocations take a free tuple before they give theirs back: one per
  // worker thread at a time; kRelocationSlack is plenty.
  const uint64_t cap = p_.records_per_node + (p_.relocate_percent > 0 ? kRelocationSlack : 0);
  txn::TableDef t{kTable, "usertable", p_.record_bytes, static_cast<uint32_t>(cap), part.value()};
  // Partitions only where something locks them: a scan.
  if (p_.scan_percent > 0) t.parent_keys = p_.partition_records;
  return {t};
}

Result<void> Ycsb::load(store::Store& s, uint32_t partition) const {
  const uint64_t base = partition * p_.records_per_node;
  return store::load(*s.table(kTable), p_.records_per_node, [base](uint64_t row, std::span<std::byte> rec) {
    fill(rec, base + row, 0);
    return base + row;
  });
}

std::vector<std::string> Ycsb::type_names() const { return {"ReadOnly", "ReadWrite", "Scan"}; }

// A scan's range: from its start key, at most `length` records, within the
// start's partition and node (keys of a node are contiguous).
uint32_t Ycsb::scan_count(uint64_t start, uint32_t length) const {
  const uint64_t part_end = (start / p_.partition_records + 1) * p_.partition_records;
  const uint64_t node_end = (start / p_.records_per_node + 1) * p_.records_per_node;
  return static_cast<uint32_t>(std::min<uint64_t>(length, std::min(part_end, node_end) - start));
}

uint64_t Ycsb::pick(txn::Rng& rng) const {
  switch (p_.distribution) {
    case Distribution::kUniform:
      return rng() % n_;
    case Distribution::kHotspot: {
      uint64_t node = rng() % p_.nodes;
      uint64_t span = rng() % 100 < p_.hot_percent ? p_.hot_records_per_node : p_.records_per_node;
      return node * p_.records_per_node + rng() % span;
    }
    case Distribution::kRccHotspot: {
      // RCC (DrTM+H's bank_worker.cc GetAccount): `r.next() % 100 < tx_hot`
      // picks from all records, else from the hot ones.
      const bool uniform = rng() % 100 < p_.tx_hot;
      uint64_t node = rng() % p_.nodes;
      uint64_t span = uniform ? p_.records_per_node : p_.hot_records_per_node;
      return node * p_.records_per_node + rng() % span;
    }
    case Distribution::kZipfian: {
      double u = std::uniform_real_distribution<double>(0, 1)(rng);
      double uz = u * zeta_n_;
      uint64_t rank;
      if (uz < 1.0) rank = 0;
      else if (uz < 1.0 + std::pow(0.5, p_.zipf_theta)) rank = 1;
      else rank = static_cast<uint64_t>(static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1, alpha_));
      if (rank >= n_) rank = n_ - 1;
      return mix(rank) % n_;  // scrambled, so hot keys spread over nodes
    }
  }
  return 0;
}

void Ycsb::generate(txn::Rng& rng, uint32_t home_node, txn::TxnInput& in) const {
  in.home_node = home_node;
  if (p_.scan_percent > 0 && rng() % 100 < p_.scan_percent) {
    const uint64_t start = pick(rng);
    const uint32_t length = 1 + static_cast<uint32_t>(rng() % p_.scan_length);
    const bool write = rng() % 100 >= p_.read_percent;
    in.type = kScanType;
    in.args[0] = start << 1 | (write ? 1 : 0);
    in.args[1] = scan_count(start, length);
    return;
  }
  uint32_t writes = 0;
  for (uint32_t i = 0; i < p_.ops_per_txn; ++i) {
    uint64_t key;
    bool dup;
    do {  // distinct keys: an operation per record
      key = pick(rng);
      dup = false;
      for (uint32_t j = 0; j < i; ++j) dup |= (in.args[j] >> 1) == key;
    } while (dup);
    bool write = rng() % 100 >= p_.read_percent;
    writes += write;
    in.args[i] = key << 1 | (write ? 1 : 0);
  }
  // Which writes also relocate their record (bit i): own records only.
  in.args[kMaxOps] = 0;
  if (p_.relocate_percent > 0)
    for (uint32_t i = 0; i < p_.ops_per_txn; ++i)
      if ((in.args[i] & 1) && (in.args[i] >> 1) / p_.records_per_node == home_node &&
          rng() % 100 < p_.relocate_percent)
        in.args[kMaxOps] |= uint64_t{1} << i;
  in.type = writes > 0 ? 1 : 0;
}

namespace {
// The calibration of compute_percent, per worker thread (the coroutines of
// a thread's workers share it) and per Ycsb instance (a thread may run
// several runs, as the tests do).
struct ComputeCalibration {
  uint64_t owner = 0;  // Ycsb::id_
  uint32_t skipped = 0;
  uint32_t samples = 0;
  double base_ns = 0;  // mean attempt latency, no computation running
};
thread_local ComputeCalibration t_calibration;
}  // namespace

Task<bool> Ycsb::execute(Txn& t, const txn::TxnInput& in, int64_t* delta) const {
  if (in.type == kScanType) co_return co_await scan(t, in, delta);
  const uint64_t start = env::tsc();
  int idx[kMaxOps];
  for (uint32_t i = 0; i < p_.ops_per_txn; ++i) {
    uint64_t key = in.args[i] >> 1;
    idx[i] = (in.args[i] & 1) ? t.write(kTable, key) : t.read(kTable, key);
  }
  if (!co_await t.fetch()) co_return false;
  int64_t writes = 0;
  for (uint32_t i = 0; i < p_.ops_per_txn; ++i) {
    uint64_t key = in.args[i] >> 1;
    uint64_t w;
    if (!consistent(t.record(idx[i]), key, &w)) {
      // A protocol may fetch a torn copy it will reject at validation (OCC);
      // it must never commit one.
      continue;
    }
    if (in.args[i] & 1) {
      fill(t.mutable_record(idx[i]), key, w + 1);
      ++writes;
      if (in.args[kMaxOps] >> i & 1) t.relocate(idx[i]);
    }
  }
  uint64_t compute_ns = p_.compute_ns;
  ComputeCalibration& cal = t_calibration;
  if (p_.compute_percent > 0) {
    // p% of the latency, as a fixed computation: the thread's first
    // attempts run none; after kCalibrationSkip of them, the mean latency
    // L0 of the next kCalibrationSamples is measured; afterwards every
    // transaction burns p / (100 - p) * L0. Not
    // adapted continuously: a transaction's latency includes the other
    // workers' computation (their RPC handlers wait behind it), so with
    // enough coroutines an adaptive computation grows without bound.
    if (cal.owner != id_) cal = {id_, 0, 0, 0};
    if (cal.samples >= kCalibrationSamples)
      compute_ns = static_cast<uint64_t>(cal.base_ns * p_.compute_percent / (100 - p_.compute_percent));
  }
  if (compute_ns > 0) {
    if (p_.compute_yield) co_await runtime::sleep_for(compute_ns);
    else burn_ns(compute_ns);
  }
  bool ok = co_await t.commit();
  if (p_.compute_percent > 0 && cal.owner == id_ && cal.samples < kCalibrationSamples) {
    // The first kCalibrationSkip attempts are start-up (cold caches,
    // connections, peers still starting): not measured.
    if (cal.skipped < kCalibrationSkip) {
      ++cal.skipped;
    } else {
      const double sample = env::tsc_to_ns(env::tsc() - start);
      cal.base_ns += (sample - cal.base_ns) / ++cal.samples;
    }
  }
  *delta = ok ? writes : 0;
  co_return ok;
}

// A Scan: the records of the range, read; the first also rewritten if the
// input says so, from a consistent copy (as execute(): a protocol may fetch
// a torn copy that its validation then rejects).
Task<bool> Ycsb::scan(Txn& t, const txn::TxnInput& in, int64_t* delta) const {
  const uint64_t first = in.args[0] >> 1;
  const uint32_t count = static_cast<uint32_t>(in.args[1]);
  const bool write = (in.args[0] & 1) != 0;
  const int at = t.scan(kTable, first, count);
  if (write) t.write(kTable, first);
  if (!co_await t.fetch()) co_return false;
  uint64_t w = 0;
  if (write && consistent(t.record(at), first, &w)) fill(t.mutable_record(at), first, w + 1);
  const bool ok = co_await t.commit();
  *delta = ok && write ? 1 : 0;
  co_return ok;
}

namespace {

// One step of the computation: a dependent multiply-add the compiler cannot
// drop or vectorise.
inline uint64_t burn_steps(uint64_t steps, uint64_t x) {
  for (uint64_t i = 0; i < steps; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    asm volatile("" : "+r"(x));
  }
  return x;
}

// Steps per ns on this CPU, measured once against the TSC: the best of 20
// short trials, so a trial the OS preempted (slower) does not count.
double steps_per_ns() {
  static const double rate = [] {
    constexpr uint64_t kSteps = 20'000;
    double best = 0;
    uint64_t x = 1;
    for (int trial = 0; trial < 20; ++trial) {
      // The hardware counter: the rate is the CPU's, whatever clock (a
      // virtual one) this thread runs on.
      const uint64_t t0 = env::hw_tsc();
      x = burn_steps(kSteps, x);
      const double ns = static_cast<double>(env::hw_tsc() - t0) * 1e9 / static_cast<double>(env::hw_tsc_hz());
      if (ns > 0) best = std::max(best, static_cast<double>(kSteps) / ns);
    }
    asm volatile("" : : "r"(x));
    return best > 0 ? best : 1.0;
  }();
  return rate;
}

}  // namespace

void Ycsb::burn_ns(uint64_t ns) {
  // A fixed amount of CPU work, calibrated against the TSC, rather than a
  // spin until a TSC deadline: if the OS preempts the thread, the
  // computation takes longer in wall time, as real computation would, and
  // still costs the thread `ns` of CPU. Under a virtual clock the time is
  // added to it instead (env::spend_ticks()). Work for the loop's
  // accounting either way, also when the coroutine computing was resumed
  // by poll_wait() (CALVIN's execution).
  runtime::note_work();
  if (env::virtual_clock() != nullptr) {
    env::spend_ticks(env::ns_to_tsc(ns));
    return;
  }
  const uint64_t x = burn_steps(static_cast<uint64_t>(static_cast<double>(ns) * steps_per_ns()), ns);
  asm volatile("" : : "r"(x));
}

// Mirrors execute(): one access per operation, a write if its low bit is set.
bool Ycsb::declare(const txn::TxnInput& in, txn::DeclaredSet& out) const {
  out.n = 0;
  if (in.type == kScanType) {
    const uint64_t first = in.args[0] >> 1;
    for (uint64_t k = 0; k < in.args[1]; ++k)
      if (!out.add(kTable, first + k, k == 0 && (in.args[0] & 1) ? txn::AccessMode::kWrite : txn::AccessMode::kRead))
        return false;
    return true;
  }
  for (uint32_t i = 0; i < p_.ops_per_txn; ++i)
    if (!out.add(kTable, in.args[i] >> 1, (in.args[i] & 1) ? txn::AccessMode::kWrite : txn::AccessMode::kRead))
      return false;
  return true;
}

bool Ycsb::declares(uint16_t type) const { return type <= kScanType; }

uint32_t Ycsb::max_declared(uint16_t type) const {
  if (type == kScanType) return p_.scan_percent > 0 ? p_.scan_length : 0;
  return type < kScanType ? p_.ops_per_txn : 0;
}

Result<int64_t> Ycsb::check_node(txn::Database& db, uint32_t n) const {
  int64_t total = 0;
  store::Table* tab = db.store(n).table(kTable);
  for (uint64_t k = n * p_.records_per_node; k < (n + 1) * p_.records_per_node; ++k) {
    store::TupleRef ref;
    if (tab->lookup(k, &ref) != 0)
      return make_error(EIO, "ycsb: record %llu missing on node %u", static_cast<unsigned long long>(k), n);
    uint64_t w;
    std::span<const std::byte> rec(ref.tuple + tab->layout().record_offset(), p_.record_bytes);
    if (!consistent(rec, k, &w))
      return make_error(EIO, "ycsb: record %llu on node %u is not one consistent version (torn or mixed write)",
                        static_cast<unsigned long long>(k), n);
    total += static_cast<int64_t>(w);
  }
  return total;
}

Result<void> Ycsb::check_total(int64_t total, uint32_t, int64_t committed_delta) const {
  if (total != committed_delta)
    return make_error(EIO, "ycsb: records carry %lld writes, committed transactions made %lld (lost or phantom updates)",
                      static_cast<long long>(total), static_cast<long long>(committed_delta));
  return {};
}

namespace {

Result<std::unique_ptr<txn::Workload>> create_ycsb(const config::Config& cfg, uint32_t nodes) {
  return std::unique_ptr<txn::Workload>(std::make_unique<Ycsb>(Ycsb::params_from(cfg, nodes)));
}

// 16 of 500 records per node get 80% of the accesses; 4 operations per
// transaction, half of them read-modify-writes.
constexpr const char* kContended[] = {"ycsb.records_per_node=500", "ycsb.distribution=hotspot",
                                      "ycsb.hot_records_per_node=16", "ycsb.hot_percent=80",
                                      "ycsb.ops_per_txn=4",        "ycsb.read_percent=50"};
// Rows moving between tuples under every primitive's locations (the
// location cache, index walks, RPC lookups): half of the own-node writes
// relocate.
constexpr const char* kRelocate[] = {"ycsb.records_per_node=500",    "ycsb.distribution=hotspot",
                                     "ycsb.hot_records_per_node=16", "ycsb.hot_percent=80",
                                     "ycsb.ops_per_txn=4",           "ycsb.read_percent=50",
                                     "ycsb.relocate_percent=50"};
// Scans of up to 12 records (CALVIN's calvin.max_accesses is 16) in
// partitions of 32, 30% of the transactions, beside the hot writers: 2PL at
// serializable locks their partitions (S, SIX with the write) against the
// writers' intention locks.
constexpr const char* kScan[] = {"ycsb.records_per_node=500", "ycsb.distribution=hotspot",
                                 "ycsb.hot_records_per_node=16", "ycsb.hot_percent=80",
                                 "ycsb.ops_per_txn=4",        "ycsb.read_percent=50",
                                 "ycsb.scan_percent=30",      "ycsb.scan_length=12",
                                 "ycsb.partition_records=32"};
constexpr txn::WorkloadVariant kVariants[] = {{"relocate", kRelocate}, {"scan", kScan}};

constexpr txn::WorkloadDef kYcsb = {
    .name = "ycsb",
    .summary = "YCSB: transactions of N reads or read-modify-writes on one table of fixed-size records",
    .add_schema = Ycsb::add_schema,
    .create = create_ycsb,
    .contended = kContended,
    .variants = kVariants,
};
RDTX_REGISTER_WORKLOAD(kYcsb)

}  // namespace

}  // namespace rdtx::workloads
