// ZkRegistration in a build without ZooKeeper's C client: cluster.coordinator
// is refused, naming what the build lacks.
#include <cerrno>

#include "rdtx-bench/zk_registration.hpp"

namespace rdtx::bench {

struct ZkRegistration::State {};

ZkRegistration::ZkRegistration(std::unique_ptr<State> s) : state_(std::move(s)) {}
ZkRegistration::~ZkRegistration() = default;

Result<std::unique_ptr<ZkRegistration>> ZkRegistration::start(const config::Config&, const run::RunConfig&,
                                                              cluster::Bootstrap&) {
  return make_error(ENOTSUP,
                    "cluster.coordinator: this rdtx-bench was built without ZooKeeper's C client "
                    "(install libzookeeper-mt-dev: scripts/install-deps.sh, then build again)");
}

}  // namespace rdtx::bench
