// Registers the shm driver: open_device("shm[,key=value]*"), keys in shm_config.hpp.
#include <unistd.h>

#include <string>

#include "rdma/driver.hpp"
#include "shm.hpp"
#include "shm_config.hpp"
#include "shm_device.hpp"
#include "shm_qp.hpp"

namespace rdtx::rdma::shm {

namespace {
Result<std::unique_ptr<Device>> open_shm(std::string_view devargs, const OpenOptions& opts) {
  auto cfg = ShmConfig::parse(devargs);
  if (!cfg.ok()) return cfg.error();
  // Nodes of one process meet in a per-process fabric unless told otherwise.
  std::string fabric = opts.fabric.empty() ? "rdtx-" + std::to_string(getpid()) : opts.fabric;
  return ShmDevice::open(*cfg, opts.node_id, fabric);
}

constexpr Driver kShmDriver{"shm", kShmDevargsHelp, open_shm};
}  // namespace

RDTX_REGISTER_DRIVER(kShmDriver)

Result<UdQpStats> ud_qp_stats(const QueuePair& qp) {
  const auto* shm_qp = dynamic_cast<const ShmQp*>(&qp);
  if (shm_qp == nullptr || shm_qp->type() != QpType::kUd)
    return make_error(EINVAL, "ud_qp_stats: not a UD QP of the shm driver");
  const RecvQueue* rq = shm_qp->recv_queue();
  return UdQpStats{rq->dropped(), rq->injected_drops(), rq->injected_dups(), rq->injected_delays()};
}

}  // namespace rdtx::rdma::shm
