#include "txn/options.hpp"

#include "txn/coordinator.hpp"

#include <algorithm>
#include <cstdlib>

namespace rdtx::txn {

namespace {
constexpr const char* kStageKeys[] = {"txn.pipeline.fetch", "txn.pipeline.lock", "txn.pipeline.validate",
                                      "txn.pipeline.log", "txn.pipeline.commit", "txn.pipeline.sequence"};
static_assert(std::size(kStageKeys) == static_cast<size_t>(Stage::kCount_));
const std::vector<std::string> kPrimitives = {"onesided", "rpc", "hybrid", "off", "mailbox"};

Primitive parse_primitive(const std::string& s) {
  if (s == "rpc") return Primitive::kRpc;
  if (s == "hybrid") return Primitive::kHybrid;
  if (s == "off") return Primitive::kOff;
  if (s == "mailbox") return Primitive::kMailbox;
  return Primitive::kOneSided;
}

// A txn.isolation value (the schema admits only these); "protocol": the
// protocol's own level (`own`).
Isolation isolation_of(const std::string& s, Isolation own) {
  if (s == "read_committed") return Isolation::kReadCommitted;
  if (s == "repeatable_read") return Isolation::kRepeatableRead;
  if (s == "snapshot") return Isolation::kSnapshot;
  if (s == "serializable") return Isolation::kSerializable;
  return own;
}
Isolation own_isolation(const config::Config& cfg) {
  const ProtocolDef* p = find_protocol(cfg.get_string("txn.protocol"));
  return p != nullptr ? p->isolation : Isolation::kSerializable;
}
}  // namespace

void add_schema(config::Schema& schema, const std::vector<const ProtocolDef*>& protocols) {
  std::vector<std::string> names;
  for (const ProtocolDef* p : protocols)
    if (!p->broken) names.push_back(p->name);
  schema.add_enum("txn.protocol", "occ", names, "concurrency-control protocol");
  schema.add_enum("txn.isolation", "protocol",
                  {"protocol", "serializable", "snapshot", "repeatable_read", "read_committed"},
                  "isolation level asked of the protocol (the history check certifies it): protocol, its own (every "
                  "protocol's is serializable but namdb's, snapshot), or repeatable_read or read_committed where "
                  "the protocol offers them (2pl: read locks held to the end without phantom protection, or "
                  "released after the read)");
  schema.add_int("txn.coroutines", 8, 1, kMaxCoroutines, "coordinator coroutines per worker");
  schema.add_int("txn.max_retries", 0, 0, 1'000'000, "attempts per transaction before giving up (0: until commit)");
  schema.add_int("txn.backoff_ns", 2000, 0, 10'000'000, "initial random backoff before retrying an aborted transaction");
  schema.add_enum("txn.pipeline.fetch", "onesided", kPrimitives, "fetch stage primitive");
  schema.add_enum("txn.pipeline.lock", "onesided", kPrimitives, "lock stage primitive");
  schema.add_enum("txn.pipeline.validate", "onesided", kPrimitives, "validate stage primitive");
  schema.add_enum("txn.pipeline.log", "off", kPrimitives,
                  "log stage primitive: redo entries to the backups (cluster.replicas > 1): onesided, rpc or off");
  schema.add_int("txn.log_ring_kb", 256, 16, 1 << 16,
                 "replication: KiB of each log ring; each worker has one per node, for that node's worker of the same index (a power of two)");
  schema.add_check([](const config::Config& cfg) -> std::string {
    const int64_t n = cfg.get_int("txn.log_ring_kb");
    if ((n & (n - 1)) == 0) return "";
    return "txn.log_ring_kb = " + std::to_string(n) + " (" + cfg.origin("txn.log_ring_kb") + ") must be a power of two";
  });
  schema.add_enum("txn.pipeline.commit", "onesided", kPrimitives, "commit stage primitive");
  schema.add_enum("txn.pipeline.sequence", "off", kPrimitives,
                  "sequence stage primitive (CALVIN's epoch batch broadcast; off for every other protocol)");
  schema.add_bool("txn.options.doorbell_batching", true, "post a batch of verbs to one QP with one doorbell");
  schema.add_bool("txn.options.outstanding_requests", true,
                  "send a stage's requests to all nodes at once and wait once (off: one-sided verbs node by node, RPC calls one by one)");
  schema.add_bool("txn.options.passive_ack", true, "do not wait for commit/release acknowledgements");
  schema.add_bool("txn.options.unsignaled_commit", false,
                  "with passive_ack: one-sided commit/release requests posted unsignaled, confirmed by a later "
                  "signaled request on the same QP (DrTM+H); false: each batch's last request per node is signaled");
  schema.add_bool("txn.options.piggyback_ack", false,
                  "with passive_ack: RPC write-back/release replies ride on the owner's next message to the "
                  "coordinator (or go after 20 us) instead of at once (DrTM+H)");
  for (const char* key : {"txn.options.unsignaled_commit", "txn.options.piggyback_ack"})
    schema.add_check([key](const config::Config& cfg) -> std::string {
      if (!cfg.get_bool(key) || cfg.get_bool("txn.options.passive_ack")) return "";
      return std::string(key) + " = true (" + cfg.origin(key) + ") needs txn.options.passive_ack = true (" +
             cfg.origin("txn.options.passive_ack") + "): an awaited commit is acknowledged at once";
    });
  schema.add_int("txn.options.scratch_banks", 1, 1, 2,
                 "scratch banks per coroutine: 2 = a passively acknowledged commit is awaited only before its bank "
                 "is reused, two transactions later (DrTM+H); 1 = before the coroutine's next transaction");
  schema.add_enum("txn.options.read_locks", "exclusive", {"exclusive", "shared"},
                  "nowait and waitdie: the lock a read takes: exclusive (one lock per record for reads and writes, "
                  "as RCC measures) or shared (readers share a record; a writer needs it free)");
  schema.add_bool("txn.options.location_cache", true, "cache remote tuple addresses (one READ per hit)");
  schema.add_int("txn.options.location_cache_entries", 1 << 16, 4, 1 << 26, "location cache entries per worker");
  schema.add_bool("stats.breakdown", true,
                  "time each stage and count verbs, doorbells and bytes per transaction (off: measure the cost)");
  schema.add_int("stats.breakdown_sample", 16, 1, 1 << 20,
                 "time the stages of one attempt in this many (a power of two; 1: every attempt)");
  schema.add_check([](const config::Config& cfg) -> std::string {
    const int64_t n = cfg.get_int("stats.breakdown_sample");
    if ((n & (n - 1)) == 0) return "";
    return "stats.breakdown_sample = " + std::to_string(n) + " (" + cfg.origin("stats.breakdown_sample") +
           ") must be a power of two";
  });
  schema.add_bool("history.record", false,
                  "record every committed attempt's reads and writes (adds a hidden writer id to each tuple)");
  schema.add_bool("history.record_aborted", false, "also record aborted attempts with their abort reason");
  schema.add_int("history.clock_skew_us", 0, 0, 60'000'000,
                 "strict serializability across hosts: the most their clocks may disagree (us); 0: real-time order "
                 "is checked within each host only");
  schema.add_int("history.capacity_mb", 2, 1, 1024,
                 "history buffer per worker (MiB, two halves); the history streams through it to a file, so it "
                 "bounds memory, not the history");
  schema.add_check([](const config::Config& cfg) -> std::string {
    if (cfg.get_bool("history.record_aborted") && !cfg.get_bool("history.record"))
      return "history.record_aborted = true (" + cfg.origin("history.record_aborted") +
             ") needs history.record = true";
    return "";
  });
  // The protocols' own keys, once per distinct function (a broken variant
  // shares its protocol's).
  std::vector<void (*)(config::Schema&)> added;
  for (const ProtocolDef* p : protocols)
    if (p->add_schema != nullptr && std::find(added.begin(), added.end(), p->add_schema) == added.end()) {
      p->add_schema(schema);
      added.push_back(p->add_schema);
    }
  std::vector<const ProtocolDef*> copy = protocols;
  schema.add_check([copy](const config::Config& cfg) -> std::string {
    const std::string& name = cfg.get_string("txn.protocol");
    for (const ProtocolDef* p : copy)
      if (name == p->name) return check_pipeline(cfg, *p);
    return "";
  });
}

std::string check_pipeline(const config::Config& cfg, const ProtocolDef& def) {
  {
    const std::string& level = cfg.get_string("txn.isolation");
    const Isolation want = isolation_of(level, def.isolation);
    if (!offers(def, want))
      return "txn.isolation = '" + level + "' (" + cfg.origin("txn.isolation") + "): protocol '" + def.name +
             "' runs at " + to_string(def.isolation) + " only";
  }
  if (cfg.get_string("txn.options.read_locks") == "shared") {
    const std::string& origin = cfg.origin("txn.options.read_locks");
    if (!def.shared_read_locks)
      return "txn.options.read_locks = 'shared' (" + origin + "): protocol '" + def.name +
             "' has no shared read locks (nowait and waitdie have)";
    // A read lock is given back in the form it was taken: FAA -1 one-sided,
    // or through the owner, which alone knows which attempts hold it.
    const std::string& fetch = cfg.get_string("txn.pipeline.fetch");
    const std::string& commit = cfg.get_string("txn.pipeline.commit");
    if (fetch != commit)
      return "txn.options.read_locks = 'shared' (" + origin + ") needs txn.pipeline.fetch (" + fetch + ", " +
             cfg.origin("txn.pipeline.fetch") + ") and txn.pipeline.commit (" + commit + ", " +
             cfg.origin("txn.pipeline.commit") +
             ") to be the same primitive: a read lock is released the way it "
             "was taken";
  }
  std::string stages;
  for (int s = 0; s < static_cast<int>(Stage::kCount_); ++s)
    if (!def.allowed[s].empty()) stages += (stages.empty() ? "" : ", ") + std::string(to_string(static_cast<Stage>(s)));
  for (int s = 0; s < static_cast<int>(Stage::kCount_); ++s) {
    const char* key = kStageKeys[s];
    const std::string& v = cfg.get_string(key);
    const std::string& origin = cfg.origin(key);
    const auto& allowed = def.allowed[s];
    // The log stage is the engine's (replication.hpp), for every protocol
    // that can take it; whether it must be on follows from cluster.replicas,
    // which the application checks.
    if (static_cast<Stage>(s) == Stage::kLog) {
      if (v == "off") continue;
      if (!def.replicable)
        return std::string(key) + " = '" + v + "' (" + origin + "): protocol '" + def.name +
               "' does not replicate through the log stage; only 'off' is accepted";
      if (v != "rpc" && v != "onesided")
        return std::string(key) + " = '" + v + "' (" + origin + ") is not a log primitive (allowed: onesided, rpc, off)";
      continue;
    }
    if (allowed.empty()) {
      if (origin == "default") continue;
      if (static_cast<Stage>(s) == Stage::kSequence && v == "off") continue;
      return std::string(key) + " = '" + v + "' (" + origin + ") does not apply to protocol '" + def.name +
             "' (its stages: " + stages + ")";
    }
    bool ok = false;
    std::string list;
    // A stage left at its default that the protocol does not take in that
    // form runs in the protocol's first (FaRM's lock and commit: mailbox).
    if (origin == "default") continue;
    for (Primitive p : allowed) {
      ok |= v == to_string(p);
      list += (list.empty() ? "" : ", ") + std::string(to_string(p));
    }
    if (!ok)
      return std::string(key) + " = '" + v + "' (" + origin + ") is not supported by protocol '" + def.name +
             "' (allowed: " + list + ")";
  }
  return "";
}

Options options_from(const config::Config& cfg) {
  Options o;
  o.protocol = cfg.get_string("txn.protocol");
  o.isolation = isolation_of(cfg.get_string("txn.isolation"), own_isolation(cfg));
  o.read_locks = cfg.get_string("txn.options.read_locks") == "shared" ? ReadLocks::kShared : ReadLocks::kExclusive;
  o.coroutines = static_cast<uint32_t>(cfg.get_int("txn.coroutines"));
  o.max_retries = static_cast<uint32_t>(cfg.get_int("txn.max_retries"));
  o.backoff_ns = static_cast<uint32_t>(cfg.get_int("txn.backoff_ns"));
  o.log_ring_bytes = static_cast<uint64_t>(cfg.get_int("txn.log_ring_kb")) << 10;
  const ProtocolDef* def = find_protocol(o.protocol);
  for (int s = 0; s < static_cast<int>(Stage::kCount_); ++s) {
    o.pipeline[s] = parse_primitive(cfg.get_string(kStageKeys[s]));
    // A default the protocol does not take: its first primitive for the
    // stage (check_pipeline() lets defaults through).
    if (def != nullptr && !def->allowed[s].empty() && cfg.origin(kStageKeys[s]) == "default" &&
        std::find(def->allowed[s].begin(), def->allowed[s].end(), o.pipeline[s]) == def->allowed[s].end())
      o.pipeline[s] = def->allowed[s][0];
  }
  o.doorbell_batching = cfg.get_bool("txn.options.doorbell_batching");
  o.outstanding_requests = cfg.get_bool("txn.options.outstanding_requests");
  o.passive_ack = cfg.get_bool("txn.options.passive_ack");
  o.unsignaled_commit = cfg.get_bool("txn.options.unsignaled_commit");
  o.piggyback_ack = cfg.get_bool("txn.options.piggyback_ack");
  o.scratch_banks = static_cast<uint32_t>(cfg.get_int("txn.options.scratch_banks"));
  o.location_cache = cfg.get_bool("txn.options.location_cache");
  o.location_cache_entries = static_cast<uint32_t>(cfg.get_int("txn.options.location_cache_entries"));
  o.breakdown = cfg.get_bool("stats.breakdown");
  o.breakdown_sample = static_cast<uint32_t>(cfg.get_int("stats.breakdown_sample"));
  o.record_history = cfg.get_bool("history.record");
  o.record_aborted = cfg.get_bool("history.record_aborted");
  o.history_capacity_bytes = static_cast<uint64_t>(cfg.get_int("history.capacity_mb")) << 20;
  // The protocols' keys: whatever their add_schema declares (a throwaway
  // schema names them), copied as strings.
  config::Schema own;
  std::vector<void (*)(config::Schema&)> added;
  for (const ProtocolDef* p : txn::protocols())
    if (p->add_schema != nullptr && std::find(added.begin(), added.end(), p->add_schema) == added.end()) {
      p->add_schema(own);
      added.push_back(p->add_schema);
    }
  for (const auto& [path, value] : cfg.flat())
    if (own.find(path) != nullptr) o.protocol_settings.emplace_back(path, value);
  o.input_fingerprint = input_fingerprint_of(cfg);
  return o;
}

uint64_t input_fingerprint_of(const config::Config& cfg) {
  std::string workload;
  for (const auto& [path, value] : cfg.flat())
    if (path == "workload") workload = value.size() >= 2 ? value.substr(1, value.size() - 2) : value;
  // FNV-1a over "key=value\n" of the keys the inputs depend on, in key order.
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& [path, value] : cfg.flat()) {
    const bool wanted = path == "workload" || (!workload.empty() && path.rfind(workload + ".", 0) == 0) ||
                        path == "cluster.nodes" || path == "cluster.workers_per_node" ||
                        path == "cluster.memory_nodes" || path == "txn.coroutines";
    if (!wanted) continue;
    for (char ch : path + "=" + value + "\n") h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
  }
  return h;
}

int64_t Options::setting_int(std::string_view path, int64_t def) const {
  for (const auto& [k, v] : protocol_settings)
    if (k == path) return std::strtoll(v.c_str(), nullptr, 10);
  return def;
}

std::string Options::setting_string(std::string_view path, std::string def) const {
  for (const auto& [k, v] : protocol_settings)
    if (k == path) return v.size() >= 2 && v.front() == '"' && v.back() == '"' ? v.substr(1, v.size() - 2) : v;
  return def;
}

}  // namespace rdtx::txn
