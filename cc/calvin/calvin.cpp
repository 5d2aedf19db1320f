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
#include "cc/calvin/calvin.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <bit>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cc/calvin/lock_manager.hpp"
#include "env/log.hpp"
#include "env/tsc.hpp"
#include "runtime/shutdown.hpp"
#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"
#include "txn/stages/copy_check.hpp"

namespace rdtx::cc::calvin {

using namespace rdtx::txn;
using runtime::Task;

namespace {

const env::LogType& calvin_log() {
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

// The active member that counts a transaction: its home if active, else
// the first.
uint32_t reporter_in(uint64_t active, uint32_t home) {
  return (active >> home & 1) != 0 ? home : static_cast<uint32_t>(std::countr_zero(active));
}

// The node an id names.
uint32_t txn_node_of(uint64_t id) { return txn::txn_node(id); }

constexpr uint64_t kFinal = uint64_t{1} << 31;
constexpr uint64_t kCountMask = kFinal - 1;
// The writer id forwarded for a declared key its owner does not hold.
constexpr uint64_t kMissing = UINT64_MAX;

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

uint64_t batch_checksum(uint64_t received, const std::byte* crs, uint64_t bytes) {
  return checksum_words(checksum_start(received), crs, 0, static_cast<uint32_t>(bytes));
}

std::atomic_ref<uint64_t> word_at(std::byte* p) { return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p)); }

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

struct Settings {
  uint32_t epoch_size, max_accesses;
  uint64_t stall_ns;
  std::string inputs, replay;
  uint64_t record_epochs;
  bool home_executes;  // calvin.active = writers_and_home
};
Settings settings_of(const Options& o) {
  return {static_cast<uint32_t>(o.setting_int("calvin.epoch_size", 10)),
          static_cast<uint32_t>(o.setting_int("calvin.max_accesses", 0)),
          static_cast<uint64_t>(o.setting_int("calvin.stall_ms", 5000)) * 1'000'000,
          o.setting_string("calvin.inputs", ""), o.setting_string("calvin.replay", ""),
          static_cast<uint64_t>(o.setting_int("calvin.record_epochs", 4096)),
          o.setting_string("calvin.active", "writers_and_home") == "writers_and_home"};
}

// The recorded inputs of one coordinator (calvin.inputs / calvin.replay):
// a magic word, the recording's fingerprint (recording_fingerprint), then
// per epoch {count | final << 31 (8 bytes)} and count CRs, then a checksum
// (FNV-1a) of everything before it. A replay proves it replays the
// recorded run: a damaged file or one recorded under another configuration
// is refused before anything is loaded (preflight_of).
constexpr uint64_t kInputsMagic = 0x3274757069766c63ull;  // "clviput2"
constexpr size_t kInputsHeader = 16;                       // magic, fingerprint
std::string inputs_file(const std::string& base, uint32_t node, uint32_t worker, uint32_t co) {
  return base + ".n" + std::to_string(node) + "w" + std::to_string(worker) + "c" + std::to_string(co);
}

uint64_t fnv1a(const std::byte* p, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 0x100000001b3ull;
  return h;
}

// What the recorded inputs depend on: the workload and its keys, the
// cluster's shape and coroutines (Options::input_fingerprint), the epoch
// size and the CR's layout.
uint64_t recording_fingerprint(const Options& o, uint32_t epoch_size) {
  const uint64_t own[] = {o.input_fingerprint, epoch_size, sizeof(Cr)};
  return fnv1a(reinterpret_cast<const std::byte*>(own), sizeof own);
}

// A recording of at most `record_epochs` epochs: its largest file.
uint64_t max_inputs_bytes(uint64_t record_epochs, uint32_t epoch_size) {
  return kInputsHeader + record_epochs * (8 + uint64_t{epoch_size} * sizeof(Cr)) + 8;
}

// Reads and proves one recording: a regular file (a device would never end
// the read), at most `max_bytes` long (read in bounded steps, and stopped
// by SIGINT/SIGTERM), its checksum and fingerprint right. Returns its bytes
// without the checksum. Errors name the file and what was wrong.
Result<std::vector<std::byte>> read_inputs(const std::string& path, uint64_t fingerprint, uint64_t max_bytes,
                                           uint64_t record_epochs) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return make_error(ENOENT, "calvin.replay: cannot open %s: %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (::fstat(::fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    std::fclose(f);
    return make_error(EINVAL, "calvin.replay: %s is not a regular file", path.c_str());
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    std::fclose(f);
    return make_error(EFBIG,
                      "calvin.replay: %s has %llu bytes, more than a recording of calvin.record_epochs = %llu epochs "
                      "(%llu bytes): not a recording of this configuration, or raise calvin.record_epochs",
                      path.c_str(), static_cast<unsigned long long>(size),
                      static_cast<unsigned long long>(record_epochs), static_cast<unsigned long long>(max_bytes));
  }
  std::vector<std::byte> v(size);
  size_t got = 0;
  while (got < size) {
    if (runtime::shutdown_requested()) {
      std::fclose(f);
      return make_error(ECANCELED, "calvin.replay: reading %s interrupted", path.c_str());
    }
    const size_t n = std::fread(v.data() + got, 1, std::min<size_t>(size - got, 1 << 20), f);
    if (n == 0) break;
    got += n;
  }
  std::fclose(f);
  if (got != size) return make_error(EIO, "calvin.replay: cannot read %s", path.c_str());
  uint64_t magic = 0, fp = 0, sum = 0;
  if (size >= kInputsHeader + 8) {
    std::memcpy(&magic, v.data(), 8);
    std::memcpy(&fp, v.data() + 8, 8);
    std::memcpy(&sum, v.data() + size - 8, 8);
  }
  if (magic != kInputsMagic)
    return make_error(EINVAL, "calvin.replay: %s is not a CALVIN inputs file (of this version)", path.c_str());
  if (sum != fnv1a(v.data(), size - 8))
    return make_error(EINVAL, "calvin.replay: %s is damaged (its checksum does not match its contents)", path.c_str());
  if (fp != fingerprint)
    return make_error(EINVAL,
                      "calvin.replay: %s was recorded under another configuration (the workload or its keys, "
                      "cluster.nodes, cluster.workers_per_node, txn.coroutines or calvin.epoch_size differ): "
                      "replay it with the recording's",
                      path.c_str());
  v.resize(size - 8);
  return v;
}

