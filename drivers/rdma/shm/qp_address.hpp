// What an shm QpAddress carries: enough for a peer to find the node's
// segment (fabric, node), tell its incarnation (token) and reach the QP's
// receive queue (qpn). Stored little-endian in QpAddress::bytes; peers are
// on the same host, so byte order never differs.
// Thread-safety: plain value type.
#pragma once

#include <cstdint>
#include <cstring>

#include "rdma/rdma.hpp"

namespace rdtx::rdma::shm {

struct AddressWire {
  static constexpr uint32_t kMagic = 0x4853'4452;  // "RDSH"
  uint32_t magic = kMagic;
  uint8_t version = 2;
  uint8_t type = 0;  // QpType
  uint16_t pd = 0;   // protection domain of the QP: the regions it reaches
  uint32_t node_id = 0;
  uint32_t qpn = 0;
  uint64_t fabric_hash = 0;
  uint64_t node_token = 0;

  QpAddress encode() const {
    QpAddress a;
    std::memcpy(a.bytes, this, sizeof *this);
    return a;
  }
  // False if `a` was not made by this driver's address().
  static bool decode(const QpAddress& a, AddressWire* out) {
    std::memcpy(out, a.bytes, sizeof *out);
    return out->magic == kMagic && out->version == 2 &&
           (out->type == uint8_t(QpType::kRc) || out->type == uint8_t(QpType::kUd));
  }
};
static_assert(sizeof(AddressWire) <= sizeof(QpAddress::bytes));

}  // namespace rdtx::rdma::shm
