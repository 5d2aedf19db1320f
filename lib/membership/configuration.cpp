#include "membership/configuration.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <set>
#include <sstream>

namespace rdtx::membership {

namespace {

bool is_token(const std::string& s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char ch) { return ch > ' ' && ch <= '~'; });
}

std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= line.size()) {
    size_t end = line.find(' ', pos);
    if (end == std::string::npos) end = line.size();
    out.push_back(line.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

template <typename T>
bool parse_uint(const std::string& s, T& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

std::string node_list(const std::vector<uint32_t>& ids) {
  std::string out;
  for (uint32_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return out.empty() ? "none" : out;
}

}  // namespace

Result<void> validate(const Configuration& c) {
  if (!is_token(c.run_id))
    return make_error(EINVAL, "configuration: run id '%s' must be non-empty printable ASCII without spaces",
                      c.run_id.c_str());
  if (c.number == 0) return make_error(EINVAL, "configuration: number 0 (the first configuration is 1)");
  if (c.members.empty()) return make_error(EINVAL, "configuration %llu: no member", (unsigned long long)c.number);
  for (const auto& [id, endpoint] : c.members)
    if (!is_token(endpoint))
      return make_error(EINVAL,
                        "configuration %llu: member %u's endpoint '%s' must be non-empty printable ASCII "
                        "without spaces",
                        (unsigned long long)c.number, id, endpoint.c_str());
  if (!c.members.contains(c.cm))
    return make_error(EINVAL, "configuration %llu: the CM, node %u, is not a member", (unsigned long long)c.number,
                      c.cm);
  for (size_t p = 0; p < c.partitions.size(); ++p) {
    const Placement& pl = c.partitions[p];
    if (pl.primary != kNoPrimary && !c.members.contains(pl.primary))
      return make_error(EINVAL, "configuration %llu: partition %zu's primary, node %u, is not a member",
                        (unsigned long long)c.number, p, pl.primary);
    std::set<uint32_t> seen{pl.primary};
    for (uint32_t b : pl.backups) {
      if (!c.members.contains(b))
        return make_error(EINVAL, "configuration %llu: partition %zu's backup, node %u, is not a member",
                          (unsigned long long)c.number, p, b);
      if (!seen.insert(b).second)
        return make_error(EINVAL, "configuration %llu: partition %zu names node %u twice (backups %s)",
                          (unsigned long long)c.number, p, b, node_list(pl.backups).c_str());
    }
  }
  return {};
}

std::string encode(const Configuration& c) {
  std::ostringstream out;
  out << kConfigMagic << ' ' << kConfigFormat << '\n'
      << "run " << c.run_id << '\n'
      << "number " << c.number << '\n'
      << "cm " << c.cm << '\n';
  for (const auto& [id, endpoint] : c.members) out << "member " << id << ' ' << endpoint << '\n';
  for (size_t p = 0; p < c.partitions.size(); ++p) {
    out << "partition " << p << ' ';
    if (c.partitions[p].primary == kNoPrimary)
      out << '-';
    else
      out << c.partitions[p].primary;
    for (uint32_t b : c.partitions[p].backups) out << ' ' << b;
    out << '\n';
  }
  return out.str();
}

Result<Configuration> decode(const std::string& text) {
  Configuration c;
  bool have_run = false, have_number = false, have_cm = false;
  size_t pos = 0, line_no = 0;
  auto bad = [&](const std::string& what) {
    return make_error(EINVAL, "configuration line %zu: %s", line_no, what.c_str());
  };
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos)
      return make_error(EINVAL, "configuration line %zu: no line end (truncated?)", line_no + 1);
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const std::vector<std::string> f = split_fields(line);
    if (line_no == 1) {
      if (f.size() != 2 || f[0] != kConfigMagic)
        return bad("'" + line.substr(0, 64) + "' is not an rdtx configuration (expected '" + kConfigMagic + " " +
                   std::to_string(kConfigFormat) + "')");
      uint32_t format = 0;
      if (!parse_uint(f[1], format) || format != kConfigFormat)
        return bad("format '" + f[1] + "', this build reads format " + std::to_string(kConfigFormat));
      continue;
    }
    const std::string& key = f[0];
    if (key == "run" && f.size() == 2) {
      if (have_run) return bad("a second 'run'");
      c.run_id = f[1];
      have_run = true;
    } else if (key == "number" && f.size() == 2) {
      if (have_number) return bad("a second 'number'");
      if (!parse_uint(f[1], c.number)) return bad("number '" + f[1] + "' is not a number");
      have_number = true;
    } else if (key == "cm" && f.size() == 2) {
      if (have_cm) return bad("a second 'cm'");
      if (!parse_uint(f[1], c.cm)) return bad("cm '" + f[1] + "' is not a node id");
      have_cm = true;
    } else if (key == "member" && f.size() == 3) {
      uint32_t id = 0;
      if (!parse_uint(f[1], id)) return bad("member '" + f[1] + "' is not a node id");
      if (!c.members.emplace(id, f[2]).second) return bad("member " + f[1] + " listed twice");
    } else if (key == "partition" && f.size() >= 3) {
      size_t p = 0;
      if (!parse_uint(f[1], p) || p != c.partitions.size())
        return bad("partition '" + f[1] + "' out of order (expected " + std::to_string(c.partitions.size()) + ")");
      Placement pl;
      if (f[2] == "-")
        pl.primary = kNoPrimary;
      else if (!parse_uint(f[2], pl.primary) || pl.primary == kNoPrimary)
        return bad("primary '" + f[2] + "' is not a node id");
      for (size_t i = 3; i < f.size(); ++i) {
        uint32_t b = 0;
        if (!parse_uint(f[i], b)) return bad("backup '" + f[i] + "' is not a node id");
        pl.backups.push_back(b);
      }
      c.partitions.push_back(std::move(pl));
    } else {
      return bad("unexpected '" + line.substr(0, 64) + "'");
    }
  }
  if (line_no == 0) return make_error(EINVAL, "configuration: empty");
  if (!have_run || !have_number || !have_cm)
    return make_error(EINVAL, "configuration: missing '%s'", !have_run ? "run" : !have_number ? "number" : "cm");
  RDTX_TRY(validate(c));
  return c;
}

std::string first_difference(const Configuration& a, const Configuration& b, const std::string& a_name,
                             const std::string& b_name) {
  auto differ = [&](const std::string& what, const std::string& va, const std::string& vb) {
    return what + " is " + va + " in " + a_name + ", " + vb + " in " + b_name;
  };
  if (a.run_id != b.run_id) return differ("the run id", "'" + a.run_id + "'", "'" + b.run_id + "'");
  if (a.number != b.number)
    return differ("the configuration number", std::to_string(a.number), std::to_string(b.number));
  if (a.cm != b.cm) return differ("the CM", "node " + std::to_string(a.cm), "node " + std::to_string(b.cm));
  for (const auto& [id, ep] : a.members) {
    auto it = b.members.find(id);
    if (it == b.members.end()) return differ("member " + std::to_string(id), ep, "absent");
    if (it->second != ep) return differ("member " + std::to_string(id), ep, it->second);
  }
  for (const auto& [id, ep] : b.members)
    if (!a.members.contains(id)) return differ("member " + std::to_string(id), "absent", ep);
  if (a.partitions.size() != b.partitions.size())
    return differ("the number of partitions", std::to_string(a.partitions.size()), std::to_string(b.partitions.size()));
  for (size_t p = 0; p < a.partitions.size(); ++p)
    if (!(a.partitions[p] == b.partitions[p])) {
      auto show = [](const Placement& pl) {
        return (pl.primary == kNoPrimary ? std::string("no primary") : "primary " + std::to_string(pl.primary)) +
               ", backups " + node_list(pl.backups);
      };
      return differ("partition " + std::to_string(p), show(a.partitions[p]), show(b.partitions[p]));
    }
  return "";
}

Result<Configuration> without(const Configuration& c, const std::vector<uint32_t>& gone) {
  Configuration n = c;
  n.number = c.number + 1;
  bool changed = false;
  for (uint32_t g : gone) {
    if (g == c.cm)
      return make_error(EINVAL, "configuration %llu without node %u: it is the CM", (unsigned long long)c.number, g);
    changed |= n.members.erase(g) > 0;
    for (Placement& pl : n.partitions) {
      if (pl.primary == g) pl.primary = kNoPrimary;
      std::erase(pl.backups, g);
    }
  }
  if (!changed)
    return make_error(EINVAL, "configuration %llu without nodes %s: none of them is a member",
                      (unsigned long long)c.number, node_list(gone).c_str());
  RDTX_TRY(validate(n));
  return n;
}

std::vector<uint32_t> lost_partitions(const Configuration& c) {
  std::vector<uint32_t> out;
  for (size_t p = 0; p < c.partitions.size(); ++p)
    if (c.partitions[p].primary == kNoPrimary) out.push_back(static_cast<uint32_t>(p));
  return out;
}

}  // namespace rdtx::membership
