// ConfigStore: a process cluster's configuration (configuration.hpp) kept in
// ZooKeeper under one root path, as FaRM keeps its configuration in
// ZooKeeper (doc/membership.md). Layout under the root:
//
//   <root>                  "rdtx-run 1\nrun <run id>\n": the run that owns the path
//   <root>/config           the configuration, text form (configuration.hpp)
//   <root>/members/<id>     ephemeral, one per live member process:
//                           "rdtx-member 1\nrun <run id>\nnode <id>\nendpoint <e>\nconfig <number>\n"
//   <root>/endpoints/<id>   a launch's rendezvous (mpirun, srun): node id's
//                           bootstrap endpoint "host:port", before the nodes meet
//
// The configuration changes only by compare-and-set: propose() writes
// configuration c+1 on the condition that the znode still has the version
// read with configuration c (ZooKeeper's conditional setData), so of two
// would-be CMs that read c, exactly one writes c+1; the other is told it
// lost the race. A member registers with an ephemeral znode: when its
// session ends (closed, or expired because the process died or was cut
// off), ZooKeeper deletes it.
//
// Errors (Result): messages start "zookeeper <servers>: zk path <path>" and
// say what is wrong. Codes: EEXIST (the root belongs to another run, a node
// id registered twice, an initial configuration exists), ESTALE (lost the
// race), EINVAL (a configuration that is malformed, of another run, or not
// the stored one), ENOENT (no configuration yet), and ZkClient's codes for
// the connection (ENOTCONN, ETIMEDOUT, ECONNRESET).
//
// Thread-safety: as ZkClient: any thread, calls block. The ZkClient must
// outlive the store.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "membership/configuration.hpp"
#include "membership/zk_client.hpp"

namespace rdtx::membership {

inline constexpr const char* kRunMagic = "rdtx-run";
inline constexpr const char* kMemberMagic = "rdtx-member";

struct VersionedConfiguration {
  Configuration config;
  int32_t version = 0;  // the znode version it was read at: propose()'s condition
};

struct MemberRecord {
  uint32_t node = 0;
  std::string endpoint;
  uint64_t config = 0;  // the configuration number it registered with
};

class ConfigStore {
 public:
  // Claims `root` for run `run_id` (creating it and its ancestors), or joins
  // it if it is this run's already. An empty root without children is
  // claimed too. EEXIST "belongs to another run (run id X, ours Y)"; EINVAL
  // when it holds something that is not an rdtx run, or `run_id` is empty
  // or has a space.
  static Result<ConfigStore> open(ZkClient& zk, const std::string& root, const std::string& run_id);

  // The stored configuration and its version. ENOENT when none was written
  // yet; EINVAL when it cannot be decoded or belongs to another run.
  Result<VersionedConfiguration> read();

  // Writes the first configuration (any number, normally 1). EEXIST naming
  // the stored configuration's number and CM when there is one already.
  Result<VersionedConfiguration> create_initial(const Configuration& first);

  // Writes `next` if the stored configuration is still `current` (same
  // version): the compare-and-set of a CM. `next.number` must be
  // `current.config.number + 1`. ESTALE "lost the race for configuration
  // N" naming what the store holds now; EINVAL for an invalid `next`.
  Result<VersionedConfiguration> propose(const VersionedConfiguration& current, const Configuration& next);

  // Registers node `self` of `expected` (the configuration this member was
  // started with) with an ephemeral znode. EINVAL naming the first
  // difference when `expected` is not the stored configuration, or `self` is
  // not one of its members; EEXIST when node `self` is registered already
  // (another live process with the same node id); ENOENT when no
  // configuration was written yet.
  Result<void> register_member(const Configuration& expected, uint32_t self);
  // Removes node `self`'s registration (closing the session does too).
  Result<void> unregister_member(uint32_t self);
  // The live members' registrations by node id.
  Result<std::map<uint32_t, MemberRecord>> registered();

  // The rendezvous of a launch (doc/deployment.md "Starting under mpirun or
  // srun"): node `self`'s bootstrap endpoint, persistent (a node that has
  // read every endpoint may go on before a slower one has). EEXIST when node
  // `self` published one already (two processes with one rank).
  Result<void> publish_endpoint(uint32_t self, const std::string& endpoint);
  // Every node's endpoint, by node id, once all `nodes` have published:
  // polled until `timeout_ms`, then ETIMEDOUT naming the nodes missing (and
  // ECANCELED as soon as `stop` says so). EINVAL for an endpoint of a node
  // id not below `nodes`, or one that is not host:port text.
  Result<std::vector<std::string>> endpoints(uint32_t nodes, uint64_t timeout_ms, const std::function<bool()>& stop);

  // A collective among `members` (recovery's phases, txn/recovery.hpp):
  // node `self`'s blob is written to <root>/recovery/c<config>/<phase>-<self>,
  // and every member's is returned once all are there (polled every 2 ms):
  // ETIMEDOUT after `timeout_ms` naming the members missing, ECANCELED as
  // soon as `stop` says so. A blob is at most ZooKeeper's 1 MiB.
  Result<std::vector<std::string>> exchange(uint64_t config, const std::string& phase, uint32_t self,
                                            const std::string& mine, const std::vector<uint32_t>& members,
                                            uint64_t timeout_ms, const std::function<bool()>& stop);

  // Deletes the run's znodes: the members' registrations, the endpoints,
  // recovery's exchanges, the configuration and the root. At the end of a
  // run, by its CM.
  Result<void> remove_all();

  const std::string& root() const { return root_; }
  const std::string& run_id() const { return run_id_; }

 private:
  ConfigStore(ZkClient& zk, std::string root, std::string run_id)
      : zk_(&zk), root_(std::move(root)), run_id_(std::move(run_id)) {}
  Error error(int code, const std::string& path, const std::string& what) const;
  std::string config_path() const { return root_ + "/config"; }
  std::string members_path() const { return root_ + "/members"; }
  std::string endpoints_path() const { return root_ + "/endpoints"; }
  std::string recovery_path() const { return root_ + "/recovery"; }
  Result<void> remove_tree(const std::string& path);

  ZkClient* zk_;
  std::string root_;
  std::string run_id_;
};

}  // namespace rdtx::membership