// The nodes of this process: q.self, or every node.
template <typename F>
Result<void> for_each_file(const RegionQuery& q, const std::string& base, F&& f) {
  for (uint32_t n = 0; n < q.nodes; ++n) {
    if (q.self >= 0 && n != static_cast<uint32_t>(q.self)) continue;
    for (uint32_t w = 0; w < q.workers_per_node; ++w)
      for (uint32_t co = 0; co < q.coroutines; ++co) RDTX_TRY(f(inputs_file(base, n, w, co)));
  }
  return {};
}

// calvin.inputs: its directory exists and takes files; calvin.replay:
// every recording of this process's coordinators is there, whole, and of
// this configuration (read_inputs).
Result<void> preflight_of(const RegionQuery& q) {
  const Settings s = settings_of(*q.options);
  if (!s.inputs.empty()) {
    const size_t slash = s.inputs.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : s.inputs.substr(0, slash);
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return make_error(EINVAL, "calvin.inputs = '%s': no directory %s for its files", s.inputs.c_str(), dir.c_str());
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      return make_error(EINVAL, "calvin.inputs = '%s': cannot create files in %s: %s", s.inputs.c_str(), dir.c_str(),
                        std::strerror(errno));
  }
  if (!s.replay.empty()) {
    const uint64_t fp = recording_fingerprint(*q.options, s.epoch_size);
    const uint64_t max_bytes = max_inputs_bytes(s.record_epochs, s.epoch_size);
    return for_each_file(q, s.replay, [&](const std::string& path) -> Result<void> {
      auto v = read_inputs(path, fp, max_bytes, s.record_epochs);
      if (!v.ok()) return v.error();
      return {};
    });
  }
  return {};
}

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

// The node's lock manager, sharded by record: shard s holds the locks of
// the records whose (table, key) hash to s, and worker s of the node runs
// it (one shard per worker, at most kMaxShards). Every shard grants in the
// same global order, so the order per record, all that deadlock freedom
// needs, is the one order (lock_manager.hpp); sharding spreads the grants
// over the node's workers instead of loading worker 0 with all of them.
constexpr uint32_t kMaxShards = 64;  // a transaction's shards: a 64-bit mask
struct LockShards {
  explicit LockShards(uint32_t groups) : board(groups) {}
  GrantBoard board;  // before the shards, which count on it
  std::vector<std::unique_ptr<LockManager>> shard;
};
uint32_t shard_of(TableId table, uint64_t key, uint32_t shards) {
  // A hash of the record's identity, not its address: the same shards in
  // every run (virtual time stays deterministic).
  const uint64_t h = (key ^ (uint64_t{table} << 56)) * 0x9e3779b97f4a7c15ull;
  return static_cast<uint32_t>((h >> 32) * shards >> 32);
}

// A lock manager shard's poller: worker s of each node runs shard s.
class LockManagerService final : public Service {
 public:
  LockManagerService(std::shared_ptr<LockShards> lms, uint32_t s)
      : Service("calvin.locks"), lms_(std::move(lms)), lm_(lms_->shard[s].get()) {}
  int poll() override { return lm_->poll(); }
  // Grants go on until every group of the node has run its last epoch.
  bool drain() override { return lm_->finished(); }

 private:
  std::shared_ptr<LockShards> lms_;
  LockManager* lm_;
};

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

// a3 (RPC): a chunk of the batch of `src` into this member's CRB, at its
// offset, with the received word and the checksum of the whole batch.
// Idempotent: a chunk of an epoch older than the one the CRB holds (a late
// copy of an old batch) is ignored, and one of the CRB's epoch is another
// chunk or a resend of one (the same bytes); nothing is granted, so there
// is no fence. The member takes the batch once its checksum matches
// (wait_batches).
void Calvin::handle_batch(rpc::Request& r) {
  const std::span<const std::byte> p = r.payload();
  BatchMsg m;
  if (p.size() < sizeof m) return;
  std::memcpy(&m, p.data(), sizeof m);
  const uint64_t count = m.received & kCountMask;
  const uint64_t bytes = count * g_.cr_bytes;
  const uint64_t chunk = p.size() - sizeof m;
  if (m.co >= g_.coroutines || m.src >= nodes_ || count > g_.epoch_size || m.offset > bytes ||
      chunk > bytes - m.offset || (chunk == 0 && bytes != 0) || (m.received >> 32) == 0)
    return;  // malformed: no answer changes anything, the caller re-sends
  std::byte* crb = at(g_.crb(m.co, m.src, m.received >> 32));
  const uint64_t held = word_at(crb).load(std::memory_order_acquire);
  if ((held >> 32) > (m.received >> 32)) return;
  std::memcpy(crb + 16 + m.offset, p.data() + sizeof m, chunk);
  std::memcpy(crb + 8, &m.checksum, 8);
  // release: the CRs before the word the member polls.
  word_at(crb).store(m.received, std::memory_order_release);
}

// F14 a3 (RPC): a chunk of forwarded values into the CFB slot, at its
// offset, with the ready word and the checksum of the whole (ForwardMsg).
// A chunk of an epoch older than the slot's is stale and dropped; one of
// the slot's epoch is another chunk (or a resend of one: the same bytes).
void Calvin::handle_forward(rpc::Request& r) {
  const std::span<const std::byte> p = r.payload();
  ForwardMsg m;
  if (p.size() < sizeof m) return;
  std::memcpy(&m, p.data(), sizeof m);
  const uint64_t len = m.ready & 0xffffffffu;
  const uint64_t chunk = p.size() - sizeof m;
  if (m.co >= g_.coroutines || m.src >= nodes_ || m.k >= nodes_ * g_.epoch_size || len > g_.slot_payload ||
      m.offset > len || chunk > len - m.offset || (chunk == 0 && len != 0) || (m.ready >> 32) == 0)
    return;
  std::byte* slot = at(g_.cfb(m.co, m.k, m.src));
  const uint64_t held = word_at(slot).load(std::memory_order_acquire);
  if ((held >> 32) > (m.ready >> 32)) return;
  std::memcpy(slot + 16 + m.offset, p.data() + sizeof m, chunk);
  std::memcpy(slot + 8, &m.checksum, 8);
  word_at(slot).store(m.ready, std::memory_order_release);
}

