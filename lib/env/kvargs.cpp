#include "env/kvargs.hpp"

#include <rte_kvargs.h>

#include <cerrno>
#include <cstdlib>
#include <set>

namespace rdtx::env {

namespace {
int collect(const char* key, const char* value, void* opaque) {
  auto* m = static_cast<std::map<std::string, std::string>*>(opaque);
  (*m)[key] = value ? value : "";
  return 0;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& k : v) s += (s.empty() ? "" : ", ") + k;
  return s.empty() ? "(none)" : s;
}
}  // namespace

Result<KvArgs> parse_kvargs(std::string_view text, const std::vector<std::string>& valid_keys) {
  KvArgs out;
  auto comma = text.find(',');
  out.name = std::string(text.substr(0, comma));
  if (out.name.empty()) return make_error(EINVAL, "devargs '%.*s': missing driver name", int(text.size()), text.data());
  if (comma == std::string_view::npos) return out;
  std::string rest(text.substr(comma + 1));
  // rte_kvargs accepts keys without '=' as flags; we require key=value.
  size_t start = 0;
  std::set<std::string> seen;
  while (start <= rest.size()) {
    size_t end = rest.find(',', start);
    std::string item = rest.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (item.find('=') == std::string::npos || item.front() == '=')
      return make_error(EINVAL, "devargs '%s': '%s' is not key=value", std::string(text).c_str(), item.c_str());
    std::string key = item.substr(0, item.find('='));
    bool known = false;
    for (const auto& k : valid_keys) known |= (k == key);
    if (!known)
      return make_error(EINVAL, "devargs '%s': unknown key '%s' for driver '%s' (valid keys: %s)",
                        std::string(text).c_str(), key.c_str(), out.name.c_str(), join(valid_keys).c_str());
    // rte_kvargs keeps both values and the getters read one: which one the
    // user meant is not ours to guess.
    if (!seen.insert(key).second)
      return make_error(EINVAL, "devargs '%s': key '%s' given twice", std::string(text).c_str(), key.c_str());
    if (end == std::string::npos) break;
    start = end + 1;
  }
  rte_kvargs* kv = rte_kvargs_parse(rest.c_str(), nullptr);
  if (kv == nullptr) return make_error(EINVAL, "devargs '%s': malformed key=value list", std::string(text).c_str());
  rte_kvargs_process(kv, nullptr, collect, &out.values);
  rte_kvargs_free(kv);
  return out;
}

Result<uint64_t> KvArgs::get_u64(const std::string& key, uint64_t def, uint64_t lo, uint64_t hi) const {
  auto it = values.find(key);
  if (it == values.end()) return def;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(it->second.c_str(), &end, 0);
  if (errno != 0 || end == it->second.c_str() || *end != '\0' || it->second[0] == '-')
    return make_error(EINVAL, "devargs: %s=%s is not a non-negative integer", key.c_str(), it->second.c_str());
  if (v < lo || v > hi)
    return make_error(ERANGE, "devargs: %s=%s is out of range [%llu, %llu]", key.c_str(), it->second.c_str(),
                      static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi));
  return static_cast<uint64_t>(v);
}

Result<double> KvArgs::get_double(const std::string& key, double def, double lo, double hi) const {
  auto it = values.find(key);
  if (it == values.end()) return def;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0')
    return make_error(EINVAL, "devargs: %s=%s is not a number", key.c_str(), it->second.c_str());
  if (!(v >= lo && v <= hi))
    return make_error(ERANGE, "devargs: %s=%s is out of range [%g, %g]", key.c_str(), it->second.c_str(), lo, hi);
  return v;
}

std::string KvArgs::get_string(const std::string& key, const std::string& def) const {
  auto it = values.find(key);
  return it == values.end() ? def : it->second;
}

}  // namespace rdtx::env
