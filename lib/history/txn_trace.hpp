// TxnTrace: the accesses of one transaction attempt, collected while it runs
// and handed to the worker's Recorder when its outcome is known.
//
// A worker's coroutines interleave, so each coordinator coroutine owns one
// TxnTrace and reuses it for every attempt: begin() clears it, the engine
// adds accesses (in any order, e.g. reads at fetch and writes at install
// time, when the replaced version is known under the lock), then calls
// Recorder::commit() or Recorder::abort(). Storage for max_accesses records
// is allocated once in the constructor; nothing on these paths allocates.
// An attempt with more accesses than that is marked overflowed, and the
// recorder then marks its history truncated rather than record it partially.
//
// Thread-safety: owned by one coroutine (one thread); no locking.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "history/format.hpp"

namespace rdtx::history {

class TxnTrace {
 public:
  explicit TxnTrace(uint32_t max_accesses)
      : acc_(std::make_unique<AccessRecord[]>(max_accesses)), capacity_(max_accesses) {}

  // Starts a new attempt. type indexes the recorder's type names; start_ts is
  // the logical snapshot timestamp if the protocol has one (0 = unknown);
  // begin_tsc when its transaction was invoked, on the recorder's clock
  // (env::tsc(), before the first attempt's first access; 0 = unknown).
  void begin(TxnId id, uint16_t type, uint64_t start_ts = 0, uint64_t begin_tsc = 0) {
    rec_ = TxnRecord{};
    rec_.id = id;
    rec_.type = type;
    rec_.start_ts = start_ts;
    rec_.begin_tsc = begin_tsc;
    n_ = 0;
    overflowed_ = false;
    snapshot_ = {};
  }
  // For protocols that take their snapshot after begin().
  void set_start_ts(uint64_t ts) { rec_.start_ts = ts; }
  // Vector snapshots (kFileSnapshotVectors): the attempt's snapshot vector
  // (not copied: it must stay valid until the recorder took the outcome)
  // and the slot its commit timestamp counts in.
  void set_snapshot(std::span<const uint64_t> words, uint32_t commit_slot) {
    snapshot_ = words;
    rec_.commit_slot = commit_slot;
  }
  // Timestamp order (kFileTimestampOrder) in (epoch, commit timestamp):
  // the epoch, compared before the commit timestamp (0 for protocols whose
  // order is the commit timestamp alone).
  void set_commit_epoch(uint32_t epoch) { rec_.commit_slot = epoch; }

  // A read that saw version `seen` (the writer id in the tuple).
  void read(uint32_t table, uint64_t key, Version seen) {
    add(table, key, Op::kRead, kAccessReads, seen, kInitialVersion, 0);
  }
  // A blind write that replaced version `replaced`, as its write seq `seq`.
  void write(uint32_t table, uint64_t key, Version replaced, uint16_t seq = 0) {
    add(table, key, Op::kWrite, 0, kInitialVersion, replaced, seq);
  }
  // A write of a value computed from the version `seen`. Recording the read
  // and the write as one access lets the checker report a lost update as
  // such when `replaced` differs from `seen`.
  void read_modify_write(uint32_t table, uint64_t key, Version seen, Version replaced, uint16_t seq = 0) {
    add(table, key, Op::kWrite, kAccessReads, seen, replaced, seq);
  }
  // An insert replaces the version of the absent key: kInitialVersion if the
  // key never existed, else the version its delete created.
  void insert(uint32_t table, uint64_t key, Version replaced, uint16_t seq = 0) {
    add(table, key, Op::kInsert, 0, kInitialVersion, replaced, seq);
  }
  void erase(uint32_t table, uint64_t key, Version replaced, uint16_t seq = 0) {
    add(table, key, Op::kDelete, 0, kInitialVersion, replaced, seq);
  }
  // A delete of the row whose version `seen` the transaction read.
  void read_erase(uint32_t table, uint64_t key, Version seen, Version replaced, uint16_t seq = 0) {
    add(table, key, Op::kDelete, kAccessReads, seen, replaced, seq);
  }

  TxnId id() const { return rec_.id; }
  const TxnRecord& record() const { return rec_; }
  std::span<const AccessRecord> accesses() const { return {acc_.get(), n_}; }
  std::span<const uint64_t> snapshot() const { return snapshot_; }
  uint32_t size() const { return n_; }
  uint32_t capacity() const { return capacity_; }
  bool overflowed() const { return overflowed_; }

 private:
  void add(uint32_t table, uint64_t key, Op op, uint8_t flags, Version seen, Version replaced, uint16_t seq) {
    if (n_ == capacity_) {
      overflowed_ = true;
      return;
    }
    AccessRecord& a = acc_[n_++];
    a.key = key;
    a.read_txn = seen.txn;
    a.replaced_txn = replaced.txn;
    a.table = table;
    a.read_seq = seen.seq;
    a.replaced_seq = replaced.seq;
    a.write_seq = seq;
    a.op = static_cast<uint8_t>(op);
    a.flags = flags;
    a.reserved = 0;
  }

  TxnRecord rec_{};
  std::unique_ptr<AccessRecord[]> acc_;
  uint32_t capacity_;
  uint32_t n_ = 0;
  bool overflowed_ = false;
  std::span<const uint64_t> snapshot_;
};

}  // namespace rdtx::history
