#include "shm_config.hpp"

#include <string>

#include "env/kvargs.hpp"

namespace rdtx::rdma::shm {

namespace {
constexpr uint64_t kMaxLatencyNs = 1'000'000'000;  // 1 s: anything beyond is a typo
constexpr double kMaxBwGbps = 1e6;
constexpr uint64_t kMinMtu = 64;
constexpr uint64_t kMaxMtu = 1u << 20;
constexpr uint64_t kMaxUdDelayNs = 1'000'000'000;
constexpr uint64_t kMaxPauseMs = 24ull * 3600 * 1000;  // a day: anything beyond is a typo
constexpr uint64_t kMaxNodeId = 4095;                  // QP numbers hold 12 bits of node id

Error with_devargs(std::string_view devargs, const Error& e) {
  return make_error(e.code, "shm devargs '%.*s': %s", int(devargs.size()), devargs.data(), e.message.c_str());
}

// `allowed` lists the orders the key accepts, in the order the message names them.
Result<WordOrder> get_order(const env::KvArgs& kv, const char* key, std::initializer_list<WordOrder> allowed) {
  std::string v = kv.get_string(key, "ascending");
  std::string names;
  for (WordOrder o : allowed) {
    if (v == to_string(o)) return o;
    names += (names.empty() ? "" : "|") + std::string(to_string(o));
  }
  return make_error(EINVAL, "devargs: %s=%s is not one of %s", key, v.c_str(), names.c_str());
}

// Named RNIC calibrations (doc/drivers.md "RNIC model" gives each value's
// source). msg_mops, doorbell_ns, link_gbps, atomic_mops.
struct NicCalibration {
  const char* name;
  NicParams params;
};
constexpr NicCalibration kNics[] = {
    // ConnectX-4 EDR 100 Gb/s: RCC's 33 Mpps peak, DrTM+H's 48 M atomics/s
    // per machine of two ConnectX-4 (24 per NIC), "hundreds of cycles" per MMIO.
    {"edr", {33.0, 100, 100.0, 24.0}},
    // ConnectX-3 FDR 56 Gb/s (RCC's second cluster); message rate and
    // atomics are estimates (doc/drivers.md says which and why).
    {"fdr", {26.0, 100, 56.0, 2.7}},
};
constexpr double kMaxMops = 1e4;
constexpr uint64_t kMaxDoorbellNs = 1'000'000;

Result<void> parse_nic(const env::KvArgs& kv, ShmConfig& cfg) {
  if (kv.values.count("nic") != 0) {
    std::string name = kv.get_string("nic", "");
    const NicCalibration* cal = nullptr;
    std::string names;
    for (const NicCalibration& c : kNics) {
      if (name == c.name) cal = &c;
      names += (names.empty() ? "" : "|") + std::string(c.name);
    }
    if (cal == nullptr) return make_error(EINVAL, "devargs: nic=%s is not a known calibration (%s)", name.c_str(), names.c_str());
    cfg.nic_name = cal->name;
    cfg.nic = cal->params;
  }
  // Explicit keys override the calibration's values (0 turns a limit off).
  for (auto [key, out] : {std::pair{"nic_mops", &cfg.nic.msg_mops}, {"link_gbps", &cfg.nic.link_gbps},
                          {"atomic_mops", &cfg.nic.atomic_mops}}) {
    auto v = kv.get_double(key, *out, 0, key == std::string("link_gbps") ? kMaxBwGbps : kMaxMops);
    if (!v.ok()) return v.error();
    *out = *v;
  }
  auto db = kv.get_u64("doorbell_ns", cfg.nic.doorbell_ns, 0, kMaxDoorbellNs);
  if (!db.ok()) return db.error();
  cfg.nic.doorbell_ns = *db;
  return {};
}
}  // namespace

const char* to_string(AtomicsMode m) { return m == AtomicsMode::kHca ? "hca" : "cpu"; }

const char* to_string(WordOrder o) {
  switch (o) {
    case WordOrder::kAscending: return "ascending";
    case WordOrder::kDescending: return "descending";
    case WordOrder::kRandom: return "random";
  }
  return "?";
}

Result<ShmConfig> ShmConfig::parse(std::string_view devargs) {
  auto kv = env::parse_kvargs(devargs, {"bw_gbps", "latency_ns", "mtu", "pause_at_ms", "pause_ms", "pause_node",
                                        "read_order", "seed", "ud_delay", "ud_delay_ns", "ud_drop", "ud_dup",
                                        "write_order", "nic", "nic_mops", "doorbell_ns", "link_gbps",
                                        "atomic_mops", "rc_stall", "stall_ms", "atomics"});
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

  auto read_order = get_order(*kv, "read_order", {WordOrder::kAscending, WordOrder::kDescending, WordOrder::kRandom});
  if (!read_order.ok()) return with_devargs(devargs, read_order.error());
  auto write_order = get_order(*kv, "write_order", {WordOrder::kAscending, WordOrder::kRandom});
  if (!write_order.ok()) return with_devargs(devargs, write_order.error());
  cfg.read_order = *read_order;
  cfg.write_order = *write_order;

  if (auto nic = parse_nic(*kv, cfg); !nic.ok()) return with_devargs(devargs, nic.error());

  if (std::string a = kv->get_string("atomics", "cpu"); a == "hca")
    cfg.atomics = AtomicsMode::kHca;
  else if (a != "cpu")
    return make_error(EINVAL, "shm devargs '%.*s': atomics=%s is not one of cpu|hca", int(devargs.size()),
                      devargs.data(), a.c_str());

  for (auto [key, out] : {std::pair{"ud_drop", &cfg.ud_drop}, {"ud_dup", &cfg.ud_dup}, {"ud_delay", &cfg.ud_delay}}) {
    auto p = kv->get_double(key, 0, 0, 1);
    if (!p.ok()) return with_devargs(devargs, p.error());
    *out = *p;
  }
  auto stall = kv->get_double("rc_stall", 0, 0, 1);
  if (!stall.ok()) return with_devargs(devargs, stall.error());
  cfg.rc_stall = *stall;
  auto stall_ms = kv->get_u64("stall_ms", kDefaultStallMs, 1, kMaxStallMs);
  if (!stall_ms.ok()) return with_devargs(devargs, stall_ms.error());
  cfg.stall_ms = *stall_ms;
  auto delay_ns = kv->get_u64("ud_delay_ns", kDefaultUdDelayNs, 1, kMaxUdDelayNs);
  if (!delay_ns.ok()) return with_devargs(devargs, delay_ns.error());
  cfg.ud_delay_ns = *delay_ns;

  cfg.seed_given = kv->values.count("seed") != 0;
  auto seed = kv->get_u64("seed", 0);
  if (!seed.ok()) return with_devargs(devargs, seed.error());
  cfg.seed = *seed;

  cfg.has_pause = kv->values.count("pause_node") != 0;
  if (!cfg.has_pause && (kv->values.count("pause_at_ms") != 0 || kv->values.count("pause_ms") != 0))
    return make_error(EINVAL, "shm devargs '%.*s': pause_at_ms and pause_ms need pause_node=N (the node to pause)",
                      int(devargs.size()), devargs.data());
  if (cfg.has_pause) {
    if (kv->values.count("pause_ms") == 0)
      return make_error(EINVAL, "shm devargs '%.*s': pause_node needs pause_ms=D (how long the node stops)",
                        int(devargs.size()), devargs.data());
    auto node = kv->get_u64("pause_node", 0, 0, kMaxNodeId);
    if (!node.ok()) return with_devargs(devargs, node.error());
    auto at = kv->get_u64("pause_at_ms", 0, 0, kMaxPauseMs);
    if (!at.ok()) return with_devargs(devargs, at.error());
    auto len = kv->get_u64("pause_ms", 0, 1, kMaxPauseMs);
    if (!len.ok()) return with_devargs(devargs, len.error());
    cfg.pause_node = static_cast<uint32_t>(*node);
    cfg.pause_at_ms = *at;
    cfg.pause_ms = *len;
  }
  return cfg;
}

}  // namespace rdtx::rdma::shm
