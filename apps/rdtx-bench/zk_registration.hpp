// rdtx-bench's use of the configuration store (cluster.coordinator;
// doc/membership.md "The run in ZooKeeper"): once the node processes have
// joined through the bootstrap and agreed on the configuration, node 0 (the
// configuration manager) claims the coordinator's path for this run and
// writes configuration 1 (members = cluster.hosts, CM = node 0, the
// placement of every partition), and every node registers itself with an
// ephemeral znode; node 0 checks that all of them did. While the run goes
// on, it is the run's membership service (run::RunMembership): leases
// between the CM and every member over the fabric (membership::LeaseAgent),
// and on a suspicion the CM writes configuration c+1 without the suspect,
// announces it in its grants and waits for every member to acknowledge it
// (doc/membership.md "Leases", "Reconfiguration"). At the end node 0 removes
// the run's znodes and every node closes its session.
// Thread-safety: start() and the RunMembership calls but verdict() on the
// main thread, in the run's order; verdict() from any thread. A thread of
// its own acts on suspicions and new configurations.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "cluster/bootstrap.hpp"
#include "config/config.hpp"
#include "membership/configuration.hpp"
#include "rdtx-bench/report.hpp"
#include "run/runner.hpp"

namespace rdtx::bench {

// Configuration 1 of a run: the members of cluster.hosts, node 0 as the CM,
// partition p's primary on node p and its backups on the next nodes that
// hold data (txn::backup_node).
membership::Configuration initial_configuration(const config::Config& cfg, const run::RunConfig& run,
                                                const std::string& run_id);

// A process cluster started by a launcher (mpirun, srun: membership::
// detect_launch) without cluster.hosts: the node id is the launcher's rank,
// cluster.nodes its number of processes, and every node publishes its
// bootstrap endpoint (cluster.host, a free port) under the coordinator's
// path and reads everybody's (doc/deployment.md "Starting under mpirun or
// srun").
struct LaunchRendezvous {
  int node = -1;
  std::vector<std::string> overrides;  // cluster.nodes, cluster.hosts
  std::string run_id;                  // the launch's: the run's id in ZooKeeper
  std::string summary;                 // one line for stderr
};
// `node_arg`: --node, or -1. Errors name what is missing or wrong: no
// launcher, no cluster.coordinator, a --node or cluster.nodes other than the
// launcher's, ZooKeeper, nodes that did not publish in time.
Result<LaunchRendezvous> rendezvous(const config::Config& cfg, int node_arg);

class ZkRegistration : public run::RunMembership {
 public:
  // Collective over `boot` (every node calls it at the same point): the
  // run id (node 0's, all_gather), the store, configuration 1, the
  // registrations. Errors name the ZooKeeper servers and path (ZooKeeper not
  // reachable, the path of another run, a member refused).
  // `run_id`: a launch's (LaunchRendezvous), or "" for node 0 to make one.
  static Result<std::unique_ptr<ZkRegistration>> join(const config::Config& cfg, const run::RunConfig& run,
                                                      cluster::Bootstrap& boot, const std::string& run_id = "");
  // Node 0 removes the run's znodes (a failure is printed, not fatal), also
  // when start() fails after node 0 wrote; every node's session closes,
  // which removes its registration.
  ~ZkRegistration() override;
  ZkRegistration(const ZkRegistration&) = delete;
  ZkRegistration& operator=(const ZkRegistration&) = delete;

  // One line for stderr: where the configuration is and who registered.
  const std::string& summary() const { return summary_; }

  // run::RunMembership: the lease agent on the node's device (collective),
  // its thread and the reconfiguration thread, what ends the run (this
  // member fenced or removed, a partition without a live primary), and the
  // lease figures on stderr at the end.
  Result<void> attach(cluster::Cluster& c) override;
  void start() override;
  std::optional<Error> verdict() override;
  void stop() override;
  Error await_verdict() override;
  // A removal that leaves every partition its primary is resolved with
  // `recover` over ZooKeeper (ConfigStore::exchange), after which the run
  // goes on without the removed nodes (Bootstrap::exclude).
  void set_recovery(Recover recover) override;
  // After stop(): the leases as this node saw them (for the report).
  std::optional<LeaseFigures> lease_figures() const;

  struct State;

 private:
  explicit ZkRegistration(std::unique_ptr<State> s);
  std::unique_ptr<State> state_;
  std::string summary_;
};

}  // namespace rdtx::bench
