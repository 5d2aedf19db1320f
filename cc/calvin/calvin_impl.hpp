// CALVIN's internal header (calvin.cpp describes the protocol): what its
// files share. The Calvin protocol class, its per-coroutine state (CoState,
// Plan, SetView), a CALVIN Request (Cr), the words and RPC messages of a
// batch and of forwarded values (BatchMsg, ForwardMsg), the settings, and
// call_in_chunks() (both the batch and the values go by it). The class's
// members are defined by component:
//   calvin.cpp     init(), the epoch loop (run_coordinator), fail/stalled,
//                  the schema, the definition and its registration
//   inputs.cpp     recording and replaying the input batches (inputs.hpp)
//   sequencer.cpp  a member's batch generated or replayed, broadcast,
//                  received (the batch RPC handler), awaited, and the
//                  epoch planned and published to the lock manager
//   executor.cpp   Figure 14: forwarding, waiting for values and grants,
//                  local reads, running, the fetch and commit modules,
//                  releasing the locks
// The node's lock manager shards and their service: lock_service.hpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cc/calvin/calvin.hpp"
#include "cc/calvin/inputs.hpp"
#include "cc/calvin/lock_service.hpp"
#include "env/log.hpp"
#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"
#include "txn/stages/copy_check.hpp"

namespace rdtx::cc::calvin::detail {

using namespace rdtx::txn;
using runtime::Task;

inline const env::LogType& calvin_log() {
  static const env::LogType type("rdtx.cc.calvin");
  return type;
}

// One CALVIN Request: what the sequencer decided about a transaction.
struct Cr {
  uint64_t ts;
  uint64_t id;
  TxnInput in;
};
static_assert(sizeof(Cr) % 8 == 0 && std::is_trivially_copyable_v<Cr>);

constexpr uint64_t kFinal = uint64_t{1} << 31;
constexpr uint64_t kCountMask = kFinal - 1;

// RPC message headers: the batch (a3) and the forwarded values (F14 a3).
// A batch larger than one message (a small MTU, a large epoch_size) goes in
// chunks of up to batch_chunk_ bytes of CRs, each saying where it goes
// (`offset` into the CRs) and carrying the received word and the checksum of
// the whole batch, as ForwardMsg below: the member takes the batch when the
// checksum matches, whatever order the chunks came in.
struct BatchMsg {
  uint32_t co;
  uint32_t src;
  uint32_t offset;
  uint32_t reserved;
  uint64_t received;
  uint64_t checksum;
};
// A transaction's values from one node go in one message or, larger than
// one (TPC-C's records), in chunks of up to forward_chunk_ bytes, each
// message saying where its chunk goes (`offset` into the values). Every
// chunk carries the ready word and the checksum of all the values: the
// member takes them when the checksum matches, whatever order the chunks
// came in.
struct ForwardMsg {
  uint32_t co;
  uint32_t k;
  uint32_t src;
  uint32_t offset;
  uint64_t ready;
  uint64_t checksum;
};
// The most chunks a forward may take (calvin.max_accesses x the largest
// record; init() refuses more).
constexpr uint32_t kMaxForwardChunks = 16;
// calvin.max_accesses = 0 for a workload that gives no bound
// (Workload::max_declared() 0 for every type).
constexpr uint32_t kDefaultMaxAccesses = 16;
static_assert(sizeof(BatchMsg) == 32 && sizeof(ForwardMsg) == 32);
// The most chunks a batch may take (init() refuses more).
constexpr uint32_t kMaxBatchChunks = 64;
constexpr uint32_t kMaxChunks = std::max(kMaxBatchChunks, kMaxForwardChunks);

inline std::atomic_ref<uint64_t> word_at(std::byte* p) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p));
}

struct Settings {
  uint32_t epoch_size, max_accesses;
  uint64_t stall_ns;
  std::string inputs, replay;
  uint64_t record_epochs;
  bool home_executes;  // calvin.active = writers_and_home
};
Settings settings_of(const Options& o);  // calvin.cpp

// One transaction of the epoch as this member sees it.
struct Plan {
  const Cr* cr = nullptr;
  uint32_t src = 0;        // the node whose batch holds it
  uint32_t index = 0;      // its position in that batch
  uint64_t readers = 0;    // nodes holding a declared record (bit per node)
  uint64_t waiting = 0;    // other readers whose forwarded values are not verified here yet
  uint64_t active = 0;     // the members that execute it (calvin.active)
  uint32_t reporter = 0;   // the active member that counts it and records its history
  uint32_t nlocal = 0;     // declared records on this node
  uint64_t shards = 0;     // the lock manager shards holding its locks here (bit per shard)
};

// A transaction's declared accesses, as stored for the epoch.
struct SetView {
  uint32_t n;
  const DeclaredSet::Entry* e;
};