// Sends this member's batch of `epoch` (already in the staging area after a
// BatchMsg header) to every counterpart, itself included (locally).
Task<bool> Calvin::broadcast(Coordinator& c, uint64_t epoch, uint32_t count, bool final) {
  const uint32_t co = c.index();
  std::byte* st = at(g_.staging(co));
  BatchMsg m{co, me_, 0, 0, (epoch << 32) | (final ? kFinal : 0) | count, 0};
  const uint64_t bytes = count * g_.cr_bytes;
  m.checksum = batch_checksum(m.received, st + sizeof m, bytes);
  std::memcpy(st, &m, sizeof m);
  // Itself: straight into its own CRB.
  std::byte* own = at(g_.crb(co, me_, epoch));
  std::memcpy(own + 16, st + sizeof m, bytes);
  std::memcpy(own + 8, &m.checksum, 8);
  word_at(own).store(m.received, std::memory_order_release);
  if (nodes_ == 1) co_return true;
  const uint64_t since = env::tsc();
  if (o_.stage(Stage::kSequence) != Primitive::kRpc) {
    // b1/b2: one WRITE of checksum + CRs at CR1's offset (the checksum word
    // just before it), then the 8-byte WRITE of the received word; one
    // doorbell per node, one wait for all.
    for (;;) {
      OneSidedBatch& b = c.onesided();
      for (uint32_t d = 0; d < nodes_; ++d) {
        if (d == me_) continue;
        const RegionDescriptor& rd = e_.db().region(d, e_.ctx().index);
        const uint64_t remote = rd.addr + g_.crb(co, me_, epoch);
        b.write({d, remote + 8, rd.rkey}, st + 24, static_cast<uint32_t>(8 + bytes), 0, lkey_);  // the checksum, then the CRs
        b.write({d, remote, rd.rkey}, st + 16, 8, 0, lkey_);  // the received word
      }
      if (co_await b.execute()) co_return true;
      // A failed WRITE (its QP was reconnected): send the whole batch again.
      if (stalled(c, since, "the completion of a batch WRITE", me_)) co_return false;
      co_await runtime::poll_wait();
    }
  }
  // a1-a3: a call per counterpart and chunk, each re-sent until answered
  // (a datagram lost): the group cannot go on without it.
  uint64_t others = 0;
  for (uint32_t d = 0; d < nodes_; ++d)
    if (d != me_) others |= uint64_t{1} << d;
  co_return co_await call_in_chunks(c, batch_handler_, st, m, bytes, batch_chunk_, others,
                                    co_[co].batch_replies.data(), since, "an answer to a batch");
}

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

// b3: polls the CRBs until every node's batch of `epoch` is complete.
//
// Why two CRBs (epoch parity) per source are enough: a member sends its
// batch of e+1 only after executing e, which needs every member's batch of
// e. So when source S writes its batch of e+2 into the CRB that held e, S
// has received this member's batch of e+1, which this member sent only
// after executing e: it no longer reads the batches of e. But S may write
// e+1 while this member still waits for another node's batch of e: hence
// the second buffer. (The CFB needs no parity: a member forwards values of
// epoch e+1 only after receiving every batch of e+1, including that of the
// receiver, who sends it only after executing e.)
Task<bool> Calvin::wait_batches(Coordinator& c, uint64_t epoch, bool* last) {
  const uint32_t co = c.index();
  const uint64_t since = env::tsc();
  *last = false;
  for (uint32_t src = 0; src < nodes_;) {
    std::byte* crb = at(g_.crb(co, src, epoch));
    // acquire: the CRs of a batch written locally (RPC handler) before it.
    const uint64_t w = word_at(crb).load(std::memory_order_acquire);
    if ((w >> 32) == epoch) {
      uint64_t sum;
      std::memcpy(&sum, crb + 8, 8);
      // The received word may land before the CRs' words: trust the batch
      // only when its checksum matches.
      if (batch_checksum(w, crb + 16, (w & kCountMask) * g_.cr_bytes) == sum) {
        *last |= (w & kFinal) != 0;
        ++src;
        continue;
      }
    }
    if (stalled(c, since, "the batch of an epoch", src)) co_return false;
    co_await runtime::poll_wait();
  }
  runtime::note_work();  // the epoch is planned next, in this pass
  co_return true;
}

