// Parallel loading of a table at start-up: rows are built by the workload
// and inserted with oneTBB's parallel_for, the calling thread taking part.
// Inserts from many threads are what Table supports anyway (per-chain locks,
// lock-free tuple allocation), so loading needs no special path and leaves
// the table exactly as the same inserts one by one would (up to which tuple
// each key got).
// Thread-safety: runs its own threads; the builder is called concurrently
// for different rows and must be safe for that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "base/result.hpp"
#include "store/table.hpp"

namespace rdtx::store {

// Builds row `row`: fills `record` (record_bytes, zeroed beforehand) and
// returns the row's key. Called once per row, from any loader thread.
using RowBuilder = std::function<uint64_t(uint64_t row, std::span<std::byte> record)>;

// Inserts rows [0, rows) of `table`. Stops at the first failure and returns
// it, naming the table, the row and its key (EEXIST for a key built twice,
// ENOSPC when the table or its overflow area is full, ...); rows inserted
// before it stay. A stop request (runtime::shutdown_requested(), SIGINT or
// SIGTERM) stops it too, within a chunk of rows: ECANCELED.
Result<void> load(Table& table, uint64_t rows, const RowBuilder& build);

}  // namespace rdtx::store
