// CALVIN (RCC section 4.6, Figures 11-14): deterministic transactions in
// epochs. Not a closed retry loop: the protocol replaces the coordinator's
// loop (Protocol::run_coordinator).
//
// Groups. Coordinator coroutine c of worker w on every node form a group
// (RCC's counterparts); they talk through the QPs and RPC endpoints of
// worker w, which are paired with worker w of every node. Every member is
// the sequencer of its own transactions and a scheduler of the group's.
//
// Every wait for another node (a batch, values, an answer) or for the lock
// manager polls with runtime::poll_wait(): not counted as work, so a loop
// whose coroutines all wait can give its CPU to the peer they wait for. A
// wait that ends, and what follows it in the same pass (planning an epoch,
// executing), is counted with runtime::note_work().
//
// Per epoch e (1, 2, ...), each member:
//   sequence  generates calvin.epoch_size inputs (timestamp and id taken at
//             home) and broadcasts the batch to every counterpart's CRB
//             (b1/b2 one-sided: a WRITE of the CRs and the checksum at CR1's
//             offset, then an 8-byte WRITE of the CH's received word; a1-a3
//             RPC: one call per counterpart whose handler copies the batch
//             into the CRB); polls its CRBs until every node's batch of e is
//             there (b3), and orders them all by timestamp (a4/b4): the same
//             order on every member.
//   schedule  publishes, per transaction of the epoch with records on this
//             node, the records to the node's lock manager shards
//             (lock_manager.hpp; one request per shard holding some of
//             them), which grant in (epoch, timestamp) order.
//   execute   (Figure 14; its step names below carry "F14") per transaction,
//             visited in that order: if it has local records, once they are
//             granted reads them (F14 a1/b1), forwards them with their writer
//             ids to the active members, the nodes it writes on plus its
//             home (calvin.active = writers: the nodes it writes on alone,
//             as RCC's code; the home if it writes nothing)
//             (F14 a2/b2: RPC, a call per active counterpart whose
//             handler buffers the values in the CFB slot, F14 a3; one-sided,
//             a WRITE of the values into the counterpart's CFB slot, then a
//             WRITE of the slot's ready word, F14 b3); a member that is not
//             active then releases. An active member waits for the values it
//             needs (F14 b3: polls the slots' ready words, yielding; F14 a3
//             for RPC: the same slots), runs the workload's execute() on a
//             Txn served from them (fetch module), installs its local writes
//             in place (F14 a4/b4, commit module) and releases. The
//             reporter, the home if it is active, else the first active
//             member, counts the outcome and records the history.
//   Each transaction goes as soon as it can (execute_epoch()), not one
//   after the other. A member enters e+1 only once it has executed all of
//   e: lockstep.
//
// Stop: a member whose worker is stopping broadcasts an empty batch marked
// final; every member executes that epoch (the others' batches included)
// and stops, so no member waits for a batch that will never come.
//
// Buffers (ProtocolDef::region_bytes, calvin.hpp's Geometry): per coroutine,
// per source node, two CRBs (epoch parity; see wait_batches() for why two
// are enough), each CH {received = epoch << 32 | final << 31 | count,
// checksum} + CR[epoch_size], CR = {timestamp, txn id, TxnInput}; one CFB
// with a slot per (transaction index of the epoch, source node): {ready =
// epoch << 32 | length, checksum} + per local access (writer id, record).
// Epoch tags make stale or duplicated writes harmless: nothing is reset.
// A receiver trusts a batch or a slot only when its checksum (over the tag
// word and the bytes) matches: WRITEs land in no particular word order.
//
// Files: this one holds the schema and settings, init(), the epoch loop
// (run_coordinator()) and the definition; calvin_impl.hpp the Calvin class
// and what the others share; inputs.hpp/.cpp the input log (calvin.inputs,
// calvin.replay); sequencer.cpp the sequence step and the epoch's plan
// (schedule); lock_service.hpp the node's lock manager shards and the
// service that runs them, lock_manager.hpp/.cpp the lock manager;
// executor.cpp the execute step (Figure 14).
#include "cc/calvin/calvin.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cc/calvin/calvin_impl.hpp"
#include "env/log.hpp"
#include "env/tsc.hpp"
#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::calvin {

