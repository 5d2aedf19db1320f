// The contended run the protocol tests (fast) and the stress suite share:
// one protocol x pipeline x optimisation set on a registered workload in
// its contended setting (WorkloadDef::contended: a tiny hot set), many
// coroutines and three nodes in one thread over a 1 us latency model, with
// history recording. It returns the run's result and the history checker's
// report; the callers assert on both. The lists of runs come from the
// registries (txn::workloads(), txn::protocols()), so a new workload or
// protocol is covered without editing a test.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "cc/occ/occ.hpp"
#include "history/checker.hpp"
#include "run/runner.hpp"
#include "run/verdict.hpp"
#include "txn/protocol.hpp"
#include "txn/workload.hpp"

namespace rdtx::testing_contention {

using txn::Primitive;

inline constexpr uint32_t kNodes = 3;

struct Combo {
  std::string workload;  // a registry name (txn::workloads())
  // A registry name (broken variants: "occ-unvalidated", "sundial-unrenewed":
  // tests only), or "<name>/<variant>" (ProtocolDef::variants: "2pl/nowait").
  std::string protocol;
  Primitive fetch = Primitive::kOneSided, lock = Primitive::kOneSided, validate = Primitive::kOneSided,
            commit = Primitive::kOneSided;
  // The sequence stage (CALVIN's batch broadcast); ignored by a protocol
  // without one (left off for it).
  Primitive sequence = Primitive::kOneSided;
  bool passive_ack = true;
  uint32_t scratch_banks = 1;  // txn.options.scratch_banks
  bool unsignaled = false;     // txn.options.unsignaled_commit
  bool piggyback = false;      // txn.options.piggyback_ack
  bool doorbell = true;
  bool outstanding = true;
  bool cache = true;
  uint32_t coroutines = 8;
  uint32_t nodes = kNodes;
  uint32_t qps_per_node = 1;  // RC QPs each worker keeps to each node
  uint32_t workers_per_node = 1;
  // Replication: copies per partition (> 1: the log stage runs with `log`).
  uint32_t replicas = 1;
  Primitive log = Primitive::kRpc;
  uint32_t log_skip_every = 0;  // the broken variant: an entry left out
  // More protocol settings, after the variant's: tests' hooks no
  // configuration has (2pl.test_vote_abort_every).
  std::vector<std::pair<std::string, std::string>> settings = {};
  // Workload settings ("ycsb.scan_percent=100"), after the variant's.
  std::vector<std::string> workload_settings = {};
  // Chaos: extra shm devargs (faults), the RPC timeout, and the warm-up
  // (measuring starts after it, e.g. after an injected stall).
  std::string faults = "";
  uint64_t rpc_timeout_ns = 0;  // 0: lib/rpc's default
  double warmup_s = 0.0;
  // Each pass of the test's one thread over the workers takes at least
  // this long (run::RunConfig::single_thread_pass_ns).
  uint64_t pass_ns = 0;
  // Of `nodes`, the memory nodes of the split layout (0: symmetric;
  // cluster.memory_nodes): the workload is made for the nodes that hold data.
  uint32_t memory_nodes = 0;
  // Called with the database after the run (run::RunConfig::inspect_database).
  std::function<void(txn::Database&)> inspect = nullptr;
  // The workers on the EAL's lcores (one loop each, true parallelism: the
  // caller's main initialised the EAL with several) instead of one thread.
  bool parallel = false;
  // The broken owner atomics (txn::Options::owner_atomics_cpu: tests only).
  bool owner_atomics_cpu = false;
  // Node n's timestamp clock behind node 0's by n lags
  // (run::RunConfig::node_clock_lag_ns).
  uint64_t node_clock_lag_ns = 0;
};

inline const txn::ProtocolDef* protocol_of(const std::string& name);

inline std::string name_of(const Combo& c) {
  std::string n = c.workload + "_" + c.protocol;
  if (const txn::ProtocolDef* d = protocol_of(c.protocol)) {
    const Primitive prims[] = {c.fetch, c.lock, c.validate, Primitive::kOff, c.commit, c.sequence};
    static_assert(std::size(prims) == txn::kStages);
    for (int s = 0; s < txn::kStages; ++s)
      if (!d->allowed[s].empty() && d->allowed[s].size() + (s == 0) > 1)
        n += std::string("_") + txn::to_string(static_cast<txn::Stage>(s)) + "_" + txn::to_string(prims[s]);
  }
  if (!c.passive_ack) n += "_sync";
  if (c.scratch_banks != 1) n += "_banks" + std::to_string(c.scratch_banks);
  if (c.unsignaled) n += "_unsignaled";
  if (c.piggyback) n += "_piggyback";
  if (!c.doorbell) n += "_nodoorbell";
  if (!c.outstanding) n += "_serial";
  if (!c.cache) n += "_nocache";
  if (c.coroutines != 8) n += "_co" + std::to_string(c.coroutines);
  if (c.nodes != kNodes) n += "_n" + std::to_string(c.nodes);
  if (c.qps_per_node != 1) n += "_qps" + std::to_string(c.qps_per_node);
  if (c.workers_per_node != 1) n += "_w" + std::to_string(c.workers_per_node);
  if (c.replicas != 1) n += "_r" + std::to_string(c.replicas) + "_log_" + txn::to_string(c.log);
  if (c.memory_nodes != 0) n += "_mem" + std::to_string(c.memory_nodes) + "of" + std::to_string(c.nodes);
  if (c.parallel) n += "_parallel";
  if (c.owner_atomics_cpu) n += "_cpu_owner_atomics";
  for (char& ch : n)
    if (ch == '-' || ch == '/') ch = '_';
  return n;
}

// Every registered workload, by name, and each of its variants
// (WorkloadDef::variants) as "<workload>/<variant>".
inline std::vector<std::string> workload_names() {
  std::vector<std::string> v;
  for (const txn::WorkloadDef* w : txn::workloads()) {
    v.push_back(w->name);
    for (const txn::WorkloadVariant& var : w->variants) v.push_back(std::string(w->name) + "/" + var.name);
  }
  return v;
}

// The registry name of a workload_names() entry ("smallbank/drtmh" ->
// "smallbank").
inline std::string base_workload(const std::string& name) { return name.substr(0, name.find('/')); }

// The seed of a randomized suite: RDTX_STRESS_SEED, or a random one (printed
// by the suite so that a failure can be rerun).
inline uint64_t stress_seed() {
  static const uint64_t s = []() -> uint64_t {
    const char* e = std::getenv("RDTX_STRESS_SEED");
    if (e && *e) return std::strtoull(e, nullptr, 10);
    return uint64_t{std::random_device{}() % 1'000'000'000 + 1};
  }();
  return s;
}

inline const txn::ProtocolDef* protocol_of(const std::string& name);
inline Result<std::unique_ptr<txn::Workload>> contended_workload(const std::string& name, uint32_t nodes,
                                                                  double seconds = 0,
                                                                  const std::vector<std::string>& more = {});

// Why the configuration refuses `c` at load, by design: a text its error
// names, or "" when it runs. CALVIN refuses a
// workload with a type whose read/write set it cannot know up front
// (TPC-C's: keys computed from values read). The suites leave refused
// combinations out of their runs and the Refusals test checks each refusal.
inline std::vector<std::pair<std::string, std::string>> protocol_settings(const std::string& name);
inline bool shared_read_locks(const std::string& name);

inline std::string refusal(const Combo& c) {
  // Shared read locks go back the way they were taken (options.cpp).
  if (c.fetch != c.commit && shared_read_locks(c.protocol))
    return "to be the same primitive: a read lock is released the way it was taken";
  static std::map<std::string, std::string> known;  // (workload, protocol, replicated) -> refusal
  const std::string id =
      c.workload + "|" + c.protocol + "|" + (c.replicas > 1 ? "r" : "") + (c.fetch == Primitive::kRpc ? "|f" : "");
  if (auto it = known.find(id); it != known.end()) return it->second;
  std::string why;
  auto w = contended_workload(c.workload, 3);
  const txn::ProtocolDef* d = protocol_of(c.protocol);
  if (w.ok() && d != nullptr) {
    if (std::string(d->name).rfind("calvin", 0) == 0) {
      for (uint16_t t = 0; t < (*w)->type_names().size(); ++t)
        if (!(*w)->declares(t)) why = "does not declare the read/write set of transaction type";
    }
    if (why.empty() && (*w)->relocates() && !d->relocates_rows) why = "cannot relocate rows";
  }
  return known[id] = why;
}
inline bool refused(const Combo& c) { return !refusal(c).empty(); }
// Whether TPC-C's full mix is refused where `c` runs TPC-C/no.
inline bool full_tpcc_refused(Combo c) {
  c.workload = "tpcc";
  return refused(c);
}

// Every registered workload x every registered protocol (broken variants
// aside) x every primitive each of its stages accepts: generated from the
// registries, so a new workload or protocol is covered without editing a
// list.
inline std::vector<std::string> protocol_names();

inline std::vector<Combo> primitive_combos() {
  std::vector<Combo> v;
  for (const std::string& w : workload_names())
    for (const std::string& name : protocol_names()) {
      const txn::ProtocolDef* d = protocol_of(name);
      auto or_default = [](const txn::Primitives& a) {
        return a.empty() ? txn::Primitives{Primitive::kOneSided} : a;
      };
      const int F = 0, L = 1, V = 2, C = 4, S = 5;
      for (Primitive f : or_default(d->allowed[F]))
        for (Primitive l : or_default(d->allowed[L]))
          for (Primitive val : or_default(d->allowed[V]))
            for (Primitive c : or_default(d->allowed[C]))
              for (Primitive sq : or_default(d->allowed[S])) {
                Combo cb;
                cb.workload = w;
                cb.protocol = name;
                cb.fetch = f;
                cb.lock = l;
                cb.validate = val;
                cb.commit = c;
                cb.sequence = sq;
                if (!refused(cb)) v.push_back(cb);
              }
    }
  return v;
}

// primitive_combos() of the workloads the stress suites run
// (WorkloadDef::stress_suites): what test_stress and test_chaos start from.
inline std::vector<Combo> stress_primitive_combos() {
  std::vector<Combo> v = primitive_combos();
  std::erase_if(v, [](const Combo& c) { return !txn::find_workload(base_workload(c.workload))->stress_suites; });
  return v;
}

// True if every stage the protocol has accepts primitive `p` (the all-RPC
// runs are for protocols that have an RPC form of every stage; FaRM's lock
// and commit are mailbox only).
inline bool accepts_everywhere(const txn::ProtocolDef& d, Primitive p) {
  for (int s = 0; s < txn::kStages; ++s) {
    if (d.allowed[s].empty()) continue;
    if (std::find(d.allowed[s].begin(), d.allowed[s].end(), p) == d.allowed[s].end()) return false;
  }
  return true;
}

// Every registered protocol, broken variants aside; a protocol with
// variants (ProtocolDef::variants) as each "<name>/<variant>" ("<name>"
// for a variant named "").
inline std::vector<std::string> protocol_names() {
  std::vector<std::string> v;
  for (const txn::ProtocolDef* d : txn::protocols()) {
    if (d->broken) continue;
    if (d->variants.empty()) v.push_back(d->name);
    // A variant named "" is the defaults, under the protocol's own name.
    for (const txn::ProtocolVariant& var : d->variants)
      v.push_back(*var.name ? std::string(d->name) + "/" + var.name : std::string(d->name));
  }
  return v;
}

// What a conflict does under the protocol: aborts an attempt (most);
// makes it wait, aborting only what waits too long (2PL's Bounded Wait:
// deadlocks); aborts it or makes it wait, by timestamps (TO: a request too
// late aborts, a younger one waits for a pending write); or never aborts it
// (CALVIN grants locks in one global order, doc/txn.md "CALVIN"; its only
// aborts are the workload's own).
enum class OnConflict { kAbort, kWait, kAbortOrWait, kNever };
inline OnConflict on_conflict(const std::string& protocol) {
  if (protocol.rfind("calvin", 0) == 0) return OnConflict::kNever;
  if (protocol.rfind("2pl/bounded_wait", 0) == 0) return OnConflict::kWait;  // at every level
  if (protocol == "to") return OnConflict::kAbortOrWait;
  return OnConflict::kAbort;
}
inline bool conflicts_abort(const std::string& protocol) { return on_conflict(protocol) == OnConflict::kAbort; }

// Aborts for any reason but the workload's own (kUser).
inline uint64_t non_user_aborts(const run::RunResult& r);

// Whether a contended run shows its conflicts handled the protocol's way
// (on_conflict): "" if so, else what is missing.
inline std::string conflicts_unseen(const run::RunResult& r, const std::string& protocol) {
  switch (on_conflict(protocol)) {
    case OnConflict::kAbort:
      return r.total.aborts_total() > 0 ? "" : "no abort: the hot set must cause conflicts";
    case OnConflict::kWait:
      return r.total.lock_waits > 0 ? "" : "no lock request waited: the hot set must cause conflicts";
    case OnConflict::kAbortOrWait:
      return r.total.aborts_total() + r.total.lock_waits > 0 ? ""
                                                              : "no abort and no wait: the hot set must cause conflicts";
    case OnConflict::kNever:
      return non_user_aborts(r) == 0 ? "" : "CALVIN never aborts for a conflict";
  }
  return "";
}

// Aborts for any reason but the workload's own (kUser).
inline uint64_t non_user_aborts(const run::RunResult& r) {
  return r.total.aborts_total() - r.total.aborts[static_cast<int>(txn::AbortReason::kUser)];
}

// The count of aborts whose reason has this key ("lock_conflict", ...).
inline uint64_t aborts_named(const run::RunResult& r, const char* key) {
  for (size_t k = 0; k < r.abort_reasons.size(); ++k)
    if (std::string(r.abort_reasons[k].key) == key) return r.total.aborts[k];
  return 0;
}

struct Outcome {
  run::RunResult run;
  history::CheckReport check;
  std::string check_text;  // format_report(), for failure messages
  // The run's workload after its check (what check_total() remembered:
  // writeskew's skewed_pairs()).
  std::unique_ptr<txn::Workload> workload;
};

inline const txn::ProtocolDef* protocol_of(const std::string& name) {
  return txn::find_protocol(name.substr(0, name.find('/')));
}

// The settings of a "<name>/<variant>" protocol (none for a plain name).
inline std::vector<std::pair<std::string, std::string>> protocol_settings(const std::string& name) {
  std::vector<std::pair<std::string, std::string>> v;
  const size_t slash = name.find('/');
  const txn::ProtocolDef* d = protocol_of(name);
  if (slash == std::string::npos || d == nullptr) return v;
  for (const txn::ProtocolVariant& var : d->variants)
    if (name.compare(slash + 1, std::string::npos, var.name) == 0)
      for (const auto& [k, val] : var.settings) v.emplace_back(k, val);
  return v;
}

// Whether a "<name>/<variant>" protocol runs with shared read locks
// (txn.options.read_locks = shared: nowait/shared, waitdie/shared).
inline bool shared_read_locks(const std::string& name) {
  for (const auto& [k, v] : protocol_settings(name))
    if (k == "txn.options.read_locks" && v == "shared") return true;
  return false;
}

// The workload `name` in its contended setting for `nodes` nodes: its keys'
// defaults with WorkloadDef::contended applied. Errors name the workload and
// the key (an override the workload's schema refuses, say).
// `seconds` (the measured time of the run it is for): a run no longer than
// WorkloadDef::kShortRunSeconds gets the workload's short_run overrides too.
inline Result<std::unique_ptr<txn::Workload>> contended_workload(const std::string& name, uint32_t nodes,
                                                                  double seconds,
                                                                  const std::vector<std::string>& more) {
  const txn::WorkloadDef* def = txn::find_workload(base_workload(name));
  if (def == nullptr) return make_error(EINVAL, "unknown workload '%s'", name.c_str());
  config::Schema schema;
  def->add_schema(schema);
  std::vector<std::string> overrides(def->contended.begin(), def->contended.end());
  if (size_t slash = name.find('/'); slash != std::string::npos) {
    const txn::WorkloadVariant* var = nullptr;
    for (const txn::WorkloadVariant& v : def->variants)
      if (name.compare(slash + 1, std::string::npos, v.name) == 0) var = &v;
    if (var == nullptr) return make_error(EINVAL, "unknown workload variant '%s'", name.c_str());
    overrides.assign(var->overrides.begin(), var->overrides.end());
  }
  if (seconds > 0 && seconds <= txn::WorkloadDef::kShortRunSeconds)
    overrides.insert(overrides.end(), def->short_run.begin(), def->short_run.end());
  overrides.insert(overrides.end(), more.begin(), more.end());
  auto cfg = config::Config::parse(schema, "", name + ".contended", overrides);
  if (!cfg.ok()) return make_error(cfg.error().code, "workload '%s': %s", name.c_str(), cfg.error().message.c_str());
  auto w = def->create(*cfg, nodes);
  if (!w.ok()) return make_error(w.error().code, "workload '%s': %s", name.c_str(), w.error().message.c_str());
  return w;
}

// Runs `c` for `seconds` with `seed` and checks the history it recorded.
inline Result<Outcome> run_contended(const Combo& c, uint64_t seed, double seconds) {
  const uint32_t data_nodes = c.memory_nodes != 0 ? c.memory_nodes : c.nodes;
  auto workload = contended_workload(c.workload, data_nodes, c.warmup_s + seconds, c.workload_settings);
  if (!workload.ok()) return workload.error();

  run::RunConfig rc;
  rc.workload = workload->get();
  rc.cluster.nodes = c.nodes;
  rc.cluster.memory_nodes = c.memory_nodes;
  rc.inspect_database = c.inspect;
  rc.cluster.workers_per_node = c.workers_per_node;
  rc.cluster.qps_per_node = c.qps_per_node;
  rc.cluster.replicas = c.replicas;
  rc.options.pipeline[static_cast<int>(txn::Stage::kLog)] = c.replicas > 1 ? c.log : Primitive::kOff;
  rc.options.log_skip_every = c.log_skip_every;
  // A 1 us latency model: operations take effect and complete later than
  // they are posted, so coroutines interleave at every step. (With zero
  // latency one thread serialises them so tightly that even OCC without
  // validation keeps the invariant.)
  // The latency model's 1 us, unless the faults give another.
  const bool latency = c.faults.find("latency_ns=") != std::string::npos;
  rc.cluster.devargs = std::string(latency ? "shm" : "shm,latency_ns=1000") + (c.faults.empty() ? "" : "," + c.faults);
  // RDTX_TEST_DEVARGS: the same runs on another device (scripts/rdma-field-test
  // runs the protocol suite's combinations over verbs on Soft-RoCE with it).
  // shm's faults and latency model do not exist there: a case that asks for
  // faults is refused, naming why.
  if (const char* d = std::getenv("RDTX_TEST_DEVARGS"); d != nullptr && *d != '\0') {
    if (!c.faults.empty())
      return make_error(ENOTSUP, "faults '%s' are shm's; RDTX_TEST_DEVARGS = '%s' names another device",
                        c.faults.c_str(), d);
    rc.cluster.devargs = d;
  }
  if (c.rpc_timeout_ns != 0) rc.cluster.rpc.timeout_ns = c.rpc_timeout_ns;
  rc.cluster.rpc.recv_buffers = 256;
  rc.cluster.rpc.send_buffers = 256;
  rc.protocol = protocol_of(c.protocol);
  if (rc.protocol == nullptr) return make_error(EINVAL, "unknown protocol '%s'", c.protocol.c_str());
  // The protocol's own level (its strongest), unless a variant asks for a
  // weaker one.
  rc.options.isolation = rc.protocol->isolation;
  // A variant's settings: the protocol's own keys, txn.isolation and
  // txn.options.read_locks.
  for (const auto& [k, v] : protocol_settings(c.protocol)) {
    if (k == "txn.isolation")
      rc.options.isolation = v == "read_committed"    ? txn::Isolation::kReadCommitted
                             : v == "repeatable_read" ? txn::Isolation::kRepeatableRead
                                                      : txn::Isolation::kSerializable;
    else if (k == "txn.options.read_locks")
      rc.options.read_locks = v == "shared" ? txn::ReadLocks::kShared : txn::ReadLocks::kExclusive;
    else
      rc.options.protocol_settings.emplace_back(k, v);
  }
  for (const auto& kv : c.settings) rc.options.protocol_settings.push_back(kv);
  rc.options.coroutines = c.coroutines;
  // FaRM's message logs hold a LOCK record of every write of a transaction
  // to one primary: with records as large as TPC-C's customers (664 bytes)
  // that needs a larger log than the default, as conf/tpcc/farm-mailbox.toml
  // sets (txn.log_ring_kb = 1024).
  uint32_t max_record = 0;
  for (const txn::TableDef& t : (*workload)->tables(data_nodes)) max_record = std::max(max_record, t.record_bytes);
  if (max_record > 256) rc.options.log_ring_bytes = uint64_t{1} << 20;
  rc.options.pipeline[static_cast<int>(txn::Stage::kFetch)] = c.fetch;
  rc.options.pipeline[static_cast<int>(txn::Stage::kLock)] = c.lock;
  rc.options.pipeline[static_cast<int>(txn::Stage::kValidate)] = c.validate;
  rc.options.pipeline[static_cast<int>(txn::Stage::kCommit)] = c.commit;
  // A Combo's defaults (one-sided) for a stage the protocol has only in
  // other forms: its first, as the configuration does (FaRM: mailbox).
  for (int s = 0; s < txn::kStages; ++s) {
    const auto& allowed = rc.protocol->allowed[s];
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), rc.options.pipeline[s]) == allowed.end())
      rc.options.pipeline[s] = allowed[0];
  }
  rc.options.pipeline[static_cast<int>(txn::Stage::kSequence)] =
      rc.protocol->allowed[static_cast<int>(txn::Stage::kSequence)].empty() ? Primitive::kOff : c.sequence;
  rc.options.passive_ack = c.passive_ack;
  rc.options.scratch_banks = c.scratch_banks;
  rc.options.unsignaled_commit = c.unsignaled;
  rc.options.piggyback_ack = c.piggyback;
  rc.options.doorbell_batching = c.doorbell;
  rc.options.outstanding_requests = c.outstanding;
  rc.options.location_cache = c.cache;
  rc.options.record_history = true;
  rc.options.record_aborted = true;
  rc.options.history_capacity_bytes = size_t{32} << 20;
  rc.warmup_s = c.warmup_s;
  rc.duration_s = seconds;
  rc.seed = seed;
  rc.single_thread = !c.parallel;
  rc.single_thread_pass_ns = c.pass_ns;
  rc.options.owner_atomics_cpu = c.owner_atomics_cpu;
  rc.node_clock_lag_ns = c.node_clock_lag_ns;
  auto r = run::run(rc);
  if (!r.ok()) return r.error();
  Outcome out;
  out.run = std::move(*r);
  auto h = run::merged_history(out.run);
  if (!h.ok()) return h.error();
  // At the isolation level the protocol claims.
  auto rep = history::check(*h, txn::check_options(out.run.isolation));
  if (!rep.ok()) return rep.error();
  out.check = std::move(*rep);
  out.check_text = history::format_report(out.check, 3);
  out.workload = std::move(*workload);
  return out;
}

