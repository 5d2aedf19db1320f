// rdtx-bench's configuration: one Schema assembled from the engine's [txn]
// keys, every registered workload's keys (txn::workloads()) and the app's own
// (`workload`, [cluster], [run]), and the translation of a loaded Config into
// a run::RunConfig.
// Thread-safety: setup code for the main thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "cluster/bootstrap.hpp"
#include "config/config.hpp"
#include "rdma/rdma.hpp"
#include "run/runner.hpp"
#include "txn/workload.hpp"

namespace rdtx::bench {

// cluster.hosts: "host:port,host:port,..." (node 0 first; [v6]:port allowed).
Result<std::vector<cluster::NodeAddress>> parse_hosts(const std::string& hosts);

// Nodes of `hosts` (parse_hosts) that run on the same host as node `self`,
// `self` included: the same host name, or both a name of this machine
// (loopback addresses, localhost, gethostname()).
uint32_t nodes_on_host_of(const std::vector<cluster::NodeAddress>& hosts, uint32_t self);

// A string for messages: `s` itself, or its first `keep` bytes and its
// length when longer (an oversized devargs value, say).
std::string shortened(const std::string& s, size_t keep = 64);

// history.dir (if set) is created and written to now, so that a bad
// directory fails before the run rather than after it. EINVAL naming the key;
// EEXIST, naming them, if it holds history files (another run's).
Result<void> check_history_dir(const config::Config& cfg);

// EAL options: --file-prefix must be a plain name (no '/'). EINVAL.
Result<void> check_file_prefix(const std::vector<std::string>& eal);

// The split layout (cluster.memory_nodes, cluster.compute_nodes): the
// memory nodes the keys give (0: symmetric), and the check of the keys
// ("" if they fit cluster.nodes and txn.protocol, else the error naming
// them).
uint32_t memory_nodes_of(const config::Config& cfg);
std::string check_roles(const config::Config& cfg);

// Virtual time's floors (run.virtual_pass_ns, run.virtual_max_pass_us): a
// pass's virtual cost at least this, so that a virtual second costs a
// bounded number of wall seconds.
inline constexpr int64_t kMinVirtualPassNs = 50;
inline constexpr double kMinVirtualMaxPassUs = 1.0;

// cluster.coordinator: "" if unset or valid, else the error naming the key:
// it needs cluster.mode = "process" and a value that
// membership::parse_coordinator accepts.
std::string check_coordinator(const config::Config& cfg);

// Every key rdtx-bench accepts, with the cross-key checks of each component.
config::Schema make_schema();

// A run as the configuration describes it. `run.workload` points into
// `workload`, so a Plan is moved, never copied.
struct Plan {
  run::RunConfig run;
  std::unique_ptr<txn::Workload> workload;
  Plan() = default;
  Plan(Plan&&) = default;
  Plan& operator=(Plan&&) = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
};
// `cfg` must have been loaded with make_schema(); the schema has checked
// every value, so this fails only if a name the schema allowed has no
// implementation.
Result<Plan> plan_from(const config::Config& cfg);

// What the run asks of the protocol and the device, checked before the EAL
// starts and anything is loaded: the protocol's region (txn::region_bytes:
// NAM-DB's namdb.oracle_node within the cluster, CALVIN's
// calvin.max_accesses not below the workload's largest set), and an RPC
// message (the device's max_msg_size) that carries an item of the largest
// record when a stage runs over RPC; what the protocol reads or writes
// outside memory (txn::preflight: CALVIN's calvin.inputs directory and
// calvin.replay recordings, of node `self` or, -1, of every node). EINVAL
// naming the keys.
Result<void> check_plan(const config::Config& cfg, const Plan& plan, const rdma::DeviceCaps& caps, int self = -1);

}  // namespace rdtx::bench
