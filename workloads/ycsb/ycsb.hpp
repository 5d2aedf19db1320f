// YCSB as RCC runs it: one table of fixed-size records, transactions of N
// operations (each a read, or a read-modify-write with probability
// 1 - read_percent), keys drawn uniformly, from a hot area, or from a
// (scrambled) Zipfian distribution, and an optional local computation per
// transaction. Two meanings of the hot area (doc/writing-a-workload.md has
// both side by side):
//  - distribution "hotspot": `hot_percent`% of the accesses go to the
//    `hot_records_per_node` hot records of a node (rdtx's key, unchanged);
//  - distribution "rcc_hotspot": RCC's code, `rand % 100 < tx_hot ?
//    uniform over all records : hot` -- `tx_hot`% of the accesses are
//    uniform, the rest hot (RCC's tx_hot = 90 sends 10% to the hot area).
// Computation: `compute_ns` per transaction, or `compute_percent`% of the
// transaction's latency (RCC's "5% of the total latency"; calibrated on
// each worker thread's first attempts, then fixed), spent in CPU work
// calibrated against the TSC (RCC's usleep() blocks its worker thread: no
// other coroutine runs), or in a yielding sleep if `compute_yield`.
//
// Scans (`scan_percent`, as YCSB's workload E: a start key and a length
// uniform in 1..`scan_length`, YCSB's maxscanlength = 100 and
// scanlengthdistribution = uniform): a Scan transaction reads the records
// from its start key on (Txn::scan), clipped to the start's partition of
// `partition_records` keys, and is a read-modify-write of its first record
// with probability 1 - read_percent. With scans the table has that
// partition level (TableDef::parent_keys): 2PL at serializable locks a
// scan's partition, not its rows (doc/txn.md).
//
// Relocation (`relocate_percent`, tests): a read-modify-write of a record
// of the coordinator's node may also move it to another tuple, whose old
// tuple the next move takes for another key.
//
// Record: {writes, check, payload}: every committed write increments
// `writes` and rewrites check and payload as functions of (key, writes).
// Invariants after a run: every record is self-consistent (no torn or
// mixed write) and the sum of `writes` over all records equals the number
// of committed write operations (no lost update).
#pragma once

#include <vector>

#include "config/config.hpp"
#include "txn/workload.hpp"

namespace rdtx::workloads {

class Ycsb final : public txn::Workload {
 public:
  enum class Distribution { kUniform, kHotspot, kRccHotspot, kZipfian };
  static constexpr txn::TableId kTable = 0;

  struct Params {
    uint64_t records_per_node = 100'000;
    uint32_t record_bytes = 64;
    uint32_t ops_per_txn = 10;
    uint32_t read_percent = 50;
    Distribution distribution = Distribution::kUniform;
    uint64_t hot_records_per_node = 100;
    uint32_t hot_percent = 90;  // hotspot: percent of accesses that are hot
    uint32_t tx_hot = 90;       // rcc_hotspot: percent of accesses that are uniform
    double zipf_theta = 0.99;
    uint64_t compute_ns = 0;
    uint32_t compute_percent = 0;  // of the transaction's latency (without it)
    bool compute_yield = false;
    // Percent of the read-modify-writes of a node's own records that also
    // move the record to another tuple (Txn::relocate): a delete and a
    // reinsert, so that locations peers hold go stale and tuples change
    // keys under them (rdtx's test of stale locations, not RCC's YCSB).
    uint32_t relocate_percent = 0;
    uint32_t scan_percent = 0;   // percent of transactions that are a Scan
    uint32_t scan_length = 100;  // a scan's most records
    uint64_t partition_records = 1000;
    uint32_t nodes = 1;
  };
  static void add_schema(config::Schema& s);
  static Params params_from(const config::Config& cfg, uint32_t nodes);

  explicit Ycsb(const Params& p);
  const char* name() const override { return "ycsb"; }
  std::vector<txn::TableDef> tables(uint32_t nodes) const override;
  Result<void> load(store::Store& s, uint32_t partition) const override;
  std::vector<std::string> type_names() const override;
  void generate(txn::Rng& rng, uint32_t home_node, txn::TxnInput& in) const override;
  runtime::Task<bool> execute(txn::Txn& t, const txn::TxnInput& in, int64_t* delta) const override;
  // The accesses execute() declares, from the input alone (every type does).
  bool declare(const txn::TxnInput& in, txn::DeclaredSet& out) const override;
  bool declares(uint16_t type) const override;
  uint32_t max_declared(uint16_t type) const override;
  bool relocates() const override { return p_.relocate_percent > 0; }
  Result<int64_t> check_node(txn::Database& db, uint32_t node) const override;
  Result<void> check_total(int64_t sum, uint32_t nodes, int64_t committed_delta) const override;

  static constexpr uint32_t kMaxOps = 12;
  static constexpr uint16_t kScanType = 2;
  static constexpr uint32_t kMaxScanLength = 500;  // TxnInput carries the keys (and, in args[kMaxOps], the relocations)
  static constexpr uint64_t kRelocationSlack = 64;

  // Burns `ns` of CPU without yielding: a loop calibrated against the TSC.
  static void burn_ns(uint64_t ns);
  // One key as generate() draws it (tests measure the hot share).
  uint64_t pick_key(txn::Rng& rng) const { return pick(rng); }

 private:
  uint64_t pick(txn::Rng& rng) const;
  uint32_t scan_count(uint64_t start, uint32_t length) const;
  runtime::Task<bool> scan(txn::Txn& t, const txn::TxnInput& in, int64_t* delta) const;
  // compute_percent: attempts of each worker thread skipped (start-up), then measured.
  static constexpr uint32_t kCalibrationSkip = 2000, kCalibrationSamples = 1000;
  const uint64_t id_;                                      // tells the calibrations of runs apart
  Params p_;
  uint64_t n_ = 0;  // records in the cluster
  // Zipfian (Gray et al., as YCSB): constants for n_ items.
  double zeta_n_ = 0, alpha_ = 0, eta_ = 0, zeta2_ = 0;
};

}  // namespace rdtx::workloads
