#include "verbs_config.hpp"

#include "env/kvargs.hpp"

namespace rdtx::rdma::verbs {

namespace {
constexpr uint64_t kMaxPort = 255;       // ibv port numbers are 8 bits
constexpr uint64_t kMaxGidIndex = 1023;  // beyond any device's GID table
constexpr uint64_t kMaxTimeout = 31;     // 5-bit field of the QP context
constexpr uint64_t kMaxRetryCnt = 7;     // 3-bit field

Error with_devargs(std::string_view devargs, const Error& e) {
  return make_error(e.code, "verbs devargs '%.*s': %s", int(devargs.size()), devargs.data(), e.message.c_str());
}
}  // namespace

const char* to_string(HugePages h) {
  switch (h) {
    case HugePages::kAuto:
      return "auto";
    case HugePages::kOn:
      return "on";
    case HugePages::kOff:
      return "off";
  }
  return "?";
}

Result<VerbsConfig> VerbsConfig::parse(std::string_view devargs) {
  auto kv = env::parse_kvargs(devargs, {"dev", "gid_index", "huge", "port", "retry_cnt", "timeout"});
  if (!kv.ok()) return kv.error();
  if (kv->name != "verbs")
    return make_error(EINVAL, "devargs '%.*s' are not for the verbs driver", int(devargs.size()), devargs.data());
  VerbsConfig cfg;
  if (kv->values.count("dev") != 0) {
    cfg.dev = kv->get_string("dev", "");
    if (cfg.dev.empty()) return with_devargs(devargs, make_error(EINVAL, "dev= names no device"));
  }
  auto port = kv->get_u64("port", 1, 1, kMaxPort);
  if (!port.ok()) return with_devargs(devargs, port.error());
  cfg.port = static_cast<uint32_t>(*port);
  if (kv->get_string("gid_index", "auto") != "auto") {
    auto gid = kv->get_u64("gid_index", 0, 0, kMaxGidIndex);
    if (!gid.ok()) return with_devargs(devargs, gid.error());
    cfg.gid_index = static_cast<int>(*gid);
  }
  std::string huge = kv->get_string("huge", "auto");
  if (huge == "auto") {
    cfg.huge = HugePages::kAuto;
  } else if (huge == "on") {
    cfg.huge = HugePages::kOn;
  } else if (huge == "off") {
    cfg.huge = HugePages::kOff;
  } else {
    return with_devargs(devargs, make_error(EINVAL, "huge=%s is not one of auto, on, off", huge.c_str()));
  }
  auto timeout = kv->get_u64("timeout", cfg.timeout, 0, kMaxTimeout);
  if (!timeout.ok()) return with_devargs(devargs, timeout.error());
  cfg.timeout = static_cast<uint8_t>(*timeout);
  auto retry = kv->get_u64("retry_cnt", cfg.retry_cnt, 0, kMaxRetryCnt);
  if (!retry.ok()) return with_devargs(devargs, retry.error());
  cfg.retry_cnt = static_cast<uint8_t>(*retry);
  return cfg;
}

}  // namespace rdtx::rdma::verbs