// a4/b4: every transaction of the epoch, in timestamp order, planned for
// this member; its requests published to the lock manager.
bool Calvin::plan_epoch(Coordinator& c, uint64_t epoch, bool last) {
  const uint32_t co = c.index();
  CoState& cs = co_[co];
  const Workload& wl = e_.workload();
  Database& db = e_.db();
  uint32_t n = 0;
  for (uint32_t src = 0; src < nodes_; ++src) {
    const std::byte* crb = at(g_.crb(co, src, epoch));
    const uint64_t count = word_at(const_cast<std::byte*>(crb)).load(std::memory_order_relaxed) & kCountMask;
    for (uint32_t i = 0; i < count; ++i) {
      Plan& p = cs.plans[n++];
      p = Plan{};
      p.cr = reinterpret_cast<const Cr*>(crb + 16 + i * g_.cr_bytes);
      p.src = src;
      p.index = i;
    }
  }
  std::sort(cs.plans.begin(), cs.plans.begin() + n, [](const Plan& a, const Plan& b) { return a.cr->ts < b.cr->ts; });
  std::fill(cs.counts.begin(), cs.counts.end(), 0);
  for (uint32_t k = 0; k < n; ++k) {
    Plan& p = cs.plans[k];
    DeclaredSet& declared = cs.declared;
    declared.n = 0;
    if (!wl.declare(p.cr->in, declared) || declared.n > g_.max_accesses) {
      fail(c, "transaction %llx (type %u) declares %u accesses, calvin.max_accesses is %u",
           static_cast<unsigned long long>(p.cr->id), p.cr->in.type, declared.n, g_.max_accesses);
      return false;
    }
    std::copy_n(declared.e, declared.n, cs.entries.begin() + static_cast<std::ptrdiff_t>(size_t{k} * cs.max_accesses));
    cs.declared_n[k] = declared.n;
    const SetView d = cs.set(k);
    p.active = 0;  // the nodes it writes on, first
    std::byte** tuples = cs.tuples_of(k);
    for (uint32_t j = 0; j < d.n; ++j) {
      const uint32_t owner = db.owner(d.e[j].table, d.e[j].key);
      p.readers |= uint64_t{1} << owner;
      if (d.e[j].mode == AccessMode::kWrite) p.active |= uint64_t{1} << owner;
      tuples[j] = nullptr;
      if (owner != me_) continue;
      ++p.nlocal;
      store::TupleRef ref;
      if (db.store(me_).table(d.e[j].table)->lookup(d.e[j].key, &ref) != 0) continue;
      tuples[j] = ref.tuple;
      // Its lock in the record's shard: one request per shard it touches.
      const uint32_t s = shard_of(d.e[j].table, d.e[j].key, shards_);
      uint32_t& q = cs.requests[size_t{k} * shards_ + s];
      LockManager& lm = *lms_->shard[s];
      if (!(p.shards >> s & 1)) {
        p.shards |= uint64_t{1} << s;
        q = cs.counts[s]++;
        LockManager::Request& r = lm.request(group(c), epoch, q);
        r.ts = p.cr->ts;
        r.id = p.cr->id;
      }
      lm.add_record(group(c), epoch, q, ref.tuple);
    }
    p.active = active_of(p.active, p.cr->in.home_node);
    p.reporter = reporter_in(p.active, p.cr->in.home_node);
    // It is recorded under its id, which names the reporter (mint_id()):
    // inputs replayed from a run with another calvin.active do not.
    if (txn_node_of(p.cr->id) != p.reporter) {
      fail(c, "transaction %llx: its id names node %u, its reporter is node %u (calvin.replay of inputs "
           "recorded with another calvin.active?)",
           static_cast<unsigned long long>(p.cr->id), txn_node_of(p.cr->id), p.reporter);
      return false;
    }
    p.waiting = p.readers & ~(uint64_t{1} << me_);
  }
  for (uint32_t s = 0; s < shards_; ++s) lms_->shard[s]->publish(group(c), epoch, cs.counts[s], last);
  cs.publish_tsc = env::tsc();
  cs.epoch = epoch;
  return true;
}

uint32_t Calvin::forward_offset(SetView d, uint32_t j) const {
  const Database& db = e_.db();
  const uint32_t owner = db.owner(d.e[j].table, d.e[j].key);
  uint32_t off = 0;
  for (uint32_t i = 0; i < j; ++i)
    if (db.owner(d.e[i].table, d.e[i].key) == owner) off += 8 + pad8(db.layout(d.e[i].table).record_bytes);
  return off;
}

uint32_t Calvin::forward_len(SetView d, uint32_t node) const {
  const Database& db = e_.db();
  uint32_t len = 0;
  for (uint32_t i = 0; i < d.n; ++i)
    if (db.owner(d.e[i].table, d.e[i].key) == node) len += 8 + pad8(db.layout(d.e[i].table).record_bytes);
  return len;
}

// F14 a2/b2, forwarding: one-sided, the two WRITEs of F14 b3 (values, then
// the ready word); RPC, calls whose handler does F14 a3. The values in the staging
// area (after a ForwardMsg header) to every node of `targets`.
Task<bool> Calvin::forward(Coordinator& c, uint32_t k, uint32_t len, uint64_t targets) {
  const uint32_t co = c.index();
  const uint64_t epoch = co_[co].epoch;
  std::byte* st = at(g_.staging(co));
  ForwardMsg m{co, k, me_, 0, (epoch << 32) | len, 0};
  m.checksum = checksum_words(checksum_start(m.ready), st + sizeof m, 0, len);
  std::memcpy(st, &m, sizeof m);
  const uint64_t since = env::tsc();
  if (o_.stage(Stage::kFetch) != Primitive::kRpc) {
    for (;;) {
      OneSidedBatch& b = c.onesided();
      for (uint32_t d = 0; d < nodes_; ++d) {
        if (!(targets >> d & 1)) continue;
        const RegionDescriptor& rd = e_.db().region(d, e_.ctx().index);
        const uint64_t remote = rd.addr + g_.cfb(co, k, me_);
        b.write({d, remote + 8, rd.rkey}, st + 24, 8 + len, 0, lkey_);  // checksum, then the values
        b.write({d, remote, rd.rkey}, st + 16, 8, 0, lkey_);            // the ready word
      }
      if (co_await b.execute()) co_return true;
      if (stalled(c, since, "the completion of a values WRITE", me_)) co_return false;
      co_await runtime::poll_wait();
    }
  }
  // RPC: a call per node and chunk (F14 a3 in the handler).
  co_return co_await call_in_chunks(c, forward_handler_, st, m, len, forward_chunk_, targets,
                                    co_[co].forward_replies.data(), since, "an answer to forwarded values");
}

