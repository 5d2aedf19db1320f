#include "store/remote_lookup.hpp"

#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "runtime/cq_poller.hpp"
#include "store/hash_index.hpp"
#include "store/store_log.hpp"

namespace rdtx::store {

namespace {

rdma::WorkRequest read_request(std::byte* local, uint32_t length, uint32_t lkey, uint64_t remote_addr, uint32_t rkey) {
  rdma::WorkRequest wr;
  wr.opcode = rdma::Opcode::kRead;
  wr.local = local;
  wr.length = length;
  wr.lkey = lkey;
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  return wr;
}

// Scans a bucket a READ left in `buf`. Copied out first: the scratch buffer
// carries no alignment promise, and a coroutine frame cannot hold the
// 64-byte aligned Bucket reliably.
ScanResult scan_copy(const std::byte* buf, uint64_t at, uint64_t key, const IndexGeometry& g, uint64_t* value,
                     uint64_t* next) {
  Bucket copy;
  std::memcpy(&copy, buf, sizeof copy);
  return scan_bucket(copy, at, key, g, value, next);
}

void log_corrupt(const TableDescriptor& t, uint64_t key, uint64_t bucket) {
  RDTX_LOG(store_log(), Warning,
           "table %u on node %u: corrupt index bucket %" PRIu64 " while looking up key %" PRIu64
           " (bad tuple index, chain link or cycle)",
           t.table_id, t.node_id, bucket, key);
}

// READs the tuple at `addr` into scratch (plus, when confirming, its state
// word right behind it) in one doorbell batch; returns whether the READs
// succeeded and counts them.
runtime::Task<bool> read_tuple(rdma::QueuePair* qp, const TableDescriptor& t, uint64_t addr, Scratch scratch,
                               TupleCheck check, FetchResult* r) {
  rdma::WorkRequest wr[2] = {
      read_request(scratch.data, t.tuple_bytes, scratch.lkey, addr, t.rkey),
      read_request(scratch.data + t.tuple_bytes, 8, scratch.lkey, addr + t.layout().state_offset(), t.rkey),
  };
  bool confirm = check == TupleCheck::kConfirmed;
  if (confirm) wr[0].next = &wr[1];
  r->round_trips += 1;
  r->reads += confirm ? 2 : 1;
  co_return co_await runtime::post_and_wait(qp, &wr[0], confirm ? &wr[1] : &wr[0]);
}

// Whether scratch holds `key`'s tuple in the incarnation `accept` approves.
template <typename Accept>
bool holds_key(const TableDescriptor& t, const std::byte* buf, uint64_t key, TupleCheck check, Accept&& accept) {
  TupleHeader h = read_header(buf, t.layout());
  if (h.key != key || !is_live(h.state) || !accept(h.state)) return false;
  if (check == TupleCheck::kSingleRead) return true;
  uint64_t after;
  std::memcpy(&after, buf + t.tuple_bytes, sizeof after);
  return after == h.state;
}

}  // namespace

runtime::Task<LookupResult> lookup_onesided(rdma::QueuePair* qp, TableDescriptor t, uint64_t key, Scratch scratch) {
  LookupResult r;
  if (scratch.bytes < kBucketBytes) {
    r.status = -EINVAL;
    co_return r;
  }
  IndexGeometry g = t.geometry();
  uint64_t b = bucket_of(key, t.buckets);
  for (;;) {
    rdma::WorkRequest wr = read_request(scratch.data, kBucketBytes, scratch.lkey, t.bucket_addr(b), t.rkey);
    ++r.reads;
    if (!co_await runtime::post_and_wait(qp, &wr, &wr)) {
      r.status = -EIO;
      co_return r;
    }
    uint64_t value = 0, next = 0;
    switch (scan_copy(scratch.data, b, key, g, &value, &next)) {
      case ScanResult::kFound:
        r.tuple_index = slot_tuple(value);
        r.remote_addr = t.tuple_addr(r.tuple_index);
        r.state_low = slot_state(value);
        co_return r;
      case ScanResult::kEnd:
        r.status = -ENOENT;
        co_return r;
      case ScanResult::kCorrupt:
        log_corrupt(t, key, b);
        r.status = -EBADMSG;
        co_return r;
      case ScanResult::kNext:
        break;
    }
    b = next;  // links strictly increase (scan_copy checked): no cycle
  }
}

runtime::Task<FetchResult> fetch_onesided(rdma::QueuePair* qp, TableDescriptor t, uint64_t key, Scratch scratch,
                                          LocationCache* cache, TupleCheck check) {
  FetchResult r;
  if (scratch.bytes < scratch_bytes(t)) {
    r.status = -EINVAL;
    co_return r;
  }
  auto found = [&](uint64_t addr) {
    r.remote_addr = addr;
    r.tuple_index = static_cast<uint32_t>((addr - t.heap_addr) / t.tuple_bytes);
    r.state = read_header(scratch.data, t.layout()).state;
    r.tuple = scratch.data;
  };

  CachedLocation c;
  if (cache != nullptr && cache->find(t.table_id, key, &c)) {
    // An entry for another node or outside the table (the descriptor
    // changed since it was cached) is stale without a READ.
    if (c.node == t.node_id && t.is_tuple_addr(c.remote_addr)) {
      if (!co_await read_tuple(qp, t, c.remote_addr, scratch, check, &r)) {
        r.status = -EIO;
        co_return r;
      }
      if (holds_key(t, scratch.data, key, check, [&](uint64_t s) { return s == c.state; })) {
        r.cache_hit = true;
        found(c.remote_addr);
        co_return r;
      }
    }
    cache->invalidate_stale(t.table_id, key);
  }

  for (int attempt = 0; attempt < kFetchAttempts; ++attempt) {
    LookupResult l = co_await lookup_onesided(qp, t, key, scratch);
    r.reads += l.reads;
    r.round_trips += l.reads;
    if (l.status != 0) {
      r.status = l.status;
      co_return r;
    }
    if (!co_await read_tuple(qp, t, l.remote_addr, scratch, check, &r)) {
      r.status = -EIO;
      co_return r;
    }
    if (holds_key(t, scratch.data, key, check, [&](uint64_t s) { return state_low(s) == l.state_low; })) {
      found(l.remote_addr);
      if (cache != nullptr) cache->insert(t.table_id, key, CachedLocation{t.node_id, r.remote_addr, r.state});
      co_return r;
    }
    // Erased or reused since the slot was read: the index has changed too.
  }
  r.status = -EAGAIN;
  co_return r;
}

}  // namespace rdtx::store