namespace detail {

namespace {

void add_calvin_schema(config::Schema& s) {
  s.add_int("calvin.epoch_size", 10, 1, 256, "CALVIN: transactions each coordinator sequences per epoch");
  s.add_int("calvin.max_accesses", 0, 0, Txn::kMaxAccesses,
            "CALVIN: the most accesses a transaction may declare (sizes the forward buffer slots); 0: the "
            "workload's largest declared set (16 if it gives none)");
  s.add_int("calvin.stall_ms", 5000, 10, 600'000,
            "CALVIN: a member waiting longer than this for a batch, a grant or values fails the run");
  s.add_enum("calvin.active", "writers_and_home", {"writers_and_home", "writers"},
             "CALVIN: the members that execute a transaction: the nodes it writes on and its home (writers_and_home: "
             "the home counts it), or the nodes it writes on alone, as RCC's code (writers: the first of them counts "
             "it unless the home writes; a transaction that writes nothing runs at home)");
  s.add_string("calvin.inputs", "",
               "CALVIN: record every coordinator's input batches, per epoch, to files FILE.n<node>w<worker>c<coroutine> "
               "(\"\": no recording)");
  s.add_int("calvin.record_epochs", 4096, 1, 1 << 24,
            "CALVIN: epochs recorded per coordinator at most (memory: epochs x epoch_size x 136 bytes)");
  s.add_string("calvin.replay", "",
               "CALVIN: run exactly the epochs recorded in FILE.n<node>w<worker>c<coroutine> (calvin.inputs of an "
               "earlier run, same cluster and coroutines) instead of generating inputs (\"\": generate)");
}

}  // namespace

Settings settings_of(const Options& o) {
  return {static_cast<uint32_t>(o.setting_int("calvin.epoch_size", 10)),
          static_cast<uint32_t>(o.setting_int("calvin.max_accesses", 0)),
          static_cast<uint64_t>(o.setting_int("calvin.stall_ms", 5000)) * 1'000'000,
          o.setting_string("calvin.inputs", ""), o.setting_string("calvin.replay", ""),
          static_cast<uint64_t>(o.setting_int("calvin.record_epochs", 4096)),
          o.setting_string("calvin.active", "writers_and_home") == "writers_and_home"};
}

namespace {

Result<uint64_t> region_bytes_of(const RegionQuery& q) {
  const Settings s = settings_of(*q.options);
  // Asked before anything is loaded (rdtx-bench): a bound below the
  // workload's largest set is refused then, not after loading the tables.
  if (s.max_accesses != 0 && s.max_accesses < q.max_declared)
    return make_error(EINVAL,
                      "calvin.max_accesses = %u is below the largest read/write set the workload declares (%u "
                      "accesses): set it to %u or more, or 0 (the workload's largest)",
                      s.max_accesses, q.max_declared, q.max_declared);
  const uint32_t max_accesses = s.max_accesses != 0   ? s.max_accesses
                                : q.max_declared != 0 ? q.max_declared
                                                      : kDefaultMaxAccesses;
  return Geometry::make(q.nodes, q.coroutines, s.epoch_size, max_accesses, q.max_record_bytes).region_bytes();
}

}  // namespace

void Calvin::fail(Coordinator& c, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  RDTX_LOG(calvin_log(), Error, "node %u worker %u coroutine %u: %s", me_, e_.ctx().index, c.index(), buf);
  // Counted as a commit error: the run's checks fail.
  ++e_.stats().commit_errors;
  failed_ = true;
}

bool Calvin::stalled(Coordinator& c, uint64_t since, const char* what, uint32_t node) {
  if (env::tsc() - since < env::ns_to_tsc(s_.stall_ns)) return false;
  fail(c, "waited more than %llu ms for %s from node %u (calvin.stall_ms): that node stopped answering",
       static_cast<unsigned long long>(s_.stall_ns / 1'000'000), what, node);
  return true;
}

Result<void> Calvin::init() {
  s_ = settings_of(o_);
  me_ = e_.node();
  nodes_ = e_.db().nodes();
  wpn_ = e_.workers_per_node();
  const Workload& wl = e_.workload();
  const std::vector<std::string> types = wl.type_names();
  for (uint16_t t = 0; t < types.size(); ++t)
    if (!wl.declares(t))
      return make_error(EINVAL,
                        "workload '%s' does not declare the read/write set of transaction type '%s' up front "
                        "(Workload::declare), which CALVIN needs",
                        wl.name(), types[t].c_str());
  // The bound on a declared set: calvin.max_accesses, or (0) the
  // workload's own (Workload::max_declared; 16 if it gives none). A bound
  // below the workload's is refused here, not at the run's first
  // transaction that exceeds it.
  const uint32_t declared = txn::max_declared(wl);
  uint16_t largest = 0;
  for (uint16_t t = 0; t < types.size(); ++t)
    if (wl.max_declared(t) == declared) largest = t;
  if (declared > Txn::kMaxAccesses)
    return make_error(EINVAL, "workload '%s' declares up to %u accesses (type '%s'), more than a transaction holds (%u)",
                      wl.name(), declared, types[largest].c_str(), Txn::kMaxAccesses);
  if (s_.max_accesses == 0) {
    s_.max_accesses = declared != 0 ? declared : kDefaultMaxAccesses;
  } else if (s_.max_accesses < declared) {
    return make_error(EINVAL,
                      "calvin.max_accesses = %u is below the largest read/write set workload '%s' declares: %u "
                      "(type '%s'); leave it at 0 (the workload's) or set at least %u",
                      s_.max_accesses, wl.name(), declared, types[largest].c_str(), declared);
  }
  uint32_t max_record = 0;
  for (TableId t = 0; t < e_.db().tables(); ++t)
    if (e_.db().has_table(t)) max_record = std::max(max_record, e_.db().layout(t).record_bytes);
  g_ = Geometry::make(nodes_, o_.coroutines, s_.epoch_size, s_.max_accesses, max_record);
  if (e_.db().region_bytes() < g_.region_bytes())
    return make_error(EINVAL, "the protocol region has %llu bytes per worker, CALVIN needs %llu",
                      static_cast<unsigned long long>(e_.db().region_bytes()),
                      static_cast<unsigned long long>(g_.region_bytes()));
  region_ = e_.db().local_region(me_, e_.ctx().index);
  lkey_ = e_.db().local_region_lkey(me_, e_.ctx().index);
  const uint32_t max_payload = e_.ctx().rpc->max_payload();
  batch_chunk_ = (max_payload - static_cast<uint32_t>(sizeof(BatchMsg))) & ~7u;
  if (o_.stage(Stage::kSequence) == Primitive::kRpc && (g_.crb_bytes - 16 + batch_chunk_ - 1) / batch_chunk_ > kMaxBatchChunks)
    return make_error(EINVAL,
                      "calvin.epoch_size = %u: a batch of %llu bytes takes more than %u RPC messages of %u bytes",
                      s_.epoch_size, static_cast<unsigned long long>(g_.crb_bytes - 16), kMaxBatchChunks, max_payload);
  forward_chunk_ = (max_payload - static_cast<uint32_t>(sizeof(ForwardMsg))) & ~7u;
  if (o_.stage(Stage::kFetch) == Primitive::kRpc &&
      (g_.slot_payload + forward_chunk_ - 1) / forward_chunk_ > kMaxForwardChunks)
    return make_error(EINVAL,
                      "calvin.max_accesses = %u: forwarded values of up to %llu bytes take more than %u RPC messages "
                      "of %u bytes",
                      s_.max_accesses, static_cast<unsigned long long>(g_.slot_payload), kMaxForwardChunks,
                      max_payload);
  // The node's lock manager shards: the first worker of the node to be
  // created makes them (Database::node_state), worker s runs shard s.
  shards_ = std::min(wpn_, kMaxShards);
  std::shared_ptr<void>& slot = e_.db().node_state(me_, "calvin.lock_manager");
  if (!slot) {
    auto lms = std::make_shared<LockShards>(wpn_ * o_.coroutines);
    for (uint32_t s = 0; s < shards_; ++s)
      lms->shard.push_back(
          std::make_unique<LockManager>(wpn_ * o_.coroutines, nodes_ * s_.epoch_size, s_.max_accesses, lms->board));
    slot = lms;
  }
  lms_ = std::static_pointer_cast<LockShards>(slot);
  if (e_.ctx().index < shards_) e_.add_service(std::make_unique<LockManagerService>(lms_, e_.ctx().index));
  auto b = e_.register_handler("calvin.batch", [this](rpc::Request& r) { handle_batch(r); });
  if (!b.ok()) return b.error();
  batch_handler_ = *b;
  auto f = e_.register_handler("calvin.forward", [this](rpc::Request& r) { handle_forward(r); });
  if (!f.ok()) return f.error();
  forward_handler_ = *f;
  co_.resize(o_.coroutines);
  const uint32_t per_epoch = nodes_ * s_.epoch_size;
  for (CoState& cs : co_) {
    cs.plans.resize(per_epoch);
    cs.max_accesses = s_.max_accesses;
    cs.entries.resize(size_t{per_epoch} * s_.max_accesses);
    cs.declared_n.resize(per_epoch);
    cs.tuples.resize(size_t{per_epoch} * s_.max_accesses);
    cs.requests.resize(size_t{per_epoch} * shards_);
    cs.counts.resize(shards_);
    cs.step.resize(per_epoch);
    cs.ready_tsc.resize(per_epoch);
    cs.forward_net.resize(per_epoch);
    if (o_.stage(Stage::kSequence) == Primitive::kRpc)
      cs.batch_replies.resize(size_t{nodes_} * ((g_.crb_bytes - 16 + batch_chunk_ - 1) / batch_chunk_ + 1));
    if (o_.stage(Stage::kFetch) == Primitive::kRpc)
      cs.forward_replies.resize(size_t{nodes_} * ((g_.slot_payload + forward_chunk_ - 1) / forward_chunk_));
    cs.gen_tsc.resize(s_.epoch_size);
    if (!s_.inputs.empty()) {
      cs.recorded.reserve(max_inputs_bytes(s_.record_epochs, s_.epoch_size));
      cs.recorded.resize(kInputsHeader);
      const uint64_t fp = recording_fingerprint(o_, s_.epoch_size);
      std::memcpy(cs.recorded.data(), &kInputsMagic, 8);
      std::memcpy(cs.recorded.data() + 8, &fp, 8);
    }
  }
  if (!s_.replay.empty())
    for (uint32_t co = 0; co < o_.coroutines; ++co) RDTX_TRY(load_replay(co));
  set_stage(Stage::kFetch, *this, fetch);
  set_stage(Stage::kCommit, *this, commit);
  set_release(*this, release);
  return {};
}

Task<void> Calvin::run_coordinator(Coordinator& c) {
  const uint32_t co = c.index();
  for (uint64_t epoch = 1; !failed_; ++epoch) {
    // Sequencing: this member's batch of the epoch (empty and final once
    // its worker stops).
    uint32_t count = 0;
    bool final = false;
    if (!next_batch(c, &count, &final)) break;
    // The sequencing's verbs and time, outside any transaction: counted on
    // a blank attempt, then charged to the first transaction of the epoch
    // this member reports (so that per-commit figures include them).
    c.begin_attempt(0, 0);
    const uint64_t t0 = env::tsc();
    if (!co_await broadcast(c, epoch, count, final)) break;
    bool last = false;
    if (!co_await wait_batches(c, epoch, &last)) break;
    // Added to what an epoch that reported nothing here left (calvin.active
    // = writers: its transactions all counted by other members).
    CoState& st = co_[co];
    if (!st.sequence_pending) {
      st.sequence_net = {};
      st.sequence_tsc = 0;
    }
    st.sequence_net.add(c.attempt_counts());
    st.epoch_tsc = t0;
    st.sequence_tsc += env::tsc() - t0;
    st.sequence_pending = true;
    if (!plan_epoch(c, epoch, last)) break;
    const uint32_t n = [&] {
      uint32_t total = 0;
      for (uint32_t src = 0; src < nodes_; ++src)
        total += static_cast<uint32_t>(word_at(at(g_.crb(co, src, epoch))).load(std::memory_order_relaxed) &
                                       kCountMask);
      return total;
    }();
    bool ok = true;
    if (broken_)
      for (uint32_t k = 0; k < n && ok; ++k) ok = co_await execute(c, k);
    else
      ok = co_await execute_epoch(c, n);
    if (!ok || last) break;
  }
  // Publishes nothing more: later epochs of the node's other groups do not
  // wait for this one.
  for (auto& lm : lms_->shard) lm->leave(group(c));
  if (!s_.inputs.empty()) write_recording(c);
}

namespace {

Result<std::unique_ptr<Protocol>> create_with(WorkerEngine& e, bool broken) {
  auto p = std::make_unique<Calvin>(e, broken);
  e.set_atomic_stages(0);  // no NIC atomic: the lock manager's CPU alone locks
  RDTX_TRY(p->init());
  return std::unique_ptr<Protocol>(std::move(p));
}
Result<std::unique_ptr<Protocol>> create(WorkerEngine& e) { return create_with(e, false); }
Result<std::unique_ptr<Protocol>> create_early_reads(WorkerEngine& e) { return create_with(e, true); }

}  // namespace

}  // namespace detail

