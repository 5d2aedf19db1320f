// key=value argument lists such as a device's devargs
// ("shm,latency_ns=2000,bw_gbps=100"), parsed with DPDK's rte_kvargs.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace rdtx::env {

struct KvArgs {
  std::string name;                          // the leading token ("shm")
  std::map<std::string, std::string> values;  // key -> value

  // Typed getters: a value that does not parse, or lies outside [lo, hi],
  // is an error naming the key and the value.
  Result<uint64_t> get_u64(const std::string& key, uint64_t def, uint64_t lo = 0,
                           uint64_t hi = UINT64_MAX) const;
  Result<double> get_double(const std::string& key, double def, double lo, double hi) const;
  std::string get_string(const std::string& key, const std::string& def) const;
};

// Parses "name[,key=value]*". Any key not in `valid_keys` is an error that
// names it and lists the valid keys; a key given twice is an error naming it.
Result<KvArgs> parse_kvargs(std::string_view text, const std::vector<std::string>& valid_keys);

}  // namespace rdtx::env
