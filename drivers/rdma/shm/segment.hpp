// The control segment of one shm node: the file /dev/shm/rdtx.<fabric>.n<node>
// that the node's owner creates at open and that peers map read-only to reach
// the node's registered memory.
//
//   offset 0       SegmentHeader (one page)
//   kRegionsOffset RegionEntry[kMaxRegions]   rkey = index | generation << 12
//   kMemsOffset    MemEntry[kMaxMemFiles]     memory files from alloc_memory()
//   kRefusedOffset uint64_t[kMaxQpSeq / 64]   a bit per RC QP (by qpn & kQpSeqMask) the
//                                             owner disconnected: peers' requests to it fail
//
// Every other file of the node shares the prefix "rdtx.<fabric>.n<node>.":
// memory files "<prefix>m<id>-<gen>", UD receive queues "<prefix>q<qpn>" and
// the NIC model's shared state "<prefix>nic" (nic_model.hpp) and, with
// atomics=hca, the node's atomic unit "<prefix>atomics" (hca_atomics.hpp).
// The owner holds an exclusive flock() on the control segment for as long as
// it lives, so a segment nobody holds is stale (its owner died) and may be
// reclaimed.
//
// The words peers read concurrently are accessed with shared_word.hpp.
// Thread-safety: the owner writes under its Node mutex; peers only read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rdtx::rdma::shm {

inline constexpr uint64_t kSegmentMagic = 0x31'4d'48'53'58'54'44'52;  // "RDTXSHM1"
// 2: regions carry their protection domain; 3: receive queues count injected faults;
// 4: the refused-QP bitmap
inline constexpr uint32_t kLayoutVersion = 4;

// Region keys: the low bits index the region table (O(1) lookup), the high
// bits are a generation, so a key of a deregistered region never matches a
// later registration in the same slot. Key 0 is never issued.
inline constexpr uint32_t kRegionIndexBits = 12;
inline constexpr uint32_t kMaxRegions = 1u << kRegionIndexBits;
inline constexpr uint32_t kRegionIndexMask = kMaxRegions - 1;
inline constexpr uint32_t kMaxRegionGen = (1u << (32 - kRegionIndexBits)) - 1;
inline constexpr uint32_t make_key(uint32_t index, uint32_t gen) { return index | gen << kRegionIndexBits; }

inline constexpr uint32_t kMaxMemFiles = 1024;
inline constexpr uint32_t kNoMemFile = UINT32_MAX;  // region of process-local memory
inline constexpr size_t kMaxFabricName = 64;

struct SegmentHeader {
  uint64_t magic;  // stored last with release: the segment is initialised
  uint32_t version;
  uint32_t node_id;
  uint64_t fabric_hash;
  uint64_t node_token;     // random per open: tells incarnations of a node apart
  uint64_t process_token;  // random per process: with pid, tells "same process"
  int32_t pid;
  uint32_t reserved;
  uint64_t segment_size;
  char fabric[kMaxFabricName + 1];
};

// One registered region. A seqlock keyed by `key`: the owner clears the key
// before it rewrites the other fields and stores the new key last.
struct alignas(64) RegionEntry {
  uint32_t key;  // 0: free
  uint32_t access;
  uint64_t base;    // address in the owner's address space
  uint64_t length;
  uint32_t mem_id;  // backing memory file, or kNoMemFile
  uint32_t mem_gen;
  uint64_t mem_offset;  // offset of `base` in that file
  uint32_t pd;          // protection domain: the context that registered it
  uint32_t reserved;
};

inline constexpr uint32_t kMemSparse = 1;  // MemEntry::flags: backed piecewise (Device::reserve_memory)

struct MemEntry {
  uint32_t gen;  // 0: free; stored last with release
  uint32_t flags;
  uint64_t size;
};

inline constexpr size_t kPageSize = 4096;
inline constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// QP numbers: node id << 20 | a sequence number below 2^20 (Node::next_qpn).
inline constexpr uint32_t kQpSeqBits = 20;
inline constexpr uint32_t kQpSeqMask = (1u << kQpSeqBits) - 1;

inline constexpr size_t kRegionsOffset = kPageSize;
inline constexpr size_t kMemsOffset = kRegionsOffset + kMaxRegions * sizeof(RegionEntry);
inline constexpr size_t kRefusedOffset = round_up(kMemsOffset + kMaxMemFiles * sizeof(MemEntry), kPageSize);
inline constexpr size_t kRefusedWords = (size_t{1} << kQpSeqBits) / 64;
inline constexpr size_t kSegmentSize = round_up(kRefusedOffset + kRefusedWords * sizeof(uint64_t), kPageSize);
static_assert(sizeof(SegmentHeader) <= kPageSize);

// File names. A fabric name is [A-Za-z0-9_-]{1,64}, so no fabric's prefix is
// a prefix of another's.
inline constexpr const char* kShmDir = "/dev/shm";
std::string node_file_prefix(const std::string& fabric, uint32_t node_id);  // "rdtx.<fabric>.n<node>."
std::string node_path(const std::string& fabric, uint32_t node_id);
std::string mem_path(const std::string& fabric, uint32_t node_id, uint32_t id, uint32_t gen);
std::string qp_path(const std::string& fabric, uint32_t node_id, uint32_t qpn);
// The node's NIC state (nic_model.hpp NicShared): mapped read-write by the
// owner and by peers, when the RNIC model is on.
std::string nic_path(const std::string& fabric, uint32_t node_id);
// The node's atomic unit (hca_atomics.hpp HcaAtomicUnit): mapped read-write
// by the owner and by peers, with atomics=hca.
std::string atomics_path(const std::string& fabric, uint32_t node_id);

bool valid_fabric_name(const std::string& fabric);
uint64_t fabric_hash(const std::string& fabric);
// Random per process, computed once.
uint64_t process_token();
uint64_t random_u64();

}  // namespace rdtx::rdma::shm
