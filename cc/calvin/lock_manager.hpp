// CALVIN's lock manager: one per shard of a node's records (lock_service.hpp's
// LockShards: shard s holds the records whose (table, key) hash to s),
// shared by the node's CALVIN groups (every coordinator coroutine of every
// worker), run by a service of worker s (LockManagerService, lock_service.hpp).
// It grants the locks of its records in ONE GLOBAL ORDER, (epoch,
// timestamp), the same on every node and in every shard
// (Calvin [28]'s rule, not RCC's abort-and-retry; doc/txn.md "CALVIN"):
//
//   - a group publishes the requests of epoch e (its merged, ordered batch:
//     per transaction the node's records it touches) with publish();
//   - once every group of the node has published e (or has left before e),
//     poll() merges them by timestamp into the pending list;
//   - poll() walks the pending list in order keeping the set of records
//     requested by earlier transactions still waiting, and grants a
//     transaction iff none of its records is locked or in that set (FIFO
//     per record without per-record queues): it sets each record's lock word
//     (tuple word 0) to the transaction id, then the request's granted tag;
//   - after granting requests of a group it bumps the group's word on the
//     node's GrantBoard (shared by the shards), so a group with many
//     waiting transactions reads one word per poll, and their granted()
//     tags only when it moved;
//   - the executing coroutine polls granted() and yields; when done it clears
//     the lock words (release()), which counts a release: poll() walks the
//     pending list again only after a release or a merge (nothing else can
//     make a waiting request grantable).
//
// Deadlock freedom: every transaction waits only for locks held or
// requested by transactions earlier in the global order (a later one is
// never granted a record an earlier one waits for), and for values from
// its counterparts on other nodes, which wait only for earlier ones in the
// same order. The earliest unfinished transaction therefore always
// progresses: no cycle.
//
// Epochs: a group publishes e+1 only after finishing e (every request of e
// granted), so the pending list holds one epoch at a time and a request slot
// (two per group, by epoch parity) is reused only after its request was
// granted; the epoch tag in `granted` makes a reused slot unambiguous.
//
// Thread-safety: publish(), granted(), release() and leave() from the group's
// thread; poll() from one thread (its worker's); between them only atomics
// (acquire/release, as commented), no lock, no allocation after construction.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rdtx::cc::calvin {

// Per group, a count of the grants any shard of the node made to it: what
// a group polls to learn whether any of its waiting requests may have been
// granted since it last looked. A shard bumps it after the granted tags
// (release); a group that reads it (acquire) and then finds a request not
// granted will see the word move once it is.
class GrantBoard {
 public:
  explicit GrantBoard(uint32_t groups) : word_(groups) {}
  uint64_t grants(uint32_t group) const { return word_[group].n.load(std::memory_order_acquire); }
  void add(uint32_t group) { word_[group].n.fetch_add(1, std::memory_order_release); }

 private:
  struct alignas(64) Word {  // a line each: every shard writes, one group reads
    std::atomic<uint64_t> n{0};
  };
  std::vector<Word> word_;
};

class LockManager {
 public:
  // `groups` groups of up to `per_epoch` transactions per epoch with up to
  // `max_records` records each on this node; its grants are counted on
  // `board` (the node's, shared by its shards; outlives the manager).
  LockManager(uint32_t groups, uint32_t per_epoch, uint32_t max_records, GrantBoard& board);

  // Group side. The request slot of transaction i of the group's epoch e:
  // fill `ts`, `id`, then add its records, then publish the epoch.
  struct Request {
    uint64_t ts = 0;
    uint64_t id = 0;  // the lock value
    uint32_t nrec = 0;
    std::atomic<uint64_t> granted{0};  // the epoch it was granted in (0: not)
  };
  Request& request(uint32_t group, uint64_t epoch, uint32_t i);
  // Adds a record (its tuple: word 0 is the lock word) to the request.
  // Every lock is exclusive, reads included (doc/txn.md "CALVIN").
  void add_record(uint32_t group, uint64_t epoch, uint32_t i, std::byte* tuple);
  // Requests [0, count) of epoch e are complete (e counts from 1, one after
  // the other). `last`: the group publishes no epoch after e.
  void publish(uint32_t group, uint64_t epoch, uint32_t count, bool last);
  bool granted(uint32_t group, uint64_t epoch, uint32_t i) const {
    // acquire: the lock words the manager set before the tag.
    return slot(group, epoch, i).granted.load(std::memory_order_acquire) == epoch;
  }
  // Clears the lock words of a granted request (its transaction is done).
  void release(uint32_t group, uint64_t epoch, uint32_t i);
  // The group publishes nothing more (stopped, or failed): epochs after its
  // last published one no longer wait for it.
  void leave(uint32_t group);

  // Manager side: merges complete epochs and grants what can be granted.
  // Returns the work done (0: idle).
  int poll();
  // Every group has left and nothing is pending.
  bool finished() const;
  // When poll() merged epoch e (env::tsc() of its thread), for the
  // breakdown: read by a group after a grant of e, before it publishes e+1
  // (so the manager cannot have merged e+2 over it).
  uint64_t merged_tsc(uint64_t epoch) const { return merged_tsc_[epoch & 1].load(std::memory_order_relaxed); }

 private:
  struct Group {
    std::atomic<uint64_t> published{0};          // last epoch published (release)
    std::atomic<uint64_t> last{UINT64_MAX};      // no epoch after this one
    std::atomic<uint32_t> count[2] = {0, 0};      // requests per epoch parity
  };
  Request& slot(uint32_t group, uint64_t epoch, uint32_t i) {
    return requests_[(size_t{group} * 2 + (epoch & 1)) * per_epoch_ + i];
  }
  const Request& slot(uint32_t group, uint64_t epoch, uint32_t i) const {
    return requests_[(size_t{group} * 2 + (epoch & 1)) * per_epoch_ + i];
  }
  uintptr_t* records_of(size_t slot_index) { return &records_[slot_index * max_records_]; }
  bool blocked(uintptr_t rec) const;
  void block(uintptr_t rec);

  const uint32_t groups_, per_epoch_, max_records_;
  GrantBoard& board_;
  std::vector<Group> group_;
  std::vector<Request> requests_;      // [group][parity][i]
  std::vector<uintptr_t> records_;     // [slot][record]: tuple address
  // Manager state (poll()'s thread only).
  uint64_t merging_ = 1;               // the next epoch to merge
  // Written before the grants of the epoch (whose release tags order it).
  std::atomic<uint64_t> merged_tsc_[2] = {0, 0};
  struct Pending {
    uint64_t ts;
    uint64_t epoch;
    uint32_t slot;
  };
  std::vector<Pending> pending_;       // reserved: never reallocates
  // The records requested by earlier waiting transactions in this walk:
  // open addressing, entries of older walks told apart by generation.
  struct BlockedSlot {
    uintptr_t rec = 0;
    uint64_t gen = 0;
  };
  std::vector<BlockedSlot> blocked_;
  uint64_t gen_ = 0;
  // Releases so far (release() from any thread) and as of the last walk.
  std::atomic<uint64_t> releases_{0};
  uint64_t walked_releases_ = UINT64_MAX;
};

}  // namespace rdtx::cc::calvin
