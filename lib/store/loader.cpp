#include "store/loader.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <atomic>
#include <cinttypes>
#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/shutdown.hpp"

namespace rdtx::store {

Result<void> load(Table& table, uint64_t rows, const RowBuilder& build) {
  // Chunks of rows per task: large enough that task overhead vanishes next
  // to the inserts, small enough to balance two to a few dozen threads.
  constexpr uint64_t kGrain = 4096;
  std::atomic<bool> failed{false};
  std::mutex error_mu;  // guards the error only: taken once, on failure
  Error error;
  size_t record_bytes = table.layout().record_bytes;

  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, rows, kGrain), [&](const tbb::blocked_range<uint64_t>& range) {
    std::vector<std::byte> record(record_bytes);
    for (uint64_t row = range.begin(); row != range.end(); ++row) {
      // relaxed: only a hint to stop early; the error itself is under error_mu.
      if (failed.load(std::memory_order_relaxed)) return;
      // A signal stops the load within a thousand rows (the partitioner
      // may hand a thread far more than kGrain at once).
      if (row % 1024 == 0 && runtime::shutdown_requested()) {
        std::lock_guard lock(error_mu);
        if (!failed.exchange(true, std::memory_order_relaxed))
          error = make_error(ECANCELED, "loading table '%s' (id %u): stopped by %s", table.name().c_str(), table.id(),
                             runtime::shutdown_cause());
        return;
      }
      std::memset(record.data(), 0, record.size());
      uint64_t key = build(row, record);
      int rc = table.insert(key, record);
      if (rc == 0) continue;
      std::lock_guard lock(error_mu);
      if (!failed.exchange(true, std::memory_order_relaxed))
        error = make_error(-rc, "loading table '%s' (id %u): row %" PRIu64 " key %" PRIu64 ": %s", table.name().c_str(),
                           table.id(), row, key, std::strerror(-rc));
      return;
    }
  });
  if (failed.load(std::memory_order_relaxed)) return error;
  return {};
}

}  // namespace rdtx::store
