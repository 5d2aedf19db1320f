// Registers the verbs driver: open_device("verbs[,dev=NAME][,port=N]...").
#include "rdma/driver.hpp"
#include "verbs_config.hpp"
#include "verbs_device.hpp"

namespace rdtx::rdma::verbs {

namespace {
Result<std::unique_ptr<Device>> open_verbs(std::string_view devargs, const OpenOptions& opts) {
  // Devargs first: a typo is reported even where no device exists.
  auto cfg = VerbsConfig::parse(devargs);
  if (!cfg.ok()) return cfg.error();
  return VerbsDevice::open(*cfg, opts.node_id, opts.fabric);
}

constexpr Driver kVerbsDriver{"verbs", kVerbsDevargsHelp, open_verbs};
}  // namespace

RDTX_REGISTER_DRIVER(kVerbsDriver)

}  // namespace rdtx::rdma::verbs
