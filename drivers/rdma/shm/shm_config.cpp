#include "shm_config.hpp"

#include <string>

#include "env/kvargs.hpp"

namespace rdtx::rdma::shm {

namespace {
constexpr uint64_t kMaxLatencyNs = 1'000'000'000;  // 1 s: anything beyond is a typo
constexpr double kMaxBwGbps = 1e6;
constexpr uint64_t kMinMtu = 64;
constexpr uint64_t kMaxMtu = 1u << 20;

Error with_devargs(std::string_view devargs, const Error& e) {
  return make_error(e.code, "shm devargs '%.*s': %s", int(devargs.size()), devargs.data(), e.message.c_str());
}
}  // namespace

Result<ShmConfig> ShmConfig::parse(std::string_view devargs) {
  auto kv = env::parse_kvargs(devargs, {"bw_gbps", "latency_ns", "mtu"});
  if (!kv.ok()) return kv.error();
  if (kv->name != "shm") return make_error(EINVAL, "devargs '%.*s' are not for the shm driver", int(devargs.size()), devargs.data());
  ShmConfig cfg;
  auto latency = kv->get_u64("latency_ns", 0, 0, kMaxLatencyNs);
  if (!latency.ok()) return with_devargs(devargs, latency.error());
  auto bw = kv->get_double("bw_gbps", 0, 0, kMaxBwGbps);
  if (!bw.ok()) return with_devargs(devargs, bw.error());
  auto mtu = kv->get_u64("mtu", 4096, kMinMtu, kMaxMtu);
  if (!mtu.ok()) return with_devargs(devargs, mtu.error());
  cfg.latency_ns = *latency;
  cfg.bw_gbps = *bw;
  cfg.mtu = static_cast<uint32_t>(*mtu);
  return cfg;
}

}  // namespace rdtx::rdma::shm
