// The driver registry: each driver registers its name and open function from
// a static constructor (RDTX_REGISTER_DRIVER), as DPDK's PMDs do; drivers are
// linked whole into apps and tests. The list is written before main() and
// only read afterwards.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "rdma/rdma.hpp"

namespace rdtx::rdma {

struct Driver {
  const char* name;
  const char* help;  // one line: the devargs keys and what they mean
  Result<std::unique_ptr<Device>> (*open)(std::string_view devargs, const OpenOptions& opts);
};

void register_driver(const Driver* drv);
const std::vector<const Driver*>& drivers();

}  // namespace rdtx::rdma

#define RDTX_REGISTER_DRIVER(var)                                      \
  [[gnu::constructor]] static void rdtx_register_driver_##var() {     \
    ::rdtx::rdma::register_driver(&(var));                            \
  }
