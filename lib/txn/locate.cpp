#include "txn/locate.hpp"

#include <atomic>

#include "store/hash_index.hpp"
#include "store/tuple.hpp"
#include "txn/coordinator.hpp"

namespace rdtx::txn {

namespace {

// The accesses `items` (nullptr: [from, to)).
runtime::Task<bool> locate(Coordinator& c, Txn& t, uint32_t from, uint32_t to, const uint32_t* items) {
  store::LocationCache* cache = c.engine().cache();
  uint64_t bucket[Txn::kMaxAccesses];
  uint32_t pending[Txn::kMaxAccesses];
  uint32_t npending = 0;
  for (uint32_t k = from; k < to; ++k) {
    const uint32_t i = items != nullptr ? items[k] : k;
    Access& a = t.access(i);
    if (a.located) continue;
    store::CachedLocation loc;
    if (cache && cache->find(a.table, a.key, &loc) && loc.node == a.node) {
      a.tuple_addr = loc.remote_addr;
      a.expect_state = loc.state;
      a.located = true;
      continue;
    }
    bucket[i] = store::bucket_of(a.key, c.descriptor(a.node, a.table).buckets);
    pending[npending++] = i;
  }
  // Each hop READs the current bucket of every pending access; links along a
  // chain strictly increase (scan_bucket checks), so no walk cycles.
  while (npending > 0) {
    OneSidedBatch& batch = c.onesided();
    for (uint32_t k = 0; k < npending; ++k) {
      Access& a = t.access(pending[k]);
      const store::TableDescriptor& d = c.descriptor(a.node, a.table);
      batch.read({a.node, d.bucket_addr(bucket[pending[k]]), d.rkey}, c.extra(pending[k]), store::kBucketBytes);
    }
    if (!co_await batch.execute()) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
    uint32_t still = 0;
    for (uint32_t k = 0; k < npending; ++k) {
      uint32_t i = pending[k];
      Access& a = t.access(i);
      const store::TableDescriptor& d = c.descriptor(a.node, a.table);
      uint64_t value = 0, next = 0;
      switch (store::scan_bucket(*reinterpret_cast<const store::Bucket*>(c.extra(i)), bucket[i], a.key, d.geometry(),
                                 &value, &next)) {
        case store::ScanResult::kFound:
          a.tuple_addr = d.tuple_addr(store::slot_tuple(value));
          a.expect_state = 0;
          a.expect_low = store::slot_state(value);
          a.located = true;
          break;
        case store::ScanResult::kNext:
          bucket[i] = next;
          pending[still++] = i;
          break;
        case store::ScanResult::kEnd:
          t.fail(AbortReason::kNotFound);
          co_return false;
        case store::ScanResult::kCorrupt:
          t.fail(AbortReason::kNetwork);
          co_return false;
      }
    }
    npending = still;
  }
  co_return true;
}

}  // namespace

// Neither is a coroutine: the caller awaits locate()'s frame directly.
runtime::Task<bool> locate_onesided(Coordinator& c, Txn& t, uint32_t from, uint32_t to) {
  return locate(c, t, from, to, nullptr);
}

runtime::Task<bool> locate_onesided(Coordinator& c, Txn& t, std::span<const uint32_t> items) {
  return locate(c, t, 0, static_cast<uint32_t>(items.size()), items.data());
}

namespace {
std::atomic<bool> g_trust_cache_hits{false};
}  // namespace

void trust_cache_hits_for_tests(bool on) { g_trust_cache_hits.store(on, std::memory_order_relaxed); }

bool check_fetched(Coordinator& c, Access& a) {
  const store::TupleLayout& l = c.db().layout(a.table);
  store::TupleHeader h = store::read_header(a.copy, l);
  bool ok = h.key == a.key && store::is_live(h.state) &&
            (a.expect_state != 0 ? h.state == a.expect_state : store::state_low(h.state) == a.expect_low);
  if (a.expect_state != 0 && g_trust_cache_hits.load(std::memory_order_relaxed)) [[unlikely]]
    ok = true;
  store::LocationCache* cache = c.engine().cache();
  if (!ok) {
    if (cache) cache->invalidate_stale(a.table, a.key);
    a.located = false;
    return false;
  }
  a.state = h.state;
  if (cache && a.expect_state == 0) cache->insert(a.table, a.key, {a.node, a.tuple_addr, h.state});
  return true;
}

void remember_location(Coordinator& c, Access& a, uint64_t tuple_index, uint64_t state) {
  const store::TableDescriptor& d = c.descriptor(a.node, a.table);
  if (tuple_index >= d.capacity) return;
  a.tuple_addr = d.tuple_addr(static_cast<uint32_t>(tuple_index));
  a.located = true;
  a.expect_state = state;
  a.state = state;
  if (store::LocationCache* cache = c.engine().cache()) cache->insert(d, a.key, tuple_index, state);
}

void locate_from_cache(Coordinator& c, Txn& t, uint32_t from) {
  store::LocationCache* cache = c.engine().cache();
  if (cache == nullptr) return;
  for (uint32_t i = from; i < t.size(); ++i) {
    Access& a = t.access(i);
    store::CachedLocation loc;
    if (!a.located && !a.fetched && cache->find(a.table, a.key, &loc) && loc.node == a.node) {
      a.tuple_addr = loc.remote_addr;
      a.expect_state = loc.state;
      a.located = true;
    }
  }
}

}  // namespace rdtx::txn
