// What a concurrency-control protocol is to the engine: a definition (name,
// tuple metadata, per-access state, isolation level, allowed primitives per
// stage, abort reasons, how to tell a held lock) that registers itself, and
// per worker a set of stage modules the pipeline driver (pipeline.hpp) runs.
//
//   ProtocolDef   static description; RDTX_REGISTER_PROTOCOL(def) in the
//                 protocol's folder adds it to the registry before main()
//   Protocol      one per worker: the stage modules chosen for the run's
//                 primitives, an optional per-attempt begin()
//   StageModule   one stage in one primitive (fetch one-sided, lock RPC...)
//
// Thread-safety: the registry is written before main() and read-only after;
// a Protocol and its modules belong to one worker's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "cluster/cluster.hpp"
#include "config/config.hpp"
#include "history/checker.hpp"
#include "runtime/task.hpp"
#include "txn/database.hpp"
#include "txn/types.hpp"

namespace rdtx::txn {

class Coordinator;
struct Options;
class Database;
class Txn;
class WorkerEngine;

inline constexpr int kStages = static_cast<int>(Stage::kCount_);

// One stage in one primitive. fetch runs over accesses [from, t.size());
// the other stages get from = 0 and work on the whole attempt. False: the
// attempt aborts (t's reason set); the driver then runs the release module.
class StageModule {
 public:
  virtual ~StageModule() = default;
  virtual runtime::Task<bool> run(Coordinator& c, Txn& t, uint32_t from) = 0;
};

// A stage module that calls a function of its protocol,
// fn(protocol, coordinator, txn, from): how cc/ protocols write their stages.
template <typename P>
class FunctionStage final : public StageModule {
 public:
  using Fn = runtime::Task<bool> (*)(P& p, Coordinator& c, Txn& t, uint32_t from);
  FunctionStage(P& p, Fn fn) : p_(p), fn_(fn) {}
  runtime::Task<bool> run(Coordinator& c, Txn& t, uint32_t from) override { return fn_(p_, c, t, from); }

 private:
  P& p_;
  Fn fn_;
};

// A protocol on one worker: the stage modules of the run's pipeline.
class Protocol {
 public:
  virtual ~Protocol() = default;
  // Per attempt, before the workload declares anything: timestamps,
  // snapshots. The transaction's id and timestamp are already set.
  virtual void begin(Coordinator& c, Txn& t) {
    (void)c;
    (void)t;
  }
  // The coordinator's loop, run once per coordinator coroutine until the
  // worker stops. The default is the engine's closed loop
  // (Coordinator::run_closed_loop: generate, attempt, retry on abort); a
  // protocol that is not a closed retry loop (CALVIN: epochs of sequenced
  // batches, executed by every counterpart) replaces it, and counts each
  // transaction with Coordinator::account().
  virtual runtime::Task<void> run_coordinator(Coordinator& c);
  // A metadata word every row this attempt inserts (Txn::insert) starts
  // with, written before the protocol's init_tuple runs on the tuple (which
  // may read it); called once per attempt that inserts, just before its
  // rows go in. False: none (the rows start from init_tuple alone). NAM-DB
  // gives the header of the inserter's commit version, so that an inserted
  // row is invisible to every snapshot that does not show that commit.
  virtual bool insert_word(Coordinator& c, Txn& t, store::Table::MetaWord* w) {
    (void)c;
    (void)t;
    (void)w;
    return false;
  }
  // Whether this coordinator puts the attempt's inserted rows in (the
  // pipeline's apply_inserts, before the commit stage). CALVIN runs one
  // transaction on every active member: only its home inserts.
  virtual bool inserts_here(const Coordinator& c, const Txn& t) const {
    (void)c;
    (void)t;
    return true;
  }
  // nullptr: the protocol has no such stage.
  StageModule* stage(Stage s) const { return stages_[static_cast<int>(s)]; }
  // Releases whatever a failed attempt holds (never nullptr once created).
  StageModule* release() const { return release_; }

