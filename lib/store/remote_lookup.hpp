// One-sided access to a peer's table: walk its hash index with READs and
// fetch tuples, optionally through the worker's LocationCache. These are
// coroutines of the calling worker: each READ is posted on `qp` (an RC QP
// connected to the table's owner) and awaited with runtime::post_and_wait,
// so the QP's send CQ must be polled by a runtime::CqPoller on that worker.
//
// Cost (READ round trips):
//   lookup_onesided   1 per bucket of the chain walked (1 in the common case)
//   fetch_onesided    cache hit: 1; otherwise lookup + 1 (2 in the common
//                     case); a stale cache entry adds its 1 wasted READ
// With TupleCheck::kConfirmed a tuple READ is followed, in the same doorbell
// batch (so in the same round trip), by an 8-byte READ of its state word.
//
// Why the confirmation. A READ copies memory in no particular order, so a
// single READ may return the header of one incarnation of a tuple and record
// bytes of the next (the tuple was erased and reused by another key while it
// was being read). The state word only ever grows (tuple.hpp): the state seen
// before the READ (in the index slot, or the cache entry) equal to the state
// READ after it (the confirmation, executed after the tuple READ since work
// requests of one QP execute in order) proves the tuple held that same
// incarnation throughout, so every byte is that key's. kSingleRead skips the
// second READ for callers that establish this themselves: a protocol that
// holds the tuple's lock and whose erases take that lock too, or one whose
// validation phase re-reads its versions together with the state word.
//
// Nothing read from the peer is trusted: slot tuple indexes and chain links
// are bounds-checked before use, and a link must go forward (overflow
// buckets are linked in increasing order, so a cycle is caught at its first
// backward link; -EBADMSG otherwise); headers are compared, never
// used to compute addresses. The descriptor itself must have passed
// validate() (table_descriptor.hpp).
//
// Thread-safety: a call uses its QP, scratch buffer and cache exclusively
// until it completes; run concurrent calls with different scratch buffers
// (QP and cache may be shared by the coroutines of one worker).
#pragma once

#include <cstddef>
#include <cstdint>

#include "rdma/rdma.hpp"
#include "runtime/task.hpp"
#include "store/location_cache.hpp"
#include "store/table_descriptor.hpp"

namespace rdtx::store {

// A registered local buffer that READs land in (lkey covers data..+bytes).
struct Scratch {
  std::byte* data = nullptr;
  uint32_t bytes = 0;
  uint32_t lkey = 0;
};

// The scratch size fetch_onesided needs for table `t`: a bucket, or a tuple
// plus its confirmation word, whichever is larger.
inline uint32_t scratch_bytes(const TableDescriptor& t) {
  return t.tuple_bytes + 8 > kBucketBytes ? t.tuple_bytes + 8 : kBucketBytes;
}

// fetch_onesided() looks the key up again at most this often when the tuple
// it finds is no longer the key's (erased or reused meanwhile).
inline constexpr int kFetchAttempts = 4;

struct LookupResult {
  // 0; -ENOENT: not in the index; -EBADMSG: corrupt index (bad tuple index,
  // bad chain link or a cycle); -EIO: a READ failed (the QP is now in the
  // error state); -EINVAL: scratch smaller than a bucket.
  int status = 0;
  uint32_t reads = 0;  // READs issued, one round trip each
  uint32_t tuple_index = 0;
  uint64_t remote_addr = 0;  // of the tuple
  uint32_t state_low = 0;    // low 32 bits of the state the slot recorded
};

// Walks `key`'s chain in table `t` with one READ per bucket. The result is a
// hint, as the slot it comes from: confirm it on the tuple's header.
runtime::Task<LookupResult> lookup_onesided(rdma::QueuePair* qp, TableDescriptor t, uint64_t key, Scratch scratch);

enum class TupleCheck : uint8_t {
  kConfirmed,   // tuple READ + state READ in one doorbell: bytes of one incarnation
  kSingleRead,  // one READ; the header is checked, the record may be torn by a reuse
};

struct FetchResult {
  // 0; -ENOENT; -EAGAIN: the key's tuple changed under every one of
  // kFetchAttempts lookups; -EBADMSG; -EIO; -EINVAL: scratch smaller than
  // scratch_bytes(t).
  int status = 0;
  uint32_t round_trips = 0;
  uint32_t reads = 0;      // READ work requests, confirmations included
  bool cache_hit = false;  // served by a valid cache entry
  uint32_t tuple_index = 0;
  uint64_t remote_addr = 0;
  uint64_t state = 0;                // the tuple's full state word
  const std::byte* tuple = nullptr;  // scratch.data: tuple_bytes bytes of the key's tuple
};

// Fetches `key`'s tuple of table `t` into scratch: from the cached location
// if `cache` has one and it still holds the key's incarnation (otherwise the
// entry is invalidated as stale), else by lookup_onesided plus a tuple READ,
// retried while the tuple found turns out to be erased or reused. A found
// location is (re)inserted into `cache`. `cache` may be null.
runtime::Task<FetchResult> fetch_onesided(rdma::QueuePair* qp, TableDescriptor t, uint64_t key, Scratch scratch,
                                          LocationCache* cache, TupleCheck check = TupleCheck::kConfirmed);

}  // namespace rdtx::store