// Per coroutine: preallocated for a whole epoch (nodes x epoch_size), each
// transaction's entries sized by calvin.max_accesses (not Txn::kMaxAccesses:
// an epoch of RCC's 2,000 inputs a coroutine would need gigabytes).
struct CoState {
  std::vector<Plan> plans;
  DeclaredSet declared;                       // declare()'s output, copied to entries
  std::vector<DeclaredSet::Entry> entries;    // [k][declared access]
  std::vector<uint32_t> declared_n;           // [k]: its entries
  std::vector<std::byte*> tuples;     // [k][declared access]: this node's tuple, or nullptr
  std::vector<uint32_t> requests;     // [k][shard]: its request in the shard (valid for the plan's shards)
  std::vector<uint32_t> counts;       // [shard]: requests of the epoch being planned
  std::vector<uint8_t> step;          // [k]: how far execute_epoch() got with it
  std::vector<uint64_t> ready_tsc;    // [k]: when its locks here were granted
  std::vector<stats::VerbCounts> forward_net;  // [k]: the reporter's forwarding verbs
  std::vector<rpc::Reply> forward_replies;    // [chunk][node]: forward()'s calls by RPC
  std::vector<rpc::Reply> batch_replies;      // [chunk][node]: broadcast()'s calls by RPC
  std::vector<uint64_t> gen_tsc;      // [i] of this member's own batch
  uint64_t epoch_tsc = 0;             // when this member began the epoch's sequencing
  uint64_t publish_tsc = 0;           // when it published the epoch's requests to the lock manager
  uint32_t current = 0;               // the k being executed (the fetch module's)
  uint32_t minted = 0;                // calvin.active = writers: ids this home has minted
  uint32_t max_accesses = 0;          // entries and tuples per k
  uint64_t epoch = 0;
  // Recording: this member's batches as sent (reserved once: never grows
  // past calvin.record_epochs). Replay: the batches to send, and where next.
  std::vector<std::byte> recorded;
  bool record_full = false;
  std::vector<std::byte> replay;
  size_t replay_at = kInputsHeader;
  // The epoch's sequencing (broadcast, waits for the batches): charged to
  // the first transaction of the epoch this member reports.
  stats::VerbCounts sequence_net;
  uint64_t sequence_tsc = 0;
  bool sequence_pending = false;
  SetView set(uint32_t k) const { return {declared_n[k], &entries[size_t{k} * max_accesses]}; }
  std::byte** tuples_of(uint32_t k) { return &tuples[size_t{k} * max_accesses]; }
  std::byte* const* tuples_of(uint32_t k) const { return &tuples[size_t{k} * max_accesses]; }
};

class Calvin final : public Protocol {
 public:
  Calvin(WorkerEngine& e, bool broken) : e_(e), o_(e.options()), broken_(broken) {}

  Result<void> init();
  Task<void> run_coordinator(Coordinator& c) override;
  // Every active member runs the transaction; its reporter inserts its rows.
  bool inserts_here(const Coordinator& c, const Txn&) const override {
    const CoState& cs = co_[c.index()];
    return cs.plans[cs.current].reporter == me_;
  }

  // Stage modules.
  static Task<bool> fetch(Calvin& p, Coordinator& c, Txn& t, uint32_t from);
  static Task<bool> commit(Calvin& p, Coordinator& c, Txn& t, uint32_t from);
  static Task<bool> release(Calvin& p, Coordinator& c, Txn& t, uint32_t from);

