#include "store/location_cache.hpp"

#include <algorithm>
#include <bit>

#include "env/telemetry.hpp"
#include "store/hash_index.hpp"
#include "store/store_log.hpp"

namespace rdtx::store {

namespace {

// /rdtx/store/location_cache, registered by lib/store itself (as a DPDK
// library registers /<lib>/... at init), not by whoever runs the caches.
struct CacheListing {
  stats::PublishedList<LocationCacheStats> list;
  env::TelemetryCommand command;  // last: unbound before the list goes

  CacheListing() {
    auto cmd = env::telemetry_register(
        "/rdtx/store/location_cache", "rdtx store: location cache counters per worker (n<node>w<index>)",
        [this](std::string_view, env::TelemetryDict& out) {
          list.for_each([&](const std::string& name, const LocationCacheStats& s) {
            out.add_dict(name, [&](env::TelemetryDict& d) {
              d.add_u64("hits", s.hits);
              d.add_u64("misses", s.misses);
              d.add_u64("stale", s.stale);
              d.add_u64("inserts", s.inserts);
              d.add_u64("evictions", s.evictions);
              const uint64_t lookups = s.hits + s.misses;
              d.add_u64("hit_rate_ppm", lookups ? s.hits * 1'000'000 / lookups : 0);
            });
          });
        });
    if (cmd.ok())
      command = std::move(*cmd);
    else
      RDTX_LOG(store_log(), Warning, "%s", cmd.error().message.c_str());
  }
};

}  // namespace

stats::PublishedList<LocationCacheStats>& location_cache_list() {
  static CacheListing listing;
  return listing.list;
}

LocationCache::LocationCache(size_t capacity, std::string name)
    : sets_(std::bit_floor(std::max<size_t>(capacity / kWays, 1))),
      data_(std::make_unique<Set[]>(sets_)),
      victim_(std::make_unique<uint8_t[]>(sets_)) {
  if (!name.empty()) published_.emplace(location_cache_list(), std::move(name));
}

LocationCache::Set& LocationCache::set_of(uint32_t table, uint64_t key) const {
  // The table id is folded in before mixing so that equal keys of different
  // tables land in different sets.
  return data_[index_hash(key + uint64_t{table} * 0x9e3779b97f4a7c15ull) & (sets_ - 1)];
}

LocationCache::Entry* LocationCache::lookup(uint32_t table, uint64_t key) const {
  Set& s = set_of(table, key);
  for (Entry& e : s.way)
    if (e.state != 0 && e.key == key && e.table == table) return &e;
  return nullptr;
}

bool LocationCache::find(uint32_t table, uint64_t key, CachedLocation* out) {
  const Entry* e = lookup(table, key);
  if (e == nullptr) {
    ++stats_.misses;
    return false;
  }
  ++stats_.hits;
  *out = CachedLocation{e->node, e->remote_addr, e->state};
  return true;
}

void LocationCache::insert(uint32_t table, uint64_t key, const CachedLocation& loc) {
  if (!is_live(loc.state)) return;
  Entry* e = lookup(table, key);
  if (e == nullptr) {
    size_t si = static_cast<size_t>(&set_of(table, key) - data_.get());
    Set& s = data_[si];
    for (Entry& w : s.way)
      if (w.state == 0) {
        e = &w;
        break;
      }
    if (e == nullptr) {
      e = &s.way[victim_[si]];
      victim_[si] = static_cast<uint8_t>((victim_[si] + 1) % kWays);
      ++stats_.evictions;
    }
    ++stats_.inserts;
  }
  *e = Entry{key, loc.remote_addr, loc.state, table, loc.node};
}

bool LocationCache::insert(const TableDescriptor& t, uint64_t key, uint64_t tuple_index, uint64_t state) {
  if (tuple_index >= t.capacity || !is_live(state)) return false;
  insert(t.table_id, key, CachedLocation{t.node_id, t.tuple_addr(static_cast<uint32_t>(tuple_index)), state});
  return true;
}

bool LocationCache::drop(uint32_t table, uint64_t key) {
  Entry* e = lookup(table, key);
  if (e == nullptr) return false;
  e->state = 0;
  return true;
}

void LocationCache::invalidate_stale(uint32_t table, uint64_t key) {
  if (drop(table, key)) ++stats_.stale;
}

void LocationCache::invalidate(uint32_t table, uint64_t key) { drop(table, key); }

size_t LocationCache::size() const {
  size_t n = 0;
  for (size_t i = 0; i < sets_; ++i)
    for (const Entry& e : data_[i].way) n += e.state != 0;
  return n;
}

}  // namespace rdtx::store
