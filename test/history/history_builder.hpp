// HistoryBuilder: hand-built histories for the checker tests, written with
// the same TxnTrace calls the engine makes:
//
//   HistoryBuilder b;
//   b.txn(T(1)).read(kChecking, 7, kInit).write(kSavings, 7, kInit).commit();
//
// Transactions run on n0.w0; T(seq, coroutine) names them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "history/history.hpp"
#include "history/txn_trace.hpp"

namespace rdtx::history::test {

enum Table : uint32_t { kChecking = 0, kSavings = 1 };
enum Type : uint16_t { kWriteCheck = 0, kAmalgamate = 1 };
enum Reason : uint16_t { kConflict = 0, kUser = 1 };
inline constexpr Version kInit = kInitialVersion;

inline TxnId T(uint32_t seq, uint32_t coroutine = 0) { return make_txn_id(0, 0, coroutine, seq); }
inline Version V(TxnId writer, uint16_t seq = 0) { return {writer, seq}; }

class HistoryBuilder {
 public:
  HistoryBuilder() { h_.names = {{"checking", "savings"}, {"WriteCheck", "Amalgamate"}, {"conflict", "user"}}; }

  class Txn {
   public:
    Txn(History& h, TxnId id, uint16_t type) : h_(h), trace_(64) { trace_.begin(id, type); }
    Txn& read(uint32_t table, uint64_t key, Version v) {
      trace_.read(table, key, v);
      return *this;
    }
    Txn& write(uint32_t table, uint64_t key, Version replaced, uint16_t seq = 0) {
      trace_.write(table, key, replaced, seq);
      return *this;
    }
    Txn& rmw(uint32_t table, uint64_t key, Version seen, Version replaced, uint16_t seq = 0) {
      trace_.read_modify_write(table, key, seen, replaced, seq);
      return *this;
    }
    // Real time: begin_tsc and commit_tsc (what a recorder stamps).
    Txn& at(uint64_t begin, uint64_t end) {
      begin_tsc_ = begin;
      end_tsc_ = end;
      return *this;
    }
    Txn& timestamps(uint64_t start, uint64_t commit) {
      trace_.set_start_ts(start);
      commit_ts_ = commit;
      return *this;
    }
    // Timestamp order in (epoch, commit timestamp), as CALVIN's.
    Txn& order(uint32_t epoch, uint64_t commit) {
      trace_.set_commit_epoch(epoch);
      commit_ts_ = commit;
      return *this;
    }
    // A vector snapshot (kFileSnapshotVectors) and the commit's slot and
    // timestamp in it (commit 0: it wrote nothing).
    Txn& snapshot(std::vector<uint64_t> vector, uint32_t slot = 0, uint64_t commit = 0) {
      snapshot_ = std::move(vector);
      trace_.set_snapshot(snapshot_, slot);
      commit_ts_ = commit;
      return *this;
    }
    TxnId commit() { return finish(Outcome::kCommitted, 0); }
    TxnId abort(uint16_t reason = kConflict) { return finish(Outcome::kAborted, reason); }

   private:
    TxnId finish(Outcome o, uint16_t reason) {
      TxnRecord r = trace_.record();
      r.outcome = static_cast<uint8_t>(o);
      r.abort_reason = reason;
      r.commit_ts = o == Outcome::kCommitted ? commit_ts_ : 0;
      r.begin_tsc = begin_tsc_;
      r.commit_tsc = end_tsc_;
      h_.add(r, trace_.accesses(), o == Outcome::kCommitted ? std::span<const uint64_t>(snapshot_) : std::span<const uint64_t>{});
      return r.id;
    }
    History& h_;
    TxnTrace trace_;
    uint64_t commit_ts_ = 0;
    uint64_t begin_tsc_ = 0, end_tsc_ = 0;
    std::vector<uint64_t> snapshot_;
  };

  Txn txn(TxnId id, uint16_t type = kWriteCheck) { return Txn(h_, id, type); }
  History& history() { return h_; }
  // The history's one source (n0.w0, every T()) promises timestamp order
  // (what a recorder of a ProtocolDef::timestamp_order protocol writes).
  HistoryBuilder& timestamp_order() {
    Source s;
    s.timestamp_order = true;
    s.aborts_recorded = true;
    h_.sources.push_back(s);
    return *this;
  }
  // The history's one source records snapshot vectors (what a recorder of
  // a ProtocolDef::snapshot_vectors protocol writes).
  HistoryBuilder& snapshot_vectors() {
    Source s;
    s.snapshot_vectors = true;
    s.aborts_recorded = true;
    h_.sources.push_back(s);
    return *this;
  }
  // A source that records real time on `clock` (default: one host, ticks
  // of 1 ns), for the attempts of n<node>.w<worker>.
  HistoryBuilder& real_time(uint16_t node = 0, uint16_t worker = 0, Clock clock = {1, 1'000'000'000, 0, 0}) {
    Source s;
    s.node = node;
    s.worker = worker;
    s.aborts_recorded = true;
    s.clock = clock;
    h_.sources.push_back(s);
    return *this;
  }

 private:
  History h_;
};

}  // namespace rdtx::history::test
