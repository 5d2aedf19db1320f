// Finding tuples on their owners, the common first half of every fetch
// stage.
//
// locate_onesided: for accesses [from, to) not yet located, the worker's
// location cache gives the tuple's address and full state (no network);
// the others walk the owner's hash index with one READ per bucket, all
// accesses in parallel (one doorbell per node per hop, one wait).
// check_fetched: after a tuple READ, confirms the copy's header (key, live,
// state equal to the hint) and fills the cache; on a mismatch the cache
// entry is dropped as stale and the access must be located again.
// Thread-safety: the coordinator's coroutine.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/task.hpp"
#include "txn/txn.hpp"

namespace rdtx::txn {

class Coordinator;

// False: aborted (reason set: kNotFound, or kNetwork for failed READs or a
// corrupt index); nothing is held.
runtime::Task<bool> locate_onesided(Coordinator& c, Txn& t, uint32_t from, uint32_t to);
// The same for the accesses `items` only (e.g. a fetch that locks its writes
// one-sided and leaves its reads to read_tuples' hybrid path). `items` must
// stay valid until the task completes (await it at once).
runtime::Task<bool> locate_onesided(Coordinator& c, Txn& t, std::span<const uint32_t> items);

// True if a.copy holds the access's tuple; updates a.state and the cache.
bool check_fetched(Coordinator& c, Access& a);

// BROKEN, tests only: check_fetched() takes a location-cache hit's tuple
// without looking at its header (key, incarnation), as a cache that trusts
// its entries would. The tests that move rows under one-sided fetches
// (ycsb/relocate) prove the history check catches it. Process-wide.
void trust_cache_hits_for_tests(bool on);

// Hybrid fetch: accesses [from, t.size()) neither located nor fetched whose
// location the cache holds are located from it (no network); the others are
// left for RPC.
void locate_from_cache(Coordinator& c, Txn& t, uint32_t from);

// Fills the cache from an RPC reply (hybrid fetch).
void remember_location(Coordinator& c, Access& a, uint64_t tuple_index, uint64_t state);

}  // namespace rdtx::txn
