// CALVIN's lock service (calvin.cpp describes the protocol): the node's
// lock manager shards (LockShards), the shard that holds a record's lock
// (shard_of()), and the service that runs a shard on its worker
// (LockManagerService). The lock manager itself: lock_manager.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cc/calvin/lock_manager.hpp"
#include "txn/service.hpp"
#include "txn/types.hpp"

namespace rdtx::cc::calvin::detail {

using namespace rdtx::txn;

// The node's lock manager, sharded by record: shard s holds the locks of
// the records whose (table, key) hash to s, and worker s of the node runs
// it (one shard per worker, at most kMaxShards). Every shard grants in the
// same global order, so the order per record, all that deadlock freedom
// needs, is the one order (lock_manager.hpp); sharding spreads the grants
// over the node's workers instead of loading worker 0 with all of them.
constexpr uint32_t kMaxShards = 64;  // a transaction's shards: a 64-bit mask
struct LockShards {
  explicit LockShards(uint32_t groups) : board(groups) {}
  GrantBoard board;  // before the shards, which count on it
  std::vector<std::unique_ptr<LockManager>> shard;
};
inline uint32_t shard_of(TableId table, uint64_t key, uint32_t shards) {
  // A hash of the record's identity, not its address: the same shards in
  // every run (virtual time stays deterministic).
  const uint64_t h = (key ^ (uint64_t{table} << 56)) * 0x9e3779b97f4a7c15ull;
  return static_cast<uint32_t>((h >> 32) * shards >> 32);
}

// A lock manager shard's poller: worker s of each node runs shard s.
class LockManagerService final : public Service {
 public:
  LockManagerService(std::shared_ptr<LockShards> lms, uint32_t s)
      : Service("calvin.locks"), lms_(std::move(lms)), lm_(lms_->shard[s].get()) {}
  int poll() override { return lm_->poll(); }
  // Grants go on until every group of the node has run its last epoch.
  bool drain() override { return lm_->finished(); }

 private:
  std::shared_ptr<LockShards> lms_;
  LockManager* lm_;
};

}  // namespace rdtx::cc::calvin::detail
