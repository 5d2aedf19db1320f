// ZkRegistration in a build without ZooKeeper's C client: cluster.coordinator
// is refused, naming what the build lacks.
#include <cerrno>

#include "rdtx-bench/zk_registration.hpp"

namespace rdtx::bench {

struct ZkRegistration::State {};

ZkRegistration::ZkRegistration(std::unique_ptr<State> s) : state_(std::move(s)) {}
ZkRegistration::~ZkRegistration() = default;
Result<void> ZkRegistration::attach(cluster::Cluster&) { return make_error(ENOTSUP, "no ZooKeeper client"); }
void ZkRegistration::start() {}
std::optional<Error> ZkRegistration::verdict() { return std::nullopt; }
void ZkRegistration::stop() {}
void ZkRegistration::set_recovery(Recover) {}
std::optional<LeaseFigures> ZkRegistration::lease_figures() const { return std::nullopt; }
Error ZkRegistration::await_verdict() { return Error{ENOTSUP, "no ZooKeeper client"}; }

Result<LaunchRendezvous> rendezvous(const config::Config&, int) {
  return make_error(ENOTSUP,
                    "cluster.hosts is empty and this rdtx-bench was built without ZooKeeper's C client, through "
                    "which the nodes would rendezvous (install libzookeeper-mt-dev: scripts/install-deps.sh, then "
                    "build again; or list the nodes in cluster.hosts)");
}

Result<std::unique_ptr<ZkRegistration>> ZkRegistration::join(const config::Config&, const run::RunConfig&,
                                                              cluster::Bootstrap&, const std::string&) {
  return make_error(ENOTSUP,
                    "cluster.coordinator: this rdtx-bench was built without ZooKeeper's C client "
                    "(install libzookeeper-mt-dev: scripts/install-deps.sh, then build again)");
}

}  // namespace rdtx::bench
