// The only file that includes toml++: it is header-heavy and its types stay
// out of config.hpp.
#include "config/config.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>

#include <toml++/toml.h>

#include "config/literal.hpp"

namespace rdtx::config {

namespace {

using detail::quote;

// Config files are written by hand or by a sweep script; anything larger is
// a wrong path (a log, /dev/zero), not a config.
constexpr size_t kMaxFileSize = 16u << 20;

// Levenshtein distance, ignoring ASCII case so that "TXN" suggests "txn".
size_t edit_distance(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); j++) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string_view leaf(std::string_view path) {
  size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

// The candidate closest to `word`, if it is close enough to be a typo of it
// (at most a third of the letters wrong); compares last components only if
// `by_leaf`. "" if none is.
std::string closest(std::string_view word, const std::vector<std::string_view>& candidates, bool by_leaf) {
  std::string_view w = by_leaf ? leaf(word) : word;
  size_t best_distance = std::max<size_t>(1, w.size() / 3) + 1;
  std::string_view best;
  for (std::string_view c : candidates) {
    size_t d = edit_distance(w, by_leaf ? leaf(c) : c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return std::string(best);
}

std::string did_you_mean(const std::string& suggestion) {
  return suggestion.empty() ? "" : " (did you mean '" + suggestion + "'?)";
}

// For a misspelt path: the closest known path, else a known path whose last
// component is (close to) the one given, which catches a right key put in
// the wrong section ([txn] doorbell_batching -> txn.options.doorbell_batching).
std::string suggest_path(std::string_view path, const std::vector<std::string_view>& known) {
  std::string s = closest(path, known, false);
  return did_you_mean(s.empty() ? closest(path, known, true) : s);
}

std::vector<std::string_view> key_paths(const Schema& schema) {
  std::vector<std::string_view> out;
  for (const auto& [path, spec] : schema.keys()) out.push_back(path);
  return out;
}

std::vector<std::string_view> section_paths(const Schema& schema) {
  std::vector<std::string_view> out;
  for (const auto& [path, spec] : schema.keys()) {
    std::string_view p = path;
    for (size_t dot = p.find('.'); dot != std::string_view::npos; dot = p.find('.', dot + 1))
      out.push_back(p.substr(0, dot));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

const char* expected(Type t) {
  switch (t) {
    case Type::kBool: return "a boolean (true or false)";
    case Type::kInt: return "an integer";
    case Type::kFloat: return "a number";
    case Type::kString:
    case Type::kEnum: return "a string";
  }
  return "?";
}

const char* found(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::none: return "nothing";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
  }
  return "?";
}

// `node`'s value as the key's type; the error has no location prefix.
Result<Value> typed(const KeySpec& spec, const std::string& path, const toml::node& node) {
  switch (spec.type) {
    case Type::kBool:
      if (const auto* v = node.as_boolean()) return Value{v->get()};
      break;
    case Type::kInt:
      if (const auto* v = node.as_integer()) return Value{v->get()};
      break;
    case Type::kFloat:
      if (const auto* v = node.as_floating_point()) return Value{v->get()};
      if (const auto* v = node.as_integer()) return Value{static_cast<double>(v->get())};
      break;
    case Type::kString:
    case Type::kEnum:
      if (const auto* v = node.as_string()) return Value{v->get()};
      break;
  }
  return make_error(EINVAL, "expected %s for %s, found %s", expected(spec.type), path.c_str(), found(node));
}

// Range and allowed-value checks of a value already of the key's type.
Result<void> in_range(const KeySpec& spec, const std::string& path, const Value& v) {
  switch (spec.type) {
    case Type::kInt: {
      int64_t x = std::get<int64_t>(v);
      if (x < spec.int_min || x > spec.int_max)
        return make_error(ERANGE, "%s = %lld is out of range [%lld, %lld]", path.c_str(), static_cast<long long>(x),
                          static_cast<long long>(spec.int_min), static_cast<long long>(spec.int_max));
      break;
    }
    case Type::kFloat: {
      double x = std::get<double>(v);
      if (!(x >= spec.float_min && x <= spec.float_max))  // NaN fails too
        return make_error(ERANGE, "%s = %s is out of range [%s, %s]", path.c_str(), detail::float_literal(x).c_str(),
                          detail::float_literal(spec.float_min).c_str(),
                          detail::float_literal(spec.float_max).c_str());
      break;
    }
    case Type::kEnum: {
      const std::string& s = std::get<std::string>(v);
      if (std::find(spec.allowed.begin(), spec.allowed.end(), s) != spec.allowed.end()) break;
      std::string list;
      std::vector<std::string_view> candidates;
      for (const auto& a : spec.allowed) {
        list += (list.empty() ? "" : ", ") + a;
        candidates.push_back(a);
      }
      return make_error(EINVAL, "%s = %s is not one of: %s%s", path.c_str(), quote(s).c_str(), list.c_str(),
                        did_you_mean(closest(s, candidates, false)).c_str());
    }
    case Type::kBool:
    case Type::kString:
      break;
  }
  return {};
}

Result<Value> checked(const KeySpec& spec, const std::string& path, const toml::node& node) {
  Result<Value> v = typed(spec, path, node);
  if (!v) return v;
  RDTX_TRY(in_range(spec, path, *v));
  return v;
}

bool valid_utf8(std::string_view s) {
  // The smallest code point of each length: anything below is an overlong form.
  static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 4;
    if (n == 4 || s.size() - i <= n) return false;  // bad lead byte, or truncated
    uint32_t cp = c & (n == 0 ? 0x7f : 0x7f >> (n + 1));
    for (size_t k = 1; k <= n; k++) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (cp < kMin[n] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return false;
    i += n + 1;
  }
  return true;
}

std::string where(std::string_view source, const toml::source_region& r) {
  if (r.begin.line == 0) return std::string(source);  // toml++ knows no position
  return std::string(source) + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

struct Assignment {
  std::string path;
  Value value;
  std::string origin;
};

// Walks a parsed file against the schema, collecting every value and every
// problem, so that the one reported is the first in the file rather than
// the first in toml++'s (alphabetical) table order.
class FileReader {
 public:
  FileReader(const Schema& schema, std::string_view source) : schema_(schema), source_(source) {}

  void walk(const toml::table& table, const std::string& prefix) {
    for (auto&& [key, node] : table) {
      // A quoted key that is not bare ("txn.coroutines" = 1 is one key with a
      // dot in its name) is shown quoted, and so never matches a schema path.
      std::string name = detail::is_bare_key(key.str()) ? std::string(key.str()) : quote(key.str());
      std::string path = prefix.empty() ? name : prefix + "." + name;
      if (const KeySpec* spec = schema_.find(path)) {
        Result<Value> v = checked(*spec, path, node);
        if (v)
          assignments.push_back({path, std::move(v.value()), where(source_, key.source())});
        else
          fail(node.source(), v.error());
      } else if (schema_.is_section(path)) {
        if (const toml::table* sub = node.as_table())
          walk(*sub, path);
        else
          fail(node.source(), make_error(EINVAL, "'%s' is a section: expected a table, found %s", path.c_str(),
                                         found(node)));
      } else if (node.is_table()) {
        fail(key.source(), make_error(EINVAL, "unknown section '%s'%s", path.c_str(),
                                      suggest_path(path, section_paths(schema_)).c_str()));
      } else {
        fail(key.source(), make_error(EINVAL, "unknown key '%s'%s", path.c_str(),
                                      suggest_path(path, key_paths(schema_)).c_str()));
      }
    }
  }

  // The first problem in file order, if any.
  const Error* first_problem() const {
    auto it = std::min_element(problems_.begin(), problems_.end(),
                               [](const Problem& a, const Problem& b) { return a.pos < b.pos; });
    return it == problems_.end() ? nullptr : &it->error;
  }

  std::vector<Assignment> assignments;

 private:
  struct Problem {
    toml::source_position pos;
    Error error;
  };

  void fail(const toml::source_region& at, Error e) {
    e.message = where(source_, at) + ": " + e.message;
    problems_.push_back({at.begin, std::move(e)});
  }

  const Schema& schema_;
  std::string_view source_;
  std::vector<Problem> problems_;
};

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The value of a --set argument, read according to the key's type.
Result<Value> override_value(const KeySpec& spec, const std::string& path, std::string_view text) {
  if (spec.type == Type::kString || spec.type == Type::kEnum) {
    if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
    // Strings from files are checked by toml++; these must be too, or
    // to_toml() and to_json() would write invalid documents.
    if (!valid_utf8(text)) return make_error(EINVAL, "the value for %s is not valid UTF-8", path.c_str());
    return Value{std::string(text)};
  }
  // Booleans and numbers are read by the TOML parser itself, so that --set
  // accepts exactly what a file does (0x1f, 1_000, 1e-3, inf).
  toml::table doc;
  try {
    doc = toml::parse("v = " + std::string(text));
  } catch (const toml::parse_error&) {
    // `doc` stays empty: reported below, naming the type expected.
  }
  const toml::node* node = doc.size() == 1 ? doc.get("v") : nullptr;  // one literal, nothing after it
  if (node == nullptr) return make_error(EINVAL, "expected %s for %s", expected(spec.type), path.c_str());
  return typed(spec, path, *node);
}

Result<Assignment> read_override(const Schema& schema, const std::string& arg) {
  auto fail = [&arg](Error e) {
    e.message = "--set " + arg + ": " + e.message;
    return e;
  };
  size_t eq = arg.find('=');
  if (eq == std::string::npos) return fail(make_error(EINVAL, "expected section.key=value"));
  std::string path(trim(std::string_view(arg).substr(0, eq)));
  if (path.empty()) return fail(make_error(EINVAL, "empty key before '='"));
  const KeySpec* spec = schema.find(path);
  if (spec == nullptr) {
    if (schema.is_section(path)) return fail(make_error(EINVAL, "'%s' is a section, not a key", path.c_str()));
    return fail(make_error(EINVAL, "unknown key '%s'%s", path.c_str(), suggest_path(path, key_paths(schema)).c_str()));
  }
  Result<Value> v = override_value(*spec, path, std::string_view(arg).substr(eq + 1));
  if (!v) return fail(v.error());
  if (Result<void> r = in_range(*spec, path, *v); !r) return fail(r.error());
  return Assignment{path, std::move(v.value()), "--set"};
}

// Keys grouped by section, sections ordered component by component
// ("a" < "a.b" < "a-b"), so that a section's subsections follow it directly:
// to_json() then opens and closes each object exactly once.
using Sections =
    std::map<std::vector<std::string_view>, std::vector<std::pair<std::string_view, const Value*>>>;

template <typename Entries>
Sections by_section(const Entries& values) {
  Sections out;
  for (const auto& [path, entry] : values) {
    std::vector<std::string_view> comps;
    std::string_view p = path;
    for (size_t dot; (dot = p.find('.')) != std::string_view::npos; p.remove_prefix(dot + 1))
      comps.push_back(p.substr(0, dot));
    out[comps].emplace_back(p, &entry.value);
  }
  return out;
}

}  // namespace

Result<Config> Config::load(const Schema& schema, const std::string& file,
                            const std::vector<std::string>& overrides) {
  if (file.empty()) return parse(schema, "", "", overrides);
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (f == nullptr) return make_error(errno, "cannot read '%s': %s", file.c_str(), std::strerror(errno));
  std::string text;
  char buf[65536];
  size_t n;
  errno = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() <= kMaxFileSize) text.append(buf, n);
  int err = std::ferror(f) ? (errno != 0 ? errno : EIO) : 0;
  std::fclose(f);
  if (err != 0) return make_error(err, "cannot read '%s': %s", file.c_str(), std::strerror(err));
  if (text.size() > kMaxFileSize)
    return make_error(EFBIG, "cannot read '%s': larger than %zu MiB, not a config file", file.c_str(),
                      kMaxFileSize >> 20);
  return parse(schema, text, file, overrides);
}

Result<Config> Config::parse(const Schema& schema, std::string_view toml_text, std::string_view source_name,
                             const std::vector<std::string>& overrides) {
  std::string source = source_name.empty() ? "<config>" : std::string(source_name);
  toml::table doc;
  try {
    doc = toml::parse(toml_text, std::string_view(source));
  } catch (const toml::parse_error& e) {
    return make_error(EINVAL, "%s: TOML syntax error: %.*s", where(source, e.source()).c_str(),
                      int(e.description().size()), e.description().data());
  }
  FileReader reader(schema, source);
  reader.walk(doc, "");
  if (const Error* e = reader.first_problem()) return *e;

  Config cfg;
  for (const auto& [path, spec] : schema.keys()) cfg.values_.emplace(path, Entry{spec.def, "default"});
  for (auto& a : reader.assignments) cfg.values_.at(a.path) = Entry{std::move(a.value), std::move(a.origin)};
  for (const auto& arg : overrides) {
    Result<Assignment> a = read_override(schema, arg);
    if (!a) return a.error();
    cfg.values_.at(a->path) = Entry{std::move(a->value), std::move(a->origin)};
  }
  for (const auto& check : schema.checks_) {
    std::string msg = check(cfg);
    if (!msg.empty()) return Error{EINVAL, std::move(msg)};
  }
  return cfg;
}

const Config::Entry& Config::at(std::string_view path, size_t type_index, const char* getter) const {
  static constexpr const char* kTypeNames[] = {"bool", "int", "float", "string"};
  auto it = values_.find(path);
  if (it == values_.end())
    detail::die("%s(\"%.*s\"): no such key in the schema", getter, int(path.size()), path.data());
  if (type_index != std::variant_npos && it->second.value.index() != type_index)
    detail::die("%s(\"%.*s\"): the key is a %s", getter, int(path.size()), path.data(),
              kTypeNames[it->second.value.index()]);
  return it->second;
}

bool Config::get_bool(std::string_view path) const { return std::get<bool>(at(path, 0, "get_bool").value); }

int64_t Config::get_int(std::string_view path) const { return std::get<int64_t>(at(path, 1, "get_int").value); }

double Config::get_float(std::string_view path) const { return std::get<double>(at(path, 2, "get_float").value); }

const std::string& Config::get_string(std::string_view path) const {
  return std::get<std::string>(at(path, 3, "get_string").value);
}

const std::string& Config::origin(std::string_view path) const {
  return at(path, std::variant_npos, "origin").origin;
}

std::string Config::to_toml() const {
  std::string out;
  for (const auto& [section, keys] : by_section(values_)) {
    if (!section.empty()) {
      std::string name;
      for (std::string_view c : section) name += (name.empty() ? "" : ".") + std::string(c);
      out += (out.empty() ? "[" : "\n[") + name + "]\n";
    }
    for (const auto& [key, value] : keys) out += std::string(key) + " = " + detail::toml_literal(*value) + "\n";
  }
  return out;
}

std::string Config::to_config_file(const Schema& schema) const {
  // The checks see only values and whether each key was given (origin
  // "default" or not): a copy in which a default is marked as given is
  // exactly what loading the written line would produce.
  Config given = *this;
  std::set<std::string, std::less<>> inapplicable;
  auto accepted = [&] {
    for (const auto& check : schema.checks_)
      if (!check(given).empty()) return false;
    return true;
  };
  for (auto& [path, entry] : given.values_) {
    if (entry.origin != "default") continue;
    entry.origin = "<print-config>";
    if (!accepted()) {
      entry.origin = "default";
      inapplicable.insert(path);
    }
  }
  std::string out;
  for (const auto& [section, keys] : by_section(values_)) {
    std::string name;
    for (std::string_view c : section) name += (name.empty() ? "" : ".") + std::string(c);
    if (!section.empty()) out += (out.empty() ? "[" : "\n[") + name + "]\n";
    for (const auto& [key, value] : keys) {
      const std::string path = name.empty() ? std::string(key) : name + "." + std::string(key);
      if (inapplicable.count(path))
        out += "# " + std::string(key) + " = " + detail::toml_literal(*value) + "  (default; does not apply)\n";
      else
        out += std::string(key) + " = " + detail::toml_literal(*value) + "\n";
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> Config::flat() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, entry] : values_) out.emplace_back(key, detail::toml_literal(entry.value));
  return out;
}

std::string Config::to_json() const {
  std::string out = "{";
  std::vector<std::string_view> open;  // components of the innermost open object
  std::vector<bool> has_member{false};  // per open object, the root included
  auto member = [&](std::string_view name) {
    if (has_member.back()) out += ',';
    has_member.back() = true;
    out += quote(name) + ":";
  };
  for (const auto& [section, keys] : by_section(values_)) {
    size_t common = 0;
    while (common < open.size() && common < section.size() && open[common] == section[common]) common++;
    for (; open.size() > common; open.pop_back(), has_member.pop_back()) out += '}';
    for (size_t i = common; i < section.size(); i++) {
      member(section[i]);
      out += '{';
      open.push_back(section[i]);
      has_member.push_back(false);
    }
    for (const auto& [key, value] : keys) {
      member(key);
      out += detail::json_literal(*value);
    }
  }
  return out + std::string(open.size() + 1, '}');
}

}  // namespace rdtx::config