 private:
  Task<bool> broadcast(Coordinator& c, uint64_t epoch, uint32_t count, bool final);
  Task<bool> wait_batches(Coordinator& c, uint64_t epoch, bool* last);
  bool plan_epoch(Coordinator& c, uint64_t epoch, bool last);
  // The batch of the next epoch into the staging area: generated, or
  // replayed. Returns its count; *final when it is the member's last.
  bool next_batch(Coordinator& c, uint32_t* count, bool* final);
  uint64_t active_of(uint64_t writers, uint32_t home) const;
  uint32_t reporter_of(const TxnInput& in, const DeclaredSet& d) const;
  uint64_t mint_id(Coordinator& c, CoState& cs, const TxnInput& in, const DeclaredSet& d);
  void record_batch(CoState& cs, const std::byte* crs, uint32_t count, bool final);
  Result<void> load_replay(uint32_t co);
  void write_recording(Coordinator& c);
  Task<bool> execute(Coordinator& c, uint32_t k);
  Task<bool> forward(Coordinator& c, uint32_t k, uint32_t len, uint64_t targets);
  template <typename Msg>
  Task<bool> call_in_chunks(Coordinator& c, rpc::HandlerId handler, std::byte* st, Msg m, uint64_t len,
                            uint32_t chunk, uint64_t targets, rpc::Reply* replies, uint64_t since, const char* what);
  Task<bool> wait_grant(Coordinator& c, uint32_t k);
  bool granted_all(Coordinator& c, uint32_t k) const;
  uint64_t values_missing(Coordinator& c, uint32_t k, uint64_t missing);
  uint32_t read_local(Coordinator& c, uint32_t k);
  Task<bool> run(Coordinator& c, uint32_t k, Txn& t);
  void charge_sequence(Coordinator& c);
  Task<bool> execute_epoch(Coordinator& c, uint32_t n);
  void release_locks(Coordinator& c, uint32_t k);
  Task<bool> wait_values(Coordinator& c, uint32_t k);
  // The payload offset, in the owner's forwarded values, of declared access j.
  uint32_t forward_offset(SetView d, uint32_t j) const;
  uint32_t forward_len(SetView d, uint32_t node) const;
  // A wait that lasted too long: the run fails, naming what was awaited.
  bool stalled(Coordinator& c, uint64_t since, const char* what, uint32_t node);
  void fail(Coordinator& c, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
  void handle_batch(rpc::Request& r);
  void handle_forward(rpc::Request& r);
  uint32_t group(const Coordinator& c) const { return e_.ctx().index * o_.coroutines + c.index(); }
  std::byte* at(uint64_t off) const { return region_ + off; }

  WorkerEngine& e_;
  const Options& o_;
  const bool broken_;
  Settings s_{};
  Geometry g_{};
  uint32_t me_ = 0, nodes_ = 0, wpn_ = 1;
  std::byte* region_ = nullptr;
  uint32_t lkey_ = 0;
  std::shared_ptr<LockShards> lms_;
  uint32_t shards_ = 1;
  uint32_t forward_chunk_ = 0;  // values bytes an RPC forward message carries
  uint32_t batch_chunk_ = 0;    // CR bytes an RPC batch message carries
  rpc::HandlerId batch_handler_ = 0, forward_handler_ = 0;
  std::vector<CoState> co_;
  bool failed_ = false;  // the run failed here: every group stops
};

// Calls `handler` on every node of `targets` with the `len` bytes after the
// header `m` in the staging area `st`, in chunks of up to `chunk` bytes: a
// chunk's message is its header (m with its offset) written just before its
// bytes (the bytes it covers are put back after the calls copied them),
// every chunk to every target in one batch. A call that gets no answer is
// sent again until answered (or stalled() gives up). `replies`: [chunk][node].
template <typename Msg>
Task<bool> Calvin::call_in_chunks(Coordinator& c, rpc::HandlerId handler, std::byte* st, Msg m, uint64_t len,
                                  uint32_t chunk, uint64_t targets, rpc::Reply* replies, uint64_t since,
                                  const char* what) {
  static_assert(sizeof(Msg) == 32);
  const uint32_t chunks = len == 0 ? 1 : static_cast<uint32_t>((len + chunk - 1) / chunk);
  uint64_t pending[kMaxChunks];
  for (uint32_t i = 0; i < chunks; ++i) pending[i] = targets;
  for (;;) {
    rpc::Batch b(*e_.ctx().rpc);
    for (uint32_t i = 0; i < chunks; ++i) {
      if (pending[i] == 0) continue;
      const uint32_t off = i * chunk;
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(chunk, len - off));
      std::byte* h = st + off;
      std::byte saved[sizeof m];
      std::memcpy(saved, h, sizeof m);
      m.offset = off;
      std::memcpy(h, &m, sizeof m);
      for (uint64_t t = pending[i]; t != 0; t &= t - 1) {
        const uint32_t d = static_cast<uint32_t>(std::countr_zero(t));
        rpc::Reply& r = replies[size_t{i} * nodes_ + d];
        r = rpc::Reply{};
        b.call(d * wpn_ + e_.ctx().index, handler, std::span<const std::byte>(h, sizeof m + n), &r);
        c.count_verb(stats::Verb::kSend, sizeof m + n);
      }
      if (i != 0) std::memcpy(h, saved, sizeof m);
    }
    co_await b.send();
    c.count_round_trip();
    uint32_t late = 0;
    bool done = true;
    for (uint32_t i = 0; i < chunks; ++i)
      for (uint64_t t = pending[i]; t != 0; t &= t - 1) {
        const uint32_t d = static_cast<uint32_t>(std::countr_zero(t));
        if (replies[size_t{i} * nodes_ + d].status == rpc::CallStatus::kOk) {
          pending[i] &= ~(uint64_t{1} << d);
        } else {
          late = d;
          done = false;
        }
      }
    if (done) co_return true;
    if (stalled(c, since, what, late)) co_return false;
    // A call that could not even be queued (no credit or send buffer) ends
    // at once: let the loop run before sending again.
    co_await runtime::poll_wait();
  }
}

}  // namespace rdtx::cc::calvin::detail
