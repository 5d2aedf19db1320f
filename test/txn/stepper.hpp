// Stepper: protocol-rule tests stepped by hand in one thread, as SPDK's
// ut_multithread steps its threads. An embedded cluster on the shm driver
// with zero latency runs a protocol with its real stage modules; the test
// writes each transaction as a short script against the Txn API, hands it
// to one coordinator, and polls the workers (all, or one node's) until a
// script reaches a pause point or ends. Nothing runs unless the test
// polls, so every interleaving is chosen by the test and its outcome is
// deterministic.
//
// How it reaches into the engine without hooks in lib/txn:
// - the workload (ScriptedWorkload) runs, on coordinator (node, coroutine),
//   the script the test gave it, and parks that coordinator while it has
//   none (its transaction's timestamp is then already taken: idle_ts());
// - the protocol is the one under test wrapped in a Protocol whose stage
//   modules call the real ones and can pause a script after a given stage
//   (e.g. after the lock stage, holding its locks);
// - one attempt per transaction (txn.max_retries = 1) and awaited commits
//   and releases (passive_ack off), so "the script ended" means its writes
//   and unlocks have landed.
// Thread-safety: everything on the test's thread.
#pragma once

#include <coroutine>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "cluster/cluster.hpp"
#include "env/tsc.hpp"
#include "runtime/worker.hpp"
#include "store/loader.hpp"
#include "store/tuple.hpp"
#include "txn/coordinator.hpp"
#include "run/runner.hpp"

namespace rdtx::testing_stepper {

using txn::AbortReason;
using txn::Key;
using txn::Primitive;
using txn::Stage;

inline constexpr txn::TableId kTable = 0;
inline constexpr uint64_t kKeysPerNode = 16;  // node n owns keys [16n, 16n + 16)
inline constexpr uint64_t kLoadedPerNode = 12;  // keys [16n, 16n + 12) are loaded; the others are for Ins()
inline constexpr uint64_t kInitial = 100;     // every record's counter at load
inline constexpr uint64_t kInserted = 7;      // an inserted row's counter

// One step of a scripted transaction. A write adds one to the record's
// counter (computed from the fetched copy) when the script commits; an
// erase declares a write and erases the row (Txn::erase) at the commit; an
// insert puts in a row with counter kInserted.
struct Op {
  enum Kind : uint8_t { kRead, kWrite, kErase, kInsert, kFetch, kPause, kCommit } kind;
  Key key = 0;
  const char* label = "";
};
inline Op R(Key k) { return {Op::kRead, k}; }
inline Op W(Key k) { return {Op::kWrite, k}; }
inline Op Erase(Key k) { return {Op::kErase, k}; }
inline Op Ins(Key k) { return {Op::kInsert, k}; }
inline Op Fetch() { return {Op::kFetch}; }
inline Op Pause(const char* label) { return {Op::kPause, 0, label}; }
inline Op Commit() { return {Op::kCommit}; }

// Suspends a coroutine until open() schedules it again on its worker.
class Gate {
 public:
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    h_ = h;
    w_ = runtime::Worker::current();
  }
  void await_resume() const noexcept {}
  bool waiting() const { return static_cast<bool>(h_); }
  void open() {
    if (h_) w_->schedule(std::exchange(h_, {}));
  }

 private:
  std::coroutine_handle<> h_;
  runtime::Worker* w_ = nullptr;
};

// A transaction written by the test, and what became of it.
class Script {
 public:
  explicit Script(std::vector<Op> ops) : ops_(std::move(ops)) {}
  // Also pause (label "after <stage>") when stage `s` of the protocol has
  // run successfully.
  Script& pause_after(Stage s) {
    pause_after_ = static_cast<int>(s);
    return *this;
  }

  bool started() const { return started_; }
  bool done() const { return done_; }
  bool committed() const { return committed_; }
  AbortReason reason() const { return reason_; }
  // The label it is paused at, "" when running or not started.
  const std::string& paused_at() const { return paused_at_; }
  // The stage it is in (or last ran), kCount_ before the first.
  Stage stage() const { return stage_; }
  uint64_t id() const { return id_; }
  uint64_t timestamp() const { return ts_; }
  // The counter each read access saw (in declaration order), taken when
  // the script reaches its commit: which version a read was served.
  const std::vector<uint64_t>& reads_seen() const { return reads_seen_; }

