// A node as its peers see it: its control segment mapped read-only and the
// memory files behind its regions mapped on demand. translate() turns a
// (remote address, key) of that node into a pointer in this process: the
// whole protection check and address translation of a one-sided verb.
//
// Same process (same pid and process token): the owner's addresses are ours,
// so regions of any memory are reachable. Another process: only regions of
// memory from alloc_memory() are, through this process's mapping of the
// backing file (region base + offset in file -> our mapping + offset).
// Mappings are made at connect/create_ah time for the memory that exists
// then, and once, on first use, for memory allocated later; they are kept
// until the PeerNode goes, so no verb ever races with an unmap.
//
// Thread-safety: translate() from any thread; mapping is serialised inside.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "hca_atomics.hpp"
#include "mapped_file.hpp"
#include "region_table.hpp"
#include "nic_model.hpp"
#include "segment.hpp"

namespace rdtx::rdma::shm {

class PeerNode {
 public:
  // Maps the control segment of `node_id`. Fails if the node is not open, is
  // stale (its owner died), is another incarnation than `expected_token`, or
  // its segment does not validate.
  // `map_nic`: also map its NIC state read-write (the RNIC model is on);
  // `map_atomics`: its atomic unit (atomics=hca).
  static Result<std::shared_ptr<PeerNode>> open(const std::string& fabric, uint32_t node_id,
                                                uint64_t expected_token, bool map_nic = false,
                                                bool map_atomics = false);

  uint32_t node_id() const { return node_id_; }
  uint64_t token() const { return token_; }
  bool same_process() const { return same_process_; }
  // The node's NIC state (nic_model.hpp), if opened with map_nic; else nullptr.
  NicShared* nic() const { return nic_; }
  // The node's atomic unit (hca_atomics.hpp), if opened with map_atomics;
  // else nullptr.
  HcaAtomicUnit* atomic_unit() const { return atomic_unit_; }

  // Pointer to [addr, addr + len) of this node if `key` names a live region
  // of protection domain `pd` (the target QP's) granting every bit of
  // `access` and covering the range; else nullptr.
  uint8_t* translate(uint64_t addr, uint64_t len, uint32_t key, uint32_t access, uint32_t pd) const {
    Region r;
    if (!regions_.lookup(key, &r) || r.pd != pd || (r.access & access) != access || !r.covers(addr, len))
      return nullptr;
    if (same_process_) return reinterpret_cast<uint8_t*>(addr);
    return in_mapping(r, addr - r.base, len);
  }

  // The node's refused-QP bitmap (Node::set_refused): requests through a QP
  // connected to a refused one fail, as a verbs responder QP in the error
  // state drops them and the requester's retries run out.
  // The word that holds QP `qpn`'s bit (bit qpn % 64), for a poster to
  // test on every request without recomputing it.
  const uint64_t* refused_word(uint32_t qpn) const {
    return reinterpret_cast<const uint64_t*>(segment_.data() + kRefusedOffset) + (qpn & kQpSeqMask) / 64;
  }

  // Maps every memory file the node has now, so verbs need not map later.
  void map_live_memory() const;

  struct MemMapping {
    uint32_t gen;
    MappedFile file;
  };

  PeerNode(MappedFile segment, MappedFile nic, MappedFile atomics, std::string fabric, uint32_t node_id,
           uint64_t token, bool same_process);

 private:
  uint8_t* in_mapping(const Region& r, uint64_t offset, uint64_t len) const {
    if (r.mem_id >= kMaxMemFiles) return nullptr;  // process-local memory of the owner
    const MemMapping* m = mem_[r.mem_id].load(std::memory_order_acquire);
    if (m == nullptr || m->gen != r.mem_gen) {
      m = map_memory(r.mem_id, r.mem_gen);
      if (m == nullptr) return nullptr;
    }
    uint64_t start = r.mem_offset + offset;
    size_t size = m->file.size();
    if (start < offset || start > size || len > size - start) return nullptr;
    return m->file.data() + start;
  }
  const MemMapping* map_memory(uint32_t id, uint32_t gen) const;

  MappedFile segment_;
  MappedFile nic_file_;
  NicShared* nic_ = nullptr;
  MappedFile atomics_file_;
  HcaAtomicUnit* atomic_unit_ = nullptr;
  RegionTable regions_;
  const MemEntry* mems_;
  std::string fabric_;
  uint32_t node_id_;
  uint64_t token_;
  bool same_process_;

  // Current mapping per memory file id, published with release.
  mutable std::array<std::atomic<const MemMapping*>, kMaxMemFiles> mem_{};
  mutable std::mutex map_mu_;
  mutable std::vector<std::unique_ptr<MemMapping>> mappings_;  // every mapping made; guarded by map_mu_
};

}  // namespace rdtx::rdma::shm