// F14 b3 (and the pick-up of F14 a3): the nodes among `missing` whose
// values of transaction k are not (all, checksum matching) in its CFB slots yet.
// Callers keep what it returns (Plan::waiting), so a node's values are
// checksummed once, not on every poll while another node's are awaited.
uint64_t Calvin::values_missing(Coordinator& c, uint32_t k, uint64_t missing) {
  const CoState& cs = co_[c.index()];
  for (uint64_t m = missing; m != 0; m &= m - 1) {
    const uint32_t src = static_cast<uint32_t>(std::countr_zero(m));
    std::byte* slot = at(g_.cfb(c.index(), k, src));
    const uint64_t word = word_at(slot).load(std::memory_order_acquire);
    if (word >> 32 != (cs.epoch & 0xffffffffu)) continue;  // not this epoch's yet: no need to size it
    const uint64_t want = (cs.epoch << 32) | forward_len(cs.set(k), src);
    if (word != want) continue;
    uint64_t sum;
    std::memcpy(&sum, slot + 8, 8);
    if (checksum_words(checksum_start(want), slot + 16, 0, static_cast<uint32_t>(want & 0xffffffffu)) == sum)
      missing &= ~(uint64_t{1} << src);
  }
  return missing;
}

// Polls the CFB slots of transaction k until the values of every other node
// holding its records are there.
Task<bool> Calvin::wait_values(Coordinator& c, uint32_t k) {
  const uint64_t since = env::tsc();
  uint64_t& missing = co_[c.index()].plans[k].waiting;
  while ((missing = values_missing(c, k, missing)) != 0) {
    if (stalled(c, since, "forwarded values", static_cast<uint32_t>(std::countr_zero(missing)))) co_return false;
    co_await runtime::poll_wait();
  }
  co_return true;
}

// Whether every lock manager shard holding transaction k's records here has
// granted them.
bool Calvin::granted_all(Coordinator& c, uint32_t k) const {
  const CoState& cs = co_[c.index()];
  for (uint64_t m = cs.plans[k].shards; m != 0; m &= m - 1) {
    const uint32_t s = static_cast<uint32_t>(std::countr_zero(m));
    if (!lms_->shard[s]->granted(group(c), cs.epoch, cs.requests[size_t{k} * shards_ + s])) return false;
  }
  return true;
}

// Polls transaction k's grants by the node's lock manager shards, yielding.
Task<bool> Calvin::wait_grant(Coordinator& c, uint32_t k) {
  const uint64_t since = env::tsc();
  while (!granted_all(c, k)) {
    if (stalled(c, since, "a lock grant (the lock manager)", me_)) co_return false;
    co_await runtime::poll_wait();
  }
  co_return true;
}

// Local reads of transaction k (under its locks: stable), with their writer
// ids, into the staging area after the RPC header: what every active
// counterpart needs. Returns their length.
uint32_t Calvin::read_local(Coordinator& c, uint32_t k) {
  const CoState& cs = co_[c.index()];
  const SetView d = cs.set(k);
  std::byte* out = at(g_.staging(c.index())) + sizeof(ForwardMsg);
  const std::byte* const* tuples = cs.tuples_of(k);
  const Database& db = e_.db();
  uint32_t len = 0;
  for (uint32_t j = 0; j < d.n; ++j) {
    if (db.owner(d.e[j].table, d.e[j].key) != me_) continue;
    const store::TupleLayout& l = db.layout(d.e[j].table);
    const uint32_t rb = pad8(l.record_bytes);
    if (tuples[j] == nullptr) {
      set_copy_word(out + len, 0, kMissing);
      std::memset(out + len + 8, 0, rb);
    } else {
      set_copy_word(out + len, 0, db.recording() ? copy_word(tuples[j], db.history_word_offset()) : 0);
      std::memset(out + len + 8, 0, rb);
      std::memcpy(out + len + 8, tuples[j] + l.record_offset(), l.record_bytes);
    }
    len += 8 + rb;
  }
  return len;
}

// F14 a4/b4 for transaction k, whose values are all here: the workload's
// execute() on them, the local writes installed (commit module), the locks
// released; the reporter counts the outcome. `t` is the transaction's
// attempt.
Task<bool> Calvin::run(Coordinator& c, uint32_t k, Txn& t) {
  CoState& cs = co_[c.index()];
  const Plan& p = cs.plans[k];
  cs.current = k;
  int64_t delta = 0;
  const bool ok = co_await e_.workload().execute(t, p.cr->in, &delta);
  release_locks(c, k);
  if (failed_) co_return false;
  if (!ok && t.abort_reason() != AbortReason::kUser && t.abort_reason() != AbortReason::kNotFound) {
    fail(c, "transaction %llx aborted (reason %d): a CALVIN transaction never aborts for a conflict",
         static_cast<unsigned long long>(t.id()), static_cast<int>(t.abort_reason()));
    co_return false;
  }
  // Latency from its generation at home; a reporter on another node (calvin.active = writers) takes the
  // start of its own sequencing of the epoch, which the members begin together (lockstep).
  // Its history's begin is its generation, known at home only.
  if (p.reporter == me_) {
    const bool home = p.cr->in.home_node == me_;
    // Its place in the order every lock manager grants in: the history's
    // timestamp order (epochs past 2^32 - 1 are not told apart).
    t.set_commit_order(static_cast<uint32_t>(std::min<uint64_t>(cs.epoch, UINT32_MAX)), p.cr->ts);
    c.account(p.cr->in, ok, ok ? delta : 0, home ? cs.gen_tsc[p.index] : cs.epoch_tsc, true, home);
  }
  co_return true;
}

// Charges the epoch's sequencing to the first transaction this member
// reports (its attempt just begun).
void Calvin::charge_sequence(Coordinator& c) {
  CoState& cs = co_[c.index()];
  if (!cs.sequence_pending) return;
  c.add_counts(cs.sequence_net);
  c.add_phase_tsc(Phase::kSequence, cs.sequence_tsc);
  cs.sequence_pending = false;
}

