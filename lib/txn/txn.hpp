// Txn: the protocol-neutral transaction API workloads are written against,
// and the read/write set the protocols work on.
//
// A workload declares accesses by (table, key), fetches them (several fetch
// rounds are allowed: a later round may depend on values fetched earlier),
// computes on the local copies, and commits:
//
//   int from = t.write(kChecking, a), to = t.write(kChecking, b);
//   if (!co_await t.fetch()) co_return false;       // aborted
//   t.get_mut<Account>(from).balance -= x;
//   t.get_mut<Account>(to).balance += x;
//   co_return co_await t.commit();                  // false: aborted
//
// Rows are inserted with insert(table, key): a row that does not exist yet,
// at a key that no other transaction can learn before this one commits
// (TPC-C's orders, numbered from the district's next order id, which this
// transaction writes: the written row is the guard). The engine inserts the
// rows on their owner once every stage that can abort has passed (after
// lock, validate and log, before commit), so a row is never visible before
// its guard's new value, and erases them again if the commit stage fails.
// A key present already is a failed check of the run (insert_errors), not an
// abort: it means the guard did not serialise the inserters.
//
// A replicated table (TableDef::replicated: read-only, every node holds all
// of it, TPC-C's ITEM) is read with replicated(): the local copy, no
// protocol, no history (nothing writes it).
//
// It never mentions protocols or verbs. A read-only transaction declares
// only reads. An aborted attempt has released everything it held when
// fetch()/commit() return false; abort_reason() says why. user_abort() ends
// an attempt the workload gives up on (releasing what it holds).
//
// Record copies live in the worker's registered scratch memory (the
// destination of one-sided READs), one tuple-sized slot per access.
// Thread-safety: a Txn belongs to one coordinator coroutine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "runtime/task.hpp"
#include "txn/types.hpp"

namespace rdtx::txn {

class Coordinator;

// What the commit does with a written row besides installing its new value
// (Txn::erase, Txn::relocate).
enum class RowChange : uint8_t {
  kNone,
  kErase,     // the row is deleted
  kRelocate,  // the row, with its new value, moves to another tuple of its table
};

struct Access {
  TableId table = 0;
  uint32_t node = 0;  // owner
  Key key = 0;
  AccessMode mode = AccessMode::kRead;
  uint32_t round = 0;  // fetch round that declared it
  std::byte* copy = nullptr;  // local copy of the tuple (meta, header, record)
  uint64_t tuple_addr = 0;    // the tuple's address on the owner (remote address)
  uint64_t state = 0;         // store state word seen at fetch
  uint64_t writer = 0;        // recording: the writer id seen at fetch
  uint64_t replaced = 0;      // recording, writes: the writer id seen under the lock
  uint64_t expect_state = 0;  // location hint: full state (cache), or 0
  uint32_t expect_low = 0;    // location hint: low 32 bits of the state (index slot)
  bool located = false;       // tuple_addr and a hint are known
  bool fetched = false;
  bool locked = false;        // this attempt holds the tuple's lock
  bool shared = false;        // ... as one of its shared holders (txn.options.read_locks)
  bool scanned = false;       // declared by Txn::scan: a row of a predicate read
  RowChange change = RowChange::kNone;
};

// A row the attempt inserts (Txn::insert).
struct Insert {
  TableId table = 0;
  uint32_t node = 0;  // owner
  Key key = 0;
  std::byte* record = nullptr;  // record_bytes, zeroed when declared
};

class Txn {
 public:
  // Accesses of one attempt: TPC-C's Stock-Level (its district, 20 orders,
  // their lines and the lines' distinct stock rows: at most 1 + 20 + 300 +
  // 300) and Delivery (10 districts, up to 20 rows each) are the largest
  // declared sets of the workloads.
  static constexpr uint32_t kMaxAccesses = 640;
  static constexpr uint32_t kMaxInserts = 32;

  // Declaring: returns the access index used with get()/get_mut().
  // Declaring the same (table, key) twice returns the first index (a read
  // later declared as a write is upgraded if not fetched yet).
  int read(TableId table, Key key) { return declare(table, key, AccessMode::kRead); }
  int write(TableId table, Key key) { return declare(table, key, AccessMode::kWrite); }
  // Declares a scan: the rows with keys [first, first + count) of `table`,
  // read; returns the access index of key `first`, that of key first + k
  // being the returned index + k. A scan is a predicate read over a key
  // range: a protocol may lock the range as a whole rather than each row
  // (2PL at serializable: one S lock per partition, TableDef::parent_keys,
  // the rows then read without row locks); the others read each row as
  // read() would. A row of the range may be declared a write afterwards
  // (write() returns its access). Every key of the range must exist (an
  // absent one aborts the attempt, kNotFound): the history records the
  // rows read, not the predicate, so a scanned range must not gain or lose
  // rows (no workload inserts into one; doc/txn.md). A range overlapping
  // an access declared before, or more than kMaxAccesses accesses in all,
  // fails the attempt (declare_failed()).
  int scan(TableId table, Key first, uint32_t count);