 private:
  friend class ScriptedWorkload;
  friend class SteppedModule;
  friend class Stepper;
  runtime::Task<void> pause(std::string label) {
    paused_at_ = std::move(label);
    co_await gate_;
    paused_at_.clear();
  }
  std::vector<Op> ops_;
  int pause_after_ = -1;
  Gate gate_;
  std::string paused_at_;
  Stage stage_ = Stage::kCount_;
  bool started_ = false, done_ = false, committed_ = false;
  AbortReason reason_ = AbortReason::kNone;
  uint64_t id_ = 0, ts_ = 0;
  std::vector<uint64_t> reads_seen_;
};

// The workload every coordinator runs: the script the test assigned to it.
class ScriptedWorkload final : public txn::Workload {
 public:
  ScriptedWorkload(const txn::ProtocolDef& inner, uint32_t nodes, uint32_t coroutines)
      : inner_(inner), coroutines_(coroutines), slots_(static_cast<size_t>(nodes) * coroutines) {}

  const txn::ProtocolDef& inner() const { return inner_; }

  const char* name() const override { return "scripted"; }
  std::vector<txn::TableDef> tables(uint32_t nodes) const override {
    auto part = store::Partitioner::range(nodes, kKeysPerNode * nodes);
    return {{kTable, "cells", 8, static_cast<uint32_t>(kKeysPerNode * 2), part.value()}};
  }
  Result<void> load(store::Store& s, uint32_t partition) const override {
    const uint64_t base = partition * kKeysPerNode;
    return store::load(*s.table(kTable), kLoadedPerNode, [base](uint64_t row, std::span<std::byte> rec) {
      std::memcpy(rec.data(), &kInitial, 8);
      return base + row;
    });
  }
  std::vector<std::string> type_names() const override { return {"scripted"}; }
  void generate(txn::Rng&, uint32_t, txn::TxnInput&) const override {}
  runtime::Task<bool> execute(txn::Txn& t, const txn::TxnInput&, int64_t*) const override;
  Result<int64_t> check_node(txn::Database&, uint32_t) const override { return int64_t{0}; }
  Result<void> check_total(int64_t, uint32_t, int64_t) const override { return {}; }

  // The script coordinator (node, coroutine) runs, or nullptr.
  Script* running(uint32_t node, uint32_t co) const { return slot(node, co).script; }

 private:
  friend class Stepper;
  // One per coordinator (worker 0 of each node: the stepper runs one worker
  // per node). Mutable: the engine calls execute() as const, and the test
  // and every worker share one thread.
  struct Slot {
    Script* script = nullptr;
    Gate idle;  // parked here while it has no script
    uint64_t idle_ts = 0;
    bool stop = false;
  };
  Slot& slot(uint32_t node, uint32_t co) const { return slots_[static_cast<size_t>(node) * coroutines_ + co]; }
  const txn::ProtocolDef& inner_;
  uint32_t coroutines_;
  mutable std::vector<Slot> slots_;
};

