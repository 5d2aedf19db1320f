// Run configuration: TOML files plus `--set section.key=value` overrides,
// validated against a schema that components fill in before loading.
//
// Every component declares its keys (type, default, range or allowed values,
// one line of doc) on a shared Schema; the app then loads one file and the
// command-line overrides with Config::load(). Anything the schema does not
// know, any value of the wrong type or out of range, and any failed
// cross-key check is an Error whose single-line message names the file, line
// and column (or the `--set` argument) and, for misspelt names, suggests the
// closest known one. The resolved Config holds every key, defaults included,
// and prints itself as TOML or JSON for reports.
//
// Only scalar keys exist today. Arrays (e.g. `[[cluster.nodes]]`) will be a
// new kind of Schema entry with its own element schema; a TOML array given
// for a scalar key is a type error.
//
// Thread-safety: build the Schema and load the Config on one thread at
// setup. A loaded Config is immutable, so its const getters may then be
// called from any thread; they are map lookups meant for the control path,
// not the hot path (read values once into the component's own state).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/result.hpp"

namespace rdtx::config {

class Config;

// A resolved value. Enum keys hold their value as a string.
using Value = std::variant<bool, int64_t, double, std::string>;

enum class Type { kBool, kInt, kFloat, kString, kEnum };
const char* to_string(Type t);  // "bool", "int", "float", "string", "enum"

// One declared key. Ranges are inclusive; only the fields of its type matter.
struct KeySpec {
  Type type = Type::kBool;
  Value def;
  int64_t int_min = 0, int_max = 0;
  double float_min = 0, float_max = 0;
  std::vector<std::string> allowed;  // enum values, in declaration order
  std::string doc;
};

// The set of keys a run accepts. Paths are dotted ("txn.pipeline.fetch"):
// every component but the last names a TOML table (a section), the last the
// key. Each component is a TOML bare key ([A-Za-z0-9_-]+).
//
// Declaring a key twice, a path that is both a key and a section, a bad
// path, an empty range, or a default outside its range or allowed values is
// a programming error: the add_* call prints the path and aborts.
class Schema {
 public:
  Schema& add_bool(std::string path, bool def, std::string doc);
  Schema& add_int(std::string path, int64_t def, int64_t min, int64_t max, std::string doc);
  // An integer written in the file or on the command line is accepted too.
  Schema& add_float(std::string path, double def, double min, double max, std::string doc);
  Schema& add_string(std::string path, std::string def, std::string doc);
  Schema& add_enum(std::string path, std::string def, std::vector<std::string> allowed,
                   std::string doc);

  // A cross-key check, run in declaration order once every key is resolved.
  // It returns "" if the config is acceptable, else the whole error message,
  // which should name the keys involved and may cite Config::origin() (e.g.
  // "txn.protocol = \"calvin\" (conf/x.toml:2:1) does not support
  // txn.pipeline.fetch = \"onesided\"").
  Schema& add_check(std::function<std::string(const Config&)> check);

  // A table of every key: path, type, default, range or allowed values, doc.
  // For --help and for the key reference in doc/configuration.md.
  std::string describe() const;

  // nullptr if `path` is not a declared key.
  const KeySpec* find(std::string_view path) const;
  // True if `path` is a proper prefix of some key, i.e. a TOML table.
  bool is_section(std::string_view path) const;
  // Every key by path, for tools that list or document them.
  const std::map<std::string, KeySpec, std::less<>>& keys() const { return keys_; }

 private:
  friend class Config;  // runs checks_
  Schema& add(std::string path, KeySpec spec);

  std::map<std::string, KeySpec, std::less<>> keys_;
  std::set<std::string, std::less<>> sections_;
  std::vector<std::function<std::string(const Config&)>> checks_;
};

class Config {
 public:
  // Reads `file` ("" for none: defaults and overrides only), then applies
  // `overrides` in order, each "section.key=value" as given to --set (last
  // wins), then runs the schema's checks.
  //
  // Errors (one line each; the first problem in file order is reported):
  //   "cannot read 'nope.toml': No such file or directory" (code: errno;
  //   EFBIG past 16 MiB)
  //   "conf/x.toml:3:7: TOML syntax error: ..."
  //   "conf/x.toml:7:1: unknown key 'txn.corutines' (did you mean 'txn.coroutines'?)"
  //   "conf/x.toml:1:2: unknown section 'txm' (did you mean 'txn'?)"
  //   "conf/x.toml:4:14: expected an integer for txn.coroutines, found a string"
  //   "conf/x.toml:4:14: txn.coroutines = 0 is out of range [1, 1024]" (ERANGE)
  //   "--set txn.coroutines=abc: expected an integer for txn.coroutines"
  //   the message returned by a failed check
  //
  // `--set` values are read according to the key's type: bool, int and
  // float as TOML literals (so 0x1f and 1_000 work, and a float key takes an
  // integer); strings and enums verbatim, with one pair of surrounding double
  // quotes removed if present.
  static Result<Config> load(const Schema& schema, const std::string& file,
                             const std::vector<std::string>& overrides);

  // As load(), with the TOML text given directly; `source_name` stands for
  // the file name in messages and origins. For tests and built-in presets.
  static Result<Config> parse(const Schema& schema, std::string_view toml_text,
                              std::string_view source_name,
                              const std::vector<std::string>& overrides);

  // Typed getters. A path that is not in the schema, or a getter of the
  // wrong type, is a programming error: it prints the path and aborts.
  // get_string() also reads enum keys.
  bool get_bool(std::string_view path) const;
  int64_t get_int(std::string_view path) const;
  double get_float(std::string_view path) const;
  const std::string& get_string(std::string_view path) const;

  // Where the value came from: "conf/x.toml:3:1" (the key's position),
  // "--set", or "default".
  const std::string& origin(std::string_view path) const;

  // Every key, defaults included, sorted by section and key. to_toml() reads
  // back to the same values. to_json() is one line, nested by section;
  // float infinities and NaN, which JSON cannot express, become the strings
  // "inf", "-inf" and "nan".
  std::string to_toml() const;
  std::string to_json() const;
  // A config file that loads back (with `schema`, the one this Config was
  // loaded with) to this configuration: the same values, and the same keys
  // left at their defaults where that matters (for --print-config). Every
  // key given explicitly is written; so is every default that `schema`'s
  // checks accept when given explicitly (in key order, each with the ones
  // before it). A default they refuse does not apply here (e.g. a pipeline
  // stage the protocol has not, a virtual-time key without virtual time) and
  // is written as a comment, "# key = value  (default; does not apply)".
  std::string to_config_file(const Schema& schema) const;
  // Every key with its value as a TOML literal, sorted by key: what the
  // processes of a multi-process run compare to agree on one configuration.
  std::vector<std::pair<std::string, std::string>> flat() const;

 private:
  struct Entry {
    Value value;
    std::string origin;
  };

  Config() = default;
  const Entry& at(std::string_view path, size_t type_index, const char* getter) const;

  std::map<std::string, Entry, std::less<>> values_;
};

}  // namespace rdtx::config
