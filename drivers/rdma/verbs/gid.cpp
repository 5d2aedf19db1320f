#include "gid.hpp"

#include <arpa/inet.h>

namespace rdtx::rdma::verbs {

namespace {
int rank(const GidEntry& e) {
  bool link_local = e.raw[0] == 0xfe && (e.raw[1] & 0xc0) == 0x80;
  switch (e.type) {
    case GidType::kRoceV2:
      if (gid_is_ipv4_mapped(e.raw)) return 4;
      return link_local ? 2 : 3;
    case GidType::kRoceV1:
      return 1;
    case GidType::kIb:
      return 0;
  }
  return 0;
}
}  // namespace

const char* to_string(GidType t) {
  switch (t) {
    case GidType::kIb:
      return "IB";
    case GidType::kRoceV1:
      return "RoCE v1";
    case GidType::kRoceV2:
      return "RoCE v2";
  }
  return "?";
}

bool gid_is_zero(const uint8_t raw[16]) {
  for (int i = 0; i < 16; ++i)
    if (raw[i] != 0) return false;
  return true;
}

bool gid_is_ipv4_mapped(const uint8_t raw[16]) {
  for (int i = 0; i < 10; ++i)
    if (raw[i] != 0) return false;
  return raw[10] == 0xff && raw[11] == 0xff;
}

std::string format_gid(const uint8_t raw[16]) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, raw, buf, sizeof buf) == nullptr) return "?";
  return buf;
}

int pick_gid(const std::vector<GidEntry>& entries) {
  int best = -1, best_rank = -1;
  for (const GidEntry& e : entries) {
    if (gid_is_zero(e.raw)) continue;
    int r = rank(e);
    if (r > best_rank || (r == best_rank && e.index < static_cast<uint32_t>(best))) {
      best = static_cast<int>(e.index);
      best_rank = r;
    }
  }
  return best;
}

}  // namespace rdtx::rdma::verbs