inline runtime::Task<bool> ScriptedWorkload::execute(txn::Txn& t, const txn::TxnInput&, int64_t*) const {
  const uint32_t node = static_cast<uint32_t>(t.id() >> 48), co = (t.id() >> 32) & 0x3f;
  Slot& s = slot(node, co);
  if (s.script == nullptr && !s.stop) {
    s.idle_ts = t.timestamp();
    co_await s.idle;
  }
  if (s.stop) {
    co_await t.user_abort();
    co_return false;
  }
  Script& sc = *s.script;
  sc.started_ = true;
  sc.id_ = t.id();
  sc.ts_ = t.timestamp();
  bool ok = true;
  std::vector<int> writes, reads, erases;
  for (const Op& op : sc.ops_) {
    if (!ok) break;
    switch (op.kind) {
      case Op::kRead:
        reads.push_back(t.read(kTable, op.key));
        break;
      case Op::kWrite:
        writes.push_back(t.write(kTable, op.key));
        break;
      case Op::kErase:
        erases.push_back(t.write(kTable, op.key));
        break;
      case Op::kInsert:
        t.inserted<uint64_t>(t.insert(kTable, op.key)) = kInserted;
        break;
      case Op::kFetch:
        ok = co_await t.fetch();
        break;
      case Op::kPause:
        co_await sc.pause(op.label);
        break;
      case Op::kCommit:
        for (int i : reads) {
          uint64_t v;
          std::memcpy(&v, t.record(i).data(), 8);
          sc.reads_seen_.push_back(v);
        }
        for (int i : writes) {
          uint64_t v;
          std::memcpy(&v, t.record(i).data(), 8);
          ++v;
          std::memcpy(t.mutable_record(i).data(), &v, 8);
        }
        for (int i : erases) t.erase(i);
        ok = co_await t.commit();
        break;
    }
  }
  sc.done_ = true;
  sc.committed_ = ok;
  sc.reason_ = t.abort_reason();
  s.script = nullptr;
  co_return ok;
}

// A stage module of the protocol under test, run as is, then paused if the
// running script asked to stop after this stage.
class SteppedModule final : public txn::StageModule {
 public:
  SteppedModule(txn::StageModule* inner, Stage stage) : inner_(inner), stage_(stage) {}
  runtime::Task<bool> run(txn::Coordinator& c, txn::Txn& t, uint32_t from) override {
    auto& wl = static_cast<const ScriptedWorkload&>(c.engine().workload());
    Script* s = wl.running(c.engine().node(), c.index());
    if (s != nullptr && stage_ != Stage::kCount_) s->stage_ = stage_;
    const bool ok = co_await inner_->run(c, t, from);
    if (s != nullptr && ok && static_cast<int>(stage_) == s->pause_after_)
      co_await s->pause(std::string("after ") + txn::to_string(stage_));
    co_return ok;
  }

 private:
  txn::StageModule* inner_;
  Stage stage_;  // kCount_: the release module
};

class SteppedProtocol final : public txn::Protocol {
 public:
  explicit SteppedProtocol(std::unique_ptr<txn::Protocol> inner) : inner_(std::move(inner)) {
    for (int s = 0; s < txn::kStages; ++s)
      if (txn::StageModule* m = inner_->stage(static_cast<Stage>(s)))
        set_stage(static_cast<Stage>(s), std::make_unique<SteppedModule>(m, static_cast<Stage>(s)));
    set_release(std::make_unique<SteppedModule>(inner_->release(), Stage::kCount_));
  }
  void begin(txn::Coordinator& c, txn::Txn& t) override { inner_->begin(c, t); }
  bool insert_word(txn::Coordinator& c, txn::Txn& t, store::Table::MetaWord* w) override {
    return inner_->insert_word(c, t, w);
  }

  static Result<std::unique_ptr<txn::Protocol>> create(txn::WorkerEngine& e) {
    auto& wl = static_cast<const ScriptedWorkload&>(e.workload());
    auto inner = wl.inner().create(e);
    if (!inner.ok()) return inner.error();
    return std::unique_ptr<txn::Protocol>(std::make_unique<SteppedProtocol>(std::move(*inner)));
  }

 private:
  std::unique_ptr<txn::Protocol> inner_;
};

struct StepConfig {
  std::string protocol = "occ";
  Primitive primitive = Primitive::kOneSided;  // every stage the protocol has
  Primitive commit = Primitive::kOff;          // kOff: as `primitive`
  uint32_t nodes = 2;
  uint32_t coroutines = 3;  // per node
  // Long enough that no call times out, nor WAITDIE's waiting list (a
  // quarter of it) gives up, while a test steps; tests of timeouts lower it.
  uint64_t rpc_timeout_ns = 2'000'000'000;
  txn::ReadLocks read_locks = txn::ReadLocks::kExclusive;  // txn.options.read_locks
  std::vector<std::pair<std::string, std::string>> settings = {};  // the protocol's own keys
};