  // Composition, at creation: a module per stage the protocol has.
  void set_stage(Stage s, std::unique_ptr<StageModule> m) {
    stages_[static_cast<int>(s)] = m.get();
    owned_.push_back(std::move(m));
  }
  void set_release(std::unique_ptr<StageModule> m) {
    release_ = m.get();
    owned_.push_back(std::move(m));
  }
  // The same with a function of the protocol (FunctionStage).
  template <typename P>
  void set_stage(Stage s, P& self, typename FunctionStage<P>::Fn fn) {
    set_stage(s, std::make_unique<FunctionStage<P>>(self, fn));
  }
  template <typename P>
  void set_release(P& self, typename FunctionStage<P>::Fn fn) {
    set_release(std::make_unique<FunctionStage<P>>(self, fn));
  }

 private:
  StageModule* stages_[kStages] = {};
  StageModule* release_ = nullptr;
  std::vector<std::unique_ptr<StageModule>> owned_;
};

// What a protocol's region size may depend on (ProtocolDef::region_bytes).
struct RegionQuery {
  uint32_t nodes = 0;
  uint32_t workers_per_node = 0;
  uint32_t coroutines = 0;
  uint32_t max_tuple_bytes = 0;  // the largest tuple (TupleLayout::tuple_bytes) of any table
  uint32_t max_record_bytes = 0;  // the largest record of any table
  uint64_t tuples_per_node = 0;   // tuples of every table a node holds (capacity_per_node, summed)
  uint32_t tables = 0;            // the workload's tables
  uint32_t max_declared = 0;      // the largest Workload::max_declared() of any type
  const Options* options = nullptr;
  int32_t self = -1;              // preflight: this process's node (process mode), -1: every node
};

struct AbortReasonName {
  const char* key;   // stable, for JSON and telemetry: "lock_conflict"
  const char* text;  // for people: "lock conflict"
};

// What recovery (recovery.hpp) needs of a protocol's tuples on a primary.
// Called on the recovery thread beside the running workers, on tuples only
// a removed node's transaction holds.
struct RecoveryHooks {
  // The attempt id (types.hpp) whose exclusive lock the tuple holds; 0 if
  // none (or one that cannot be attributed).
  uint64_t (*holder)(const std::byte* tuple, const store::TupleLayout& l);
  // Installs a committed write as the holder's commit stage would have:
  // `record`, the replication sequence `seq` (at db.replication_word_offset())
  // and, recording, the writer id `writer` (history word); the lock stays
  // held (release() follows once recovery has checked the copies).
  void (*install)(std::byte* tuple, const store::TupleLayout& l, const Database& db, std::span<const std::byte> record,
                  uint64_t seq, uint64_t writer);
  // Releases the holder's lock, the record unchanged (an aborted write).
  void (*release)(std::byte* tuple, const store::TupleLayout& l);
};

// The default "is this tuple locked" test: metadata word 0 is not 0.
bool lock_word0_held(const std::byte* meta);

// A set of primitives: the ones a stage accepts, in the order declared
// (the first is the default when the configuration names another that the
// stage does not accept).
class Primitives {
 public:
  constexpr Primitives() = default;
  constexpr Primitives(std::initializer_list<Primitive> ps) {
    for (Primitive p : ps) list_[size_++] = p;
  }
  constexpr bool empty() const { return size_ == 0; }
  constexpr size_t size() const { return size_; }
  constexpr Primitive operator[](size_t i) const { return list_[i]; }
  constexpr const Primitive* begin() const { return list_; }
  constexpr const Primitive* end() const { return list_ + size_; }
  constexpr bool contains(Primitive p) const {
    for (Primitive q : *this)
      if (q == p) return true;
    return false;
  }