  // Declares the insert of a new row; returns its index for
  // inserted<R>(k). Its record starts zeroed. On the coordinator's own node
  // it goes into the store directly, elsewhere through its owner's `rows`
  // RPC (row_changes.cpp).
  int insert(TableId table, Key key);
  uint32_t inserts() const { return n_ins_; }
  const Insert& insert_at(uint32_t k) const { return ins_[k]; }
  std::span<std::byte> inserted_record(int k);
  template <typename R>
  R& inserted(int k) {
    static_assert(std::is_trivially_copyable_v<R>);
    return *reinterpret_cast<R*>(inserted_record(k).data());
  }
  // Deletes the row of write access i when the attempt commits; relocate()
  // moves it, with its new value, to another tuple of its table (a row
  // leaving its tuple, and the tuple taken by another row, is what every
  // location held by a peer must survive: the tests' churn). Like inserts,
  // applied on the row's owner (directly, or through its `rows` RPC) once
  // every stage that can abort has passed (the row still locked), so no
  // transaction sees the row gone, or moved, before this one committed.
  // Anything but a write access fails the attempt as a workload error.
  void erase(int i) { change(i, RowChange::kErase); }
  void relocate(int i) { change(i, RowChange::kRelocate); }
  uint32_t row_changes() const { return n_chg_; }

  // The record of `key` in replicated table `table` on this node (nullptr:
  // absent or not a replicated table).
  const std::byte* replicated(TableId table, Key key) const;
  template <typename R>
  const R* replicated(TableId table, Key key) const {
    static_assert(std::is_trivially_copyable_v<R>);
    return reinterpret_cast<const R*>(replicated(table, key));
  }

  // Fetches every access declared since the last fetch. False: aborted.
  runtime::Task<bool> fetch();
  // Runs the protocol's commit pipeline. False: aborted.
  runtime::Task<bool> commit();
  // The workload gives up: releases what the attempt holds.
  runtime::Task<void> user_abort();

  std::span<const std::byte> record(int i) const;
  std::span<std::byte> mutable_record(int i);  // only for write accesses
  template <typename R>
  const R& get(int i) const {
    static_assert(std::is_trivially_copyable_v<R>);
    return *reinterpret_cast<const R*>(record(i).data());
  }
  template <typename R>
  R& get_mut(int i) {
    static_assert(std::is_trivially_copyable_v<R>);
    return *reinterpret_cast<R*>(mutable_record(i).data());
  }

  AbortReason abort_reason() const { return reason_; }
  // For protocols: records why the attempt is aborting.
  void fail(AbortReason r) { reason_ = r; }
  uint64_t id() const { return id_; }
  // The transaction's timestamp: globally unique, taken at its first attempt
  // and kept across retries (WAITDIE's priority; smaller is older).
  uint64_t timestamp() const { return ts_; }
  // For protocols that serialise in timestamp order
  // (ProtocolDef::timestamp_order): the attempt's commit timestamp, which
  // the history records (0 each new attempt).
  void set_commit_timestamp(uint64_t ts) { commit_ts_ = ts; }
  uint64_t commit_timestamp() const { return commit_ts_; }
  // For protocols with vector snapshots (ProtocolDef::snapshot_vectors):
  // the attempt's snapshot vector (not copied: it must stay as it is until
  // the attempt's outcome is recorded) and the slot its commit timestamp
  // counts in. Cleared each new attempt.
  void set_snapshot(std::span<const uint64_t> vector, uint32_t commit_slot) {
    snapshot_ = vector;
    commit_slot_ = commit_slot;
  }
  // For a protocol whose commit order is (epoch, timestamp) (CALVIN's):
  // the attempt's place in it, which the history records.
  void set_commit_order(uint32_t epoch, uint64_t ts) {
    commit_slot_ = epoch;
    commit_ts_ = ts;
  }
  std::span<const uint64_t> snapshot() const { return snapshot_; }
  // The vector slot of the commit timestamp, or the epoch of the commit
  // order (0: none).
  uint32_t commit_slot() const { return commit_slot_; }
  uint32_t size() const { return n_; }
  Access& access(uint32_t i) { return acc_[i]; }
  const Access& access(uint32_t i) const { return acc_[i]; }
  bool declare_failed() const { return overflow_; }
  // The protocol's own state of access i (ProtocolDef::access_state_bytes,
  // zeroed when the access is declared).
  template <typename S>
  S& state(uint32_t i) {
    static_assert(std::is_trivially_copyable_v<S> && alignof(S) <= 8);
    return *reinterpret_cast<S*>(state_ + static_cast<size_t>(i) * state_bytes_);
  }

 private:
  friend class Coordinator;
  int declare(TableId table, Key key, AccessMode mode);
  // Appends a new access (no duplicate check); false if full or not a table
  // a transaction may declare.
  bool append(TableId table, Key key, AccessMode mode);
  void change(int i, RowChange c);
  runtime::Task<bool> abort_declared();
  void reset(uint64_t id);

  Coordinator* co_ = nullptr;
  std::byte* state_ = nullptr;
  uint32_t state_bytes_ = 0;
  uint64_t id_ = 0;
  uint64_t ts_ = 0;
  uint64_t commit_ts_ = 0;
  std::span<const uint64_t> snapshot_;
  uint32_t commit_slot_ = 0;
  uint32_t n_ = 0;
  uint32_t fetched_upto_ = 0;  // accesses [0, fetched_upto_) are fetched
  uint32_t round_ = 0;
  AbortReason reason_ = AbortReason::kNone;
  bool overflow_ = false;  // more than kMaxAccesses declared: the attempt aborts
  uint32_t n_ins_ = 0;
  uint32_t n_chg_ = 0;  // accesses with a RowChange
  std::byte* ins_buf_ = nullptr;  // kMaxInserts records of ins_stride_ bytes (the coordinator's)
  uint32_t ins_stride_ = 0;
  Insert ins_[kMaxInserts];
  Access acc_[kMaxAccesses];
};

}  // namespace rdtx::txn