inline constexpr int kMaxPasses = 10000;

class Stepper {
 public:
  static Result<std::unique_ptr<Stepper>> create(const StepConfig& cfg) {
    const txn::ProtocolDef* inner = txn::find_protocol(cfg.protocol);
    if (inner == nullptr) return make_error(EINVAL, "unknown protocol '%s'", cfg.protocol.c_str());
    std::unique_ptr<Stepper> s(new Stepper(*inner, cfg));
    RDTX_TRY(s->build());
    return s;
  }
  ~Stepper() { shut_down(); }

  // A script owned by the stepper (stable address).
  Script& script(std::vector<Op> ops) { return *scripts_.emplace_back(std::make_unique<Script>(std::move(ops))); }
  // Hands `s` to coordinator `co` of `node`, which must be idle.
  bool start(uint32_t node, uint32_t co, Script& s) {
    auto& slot = wl_->slot(node, co);
    if (slot.script != nullptr || !slot.idle.waiting()) return false;
    slot.script = &s;
    slot.idle.open();
    return true;
  }
  void resume(Script& s) { s.gate_.open(); }
  // The timestamp the idle coordinator's next transaction has (smaller: older).
  uint64_t idle_ts(uint32_t node, uint32_t co) const { return wl_->slot(node, co).idle_ts; }

  // One pass of every worker, or of node `node`'s only.
  void poll() { cluster_->poll_all(); }
  void poll_node(uint32_t node) { cluster_->worker(node, 0).worker->poll_once(); }
  void poll(int passes) {
    for (int i = 0; i < passes; ++i) poll();
  }
  // Polls (every node, or only `node`) until pred() holds; false after
  // `passes` passes.
  template <typename Pred>
  bool run_until(Pred pred, int passes = kMaxPasses, int node = -1) {
    for (int i = 0; i < passes; ++i) {
      if (pred()) return true;
      if (node < 0)
        poll();
      else
        poll_node(static_cast<uint32_t>(node));
    }
    return pred();
  }
  bool run_until_paused(Script& s, const std::string& label) {
    return run_until([&] { return s.paused_at() == label; });
  }
  bool run_until_done(Script& s) {
    return run_until([&] { return s.done(); });
  }

  // The abort reason's key ("validation", "wait_die"...), from the
  // protocol's names.
  std::string reason_key(const Script& s) const { return names_.at(static_cast<size_t>(s.reason())).key; }

  // The node owning `key` (its worker 0's endpoint id: one worker per node).
  uint32_t owner(Key key) const { return db_->owner(kTable, key); }
  // The owner's tuple of `key`, read on the owner.
  std::byte* tuple(Key key) const {
    const uint32_t node = db_->owner(kTable, key);
    store::TupleRef ref;
    if (db_->store(node).table(kTable)->lookup(key, &ref) != 0) return nullptr;
    return ref.tuple;
  }
  uint64_t lock_word(Key key) const {
    return store::load_word(reinterpret_cast<const uint64_t*>(tuple(key)), std::memory_order_acquire);
  }
  void set_lock_word(Key key, uint64_t v) {
    store::store_word(reinterpret_cast<uint64_t*>(tuple(key)), v, std::memory_order_release);
  }
  uint64_t counter(Key key) const {
    uint64_t v;
    std::memcpy(&v, tuple(key) + db_->layout(kTable).record_offset(), 8);
    return v;
  }

  txn::WorkerEngine& engine(uint32_t node) { return *engines_[node]; }
  cluster::Cluster& cluster() { return *cluster_; }
  const txn::ProtocolDef& def() const { return def_; }

 private:
  Stepper(const txn::ProtocolDef& inner, const StepConfig& cfg) : cfg_(cfg), def_(inner) {
    def_.name = "stepped";
    def_.create = &SteppedProtocol::create;
    names_ = txn::abort_reason_names(def_);
  }