// Caught: the history is not certified, or the run's own checks failed: a
// row inserted twice (insert_errors: two inserters the guard did not
// serialise, TPC-C's New-Orders on one D_NEXT_O_ID) or a workload condition
// broken. (TPC-C/no's anomalies under a broken protocol often show so
// first: the second New-Order of a lost update fails its insert.)
// The run's verdict (run/verdict.hpp, what rdtx-bench checks) with the
// outcome's history: "" if every check passed, else the failed ones, a line
// each. Tests' windows are short: no steady-state check.
inline std::string verdict_failures(const Outcome& o, run::VerdictOptions opts = {}) {
  run::HistoryVerdict hv;
  hv.certified = o.check.certified;
  hv.anomalies = o.check.anomalies();
  hv.message = o.check_text;
  hv.committed = o.check.stats.committed;
  opts.history = &hv;
  opts.steady_state = false;
  return run::failures(run::verdict(o.run, opts));
}
// The same on a fault-free fabric: no call may time out and no attempt
// abort on the network.
inline std::string strict_verdict_failures(const Outcome& o) {
  run::VerdictOptions opts;
  opts.timeouts_allowed = false;
  return verdict_failures(o, opts);
}

inline bool caught(const Outcome& o) {
  return !o.check.certified || o.run.total.insert_errors > 0 || !o.run.invariants.ok();
}
inline std::string what_caught(const Outcome& o) {
  return o.check_text + "\ninsert errors " + std::to_string(o.run.total.insert_errors) + ", invariants " +
         (o.run.invariants.ok() ? "ok" : o.run.invariants.error().message);
}

