// Partitioner: maps a table's 64-bit keys to the node that owns them. Every
// node holds the same Partitioner per table, so a coordinator finds a key's
// owner without asking anyone. node_of() is on every transaction's path, so
// a Partitioner is a small value type dispatching on its kind with a switch:
// no std::function, no allocation, no virtual call.
//
// Kinds (n = nodes()):
//   range    keys [0, key_space) in n contiguous ranges of ceil(key_space/n)
//            keys: node = key / range; keys >= key_space belong to node n-1
//   hash     node = a 64-bit mix of the key, scaled to [0, n) (uniform for
//            any key pattern; independent of the hash index's bucket hash)
//   modulo   node = key % n (dense integer keys, e.g. SmallBank accounts)
//   custom   node = fn(key, arg): the workload's own rule, e.g. TPC-C's
//            warehouse id taken from the composite key. fn must return a
//            value < n for every key (checked by assert in debug builds).
// Thread-safety: immutable after construction; share freely.
#pragma once

#include <cassert>
#include <cstdint>
#include <string>

#include "base/result.hpp"

namespace rdtx::store {

// Workload partitioning rule: returns the owner of `key`. `arg` is the value
// given to Partitioner::custom (e.g. warehouses per node), so one function
// serves any cluster size.
using PartitionFn = uint32_t (*)(uint64_t key, uint64_t arg);

// The hash partitioner's mix (splitmix64's finalizer). Deliberately not the
// index's bucket hash (hash_index.hpp): if both used the same function, the
// keys of one node would all land in 1/n of that node's buckets.
inline uint64_t partition_hash(uint64_t key) {
  key += 0x9e3779b97f4a7c15ull;
  key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
  key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
  return key ^ (key >> 31);
}

class Partitioner {
 public:
  enum class Kind : uint8_t { kRange, kHash, kModulo, kCustom };

  // One node owns everything (a single-node cluster, or a replicated table).
  Partitioner() = default;

  // Errors (EINVAL) name the offending parameter: nodes == 0, key_space == 0,
  // fn == nullptr.
  static Result<Partitioner> range(uint32_t nodes, uint64_t key_space);
  static Result<Partitioner> hash(uint32_t nodes);
  static Result<Partitioner> modulo(uint32_t nodes);
  // `name` (a string literal, kept by pointer) appears in describe().
  static Result<Partitioner> custom(uint32_t nodes, PartitionFn fn, uint64_t arg, const char* name);

  uint32_t node_of(uint64_t key) const {
    switch (kind_) {
      case Kind::kRange: {
        uint64_t n = key / param_;
        return n < nodes_ ? static_cast<uint32_t>(n) : nodes_ - 1;
      }
      case Kind::kHash:
        return static_cast<uint32_t>((static_cast<unsigned __int128>(partition_hash(key)) * nodes_) >> 64);
      case Kind::kModulo:
        return static_cast<uint32_t>(key % nodes_);
      case Kind::kCustom: {
        uint32_t n = fn_(key, param_);
        assert(n < nodes_ && "custom PartitionFn returned a node >= nodes()");
        return n;
      }
    }
    return 0;
  }

  Kind kind() const { return kind_; }
  uint32_t nodes() const { return nodes_; }
  // e.g. "range(4 nodes, 1000 keys/node)", "custom tpcc_warehouse(4 nodes, arg 8)".
  std::string describe() const;

 private:
  Partitioner(Kind kind, uint32_t nodes, uint64_t param, PartitionFn fn, const char* name)
      : kind_(kind), nodes_(nodes), param_(param), fn_(fn), name_(name) {}

  Kind kind_ = Kind::kModulo;
  uint32_t nodes_ = 1;
  uint64_t param_ = 0;  // range: keys per node; custom: arg
  PartitionFn fn_ = nullptr;
  const char* name_ = nullptr;
};

}  // namespace rdtx::store
