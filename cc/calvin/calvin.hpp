// CALVIN (RCC section 4.6): deterministic transactions in epochs. See
// calvin.cpp and doc/txn.md "CALVIN".
#pragma once

#include <cstdint>

#include "base/result.hpp"
#include "txn/protocol.hpp"

namespace rdtx::cc::calvin {

extern const txn::ProtocolDef kDef;

// The layout of a worker's region (ProtocolDef::region_bytes), per coroutine:
//   CRB[src node][epoch parity]  CH = {received, checksum} + CR[epoch_size]
//   CFB[txn index][src node]     {ready, checksum} + values
//   staging                      the coroutine's outgoing batch / values
struct Geometry {
  uint32_t nodes = 0;
  uint32_t coroutines = 0;
  uint32_t epoch_size = 0;    // transactions per epoch per sequencer
  uint32_t max_accesses = 0;  // per transaction (a forward slot's capacity)
  uint32_t max_record = 0;    // bytes, padded to 8
  uint64_t cr_bytes = 0;
  uint64_t crb_bytes = 0;
  uint64_t slot_payload = 0;
  uint64_t slot_bytes = 0;
  uint64_t staging_bytes = 0;
  uint64_t co_bytes = 0;

  static Geometry make(uint32_t nodes, uint32_t coroutines, uint32_t epoch_size, uint32_t max_accesses,
                       uint32_t max_record);
  uint64_t region_bytes() const { return co_bytes * coroutines; }
  uint64_t crb(uint32_t co, uint32_t src, uint64_t epoch) const {
    return co * co_bytes + (uint64_t{src} * 2 + (epoch & 1)) * crb_bytes;
  }
  uint64_t cfb(uint32_t co, uint32_t k, uint32_t src) const {
    return co * co_bytes + uint64_t{nodes} * 2 * crb_bytes + (uint64_t{k} * nodes + src) * slot_bytes;
  }
  uint64_t staging(uint32_t co) const { return co * co_bytes + co_bytes - staging_bytes; }
};

}  // namespace rdtx::cc::calvin
