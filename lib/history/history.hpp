// History: the recorded transaction attempts of a run, merged from the files
// of all its workers (reader.hpp), from recorders in the same process
// (Recorder::append_to), or built by hand in tests; the checker's input.
//
// Attempts are stored in flat arrays (records as in the file, plus the index
// of each attempt's first access), so that millions of them load and check
// without per-transaction allocations.
// Thread-safety: plain value type; no internal synchronisation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "history/format.hpp"
#include "history/names.hpp"

namespace rdtx::history {

// Asks the kernel to back [p, p + bytes) with transparent huge pages
// (madvise), where it allows them: for the checker's per-access arrays,
// read at random. A hint: nothing fails without it. (Not used for the
// History's own arrays: faulting them in as huge pages made loading slower
// by more than it saved.)
void advise_huge_pages(const void* p, size_t bytes);

// An allocator whose construct() leaves trivial values uninitialised: the
// History's arrays are sized once and then filled, in parallel, by the reader;
// zeroing them first would be one more pass over hundreds of MB, and would
// fault every page in on one thread.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using std::allocator<T>::allocator;
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
template <typename T>
using LoadVector = std::vector<T, DefaultInitAllocator<T>>;

// Long operations on a history (writing and reading its files, merging,
// checking) poll this between pieces of work, milliseconds apart, and give
// up with ECANCELED once it returns true: rdtx-bench passes
// runtime::stop_grace_over, so that SIGINT or SIGTERM ends a check within
// a second. Empty: never. Called from several threads at once.
using StopFn = std::function<bool()>;

// The clock a file's begin_tsc and commit_tsc are read from (format.hpp,
// FileHeader::clock_*); tsc_hz == 0: real time not recorded.
struct Clock {
  uint64_t domain = 0;  // same nonzero domain: the same counter
  uint64_t tsc_hz = 0;
  uint64_t tsc = 0;      // a tick ...
  uint64_t unix_ns = 0;  // ... and the wall clock then
  bool recorded() const { return tsc_hz != 0; }
  friend bool operator==(const Clock&, const Clock&) = default;
};

// One worker's part of the history (one file).
struct Source {
  std::string path;  // empty when not loaded from a file
  uint16_t node = 0;
  uint16_t worker = 0;
  uint16_t node_workers = 0;
  bool truncated = false;
  bool aborts_recorded = false;
  bool timestamp_order = false;  // kFileTimestampOrder: the protocol promises it
  bool snapshot_vectors = false;  // kFileSnapshotVectors: committed attempts carry theirs
  Clock clock;                   // kFileRealTime: begin_tsc and commit_tsc's clock
  uint64_t txns = 0;
  uint64_t dropped_txns = 0;
};

class History {
 public:
  // The checker numbers attempts and accesses with 32-bit indexes (and packs
  // an access index with 2 bits of edge kind); loading refuses more.
  static constexpr uint64_t kMaxTxns = (uint64_t{1} << 32) - 16;
  static constexpr uint64_t kMaxAccesses = uint64_t{1} << 30;

  uint64_t run_id = 0;
  uint16_t cluster_nodes = 0;  // 0: unknown
  NameTables names;
  std::vector<Source> sources;

  // Registers one worker's part before its attempts are added. The first
  // source sets run_id, cluster_nodes and names; a later one must agree on
  // all three and name a (node, worker) not seen yet. Errors name src.path.
  Result<void> add_source(const Source& src, uint64_t src_run_id, uint16_t src_cluster_nodes,
                          const NameTables& src_names);
  // With cluster_nodes known: every node 0..cluster_nodes-1 has a source for
  // each of its node_workers workers. The error names the first missing one.
  Result<void> check_complete() const;
  bool truncated() const;

  // Appends an attempt; t.access_count is taken from `accesses`,
  // t.snapshot_words from `snapshot` (its snapshot vector, if any).
  void add(const TxnRecord& t, std::span<const AccessRecord> accesses, std::span<const uint64_t> snapshot = {});
  // Appends an attempt with t.access_count zeroed accesses and
  // t.snapshot_words zeroed snapshot words for the caller to fill (a reader
  // reads them from a file straight into place; mutable_snapshot).
  std::span<AccessRecord> add_uninitialized(const TxnRecord& t);
  void reserve(size_t txns, size_t accesses);
  // Appends `txns` attempts, `accesses` accesses and `snapshot_words`
  // snapshot words, uninitialised, for a reader that fills them in place
  // (several files at once, each its own range): attempt i's record is
  // txn_data()[i], the index of its first access first_data()[i], its
  // accesses access_data()[first_data()[i]...], the index of its first
  // snapshot word snapshot_first_data()[i]. Every appended value must be
  // written before the History is used.
  void append_uninitialized(size_t txns, size_t accesses, size_t snapshot_words = 0);
  TxnRecord* txn_data() { return txns_.data(); }
  uint64_t* first_data() { return first_.data(); }
  AccessRecord* access_data() { return acc_.data(); }
  uint64_t* snapshot_first_data() { return snap_first_.data(); }
  uint64_t* snapshot_data() { return snap_.data(); }

  size_t size() const { return txns_.size(); }
  size_t access_count() const { return acc_.size(); }
  const TxnRecord& txn(size_t i) const { return txns_[i]; }
  std::span<const AccessRecord> accesses(size_t i) const { return {acc_.data() + first_[i], txns_[i].access_count}; }
  // The index in all_accesses() of attempt i's first access.
  uint64_t first_access(size_t i) const { return first_[i]; }
  std::span<const AccessRecord> all_accesses() const { return acc_; }
  std::span<const uint64_t> first_accesses() const { return first_; }
  // Attempt i's snapshot vector (TxnRecord::snapshot_words; empty: none).
  std::span<const uint64_t> snapshot(size_t i) const {
    return {snap_.data() + snap_first_[i], txns_[i].snapshot_words};
  }
  uint64_t snapshot_word_count() const { return snap_.size(); }
  uint64_t first_snapshot_word(size_t i) const { return snap_first_[i]; }

  // For tests that plant an anomaly in a generated history.
  TxnRecord& mutable_txn(size_t i) { return txns_[i]; }
  std::span<AccessRecord> mutable_accesses(size_t i) { return {acc_.data() + first_[i], txns_[i].access_count}; }
  std::span<uint64_t> mutable_snapshot(size_t i) { return {snap_.data() + snap_first_[i], txns_[i].snapshot_words}; }

 private:
  LoadVector<TxnRecord> txns_;
  LoadVector<uint64_t> first_;
  LoadVector<AccessRecord> acc_;
  LoadVector<uint64_t> snap_first_;
  LoadVector<uint64_t> snap_;
};

}  // namespace rdtx::history