using namespace detail;

Geometry Geometry::make(uint32_t nodes, uint32_t coroutines, uint32_t epoch_size, uint32_t max_accesses,
                        uint32_t max_record) {
  Geometry g;
  g.nodes = nodes;
  g.coroutines = coroutines;
  g.epoch_size = epoch_size;
  g.max_accesses = max_accesses;
  g.max_record = pad8(max_record);
  g.cr_bytes = sizeof(Cr);
  g.crb_bytes = 16 + epoch_size * g.cr_bytes;
  g.slot_payload = uint64_t{max_accesses} * (8 + g.max_record);
  g.slot_bytes = 16 + g.slot_payload;
  // Outgoing: an RPC header (whose one-sided form skips its first words) and
  // the larger of a batch and a slot.
  g.staging_bytes =
      (std::max(sizeof(ForwardMsg), sizeof(BatchMsg)) + std::max(g.crb_bytes, g.slot_bytes) + 63) & ~uint64_t{63};
  const uint64_t crbs = uint64_t{nodes} * 2 * g.crb_bytes;
  const uint64_t cfb = uint64_t{nodes} * epoch_size * nodes * g.slot_bytes;
  g.co_bytes = (crbs + cfb + g.staging_bytes + 63) & ~uint64_t{63};
  return g;
}

