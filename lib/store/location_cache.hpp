// LocationCache: a worker's memory of where remote tuples are, so that a
// fetch costs one READ instead of an index walk plus a READ (DrTM's
// location-based cache, DrTM+H §5.1). It maps (table, key) to the owner
// node, the tuple's remote address and the full state word seen there.
//
// Bounded: a fixed number of entries chosen at construction, 4-way set
// associative with round-robin replacement within a set; nothing is
// allocated afterwards. Filled by one-sided lookups (fetch_onesided) and by
// RPC replies (insert() with the tuple index and state the owner returned).
//
// Entries are never trusted: the reader READs the tuple and compares its
// header with the entry (key, state). A tuple that was erased, reused for
// another key or reinserted elsewhere has a different key or state there,
// so the reader calls invalidate_stale() and goes back to the index. Hits,
// misses, stale entries, insertions and evictions are counted.
//
// Telemetry: a named cache is listed in /rdtx/store/location_cache (lib/store
// registers the command when the first named cache is created) with the
// counters its owner last published (publish_stats(), now and then).
// Thread-safety: none; one per worker, used by its thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "stats/published.hpp"
#include "store/table_descriptor.hpp"

namespace rdtx::store {

struct CachedLocation {
  uint32_t node = 0;
  uint64_t remote_addr = 0;
  uint64_t state = 0;  // full state word seen in the tuple's header
};

struct LocationCacheStats {
  uint64_t hits = 0;  // entries found, including ones the reader then finds stale
  uint64_t misses = 0;
  uint64_t stale = 0;      // entries found wrong by a reader and dropped
  uint64_t inserts = 0;    // new entries (updates of an entry not counted)
  uint64_t evictions = 0;  // entries replaced to make room
};

class LocationCache {
 public:
  static constexpr uint32_t kWays = 4;

  // Holds at most `capacity` entries (rounded down to a power-of-two number
  // of sets, at least one set). 32 bytes per entry. A non-empty `name` (the
  // worker's, "n0w1") lists it in /rdtx/store/location_cache.
  explicit LocationCache(size_t capacity, std::string name = "");
  LocationCache(const LocationCache&) = delete;
  LocationCache& operator=(const LocationCache&) = delete;

  // Starts loading the set that find(table, key) will read: a caller that
  // knows its keys a little ahead (a transaction declaring its accesses)
  // overlaps the cache miss with other work.
  void prefetch(uint32_t table, uint64_t key) const { __builtin_prefetch(&set_of(table, key)); }
  // Counts a hit or a miss.
  bool find(uint32_t table, uint64_t key, CachedLocation* out);
  // Adds or updates (table, key) -> location; `state` must be live (odd),
  // otherwise nothing is cached.
  void insert(uint32_t table, uint64_t key, const CachedLocation& loc);
  // From an RPC reply: the owner found `key` in tuple `tuple_index` with
  // `state`. Returns false (and caches nothing) if the index is outside the
  // table or the state is not live: the reply is not to be trusted.
  bool insert(const TableDescriptor& t, uint64_t key, uint64_t tuple_index, uint64_t state);
  // Drops an entry a reader found stale (counted).
  void invalidate_stale(uint32_t table, uint64_t key);
  // Drops an entry, e.g. after the owner said the key is gone (not counted).
  void invalidate(uint32_t table, uint64_t key);

  size_t capacity() const { return sets_ * kWays; }
  size_t size() const;  // entries in use (walks the cache: for tests and reports)
  uint64_t memory_bytes() const { return sets_ * sizeof(Set) + sets_; }
  const LocationCacheStats& stats() const { return stats_; }
  // Copies stats() for /rdtx/store/location_cache (a named cache only;
  // control path: the run harness calls it every 50 ms).
  void publish_stats() {
    if (published_) published_->publish(stats_);
  }

 private:
  struct Entry {
    uint64_t key;
    uint64_t remote_addr;
    uint64_t state;  // 0: empty (a cached state is live, hence odd)
    uint32_t table;
    uint32_t node;
  };
  struct alignas(128) Set {
    Entry way[kWays];
  };
  static_assert(sizeof(Set) == 128);

  Set& set_of(uint32_t table, uint64_t key) const;
  Entry* lookup(uint32_t table, uint64_t key) const;
  bool drop(uint32_t table, uint64_t key);

  size_t sets_;
  std::unique_ptr<Set[]> data_;
  std::unique_ptr<uint8_t[]> victim_;  // next way to replace, per set
  LocationCacheStats stats_;
  std::optional<stats::PublishedList<LocationCacheStats>::Entry> published_;
};

// The named location caches of this process, for /rdtx/store/location_cache:
// registers the command on first use.
stats::PublishedList<LocationCacheStats>& location_cache_list();

}  // namespace rdtx::store
