// Cluster: the nodes and workers of a run and the connections between them.
//
// A node is one rdma::Device (one partition of the database lives in its
// registered memory). A worker is one (node, thread) pair: its own
// runtime::Worker, its own device context (rdma::Device::open_context: verbs
// gives each worker thread an ibv_context and protection domain of its own,
// so the node's tables are registered in every worker's context and a peer
// uses the rkey of the context its QP reaches), one completion queue,
// qps_per_node RC queue pairs to every node (its own included, through
// loopback, so that local accesses take the same path as remote ones), an
// rpc::Endpoint, and a registered scratch buffer for one-sided READ
// destinations. Worker i of node a is paired with worker i of node b: their
// RC QPs connect to each other lane by lane, as RCC and DrTM+H pair threads.
//
// The embedded (in-process) cluster, `cluster.mode = "inproc"`: every node
// lives in this process, on one fabric. In a multi-process cluster
// (create_node) this process holds one node; the others are reached
// through the fabric, with addresses exchanged over the bootstrap channel. Running places workers on
// the EAL lcores round-robin; several workers share an lcore when there are
// more workers than lcores, so a many-node cluster runs on 1-2 cores.
//
// Thread-safety: built and torn down on one thread; while run() runs, each
// worker is used only by the lcore that runs it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "rdma/rdma.hpp"
#include "rpc/endpoint.hpp"
#include "runtime/cq_poller.hpp"
#include "runtime/loop.hpp"
#include "runtime/worker.hpp"

namespace rdtx::cluster {

struct ClusterConfig {
  uint32_t nodes = 2;
  uint32_t workers_per_node = 1;
  // Node roles (doc/architecture.md, "Node roles"): 0 = symmetric, every node holds a
  // partition and runs coordinators; m > 0 = split (NAM-DB's disaggregated
  // layout): nodes [0, m) are memory nodes, which hold the partitions and
  // run the per-node services but no coordinator, and nodes [m, nodes) are
  // compute nodes, which run the coordinators and hold no partition. Below
  // `nodes` (the runner refuses a layout without a compute node).
  uint32_t memory_nodes = 0;
  // Copies of each partition (doc/replication.md): 1 = the primary alone;
  // r > 1: r - 1 backups on the next nodes that hold data. At most
  // data_nodes().
  uint32_t replicas = 1;
  // RC QPs each worker keeps to each node (to worker i of that node, QP j
  // to QP j). More than one emulates a larger cluster's QP count, as RCC
  // and DrTM+H do to show the RNIC's QP-cache pressure; coordinators spread
  // over them (WorkerContext::qp_to).
  uint32_t qps_per_node = 1;
  // Each worker opens its own device context (false: the workers share the
  // node's, and tables are registered once per node).
  bool context_per_worker = true;
  std::string devargs = "shm";
  std::string fabric;              // "" = a fabric private to this process
  uint32_t max_outstanding = 256;  // one-sided requests in flight per worker and QP
  size_t scratch_bytes = 1 << 20;  // per worker, registered
  rpc::EndpointConfig rpc;

  bool split() const { return memory_nodes != 0; }
  // Nodes that hold a partition: the memory nodes, or every node.
  uint32_t data_nodes() const { return split() ? memory_nodes : nodes; }
  // Nodes that run coordinators: the compute nodes, or every node.
  uint32_t compute_nodes() const { return split() ? nodes - memory_nodes : nodes; }
  bool holds_data(uint32_t n) const { return !split() || n < memory_nodes; }
  bool coordinates(uint32_t n) const { return !split() || n >= memory_nodes; }
};

// "memory", "compute", or "both" (symmetric) for node n: for reports.
inline const char* role_name(const ClusterConfig& cfg, uint32_t n) {
  return !cfg.split() ? "both" : cfg.holds_data(n) ? "memory" : "compute";
}

struct Node {
  uint32_t id = 0;
  std::unique_ptr<rdma::Device> device;
};

struct WorkerContext {
  uint32_t node = 0;    // the node this worker belongs to
  uint32_t index = 0;   // its index among that node's workers
  uint32_t id = 0;      // dense id in the cluster: node * workers_per_node + index
  // The device context everything below is made from: its own, or the node's.
  // (Declared first: it goes last.)
  std::unique_ptr<rdma::Device> own_device;
  rdma::Device* device = nullptr;
  std::unique_ptr<runtime::Worker> worker;
  std::unique_ptr<rdma::CompletionQueue> cq;
  uint32_t qps_per_node = 1;
  std::vector<std::unique_ptr<rdma::QueuePair>> qps;  // [node * qps_per_node + lane]: RC QPs to that node
  std::vector<rdma::QpAddress> peer_qps;              // what each of qps is connected to
  std::unique_ptr<runtime::CqPoller> cq_poller;
  std::unique_ptr<rpc::Endpoint> rpc;
  uint64_t rpc_timeout_ns = 0;      // how long a call may take before it fails (the adaptive timeout's floor)
  uint64_t rpc_max_timeout_ns = 0;  // and at most, after doublings
  std::unique_ptr<rdma::DeviceMemory> scratch;
  rdma::MemoryRegion scratch_mr;
  bool failed_logged = false;  // reconnect() refused once already
  uint64_t disconnected = 0;   // nodes whose QPs this worker disconnected (bit n)
  std::atomic<uint32_t> removal_seen{0};  // the Cluster's removal generation it has applied

