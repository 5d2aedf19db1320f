// Runs a workload on an embedded cluster with one protocol: builds the
// cluster and database, loads every node's partition, starts the
// coordinators on every worker (on the compute nodes' workers alone when
// the memory nodes are apart: cluster::ClusterConfig::memory_nodes), runs
// for the warm-up and the measured duration, stops, and checks the outcome
// (the workload's invariants, and that no lock is left held). rdtx-bench
// and the tests use it.
//
// The run harness, one concern per file:
//   runner.cpp       set-up, the measured window, draining, the checks
//   progress.cpp     the progress line (and the ticker thread it runs on)
//   telemetry.cpp    the run's telemetry commands (/rdtx/stats, /rdtx/workers)
//   result_wire.cpp  the byte encoding of a node's results and their
//                    exchange between node processes
// Thread-safety: call from the main thread (it launches the lcores).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "cluster/bootstrap.hpp"
#include "cluster/cluster.hpp"
#include "env/virtual_clock.hpp"
#include "history/history.hpp"
#include "history/recorder.hpp"
#include "runtime/loop.hpp"
#include "txn/engine.hpp"
#include "txn/fault.hpp"
#include "txn/recovery.hpp"

namespace rdtx::run {

// A multi-process run's membership service (rdtx-bench's
// cluster.coordinator: leases and configurations, doc/membership.md). With
// one, a peer lost while the run goes on is its to judge, not the
// bootstrap's: the run ends when verdict() says so.
class RunMembership {
 public:
  virtual ~RunMembership() = default;
  // Collective over the bootstrap, once the cluster is built and before
  // barrier "loaded": the service's own connections over the fabric.
  virtual Result<void> attach(cluster::Cluster& c) = 0;
  // With the bootstrap's monitor, right after barrier "loaded".
  virtual void start() = 0;
  // Polled every 20 ms while the run goes on (any thread): an error ends
  // this node's run with it.
  virtual std::optional<Error> verdict() = 0;
  // Before barrier "drained" (or when the run ends early).
  virtual void stop() = 0;
  // This node halted (runtime::request_halt: fenced, removed, deposed):
  // waits, within a bound of the service's, for the verdict that says why.
  virtual Error await_verdict() = 0;
  // Before start(): how this node resolves the transactions of nodes a new
  // configuration removed (txn::resolve_removed over the service's
  // collective among the survivors); returns a line for the log. Unset: a
  // removal ends the run.
  using Recover = std::function<Result<std::string>(uint64_t removed, const txn::RecoveryExchange& exchange)>;
  virtual void set_recovery(Recover) {}
};

struct RunConfig {
  cluster::ClusterConfig cluster;
  txn::Options options;
  const txn::ProtocolDef* protocol = nullptr;
  txn::Workload* workload = nullptr;
  double warmup_s = 0.2;
  double duration_s = 1.0;
  uint64_t seed = 1;
  runtime::IdlePolicy idle = runtime::IdlePolicy::kAuto;
  // Multi-process on one host: the other node processes here and this
  // process's CPUs, which idle = auto accounts for (Cluster::HostShare).
  cluster::HostShare host_share;
  // Run every worker on the calling thread (deterministic order; tests).
  bool single_thread = false;
  // With single_thread: each pass over the workers takes at least this
  // long (tests: a loop as slow as a sanitizer build's, where one pass
  // outlasts the retry backoff and the network latency).
  uint64_t single_thread_pass_ns = 0;
  // Virtual time (doc/runtime.md "Virtual time"): every worker on the
  // calling thread, each on a virtual clock of its own, the one whose clock
  // is smallest running next; the shm driver's models, timers and every
  // figure (duration, warm-up, throughput, latency) in virtual time. With
  // the modelled cost a run is deterministic for a seed. Refused (EINVAL)
  // for a multi-process node, a driver other than shm, or more than one
  // EAL lcore.
  struct VirtualTime {
    bool on = false;
    env::VirtualCost cost = env::VirtualCost::kMeasured;
    env::CostModel model;            // cost = kModel
    uint64_t max_pass_ns = 200'000;  // cost = kMeasured: cap on one pass (preemption)
  } virtual_time;
  // Multi-process (cluster.mode = "process"): this process runs node
  // bootstrap->self() of the cluster; the others run the same RunConfig in
  // their own processes. nullptr: every node in this process.
  cluster::Bootstrap* bootstrap = nullptr;
  // Multi-process: the membership service, if any (RunMembership).
  RunMembership* membership = nullptr;
  // Multi-process: this process kills itself (SIGKILL, no cleanup: a
  // machine that dies) this many seconds into the measured window, saying
  // when on stderr first (rdtx-bench's fault.kill_node). Negative: never.
  double crash_at_s = -1;
  // Where it dies then: at that time (kNone), or, armed then, at the next
  // attempt that reaches a point of the commit protocol (txn/fault.hpp).
  txn::fault::KillPoint crash_point = txn::fault::KillPoint::kNone;
  // Tests only (fault.broken_recovery): recovery drops a removed
  // coordinator's committed writes (txn::resolve_removed's skip_install).
  bool broken_recovery = false;
  // A progress line on stderr every this many seconds (0: none).
  double progress_interval_s = 0;
  // Identifies the run in recorded histories (options.record_history); 0
  // picks one from the clock.
  uint64_t run_id = 0;
  // Tests: node n's timestamp clock (WorkerEngine::epoch) runs n times this
  // far behind, as the clocks of two hosts, or of processes started apart,
  // disagree: what makes a timestamp-ordered protocol (MVCC) give a
  // transaction invoked after another's commit an older snapshot.
  uint64_t node_clock_lag_ns = 0;
  // Called with the database after the run, before it goes (tests: a
  // checksum of the final state). Local nodes only in process mode.
  std::function<void(txn::Database&)> inspect_database;
};

struct RunResult {
  // Multi-process: node 0's result covers every node (per_worker of all
  // nodes, merged total, checks); another node's covers its own workers
  // (its checks are the cluster's: invariants and locks are exchanged).
  uint32_t node = 0;      // the node whose process this is (0 in process mode's aggregate)
  bool aggregate = true;  // the figures cover every node of the cluster
  // The figures' workers run coordinators: false for another node's result
  // when that node is a memory node of the split layout (it commits
  // nothing by design).
  bool coordinates = true;
  double seconds = 0;  // measured window (virtual seconds in virtual time)
  // Ticks per second of every *_tsc figure (latency histograms, phase
  // times): the TSC's, or in virtual time the virtual clock's (1 GHz).
  uint64_t tsc_hz = 0;
  // Virtual time: how the run went (on = false: real time).
  struct VirtualTimeResult {
    bool on = false;
    env::VirtualCost cost = env::VirtualCost::kMeasured;
    double wall_seconds = 0;     // warm-up, window and drain, in real time
    double virtual_seconds = 0;  // the same in virtual time
    uint64_t passes = 0;
    uint64_t idle_passes = 0;    // passes that did no work
    uint64_t capped_passes = 0;  // kMeasured: passes cut to max_pass_ns
    // kMeasured: whether preemptions were detected (rseq), and how many:
    // their passes counted the thread's CPU time, not the real time.
    bool detects_preemption = false;
    uint64_t preemptions = 0;
    // What the passes did, as the cost model counts it (env::CostUnit):
    // measured runs too, to fit run.virtual_*_ns to.
    uint64_t work_units = 0, resumes = 0;
    double spent_seconds = 0;                 // virtual time spent in busy waits (doorbells, computation)
    std::vector<runtime::LoopStats> workers;  // per worker: busy/idle virtual ticks, passes
  } virtual_time;
  txn::WorkerStats total;  // merged over workers
  std::vector<txn::WorkerStats> per_worker;
  std::vector<runtime::LoopStats> loops;
  // The idle policy the loops ran (auto resolved); kAuto: single thread.
  runtime::IdlePolicy idle = runtime::IdlePolicy::kAuto;
  uint64_t locks_left = 0;  // tuples still locked after the run
  // Coroutines (coordinators, services) still running when the drain
  // gave up: a run that did not end cleanly (a stalled peer, lost messages).
  uint64_t tasks_left = 0;
  // Multi-process: why the run was cut short, when a peer was lost (the
  // bootstrap's monitor) or the membership ended it (a member removed, its
  // store lost): this node's figures alone then (aggregate false), the
  // cluster's checks not made. "" for a run that ended as planned.
  std::string cut_short;
  // Multi-process: the nodes removed during the run that the run went on
  // without (cluster::Bootstrap::excluded() at its end, and the slots node
  // 0 left empty in the results exchange), sorted. Their figures up to
  // their removal are not in this result; the checks are the survivors'.
  std::vector<uint32_t> removed;
  Result<void> invariants;  // the workload's check
  // What the check found that the run's isolation level allows
  // (Workload::check_note(): writeskew's pairs below 0 under snapshot
  // isolation); "" if nothing or if the check failed.
  std::string invariants_note;
  // Replication: where each partition's copies are, and the proof that
  // every backup equals its primary after the run (ok with replicas = 1).
  uint32_t replicas = 1;
  std::string placement;
  // Loading this process's partitions (and backup copies): seconds, and the
  // tables' memory (rows, index and bookkeeping) per local node.
  double load_seconds = 0;
  uint64_t table_bytes = 0;
  uint64_t table_bytes_end = 0;  // the same after the run: tables that grow (TPC-C's) add memory
  Result<void> replicas_equal;
  store::LocationCacheStats cache;
  uint64_t rpc_malformed = 0, rpc_timeouts = 0;
  // The RPC endpoints' adaptive timeouts (rpc::EndpointConfig::timeout_ns):
  // the largest one a worker settled on for a peer, the largest after
  // doublings for calls that timed out, and the longest reply, in ns.
  uint64_t rpc_timeout_settled_ns = 0, rpc_timeout_max_ns = 0, rpc_longest_reply_ns = 0;
  // How owner-side code read-modify-wrote the words NICs CAS and FAA
  // (txn/stages/owner_atomics.hpp), on this process's workers.
  txn::OwnerAtomicsMode owner_atomics = txn::OwnerAtomicsMode::kCpu;
  // The isolation level the protocol guarantees: what its history is checked at.
  txn::Isolation isolation = txn::Isolation::kSerializable;
  // Names of the abort reasons, indexed as WorkerStats::aborts.
  std::vector<txn::AbortReasonName> abort_reasons;
  // Passive requests (rpc::Batch::passive, e.g. a passive COMMIT) whose ack
  // never came or came with an error: the caller was not told, so only
  // these counters show the write that may be lost.
  uint64_t rpc_passive_timeouts = 0, rpc_passive_failures = 0;
  // An RNIC model limited the nodes (shm nic=...), and the work requests it
  // served unaccounted (rdma::Device::model_unaccounted()), whole run:
  // stamped before its window, and queued past it.
  bool nic_model = false;
  uint64_t nic_stale = 0, nic_overflow = 0;
  // Recording: every worker's history (node-major), warm-up included: a
  // history must be whole to be checked.
  std::vector<history::Recorder> histories;
  double committed_per_s() const { return seconds > 0 ? static_cast<double>(total.commits) / seconds : 0; }
  double attempted_per_s() const { return seconds > 0 ? static_cast<double>(total.attempts) / seconds : 0; }
  double abort_rate() const {
    return total.attempts ? static_cast<double>(total.attempts - total.commits) / static_cast<double>(total.attempts)
                          : 0;
  }
};

// RunResult::removed as text: "node 3", "nodes 2 and 3", "nodes 1, 2 and
// 3"; "" for none.
std::string removed_text(const std::vector<uint32_t>& removed);

// Signals (runtime::shutdown_requested()): one while the cluster is built
// and loaded fails the run with ECANCELED, "stopped by SIGTERM during
// loading"; one during the run ends it (the result says how long it
// measured), and the checks after it give up once the stop's grace is over
// (runtime::stop_grace_over(); the workload's check then fails with
// ECANCELED: not checked).
Result<RunResult> run(const RunConfig& rc);

// Node roles (rc.cluster.memory_nodes): EINVAL, naming the keys, for a
// split layout without a compute node, more replicas than nodes that hold
// data, or a protocol that cannot run with compute nodes apart
// (ProtocolDef::split_refusal). run() checks it first; for checks before a
// run.
Result<void> check_roles(const RunConfig& rc);

// Virtual time (rc.virtual_time): EINVAL, naming the keys, for what it
// cannot run (a multi-process node, a driver other than shm, more than one
// EAL lcore, a zero cost). run() checks it first; for checks before a run.
Result<void> check_virtual_time(const RunConfig& rc);

// The cluster run(rc) builds: rc.cluster with each worker's scratch buffer
// and one-sided depth (cluster::ClusterConfig::max_outstanding) sized for
// the protocol's tuples and txn.coroutines. For checks before a run.
cluster::ClusterConfig sized_cluster(const RunConfig& rc);
// Entries of each worker's completion queue in that cluster: every RC QP
// (nodes x qps_per_node) may have max_outstanding requests in flight.
uint64_t worker_cq_depth(const cluster::ClusterConfig& cc);

// The recorded histories of a run merged into one, for the checker;
// ECANCELED when `stop` asked to give up (Recorder::append_to).
Result<history::History> merged_history(const RunResult& r, const history::StopFn& stop = {});

}  // namespace rdtx::run