  Result<void> build() {
    wl_ = std::make_unique<ScriptedWorkload>(*txn::find_protocol(cfg_.protocol), cfg_.nodes, cfg_.coroutines);
    run::RunConfig rc;
    rc.cluster.nodes = cfg_.nodes;
    rc.cluster.workers_per_node = 1;
    rc.cluster.devargs = "shm";
    rc.cluster.rpc.recv_buffers = 64;
    rc.cluster.rpc.send_buffers = 64;
    rc.cluster.rpc.max_calls = 256;
    rc.cluster.rpc.timeout_ns = cfg_.rpc_timeout_ns;
    rc.protocol = &def_;
    rc.workload = wl_.get();
    txn::Options& o = rc.options;
    o.protocol = def_.name;
    o.coroutines = cfg_.coroutines;
    o.read_locks = cfg_.read_locks;
    o.isolation = def_.isolation;
    o.protocol_settings = cfg_.settings;
    for (int s = 0; s < txn::kStages; ++s)
      if (!def_.allowed[s].empty()) o.pipeline[s] = cfg_.primitive;
    if (cfg_.commit != Primitive::kOff) o.pipeline[static_cast<int>(Stage::kCommit)] = cfg_.commit;
    o.passive_ack = false;
    o.max_retries = 1;
    o.backoff_ns = 0;
    opts_ = o;
    auto c = cluster::Cluster::create_embedded(run::sized_cluster(rc));
    if (!c.ok()) return c.error();
    cluster_ = std::move(*c);
    auto region = txn::region_bytes(def_, opts_, run::sized_cluster(rc), wl_->tables(cfg_.nodes), txn::max_declared(*wl_));
    if (!region.ok()) return region.error();
    auto db = txn::Database::create(*cluster_, wl_->tables(cfg_.nodes), txn::tuple_shape(def_), false, *region,
                                    def_.region_per_node);
    if (!db.ok()) return db.error();
    db_ = std::move(*db);
    for (uint32_t n = 0; n < cfg_.nodes; ++n) RDTX_TRY(wl_->load(db_->store(n), n));
    const uint64_t epoch = env::tsc();
    for (uint32_t n = 0; n < cfg_.nodes; ++n) {
      engines_.push_back(std::make_unique<txn::WorkerEngine>(cluster_->worker(n, 0), *db_, opts_, def_, *wl_));
      engines_.back()->set_epoch(epoch);
    }
    for (uint32_t n = 0; n < cfg_.nodes; ++n) RDTX_TRY(engines_[n]->start(n + 1));
    // Every coordinator takes its first transaction's timestamp and parks.
    const bool idle = run_until([&] {
      for (auto& s : wl_->slots_)
        if (!s.idle.waiting()) return false;
      return true;
    });
    if (!idle) return make_error(ETIMEDOUT, "stepper: the coordinators did not all reach their first transaction");
    return {};
  }

  // Ends every coordinator's loop (scripts still paused run on), then tears
  // down in the runner's order: coroutines, engines, database, cluster.
  void shut_down() {
    if (!cluster_) return;
    for (uint32_t n = 0; n < cfg_.nodes; ++n) cluster_->worker(n, 0).worker->request_stop();
    auto live = [&] {
      size_t k = 0;
      for (uint32_t n = 0; n < cfg_.nodes; ++n) k += cluster_->worker(n, 0).worker->live_tasks();
      return k;
    };
    for (int i = 0; i < kMaxPasses && live() > 0; ++i) {
      for (auto& s : wl_->slots_) {
        s.stop = true;
        s.idle.open();
      }
      for (auto& sc : scripts_) sc->gate_.open();
      poll();
    }
    for (uint32_t n = 0; n < cfg_.nodes; ++n) cluster_->worker(n, 0).worker.reset();
    engines_.clear();
    db_.reset();
    cluster_.reset();
  }

  StepConfig cfg_;
  txn::ProtocolDef def_;
  std::vector<txn::AbortReasonName> names_;
  txn::Options opts_;
  std::unique_ptr<ScriptedWorkload> wl_;
  std::unique_ptr<cluster::Cluster> cluster_;
  std::unique_ptr<txn::Database> db_;
  std::vector<std::unique_ptr<txn::WorkerEngine>> engines_;
  std::deque<std::unique_ptr<Script>> scripts_;
};

}  // namespace rdtx::testing_stepper