// Figure 14 for the epoch's n transactions on this member, each as soon as
// it can go rather than one after the other. A transaction whose locks here
// are granted is read and forwarded at once (a member that is not active
// then releases); one whose values are all here is executed at once. So a
// transaction early in the order whose locks wait for another group's
// earlier transaction holds up none of this group's later ones whose locks
// are free: with one order for every group (lock_manager.hpp) a group that
// ran its epoch strictly in order left the locks it was granted for later
// transactions held while it waited, and the groups of a node ran almost
// one after the other (RCC's Figure 15 settings: 2.7 M txn/s at 20 a batch,
// 0.85 M at 64). Deadlock freedom is unchanged: every wait is still for an
// earlier transaction's locks or for this transaction's values, and every
// member keeps visiting every unfinished transaction of the epoch.
Task<bool> Calvin::execute_epoch(Coordinator& c, uint32_t n) {
  CoState& cs = co_[c.index()];
  enum : uint8_t { kNew, kValues, kDone };
  for (uint32_t k = 0; k < n; ++k) cs.step[k] = kNew;
  uint32_t first = 0;  // every transaction before it is done
  uint64_t since = env::tsc();  // the last progress
  uint64_t seen_grants = 0;
  bool first_visit = true;
  for (;;) {
    bool progress = false;
    // The grants here are looked at only when the manager made one to this
    // group since the last visit (read before the tags: lock_manager.hpp's
    // GrantBoard), not per transaction on every poll.
    const uint64_t grants = lms_->board.grants(group(c));
    const bool new_grants = first_visit || grants != seen_grants;
    seen_grants = grants;
    first_visit = false;
    for (uint32_t k = first; k < n; ++k) {
      uint8_t& step = cs.step[k];
      // Done; or waiting for a grant (every transaction that needs none
      // left kNew on the first visit) with no grant to this group since.
      if (step == kDone || (step == kNew && !new_grants)) continue;
      Plan& p = cs.plans[k];
      const bool reporter = p.reporter == me_;
      const bool active = (p.active >> me_ & 1) != 0;
      if (step == kNew) {
        if (p.nlocal == 0 && !active) {  // nothing of it here
          step = kDone;
          continue;
        }
        // F14 a1/b1: the locks here granted, in (epoch, timestamp) order.
        if (!granted_all(c, k)) continue;
        cs.ready_tsc[k] = env::tsc();
        if (p.nlocal > 0) {
          // Counted on an attempt of its own, carried over to the one that
          // executes it (the reporter's counts are those reported).
          c.begin_attempt(p.cr->id, p.cr->ts);
          const uint32_t len = read_local(c, k);
          const uint64_t targets = p.active & ~(uint64_t{1} << me_);
          if (targets != 0 && !co_await forward(c, k, len, targets)) co_return false;
          if (reporter) cs.forward_net[k] = c.attempt_counts();
          if (!active) {
            release_locks(c, k);
            step = kDone;
            progress = true;
            continue;
          }
        } else if (reporter) {
          cs.forward_net[k] = {};
        }
        step = kValues;
        progress = true;
      }
      // F14 b3: the values of every other node holding its records.
      if ((p.waiting = values_missing(c, k, p.waiting)) != 0) continue;
      Txn& t = c.begin_attempt(p.cr->id, p.cr->ts);
      if (reporter) {
        charge_sequence(c);
        c.add_counts(cs.forward_net[k]);
      }
      // Schedule: from the epoch's requests published here until the
      // lock manager shards holding its records merged the epoch (every
      // group of the node published it). Lock: from then to its grant
      // here (the earlier transactions of the grant order holding or
      // wanting its records). Both 0 without local records. Fetch: from
      // its grant here (or its first visit without local records) to its
      // values all here, which includes the other nodes' waits.
      if (c.phase_clock() != 0) {
        if (p.nlocal > 0) {
          // Another worker's clock in virtual time: kept within the wait.
          uint64_t merged = cs.publish_tsc;
          for (uint64_t m = p.shards; m != 0; m &= m - 1)
            merged = std::max(merged, lms_->shard[static_cast<uint32_t>(std::countr_zero(m))]->merged_tsc(cs.epoch));
          merged = std::min(merged, cs.ready_tsc[k]);
          c.add_phase_tsc(Phase::kSchedule, merged - cs.publish_tsc);
          c.add_phase_tsc(Phase::kLock, cs.ready_tsc[k] - merged);
        }
        c.add_phase_tsc(Phase::kFetch, env::tsc() - cs.ready_tsc[k]);
      }
      if (!co_await run(c, k, t)) co_return false;
      step = kDone;
      progress = true;
      // One execution a resume: the epoch's executions here (22 of 60 us on
      // RCC's YCSB setting when nothing waits) would otherwise run back to
      // back in one pass, holding the worker's pollers (its RPC handlers)
      // and, in virtual time, its clock that far ahead of the others'
      // (runtime/worker.cpp, kMaxVirtualPassNs).
      runtime::note_work();
      co_await runtime::yield();
    }
    while (first < n && cs.step[first] == kDone) ++first;
    if (first == n) co_return true;
    if (progress) {
      since = env::tsc();
      runtime::note_work();  // resumed by poll_wait(), which counts none
    } else if (cs.step[first] == kNew ? stalled(c, since, "a lock grant (the lock manager)", me_)
                                      : stalled(c, since, "forwarded values",
                                                static_cast<uint32_t>(std::countr_zero(cs.plans[first].waiting)))) {
      co_return false;
    }
    co_await runtime::poll_wait();
  }
}

// Clears transaction k's lock words, in every shard holding them.
void Calvin::release_locks(Coordinator& c, uint32_t k) {
  const CoState& cs = co_[c.index()];
  for (uint64_t m = cs.plans[k].shards; m != 0; m &= m - 1) {
    const uint32_t s = static_cast<uint32_t>(std::countr_zero(m));
    lms_->shard[s]->release(group(c), cs.epoch, cs.requests[size_t{k} * shards_ + s]);
  }
}

