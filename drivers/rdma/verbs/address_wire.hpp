// What a verbs QpAddress carries: everything a peer needs to reach the QP
// through InfiniBand (LID) or RoCE (GID) addressing: QP number, initial PSN,
// the port's active MTU and link layer, and for UD the Q_Key. Peers may be
// different machines, so every field is stored big-endian, byte by byte.
// Thread-safety: plain value type.
#pragma once

#include <cstdint>
#include <cstring>

#include "rdma/rdma.hpp"

namespace rdtx::rdma::verbs {

// As enum ibv_link_layer (IBV_LINK_LAYER_UNSPECIFIED is reported as kIb).
enum class LinkLayer : uint8_t { kIb = 1, kEthernet = 2 };

struct AddressWire {
  static constexpr uint32_t kMagic = 0x5244'5642;  // "RDVB"
  static constexpr uint8_t kVersion = 1;

  QpType type = QpType::kRc;
  LinkLayer link = LinkLayer::kIb;
  uint8_t mtu = 0;       // enum ibv_mtu of the sender's port (1 = 256 .. 5 = 4096)
  uint16_t lid = 0;      // IB: the port's LID
  uint32_t qpn = 0;      // 24 bits
  uint32_t psn = 0;      // 24 bits: the first PSN this QP sends
  uint32_t qkey = 0;     // UD
  uint32_t node_id = 0;  // for error messages only
  uint8_t gid[16] = {};  // RoCE: the source GID; IB: GID index 0 (informative)

  QpAddress encode() const {
    QpAddress a;
    uint8_t* p = a.bytes;
    put32(p, kMagic);
    p[4] = kVersion;
    p[5] = static_cast<uint8_t>(type);
    p[6] = static_cast<uint8_t>(link);
    p[7] = mtu;
    put16(p + 8, lid);
    put32(p + 10, qpn);
    put32(p + 14, psn);
    put32(p + 18, qkey);
    put32(p + 22, node_id);
    std::memcpy(p + 26, gid, 16);
    return a;
  }

  // False if `a` was not made by this driver's address() (or is corrupt).
  static bool decode(const QpAddress& a, AddressWire* out) {
    const uint8_t* p = a.bytes;
    if (get32(p) != kMagic || p[4] != kVersion) return false;
    if (p[5] != uint8_t(QpType::kRc) && p[5] != uint8_t(QpType::kUd)) return false;
    if (p[6] != uint8_t(LinkLayer::kIb) && p[6] != uint8_t(LinkLayer::kEthernet)) return false;
    if (p[7] < 1 || p[7] > 5) return false;
    for (size_t i = 42; i < sizeof a.bytes; ++i)
      if (p[i] != 0) return false;
    out->type = static_cast<QpType>(p[5]);
    out->link = static_cast<LinkLayer>(p[6]);
    out->mtu = p[7];
    out->lid = get16(p + 8);
    out->qpn = get32(p + 10);
    out->psn = get32(p + 14);
    out->qkey = get32(p + 18);
    out->node_id = get32(p + 22);
    std::memcpy(out->gid, p + 26, 16);
    return out->qpn <= 0xffffff && out->psn <= 0xffffff;
  }

 private:
  static void put16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
  }
  static void put32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
  }
  static uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
  static uint32_t get32(const uint8_t* p) {
    return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
  }
};
static_assert(42 <= sizeof(QpAddress::bytes));

}  // namespace rdtx::rdma::verbs