  // The RC QP to node n that `user` (a coordinator's index) posts on: one
  // user always gets the same QP, so its requests to a node stay in order.
  uint32_t qp_index(uint32_t n, uint32_t user) const { return n * qps_per_node + user % qps_per_node; }
  rdma::QueuePair* qp_to(uint32_t n, uint32_t user = 0) const { return qps[qp_index(n, user)].get(); }
  // Brings that QP back from the error state (a failed verb), where the
  // device can do so from one end (DeviceCaps::one_ended_reconnect). Else
  // the QP stays failed for the rest of the run (its requests fail, the run
  // reports them) and the first refusal is logged: restoring it needs the
  // peer's QP reset too, which the cluster does not do yet.
  Result<void> reconnect(uint32_t n, uint32_t user = 0);
};

// Every node's blob, indexed by node id (Bootstrap::all_gather).
using AllGather =
    std::function<Result<std::vector<std::vector<std::byte>>>(std::span<const std::byte> mine, std::string_view what)>;

// Other processes sharing this host's CPUs (multi-process on one host):
// they count against `host_cpus` when the idle policy is auto.
struct HostShare {
  unsigned other_processes = 0;  // node processes of the run on this host, this one not counted
  unsigned host_cpus = 0;        // CPUs of this process's affinity mask before the EAL pinned it (0: unknown)
};

class Cluster {
 public:
  static Result<std::unique_ptr<Cluster>> create_embedded(const ClusterConfig& cfg);
  // One node of a multi-process cluster (`cluster.mode = "process"`): this
  // process hosts node `self` and its workers; `all_gather` exchanges the
  // QP and endpoint addresses with the other nodes' processes, which must
  // call it with the same configuration. cfg.fabric must name the run (the
  // same in every process).
  static Result<std::unique_ptr<Cluster>> create_node(const ClusterConfig& cfg, uint32_t self,
                                                      const AllGather& all_gather);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  const ClusterConfig& config() const { return cfg_; }
  // Nodes of the cluster (all processes).
  uint32_t nodes() const { return static_cast<uint32_t>(nodes_.size()); }
  // Whether node n lives in this process (has a device here).
  bool is_local(uint32_t n) const { return n < nodes_.size() && nodes_[n].device != nullptr; }
  // The first node in this process (0 embedded; the process's node otherwise).
  uint32_t first_local_node() const { return first_node_; }
  // Workers in this process, by local index (node-major).
  uint32_t workers() const { return static_cast<uint32_t>(workers_.size()); }
  Node& node(uint32_t n) { return nodes_[n]; }
  // The device contexts of local node n's workers, by worker index: where
  // the node's tables must be registered (store::Table::create).
  std::vector<rdma::Device*> contexts(uint32_t n) const;
  WorkerContext& worker(uint32_t i) { return *workers_[i]; }
  // Worker `index` of local node `node`.
  WorkerContext& worker(uint32_t node, uint32_t index) {
    return *workers_[(node - first_node_) * cfg_.workers_per_node + index];
  }

  struct RunStats {
    runtime::StopReason reason = runtime::StopReason::kDeadline;
    runtime::IdlePolicy idle = runtime::IdlePolicy::kSpin;  // the policy the loops ran (auto resolved)
    std::vector<runtime::LoopStats> loops;
  };

  // Runs every worker until deadline_tsc (0: until all their tasks finish),
  // a shutdown request, or all tasks finished when stop_when_idle. Workers
  // are dealt round-robin over the EAL lcores (main first). The loops drain
  // together: a loop whose own tasks have returned keeps polling its workers
  // (serving RPCs to its nodes) until every loop's tasks have returned or
  // the loops' drain bound (1 s after the stop) passes.
  // With `share`, auto assumes each other process runs as many loops as
  // this one.
  Result<RunStats> run(uint64_t deadline_tsc, runtime::IdlePolicy idle, bool stop_when_idle = false,
                       HostShare share = {});
  // One pass of every worker on the calling thread: for deterministic tests.
  int poll_all();

  // This process's configuration number (doc/membership.md), 0 without a
  // membership service: its RPC datagrams carry it, and datagrams of an
  // older one are dropped (rpc::EndpointConfig::configuration). Any thread.
  void set_configuration(uint32_t number) { configuration_.store(number, std::memory_order_relaxed); }
  uint32_t configuration() const { return configuration_.load(std::memory_order_relaxed); }

  // Removal of members (doc/membership.md "Refusing the old
  // configuration"): watch_removals() gives every local worker a poller
  // (before the run, on the thread that builds the cluster); remove_nodes()
  // then has each worker disconnect its RC QPs to those nodes on its own
  // thread (rdma::QueuePair::disconnect: their one-sided requests to this
  // node fail) and waits up to `wait_ns` for every worker to have done so.
  // Returns the workers that had not (0: all did). Any thread.
  void watch_removals();
  uint32_t remove_nodes(const std::vector<uint32_t>& gone, uint64_t wait_ns);
  // Workers that have not applied the newest removal yet.
  uint32_t removal_pending() const;
  // Nodes removed so far (bit n: node n).
  uint64_t removed_nodes() const { return removed_.load(std::memory_order_acquire); }

 private:
  Cluster() = default;
  // Devices, workers, QPs and endpoints of nodes [first, first + count).
  Result<void> build_local(const ClusterConfig& cfg, uint32_t first, uint32_t count);
  ClusterConfig cfg_;
  uint32_t first_node_ = 0;
  std::vector<Node> nodes_;
  std::vector<std::unique_ptr<WorkerContext>> workers_;
  std::atomic<uint32_t> configuration_{0};
  std::atomic<uint64_t> removed_{0};  // nodes removed (bit n)
  std::atomic<uint32_t> removal_gen_{0};
};

}  // namespace rdtx::cluster