// Figure 14 for transaction k of the epoch on this member, one after the
// other: the broken variant's (tests only), which reads its records before
// their grant and then waits for it.
Task<bool> Calvin::execute(Coordinator& c, uint32_t k) {
  CoState& cs = co_[c.index()];
  const Plan& p = cs.plans[k];
  const bool active = (p.active >> me_ & 1) != 0;
  if (p.nlocal == 0 && !active) co_return true;  // nothing of it here
  Txn& t = c.begin_attempt(p.cr->id, p.cr->ts);
  if (p.reporter == me_) charge_sequence(c);
  const uint64_t t0 = c.phase_clock();
  if (p.nlocal > 0) {
    const uint32_t len = read_local(c, k);
    const uint64_t targets = p.active & ~(uint64_t{1} << me_);
    if (targets != 0 && !co_await forward(c, k, len, targets)) co_return false;
    if (!co_await wait_grant(c, k)) co_return false;
    if (!active) {
      release_locks(c, k);
      c.add_phase(Phase::kFetch, t0);
      co_return true;
    }
  }
  if (!co_await wait_values(c, k)) co_return false;
  c.add_phase(Phase::kFetch, t0);
  co_return co_await run(c, k, t);
}

// The fetch module: each access execute() declares is served from this
// node's locked record or from the values its owner forwarded.
Task<bool> Calvin::fetch(Calvin& p, Coordinator& c, Txn& t, uint32_t from) {
  CoState& cs = p.co_[c.index()];
  const uint32_t k = cs.current;
  const SetView d = cs.set(k);
  const Database& db = p.e_.db();
  std::byte* const* tuples = cs.tuples_of(k);
  for (uint32_t i = from; i < t.size(); ++i) {
    Access& a = t.access(i);
    uint32_t j = 0;
    while (j < d.n && !(d.e[j].table == a.table && d.e[j].key == a.key && d.e[j].mode == a.mode)) ++j;
    if (j == d.n) {
      p.fail(c, "workload '%s': execute() of transaction type %u accesses table %u key %llu (%s), which "
             "declare() did not declare",
             p.e_.workload().name(), cs.plans[k].cr->in.type, a.table, static_cast<unsigned long long>(a.key),
             a.mode == AccessMode::kWrite ? "write" : "read");
      t.fail(AbortReason::kUser);
      co_return false;
    }
    t.state<uint64_t>(i) = j;
    const store::TupleLayout& l = db.layout(a.table);
    uint64_t writer;
    if (a.node == p.me_ && p.broken_) {
      // The broken variant: the value read before the grant (staging).
      const std::byte* v = p.at(p.g_.staging(c.index())) + sizeof(ForwardMsg) + p.forward_offset(d, j);
      writer = copy_word(v, 0);
      if (writer == kMissing) {
        t.fail(AbortReason::kNotFound);
        co_return false;
      }
      std::memcpy(a.copy + l.record_offset(), v + 8, l.record_bytes);
    } else if (a.node == p.me_) {
      if (tuples[j] == nullptr) {
        t.fail(AbortReason::kNotFound);
        co_return false;
      }
      writer = db.recording() ? copy_word(tuples[j], db.history_word_offset()) : 0;
      std::memcpy(a.copy + l.record_offset(), tuples[j] + l.record_offset(), l.record_bytes);
    } else {
      const std::byte* v = p.at(p.g_.cfb(c.index(), k, a.node)) + 16 + p.forward_offset(d, j);
      writer = copy_word(v, 0);
      if (writer == kMissing) {
        t.fail(AbortReason::kNotFound);
        co_return false;
      }
      std::memcpy(a.copy + l.record_offset(), v + 8, l.record_bytes);
    }
    // Read under the lock: the version read is the one a write replaces.
    a.writer = a.replaced = writer;
    a.located = a.fetched = true;
  }
  co_return true;
}

// The commit module (F14 a4/b4): only this node's writes, installed in place under the
// lock the lock manager granted (history word = the writer's id).
Task<bool> Calvin::commit(Calvin& p, Coordinator& c, Txn& t, uint32_t) {
  CoState& cs = p.co_[c.index()];
  std::byte* const* tuples = cs.tuples_of(cs.current);
  const Database& db = p.e_.db();
  // Inserted rows went in before this stage, by the reporter alone
  // (inserts_here: the pipeline's apply_inserts). Erases and relocations
  // change rows other transactions may have declared: not supported, a
  // failed run (no workload that CALVIN accepts makes them).
  if (t.row_changes() != 0 && p.e_.stats().insert_errors++ == 0)
    RDTX_LOG(calvin_log(), Error, "transaction %llu erases or relocates rows, which CALVIN does not do",
             static_cast<unsigned long long>(t.id()));
  for (uint32_t i = 0; i < t.size(); ++i) {
    const Access& a = t.access(i);
    if (a.mode != AccessMode::kWrite || a.node != p.me_) continue;
    std::byte* tuple = tuples[t.state<uint64_t>(i)];
    const store::TupleLayout& l = db.layout(a.table);
    std::memcpy(tuple + l.record_offset(), a.copy + l.record_offset(), l.record_bytes);
    if (db.recording()) set_copy_word(tuple, db.history_word_offset(), t.id());
  }
  co_return true;
}

// Nothing to release per attempt: the locks are the lock manager's, freed
// by the member once the transaction is done (execute()).
Task<bool> Calvin::release(Calvin&, Coordinator&, Txn&, uint32_t) { co_return true; }

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

