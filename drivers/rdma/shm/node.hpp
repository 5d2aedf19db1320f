// The local node of an shm device: owns the control segment
// (/dev/shm/rdtx.<fabric>.n<node>, see segment.hpp) and its exclusive flock,
// the region table and the memory-file table, and a cache of the peers this
// node talks to. Everything created from the device (memory, QPs, CQs, AHs)
// holds the Node, so it goes last and its files are unlinked when it does.
//
// Thread-safety: the control-path methods may be called from any thread
// (one mutex); regions() is the lock-free fast-path view.
#pragma once

#include <cstdint>
#include <atomic>
#include <map>
#include <utility>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "hca_atomics.hpp"
#include "latency_model.hpp"
#include "nic_model.hpp"
#include "mapped_file.hpp"
#include "peer_node.hpp"
#include "rdma/rdma.hpp"
#include "recv_queue.hpp"
#include "region_table.hpp"
#include "shm_config.hpp"

namespace rdtx::rdma::shm {

class Node {
 public:
  // Claims node `node_id` of `fabric`: creates its control segment, or
  // reclaims a stale one left by a process that died. Fails if a live
  // process (this one included) has the node open.
  static Result<std::shared_ptr<Node>> open(const ShmConfig& cfg, uint32_t node_id, const std::string& fabric);

  uint32_t id() const { return node_id_; }
  const std::string& fabric() const { return fabric_; }
  uint64_t token() const { return token_; }
  uint64_t fabric_hash() const { return fabric_hash_; }
  const ShmConfig& config() const { return cfg_; }
  const LatencyModel& latency() const { return latency_; }
  // The RNIC model (devargs nic=...) and this node's shared NIC state.
  const NicModel& nic_model() const { return nic_model_; }
  NicShared* nic() const { return nic_; }
  // With atomics=hca, this node's atomic unit (hca_atomics.hpp); else nullptr.
  HcaAtomicUnit* atomic_unit() const { return atomic_unit_; }
  // Whether QPs and CQs of this node run requests through the timed ring
  // (shm_qp.hpp): with a latency model, when this node pauses, or when
  // datagrams may be delayed (a held-back datagram needs the sender's
  // progress to go out).
  bool timed() const { return timed_; }
  // The seed of this node's adversarial choices (devargs seed, or drawn at
  // open and logged).
  uint64_t seed() const { return seed_; }
  // pause_node=<this node>: the window [pause_start, pause_end) in TSC ticks
  // during which the node is stopped (shm_qp.hpp says what that means).
  bool pauses() const { return pause_len_ != 0; }
  bool paused(uint64_t now) const { return now - pause_start_ < pause_len_; }
  uint64_t pause_end() const { return pause_start_ + pause_len_; }
  const RegionTable& regions() const { return regions_; }

  // Regions belong to a protection domain (one per device context, from
  // new_pd()): a QP reaches only regions of its own domain, as with verbs.
  Result<MemoryRegion> reg_mr(void* addr, size_t length, uint32_t access, uint32_t pd);
  Result<void> dereg_mr(const MemoryRegion& mr, uint32_t pd);
  uint32_t new_pd() { return pd_seq_.fetch_add(1, std::memory_order_relaxed) + 1; }

  // A new memory file of at least `bytes`, registered in the memory table so
  // peers can map it.
  struct MemFile {
    uint32_t id;
    uint32_t gen;
    MappedFile file;
  };
  // `commit` < bytes: a sparse file (MappedFile::create_sparse) whose rest
  // is backed later; peers then map it without pre-faulting.
  Result<MemFile> alloc_memory(size_t bytes, size_t commit);
  // Called before a memory file is unmapped: deregisters the regions still
  // inside it (a peer's verb must fail, not fault) and frees its table entry.
  void free_memory(uint32_t id, uint32_t gen, const uint8_t* base, size_t size);

  // The peer `node_id` in incarnation `token` (from a QpAddress), mapped once
  // and cached; a restarted peer replaces its cache entry.
  Result<std::shared_ptr<PeerNode>> peer(uint32_t node_id, uint64_t token);
  // QP `qpn`'s receive queue on node `node_id` (incarnation `token`), mapped
  // once for all of this node's address handles while any holds it: with
  // a mapping per handle, 16 nodes x 24 workers in one process would need
  // 384 x 384 mappings, past the default vm.max_map_count (65,530).
  Result<RemoteRecvQueue> remote_queue(uint32_t node_id, uint32_t qpn, uint64_t token);

  Result<uint32_t> next_qpn();
  // Marks RC QP `qpn` of this node refused (disconnected) or not, in the
  // control segment, where its peers look before they access this node
  // through a QP connected to it (PeerNode::refuses). Any thread.
  void set_refused(uint32_t qpn, bool refused);

  Node(MappedFile segment, MappedFile nic, MappedFile atomics, const ShmConfig& cfg, uint32_t node_id,
       const std::string& fabric, uint64_t token, uint64_t seed);

 private:
  struct LiveMemory {
    uint32_t id;
    uint32_t gen;
    size_t size;
  };
  struct LiveRegion {
    uint32_t key;
    uint32_t mem_id;
    uint32_t mem_gen;
    uint32_t pd;
  };

  const ShmConfig cfg_;
  const LatencyModel latency_;
  const NicModel nic_model_;
  const uint32_t node_id_;
  const std::string fabric_;
  const uint64_t fabric_hash_;
  const uint64_t token_;
  const uint64_t seed_;
  const bool timed_;
  uint64_t pause_start_ = 0;  // TSC
  uint64_t pause_len_ = 0;    // ticks; 0: never paused
  MappedFile segment_;  // unlinked, then its flock released, when the Node goes
  MappedFile nic_file_;
  NicShared* nic_;
  MappedFile atomics_file_;
  HcaAtomicUnit* atomic_unit_;
  RegionTable regions_;
  MemEntry* mems_;

  std::mutex mu_;  // guards everything below
  std::vector<uint32_t> region_gen_;        // per slot: generation of its last key
  std::vector<uint32_t> free_regions_;      // free slot indexes
  std::map<uint32_t, LiveRegion> live_regions_;  // slot -> region
  std::map<uintptr_t, LiveMemory> memory_;  // base address -> memory file
  std::vector<uint32_t> free_mem_ids_;
  uint32_t mem_gen_ = 0;
  uint32_t qp_seq_ = 0;
  std::atomic<uint32_t> pd_seq_{0};
  std::map<uint32_t, std::shared_ptr<PeerNode>> peers_;
  std::map<std::pair<uint32_t, uint32_t>, std::weak_ptr<const MappedFile>> remote_queues_;  // (node, qpn)
};

}  // namespace rdtx::rdma::shm
