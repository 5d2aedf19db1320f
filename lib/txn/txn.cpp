#include "txn/txn.hpp"


#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::txn {

static_assert(sizeof(ItemList::idx) / sizeof(uint32_t) == Txn::kMaxAccesses);

const char* to_string(Stage s) {
  switch (s) {
    case Stage::kFetch: return "fetch";
    case Stage::kLock: return "lock";
    case Stage::kValidate: return "validate";
    case Stage::kLog: return "log";
    case Stage::kCommit: return "commit";
    case Stage::kSequence: return "sequence";
    case Stage::kCount_: break;
  }
  return "?";
}

const char* to_string(Phase p) {
  switch (p) {
    case Phase::kSchedule: return "schedule";
    case Phase::kRelease: return "release";
    case Phase::kCount_: return "?";
    default: return to_string(static_cast<Stage>(p));
  }
}

const char* to_string(Primitive p) {
  switch (p) {
    case Primitive::kOneSided: return "onesided";
    case Primitive::kRpc: return "rpc";
    case Primitive::kHybrid: return "hybrid";
    case Primitive::kOff: return "off";
    case Primitive::kMailbox: return "mailbox";
  }
  return "?";
}

void Txn::reset(uint64_t id) {
  id_ = id;
  n_ = 0;
  fetched_upto_ = 0;
  round_ = 0;
  reason_ = AbortReason::kNone;
  commit_ts_ = 0;
  snapshot_ = {};
  commit_slot_ = 0;
  overflow_ = false;
  n_ins_ = 0;
  n_chg_ = 0;
}

int Txn::declare(TableId table, Key key, AccessMode mode) {
  for (uint32_t i = 0; i < n_; ++i) {
    Access& a = acc_[i];
    if (a.table == table && a.key == key) {
      if (mode == AccessMode::kWrite && a.mode == AccessMode::kRead) {
        if (a.fetched) {
          overflow_ = true;  // upgrading a fetched read is not supported: abort the attempt
        } else {
          a.mode = AccessMode::kWrite;
        }
      }
      return static_cast<int>(i);
    }
  }
  if (!append(table, key, mode)) return 0;
  return static_cast<int>(n_ - 1);
}

bool Txn::append(TableId table, Key key, AccessMode mode) {
  if (n_ == kMaxAccesses || !co_->db().has_table(table) || co_->db().def(table).replicated) {
    overflow_ = true;
    return false;
  }
  Access& a = acc_[n_];
  a = Access{};
  a.table = table;
  a.key = key;
  a.mode = mode;
  a.node = co_->db().owner(table, key);
  a.round = round_;
  a.copy = co_->slot(n_);
  if (state_bytes_ != 0) std::memset(state_ + static_cast<size_t>(n_) * state_bytes_, 0, state_bytes_);
  if (const store::LocationCache* cache = co_->engine().cache()) cache->prefetch(table, key);
  ++n_;
  return true;
}

int Txn::scan(TableId table, Key first, uint32_t count) {
  const uint32_t at = n_;
  for (uint32_t i = 0; i < n_; ++i)
    if (acc_[i].table == table && acc_[i].key - first < count) overflow_ = true;  // overlaps an earlier access
  if (count > kMaxAccesses - n_) overflow_ = true;
  if (overflow_) return 0;
  for (uint32_t k = 0; k < count; ++k) {
    if (!append(table, first + k, AccessMode::kRead)) return 0;
    acc_[n_ - 1].scanned = true;
  }
  return static_cast<int>(at);
}

int Txn::insert(TableId table, Key key) {
  const Database& db = co_->db();
  if (n_ins_ == kMaxInserts || !db.has_table(table) || db.def(table).replicated) {
    overflow_ = true;
    return 0;
  }
  Insert& in = ins_[n_ins_];
  in.table = table;
  in.key = key;
  in.node = db.owner(table, key);
  in.record = ins_buf_ + static_cast<size_t>(n_ins_) * ins_stride_;
  std::memset(in.record, 0, db.def(table).record_bytes);
  return static_cast<int>(n_ins_++);
}

void Txn::change(int i, RowChange c) {
  if (i < 0 || static_cast<uint32_t>(i) >= n_ || acc_[i].mode != AccessMode::kWrite) {
    overflow_ = true;  // a declaration error: the attempt aborts (kUser)
    return;
  }
  if (acc_[i].change == RowChange::kNone) ++n_chg_;
  acc_[i].change = c;
}

std::span<std::byte> Txn::inserted_record(int k) {
  const Insert& in = ins_[k];
  return {in.record, co_->db().def(in.table).record_bytes};
}

const std::byte* Txn::replicated(TableId table, Key key) const {
  Database& db = co_->db();
  if (!db.has_table(table) || !db.def(table).replicated) return nullptr;
  const store::Table* tab = db.store(co_->engine().node()).table(table);
  store::TupleRef ref;
  if (tab == nullptr || tab->lookup(key, &ref) != 0) return nullptr;
  return ref.tuple + tab->layout().record_offset();
}

namespace {
runtime::Task<bool> yield_value(bool v) { co_return v; }
}  // namespace

// A declaration error (too many accesses, or a commit with accesses never
// fetched) is a workload bug: the attempt releases what it holds and ends.
runtime::Task<bool> Txn::abort_declared() {
  co_await co_->run_release(*this);
  reason_ = AbortReason::kUser;
  co_return false;
}

// fetch() and commit() are not coroutines themselves: they hand over the
// pipeline driver's task (one frame fewer per stage on the hot path).
runtime::Task<bool> Txn::fetch() {
  if (overflow_) return abort_declared();
  uint32_t from = fetched_upto_;
  fetched_upto_ = n_;
  ++round_;
  if (from == n_) return yield_value(true);
  return co_->run_fetch(*this, from);
}

runtime::Task<bool> Txn::commit() {
  if (overflow_ || fetched_upto_ != n_) return abort_declared();
  return co_->run_commit(*this);
}

runtime::Task<void> Txn::user_abort() {
  co_await co_->run_release(*this);
  reason_ = AbortReason::kUser;
}

std::span<const std::byte> Txn::record(int i) const {
  const Access& a = acc_[i];
  const auto& l = co_->db().layout(a.table);
  return {a.copy + l.record_offset(), l.record_bytes};
}

std::span<std::byte> Txn::mutable_record(int i) {
  Access& a = acc_[i];
  const auto& l = co_->db().layout(a.table);
  return {a.copy + l.record_offset(), l.record_bytes};
}

}  // namespace rdtx::txn