// A broken variant whose anomaly needs a rare interleaving: up to `tries`
// runs of `seconds` with seeds first_seed, first_seed+1, ... until one is
// caught (one is enough in most runs of an optimised build; a sanitizer
// build commits 10-20x fewer transactions, and a busy machine interleaves
// less). `each` checks every run; the result is the first caught run, or
// the last.
template <typename Each>
Result<Outcome> until_caught(const Combo& cb, uint64_t first_seed, double seconds, Each each, int tries = 8) {
  Result<Outcome> out = make_error(EINVAL, "not run");
  for (int i = 0; i < tries; ++i) {
    out = run_contended(cb, first_seed + static_cast<uint64_t>(i), seconds);
    if (!out.ok()) break;
    each(*out);
    if (caught(*out)) break;
  }
  return out;
}

// Writes the run's history files to `dir` (which must exist), for rdtx-check.
inline Result<void> write_histories(const run::RunResult& r, const std::string& dir) {
  for (const history::Recorder& rec : r.histories) {
    const auto& o = rec.options();
    RDTX_TRY(rec.write_file(dir + "/" + history::Recorder::file_name(o.node, o.worker)));
  }
  return {};
}

// "commits 123, attempts 456, lock conflict 7, lock requests that waited 3,
// ..." for failure messages.
inline std::string summary(const run::RunResult& r) {
  std::string s = "commits " + std::to_string(r.total.commits) + ", attempts " + std::to_string(r.total.attempts) +
                  ", rpc timeouts " + std::to_string(r.rpc_timeouts);
  for (size_t k = 0; k < r.abort_reasons.size(); ++k)
    if (r.total.aborts[k]) s += std::string(", ") + r.abort_reasons[k].text + " " + std::to_string(r.total.aborts[k]);
  // Every other counter that moved (lock waits, log ring waits, ...).
  for (const txn::WorkerCounter& c : txn::kWorkerCounters) {
    if (c.is_signed() || c.u64 == &txn::WorkerStats::commits || c.u64 == &txn::WorkerStats::attempts) continue;
    if (const uint64_t v = r.total.*c.u64; v != 0) s += std::string(", ") + c.text + " " + std::to_string(v);
  }
  return s;
}

}  // namespace rdtx::testing_contention
