#include "config/config.hpp"

#include <algorithm>
#include <array>

#include "config/literal.hpp"

namespace rdtx::config {

const char* to_string(Type t) {
  switch (t) {
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kString: return "string";
    case Type::kEnum: return "enum";
  }
  return "?";
}

Schema& Schema::add(std::string path, KeySpec spec) {
  std::string_view p = path;
  for (size_t start = 0;;) {
    size_t dot = p.find('.', start);
    if (!detail::is_bare_key(p.substr(start, dot == std::string_view::npos ? dot : dot - start)))
      detail::die("bad schema: '%s' is not a dotted path of bare keys ([A-Za-z0-9_-]+)", path.c_str());
    if (dot == std::string_view::npos) break;
    std::string_view section = p.substr(0, dot);
    if (keys_.find(section) != keys_.end())
      detail::die("bad schema: '%s' is declared under '%.*s', which is a key", path.c_str(), int(section.size()),
                 section.data());
    start = dot + 1;
  }
  if (keys_.find(p) != keys_.end()) detail::die("bad schema: '%s' is declared twice", path.c_str());
  if (sections_.find(p) != sections_.end())
    detail::die("bad schema: '%s' is declared as a key but is a section of other keys", path.c_str());
  for (size_t dot = p.find('.'); dot != std::string_view::npos; dot = p.find('.', dot + 1))
    sections_.emplace(p.substr(0, dot));
  keys_.emplace(std::move(path), std::move(spec));
  return *this;
}

Schema& Schema::add_bool(std::string path, bool def, std::string doc) {
  KeySpec s;
  s.type = Type::kBool;
  s.def = def;
  s.doc = std::move(doc);
  return add(std::move(path), std::move(s));
}

Schema& Schema::add_int(std::string path, int64_t def, int64_t min, int64_t max, std::string doc) {
  if (!(min <= def && def <= max))
    detail::die("bad schema: '%s': default %lld is outside [%lld, %lld]", path.c_str(), static_cast<long long>(def),
               static_cast<long long>(min), static_cast<long long>(max));
  KeySpec s;
  s.type = Type::kInt;
  s.def = def;
  s.int_min = min;
  s.int_max = max;
  s.doc = std::move(doc);
  return add(std::move(path), std::move(s));
}

Schema& Schema::add_float(std::string path, double def, double min, double max, std::string doc) {
  // Written so that a NaN bound or default fails too.
  if (!(min <= def && def <= max))
    detail::die("bad schema: '%s': default %s is outside [%s, %s]", path.c_str(), detail::float_literal(def).c_str(),
               detail::float_literal(min).c_str(), detail::float_literal(max).c_str());
  KeySpec s;
  s.type = Type::kFloat;
  s.def = def;
  s.float_min = min;
  s.float_max = max;
  s.doc = std::move(doc);
  return add(std::move(path), std::move(s));
}

Schema& Schema::add_string(std::string path, std::string def, std::string doc) {
  KeySpec s;
  s.type = Type::kString;
  s.def = std::move(def);
  s.doc = std::move(doc);
  return add(std::move(path), std::move(s));
}

Schema& Schema::add_enum(std::string path, std::string def, std::vector<std::string> allowed,
                         std::string doc) {
  if (std::find(allowed.begin(), allowed.end(), def) == allowed.end())
    detail::die("bad schema: '%s': default '%s' is not one of its allowed values", path.c_str(), def.c_str());
  KeySpec s;
  s.type = Type::kEnum;
  s.def = std::move(def);
  s.allowed = std::move(allowed);
  s.doc = std::move(doc);
  return add(std::move(path), std::move(s));
}

Schema& Schema::add_check(std::function<std::string(const Config&)> check) {
  if (!check) detail::die("bad schema: add_check() given an empty function");
  checks_.push_back(std::move(check));
  return *this;
}

const KeySpec* Schema::find(std::string_view path) const {
  auto it = keys_.find(path);
  return it == keys_.end() ? nullptr : &it->second;
}

bool Schema::is_section(std::string_view path) const { return sections_.find(path) != sections_.end(); }

std::string Schema::describe() const {
  using Row = std::array<std::string, 5>;
  std::vector<Row> rows{{"KEY", "TYPE", "DEFAULT", "RANGE", "DESCRIPTION"}};
  for (const auto& [path, s] : keys_) {
    std::string range;
    switch (s.type) {
      case Type::kInt:
        range = "[" + std::to_string(s.int_min) + ", " + std::to_string(s.int_max) + "]";
        break;
      case Type::kFloat:
        range = "[" + detail::float_literal(s.float_min) + ", " + detail::float_literal(s.float_max) + "]";
        break;
      case Type::kEnum:
        for (const auto& a : s.allowed) range += (range.empty() ? "" : " | ") + a;
        break;
      case Type::kBool:
      case Type::kString:
        break;
    }
    rows.push_back({path, to_string(s.type), detail::toml_literal(s.def), range, s.doc});
  }
  std::array<size_t, 4> width{};
  for (const auto& r : rows)
    for (size_t i = 0; i < width.size(); i++) width[i] = std::max(width[i], r[i].size());
  std::string out;
  for (const auto& r : rows) {
    for (size_t i = 0; i < width.size(); i++) out += r[i] + std::string(width[i] - r[i].size() + 2, ' ');
    out += r[4];
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += '\n';
  }
  return out;
}

}  // namespace rdtx::config
