// TableDescriptor: what a peer needs to reach one table of one node with
// one-sided verbs: where its index and tuples are, under which rkey, and
// their geometry. A plain, trivially copyable struct of fixed-width fields
// that the bootstrap ships between nodes as bytes; the receiver runs
// validate() on it once, before any lookup uses it.
// A table has one descriptor per device context of its owner (each of the
// owner's workers, when each has its own: keys are per context), and a peer
// uses the one of the context its QP is connected to.
// Thread-safety: plain value type.
#pragma once

#include <cstdint>
#include <type_traits>

#include "base/result.hpp"
#include "store/hash_index.hpp"
#include "store/tuple.hpp"

namespace rdtx::store {

struct TableDescriptor {
  uint32_t table_id = 0;
  uint32_t node_id = 0;  // owner
  uint32_t rkey = 0;     // covers index and tuples
  uint32_t meta_bytes = 0;
  uint32_t record_bytes = 0;
  uint32_t tuple_bytes = 0;
  uint32_t context = 0;  // the owner's device context (worker) the rkey belongs to
  uint32_t record_slots = 1;  // TupleLayout::record_slots
  uint64_t index_addr = 0;        // remote address of bucket 0; bucket i at index_addr + i * kBucketBytes
  uint64_t buckets = 0;           // primary buckets
  uint64_t overflow_buckets = 0;  // overflow area: buckets [buckets, buckets + overflow_buckets)
  uint64_t heap_addr = 0;         // remote address of tuple 0; tuple i at heap_addr + i * tuple_bytes
  uint64_t capacity = 0;          // tuples

  TupleLayout layout() const { return {meta_bytes, record_bytes, record_slots}; }
  IndexGeometry geometry() const { return {buckets, overflow_buckets, capacity}; }
  uint64_t bucket_addr(uint64_t bucket) const { return index_addr + bucket * kBucketBytes; }
  uint64_t tuple_addr(uint32_t index) const { return heap_addr + uint64_t{index} * tuple_bytes; }
  // True if `addr` is the first byte of one of the table's tuples.
  bool is_tuple_addr(uint64_t addr) const {
    return addr >= heap_addr && (addr - heap_addr) % tuple_bytes == 0 && (addr - heap_addr) / tuple_bytes < capacity;
  }
};
static_assert(std::is_trivially_copyable_v<TableDescriptor>);

// Checks a descriptor received from a peer: sizes consistent with the tuple
// layout, non-empty geometry within the format's limits (capacity < 2^32,
// at least one primary bucket), 8-byte aligned addresses, and no address
// computation that wraps around. Errors (EINVAL) name the table, the node
// and the field.
Result<void> validate(const TableDescriptor& d);

}  // namespace rdtx::store
