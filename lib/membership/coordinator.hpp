// The address of the coordination service that holds a process cluster's
// configuration: `cluster.coordinator = "zk://host:port[,host:port...]/path"`
// (doc/membership.md). Only the parsing lives here, so that the key is
// checked wherever the configuration is, with or without ZooKeeper's client.
// Thread-safety: plain functions and value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace rdtx::membership {

struct ServerAddress {
  std::string host;  // a name or an IPv4 literal, or an IPv6 literal without its brackets
  uint16_t port = 0;
};

struct CoordinatorAddress {
  std::vector<ServerAddress> servers;  // the ZooKeeper ensemble, at least one server
  std::string root;                    // absolute znode path of this cluster, e.g. /rdtx/run1 (never "/")

  // "h1:p1,h2:p2" ([v6]:port for IPv6 literals), as zookeeper_init wants it.
  std::string connect_string() const;
};

// Parses "zk://host:port[,host:port...]/path". EINVAL with a message naming
// what is wrong (the scheme, a server by its position, the port, the path
// and its offending component); the caller prefixes the key's name.
// Rules: every server has a host and a port 1..65535 (IPv6 as [addr]:port);
// the path is absolute, not the root itself, has no empty, "." or ".."
// component, no trailing '/', and only printable ASCII without spaces
// (ZooKeeper allows more; these are what a shell and a log line show
// unambiguously); at most 1024 characters in all.
Result<CoordinatorAddress> parse_coordinator(const std::string& url);

}  // namespace rdtx::membership
