#include "membership/coordinator.hpp"

#include <cerrno>
#include <charconv>

namespace rdtx::membership {

namespace {

constexpr const char* kScheme = "zk://";
constexpr size_t kMaxUrl = 1024;

Result<ServerAddress> parse_server(const std::string& item, size_t index) {
  const size_t colon = item.rfind(':');
  if (item.empty()) return make_error(EINVAL, "server %zu is empty (servers are host:port separated by commas)", index);
  if (colon == std::string::npos || colon == 0 || colon + 1 == item.size())
    return make_error(EINVAL, "server %zu: '%s' is not host:port", index, item.c_str());
  ServerAddress s;
  s.host = item.substr(0, colon);
  if (s.host.front() == '[') {
    if (s.host.size() < 3 || s.host.back() != ']')
      return make_error(EINVAL, "server %zu: '%s': an IPv6 address is written [addr]:port", index, item.c_str());
    s.host = s.host.substr(1, s.host.size() - 2);
  } else if (s.host.find(':') != std::string::npos) {
    return make_error(EINVAL, "server %zu: '%s': write an IPv6 address as [addr]:port", index, item.c_str());
  }
  for (char ch : s.host)
    if (ch <= ' ' || ch > '~' || ch == '/' || ch == '[' || ch == ']' || ch == '@')
      return make_error(EINVAL, "server %zu: '%s': the host has a character that no host name has", index,
                        item.c_str());
  const std::string port = item.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
    return make_error(EINVAL, "server %zu: '%s': the port must be a number 1..65535", index, item.c_str());
  s.port = static_cast<uint16_t>(value);
  return s;
}

Result<void> check_path(const std::string& path) {
  if (path.empty() || path == "/")
    return make_error(EINVAL, "no path after the servers: name this cluster's znode, e.g. zk://host:2181/rdtx/run1");
  if (path.back() == '/') return make_error(EINVAL, "path '%s' ends with '/'", path.c_str());
  for (char ch : path)
    if (ch <= ' ' || ch > '~')
      return make_error(EINVAL, "path '%s' has a space, control or non-ASCII character", path.c_str());
  size_t pos = 1;
  while (pos <= path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(pos, end - pos);
    if (part.empty()) return make_error(EINVAL, "path '%s' has an empty component ('//')", path.c_str());
    if (part == "." || part == "..")
      return make_error(EINVAL, "path '%s' has a '%s' component (ZooKeeper paths are absolute, without . or ..)",
                        path.c_str(), part.c_str());
    pos = end + 1;
  }
  return {};
}

}  // namespace

std::string CoordinatorAddress::connect_string() const {
  std::string out;
  for (const ServerAddress& s : servers) {
    if (!out.empty()) out += ',';
    const bool v6 = s.host.find(':') != std::string::npos;
    out += (v6 ? "[" + s.host + "]" : s.host) + ":" + std::to_string(s.port);
  }
  return out;
}

Result<CoordinatorAddress> parse_coordinator(const std::string& url) {
  if (url.size() > kMaxUrl) return make_error(EINVAL, "longer than %zu characters", kMaxUrl);
  const std::string scheme = kScheme;
  if (url.compare(0, scheme.size(), scheme) != 0)
    return make_error(EINVAL, "must start with '%s' (ZooKeeper is the only coordinator): zk://host:port/path", kScheme);
  const std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  const std::string servers = rest.substr(0, slash);
  CoordinatorAddress out;
  if (servers.empty()) return make_error(EINVAL, "no server: zk://host:port[,host:port]/path");
  size_t pos = 0;
  while (pos <= servers.size()) {
    size_t end = servers.find(',', pos);
    if (end == std::string::npos) end = servers.size();
    auto s = parse_server(servers.substr(pos, end - pos), out.servers.size());
    if (!s.ok()) return s.error();
    out.servers.push_back(std::move(*s));
    pos = end + 1;
  }
  out.root = slash == std::string::npos ? "" : rest.substr(slash);
  RDTX_TRY(check_path(out.root));
  return out;
}

}  // namespace rdtx::membership
