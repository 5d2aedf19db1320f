// GIDs of a RoCE port: formatting, and the choice of the source GID when
// devargs say gid_index=auto. Pure functions over what ibv_query_gid_ex
// returned, so they are testable without a device.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rdtx::rdma::verbs {

// As enum ibv_gid_type.
enum class GidType : uint8_t { kIb = 0, kRoceV1 = 1, kRoceV2 = 2 };
const char* to_string(GidType t);

struct GidEntry {
  uint32_t index = 0;
  GidType type = GidType::kIb;
  uint8_t raw[16] = {};
};

bool gid_is_zero(const uint8_t raw[16]);
// ::ffff:a.b.c.d, the form a RoCE v2 GID of an IPv4 address takes.
bool gid_is_ipv4_mapped(const uint8_t raw[16]);
// inet_ntop's IPv6 text ("fe80::1", "::ffff:10.0.0.1").
std::string format_gid(const uint8_t raw[16]);

// The entry to use as source GID: RoCE v2 with an IPv4-mapped address first
// (routable, what RoCE deployments configure), then RoCE v2 with a global
// IPv6 address, RoCE v2 link-local, RoCE v1, anything else; the lowest index
// among equals. Zero GIDs are never chosen. Returns -1 if none is left.
int pick_gid(const std::vector<GidEntry>& entries);

}  // namespace rdtx::rdma::verbs