bool Calvin::next_batch(Coordinator& c, uint32_t* count, bool* final) {
  CoState& cs = co_[c.index()];
  std::byte* crs = at(g_.staging(c.index())) + sizeof(BatchMsg);
  const Workload& wl = e_.workload();
  if (!cs.replay.empty()) {
    // Replay: the recorded batch as it was (timestamps and ids included),
    // whether or not the worker is stopping (its run.duration_s is not the
    // recording's), so that every member runs the same epochs; past the
    // recording, or once SIGINT or SIGTERM asked the process to stop, an
    // empty final batch (a replay is as interruptible as a run: the members
    // end with the epochs they have, as when generated inputs stop).
    *count = 0;
    *final = true;
    if (cs.replay_at + 8 <= cs.replay.size() && !runtime::shutdown_requested()) {
      uint64_t w;
      std::memcpy(&w, cs.replay.data() + cs.replay_at, 8);
      const uint64_t n = w & kCountMask;
      if (n > s_.epoch_size || cs.replay_at + 8 + n * g_.cr_bytes > cs.replay.size()) {
        fail(c, "calvin.replay: a batch of %llu inputs at byte %zu (calvin.epoch_size %u, file of %zu bytes)",
             static_cast<unsigned long long>(n), cs.replay_at, s_.epoch_size, cs.replay.size());
        return false;
      }
      std::memcpy(crs, cs.replay.data() + cs.replay_at + 8, n * g_.cr_bytes);
      cs.replay_at += 8 + n * g_.cr_bytes;
      *count = static_cast<uint32_t>(n);
      *final = (w & kFinal) != 0;
    }
    for (uint32_t i = 0; i < *count; ++i) cs.gen_tsc[i] = env::tsc();
    record_batch(cs, crs, *count, *final);
    return true;
  }
  *final = runtime::Worker::current()->stopping();
  *count = *final ? 0 : s_.epoch_size;
  DeclaredSet check;
  for (uint32_t i = 0; i < *count; ++i) {
    Cr cr{};
    wl.generate(c.rng(), me_, cr.in);
    if (!wl.declare(cr.in, check) || check.n > g_.max_accesses) {
      fail(c, "workload '%s' generated a transaction of type %u with %u accesses; calvin.max_accesses is %u",
           wl.name(), cr.in.type, check.n, g_.max_accesses);
      return false;
    }
    cr.id = mint_id(c, cs, cr.in, check);
    cr.ts = c.take_timestamp();
    cs.gen_tsc[i] = env::tsc();  // latency includes waiting for the epoch
    std::memcpy(crs + i * g_.cr_bytes, &cr, sizeof cr);
  }
  record_batch(cs, crs, *count, *final);
  return true;
}

// The members that execute a transaction that writes on the nodes
// `writers` (Plan::active): those and its home, or (calvin.active =
// writers, RCC's sync_reads) those alone, the home if there are none.
uint64_t Calvin::active_of(uint64_t writers, uint32_t home) const {
  return s_.home_executes || writers == 0 ? writers | uint64_t{1} << home : writers;
}

// The member that reports a transaction (Plan::reporter), from its input
// and declared set at home: as plan_epoch() finds it on every member.
uint32_t Calvin::reporter_of(const TxnInput& in, const DeclaredSet& d) const {
  const Database& db = e_.db();
  uint64_t writers = 0;
  for (uint32_t j = 0; j < d.n; ++j)
    if (d.e[j].mode == AccessMode::kWrite) writers |= uint64_t{1} << db.owner(d.e[j].table, d.e[j].key);
  return reporter_in(active_of(writers, in.home_node), in.home_node);
}

// A transaction's id. The member that reports it records it in its history,
// where every id must be that member's own (node, worker, coroutine): with
// calvin.active = writers the home mints it in its reporter's name, the
// sequence number carrying the home (64 nodes at most, so ids of one name
// are reused after 2^26 per coordinator, not 2^32).
uint64_t Calvin::mint_id(Coordinator& c, CoState& cs, const TxnInput& in, const DeclaredSet& d) {
  if (s_.home_executes) return c.take_txn_id();
  const uint32_t seq = (++cs.minted << 6) | me_;
  return make_txn_id(reporter_of(in, d), e_.ctx().index, c.index(), seq);
}

// Appends the batch to the recording while there is room (reserved at
// creation: no allocation here); a full recording keeps its prefix.
void Calvin::record_batch(CoState& cs, const std::byte* crs, uint32_t count, bool final) {
  if (s_.inputs.empty() || cs.record_full) return;
  const size_t bytes = 8 + count * g_.cr_bytes;
  if (cs.recorded.size() + bytes + 8 > max_inputs_bytes(s_.record_epochs, s_.epoch_size)) {
    cs.record_full = true;
    return;
  }
  const uint64_t w = count | (final ? kFinal : 0);
  const size_t at = cs.recorded.size();
  cs.recorded.resize(at + bytes);
  std::memcpy(cs.recorded.data() + at, &w, 8);
  std::memcpy(cs.recorded.data() + at + 8, crs, count * g_.cr_bytes);
}

void Calvin::write_recording(Coordinator& c) {
  CoState& cs = co_[c.index()];
  const std::string path = inputs_file(s_.inputs, me_, e_.ctx().index, c.index());
  if (cs.record_full)
    RDTX_LOG(calvin_log(), Warning, "%s: more than calvin.record_epochs = %llu epochs; the file holds the first ones",
             path.c_str(), static_cast<unsigned long long>(s_.record_epochs));
  const uint64_t sum = fnv1a(cs.recorded.data(), cs.recorded.size());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  const bool ok = f != nullptr && std::fwrite(cs.recorded.data(), 1, cs.recorded.size(), f) == cs.recorded.size() &&
                  std::fwrite(&sum, 1, 8, f) == 8;
  if (f != nullptr && std::fclose(f) != 0) fail(c, "calvin.inputs: cannot write %s", path.c_str());
  else if (!ok) fail(c, "calvin.inputs: cannot write %s", path.c_str());
}

Result<void> Calvin::load_replay(uint32_t co) {
  const std::string path = inputs_file(s_.replay, me_, e_.ctx().index, co);
  auto v = read_inputs(path, recording_fingerprint(o_, s_.epoch_size),
                       max_inputs_bytes(s_.record_epochs, s_.epoch_size), s_.record_epochs);
  if (!v.ok()) return v.error();
  co_[co].replay = std::move(*v);
  return {};
}

Result<std::unique_ptr<Protocol>> create_with(WorkerEngine& e, bool broken) {
  auto p = std::make_unique<Calvin>(e, broken);
  e.set_atomic_stages(0);  // no NIC atomic: the lock manager's CPU alone locks
  RDTX_TRY(p->init());
  return std::unique_ptr<Protocol>(std::move(p));
}
Result<std::unique_ptr<Protocol>> create(WorkerEngine& e) { return create_with(e, false); }
Result<std::unique_ptr<Protocol>> create_early_reads(WorkerEngine& e) { return create_with(e, true); }

}  // namespace

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