// allowed: fetch = value forwarding (one-sided WRITEs or RPC), commit = the
// local in-place install (one-sided stands for "local": nothing crosses the
// network), sequence = the batch broadcast.
// cluster.memory_nodes: a CALVIN coordinator is also its node's member of
// every epoch: it locks, reads and writes, on its own node, the records of
// the sequenced transactions that node holds. A node without data has
// nothing to execute, and a node without coordinators nobody to do it.
constexpr const char* kSplitRefusal =
    "its coordinators also execute every sequenced transaction on the records of their own node (each node's "
    "lock manager grants them in the epoch order), so they must run where the data is; set cluster.memory_nodes = 0";

// RCC's rule in the generated suites too (calvin/writers).
constexpr ProtocolSetting kWriters[] = {{"calvin.active", "writers"}};
constexpr ProtocolVariant kVariants[] = {{"", {}}, {"writers", kWriters}};

constexpr ProtocolDef kDef = {
    .name = "calvin",
    .summary = "deterministic: epochs of sequenced batches, locks granted in timestamp order, values forwarded "
               "(RCC 4.6)",
    .meta_bytes = 8,          // word 0: the lock (the holder's txn id), set only by the node's lock manager
    .access_state_bytes = 8,  // per access: its index in the declared set
    .isolation = Isolation::kSerializable,
    .strict = true,  // every input sequenced after a commit was known comes after it (doc/txn.md)
    .timestamp_order = true,  // (epoch, timestamp): the order every lock manager grants in
    .allowed = {.fetch = {Primitive::kOneSided, Primitive::kRpc},
                .commit = {Primitive::kOneSided},
                .sequence = {Primitive::kOneSided, Primitive::kRpc}},
    .lock_held = lock_word0_held,
    .create = create,
    .region_bytes = region_bytes_of,
    .add_schema = add_calvin_schema,
    // Not through the engine's log stage: a CALVIN transaction's writes are
    // installed by every member, with no commit stage between validate and
    // commit to log from; replicating CALVIN means replicating its input
    // batches (RCC omits it), not done yet.
    .replicable = false,
    .needs_declared_sets = true,
    // Its members install writes themselves, not through the engine's
    // commit pipeline.
    .relocates_rows = false,
    .variants = kVariants,
    .split_refusal = kSplitRefusal,
    .preflight = preflight_of,
};
RDTX_REGISTER_PROTOCOL(kDef)

// BROKEN, tests only: a member reads (and forwards) its records before the
// lock manager grants them, so a transaction reads ahead of an earlier
// writer still holding the record, out of the global order: its write then
// overwrites that writer's (a lost update), or its reads straddle it. The
// generated suites run it with the defaults only.
constexpr ProtocolDef kEarlyReadsForTests = [] {
  ProtocolDef d = broken_variant(kDef, "calvin-broken-early-reads",
                                 "BROKEN, tests only: CALVIN that reads its records before their locks are granted",
                                 create_early_reads);
  d.variants = {};
  return d;
}();
RDTX_REGISTER_PROTOCOL(kEarlyReadsForTests)

}  // namespace rdtx::cc::calvin