 private:
  Primitive list_[5] = {};  // every Primitive at most once
  uint8_t size_ = 0;
};

// The primitives each stage accepts, by name; an empty set: the protocol
// has no such stage.
struct StagePrimitives {
  Primitives fetch = {}, lock = {}, validate = {}, log = {}, commit = {}, sequence = {};
  constexpr const Primitives& operator[](Stage s) const {
    switch (s) {
      case Stage::kFetch: return fetch;
      case Stage::kLock: return lock;
      case Stage::kValidate: return validate;
      case Stage::kLog: return log;
      case Stage::kCommit: return commit;
      case Stage::kSequence: return sequence;
      case Stage::kCount_: break;
    }
    return none_;
  }
  constexpr const Primitives& operator[](int s) const { return (*this)[static_cast<Stage>(s)]; }

 private:
  static constexpr Primitives none_{};
};

struct ProtocolSetting {
  const char* key;
  const char* value;  // as a configuration writes it
};

struct ProtocolVariant {
  const char* name;
  std::span<const ProtocolSetting> settings;
};

// A protocol's definition, written with designated initializers and
// constant-initialized (constinit): every field has a name, only what
// differs from the defaults is written, and a broken variant is the
// protocol's definition with a few fields changed (broken_variant()).
struct ProtocolDef {
  const char* name = nullptr;
  const char* summary = nullptr;
  uint32_t meta_bytes = 0;          // tuple metadata (a multiple of 8)
  uint32_t access_state_bytes = 0;  // per-access protocol state (Txn::state<T>)
  Isolation isolation = Isolation::kSerializable;  // what the history check certifies
  // At its own level (serializable), the protocol also promises real-time
  // order: a transaction that began after another's commit was known to
  // its coordinator comes after it (strict serializability). A run that
  // records real time then certifies its history at kStrictSerializable
  // (certified_level()); why each protocol does or does not: doc/txn.md.
  bool strict = false;
  // The protocol serialises in commit-timestamp order: each attempt sets
  // its timestamp (Txn::set_commit_timestamp) before it commits, the
  // history records it, and the checker verifies that every dependency goes
  // forward in it (ww and rw strictly; history/format.hpp
  // kFileTimestampOrder).
  bool timestamp_order = false;
  // The protocol's snapshots are vectors (NAM-DB's timestamp vector): each
  // attempt gives its vector and its commit's slot (Txn::set_snapshot) and
  // its commit timestamp in that slot (Txn::set_commit_timestamp; 0 for one
  // that wrote nothing); the history records them and the checker decides
  // snapshot isolation on them exactly (history/format.hpp
  // kFileSnapshotVectors).
  bool snapshot_vectors = false;
  // Primitives each stage accepts; empty: the protocol has no such stage.
  StagePrimitives allowed = {};
  // The protocol's own abort reasons, numbered from kFirstProtocol.
  std::span<const AbortReasonName> abort_reasons = {};
  // (Which stages read-modify-write words that NICs and the owner's CPU
  // share, the protocol tells its engine: WorkerEngine::set_atomic_stages.)
  // True if a tuple's metadata shows a lock held ("locks left" after a run).
  bool (*lock_held)(const std::byte* meta) = nullptr;
  // How recovery resolves the transactions of a removed node's
  // coordinators on their primaries (recovery.hpp); nullptr: not
  // implemented for this protocol, and a run that loses a coordinator ends.
  const struct RecoveryHooks* recovery = nullptr;
  // Fails with a message naming what was wrong (e.g. a resource).
  Result<std::unique_ptr<Protocol>> (*create)(WorkerEngine& e) = nullptr;
  // A deliberately broken variant: registered for the tests that prove
  // the checks catch it, never listed for users.
  bool broken = false;
  // Record-sized slots per tuple beyond the record (MVCC's versions), and
  // the metadata a newly inserted tuple starts with (nullptr: zeroes); see
  // TupleShape.
  uint32_t extra_record_slots = 0;
  void (*init_tuple)(std::byte* tuple, const store::TupleLayout& layout) = nullptr;
  // Registered memory the protocol owns on every worker, which the
  // counterpart workers of other nodes WRITE into (CALVIN's request and
  // forward buffers; replication logs, an oracle): bytes per worker for the
  // run (RegionQuery), 0 = none. The database allocates it on every node,
  // registers it in the worker's device context and exchanges its address
  // and rkey with the table descriptors (Database::region()). Fails with a
  // message naming the limit (nullptr: no region).
  Result<uint64_t> (*region_bytes)(const RegionQuery& q) = nullptr;
  // Adds the protocol's own configuration keys to `s`, all under a section
  // of its own ([calvin]); their values reach the protocol as
  // Options::protocol_settings (nullptr: no keys). A broken variant shares
  // its protocol's function (the keys are added once).
  void (*add_schema)(config::Schema& s) = nullptr;
  // The engine's log stage (replication.hpp) can run between the protocol's
  // validate and commit stages: when it runs, every written access is
  // locked and its copy is the current committed version with the
  // workload's new record in slot 0, and the commit stage writes the copy's
  // hidden words (the replication word among them) to the primary.
  bool replicable = true;
  // The protocol needs every transaction's read/write set before it runs
  // (Workload::declare: CALVIN); a workload with a type that does not
  // declare is refused before anything is loaded.
  bool needs_declared_sets = false;
  // The protocol can run Txn::relocate: a moved row starts its new tuple
  // from the protocol's init_tuple metadata, which must not lose what
  // concurrent transactions rely on (MVCC's older versions and SUNDIAL's
  // leases carry timestamps a fresh tuple would not have). A workload that
  // relocates rows (Workload::relocates) is refused otherwise.
  bool relocates_rows = true;
  // Named settings of the protocol's own keys (and txn.isolation) the
  // generated test suites run it with, each as "<protocol>/<variant>" (2PL's
  // deadlock policies at each level); none: the defaults only. Users select
  // them with the keys themselves.
  std::span<const ProtocolVariant> variants = {};
  // Weaker levels the protocol also runs at when txn.isolation asks (2pl:
  // repeatable read, read committed); `isolation` is its default and
  // strongest.
  std::span<const Isolation> weaker_levels = {};
  // The protocol takes shared read locks when txn.options.read_locks asks
  // (nowait, waitdie); others refuse the setting.
  bool shared_read_locks = false;
  // nullptr: the protocol runs with compute nodes apart from the memory
  // nodes (cluster.memory_nodes > 0: coordinators on nodes that hold no
  // data, the owners' handlers and services on nodes that run no
  // coordinator). Otherwise why it cannot, for the refusal's message (a
  // protocol whose coordinators must run where their data is: CALVIN).
  const char* split_refusal = nullptr;
  // One region per node instead of one per worker: the same memory, shared
  // by the node's workers and registered in each one's device context, so
  // that every worker of every node reaches it through its own QPs
  // (NAM-DB's timestamp vector and overflow region); region_bytes is then
  // the node's.
  bool region_per_node = false;
  // Record slots a one-sided fetch READs (read_tuples): 0, the whole tuple;
  // 1, metadata, header and the record alone (NAM-DB: the current version
  // in one READ, its older versions only when it is not visible).
  uint32_t fetch_record_slots = 0;
  // Erases (Txn::erase) are the protocol's: its commit stage installs
  // each as a new version that says the row is gone (NAM-DB's deleted bit),
  // so that older snapshots still read the row, and the protocol removes
  // the row from the store itself once no snapshot can need it. False: the
  // engine erases the row on its owner before the commit stage
  // (row_changes.cpp).
  bool versions_erases = false;
  // Checks, before anything is loaded, what the run will read or write
  // outside memory (files its keys name: CALVIN's calvin.inputs directory,
  // its calvin.replay recordings), for the nodes of this process (q.self).
  // Fails naming the key and the file (nullptr: nothing to check).
  Result<void> (*preflight)(const RegionQuery& q) = nullptr;
};

// `def` as a deliberately broken variant (tests only): its name, summary
// and create function replaced, marked broken; everything else is the
// protocol's.
constexpr ProtocolDef broken_variant(ProtocolDef def, const char* name, const char* summary,
                                     Result<std::unique_ptr<Protocol>> (*create)(WorkerEngine& e)) {
  def.name = name;
  def.summary = summary;
  def.create = create;
  def.broken = true;
  return def;
}

// Whether the protocol runs at level `i` (its own, or a weaker one it offers).
inline bool offers(const ProtocolDef& def, Isolation i) {
  if (i == def.isolation) return true;
  for (Isolation w : def.weaker_levels)
    if (w == i) return true;
  return false;
}

// The tuples a protocol's tables are made of.
inline TupleShape tuple_shape(const ProtocolDef& def) {
  return TupleShape{def.meta_bytes, def.extra_record_slots, def.init_tuple};
}

// The protocol region a run needs per worker (ProtocolDef::region_bytes
// asked with the run's figures; 0 when the protocol has none). Every place
// that sizes it (the runner, rdtx-bench's memory check) goes through here.
// `max_declared`: the workload's largest declared set (txn::max_declared).
Result<uint64_t> region_bytes(const ProtocolDef& def, const Options& o, const cluster::ClusterConfig& cc,
                              const std::vector<TableDef>& tables, uint32_t max_declared);

// ProtocolDef::preflight asked with the run's figures (as region_bytes);
// `self`: this process's node, -1 for every node (the embedded cluster).
Result<void> preflight(const ProtocolDef& def, const Options& o, const cluster::ClusterConfig& cc,
                       const std::vector<TableDef>& tables, uint32_t max_declared, int32_t self);

// Whether one RPC item of the largest tuple fits a datagram of
// `max_msg_size` bytes (the device's, rdma::DeviceCaps::max_msg_size; 0:
// unknown, not checked), when a stage runs over RPC: an item as ItemBatch
// packs a request (the call's item count, the item's header, an 8-byte
// prefix and the data) or a reply. RPC reads and locks answer the whole
// tuple, its metadata and every version slot (MVCC keeps several), the
// history and replication words included; a datagram that cannot hold it
// fails every transaction that touches the record. EINVAL naming the
// table, record, tuple and datagram sizes. rdtx-bench checks it before the
// EAL starts, the runner once the device is open.
Result<void> check_rpc_items_fit(const ProtocolDef& def, const Options& o, const std::vector<TableDef>& tables,
                                 uint32_t replicas, uint32_t max_msg_size);

// Engine reasons then the protocol's, indexed by AbortReason.
std::vector<AbortReasonName> abort_reason_names(const ProtocolDef& def);

// The history checker's options for a protocol claiming isolation `i`: the
// level its recorded histories are certified at.
history::CheckOptions check_options(Isolation i);

// The level a run of `def` at `level` (txn.isolation) is certified at:
// strict serializable when the protocol promises real-time order at that
// level and the history records real time (not in virtual time), else
// `level`.
Isolation certified_level(const ProtocolDef& def, Isolation level, bool real_time);

// Tuples of every table on every node (of this process) that the protocol
// sees locked (ProtocolDef::lock_held): the "locks left" check after a run.
uint64_t count_locked(Database& db, const ProtocolDef& def);

void register_protocol(const ProtocolDef* def);
// Every registered protocol, by name (broken variants included: filter on
// ProtocolDef::broken).
const std::vector<const ProtocolDef*>& protocols();
// nullptr if no protocol has this name.
const ProtocolDef* find_protocol(std::string_view name);

}  // namespace rdtx::txn

#define RDTX_REGISTER_PROTOCOL(var)                               \
  [[gnu::constructor]] static void rdtx_register_protocol_##var() { \
    ::rdtx::txn::register_protocol(&(var));                       \
  }
