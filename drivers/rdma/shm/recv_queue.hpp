// The receive queue of a UD QP, in its own shared file ("<prefix>q<qpn>"):
// a ring of slots, each first a posted receive descriptor (written by the
// owner) and then that receive's completion (written by the sender that
// filled it). The owner publishes descriptors by advancing `posted`; a sender
// claims the next one by a CAS on `claimed`, copies its payload into the
// buffer, writes the completion and publishes it with a release store of
// `done`; the owner harvests completions in slot order. No one ever waits on
// another party: a sender that finds no posted buffer drops the message
// (counted in `dropped`, as UD does), and the owner that finds the next slot
// unfinished simply has nothing to report yet.
//
// Why not rte_ring (env::Ring) for this: an rte_ring trusts its own header
// (mask, capacity) on every operation and, with several producers, makes each
// producer wait for the previous ones to finish; in a file that other
// processes write, a corrupted header would make us read out of bounds and a
// peer dying mid-enqueue would hang every other sender. Here the indexes read
// from shared memory are masked with a capacity this process validated once,
// descriptors are checked against the region table, and a claim is one CAS.
// One slot for descriptor and completion also halves the shared atomics per
// message compared with a descriptor ring plus a completion ring.
//
// Thread-safety: RecvQueue (owner side) belongs to the thread that owns the
// QP; RemoteRecvQueue (sender side) may be used by any number of threads and
// processes at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/result.hpp"
#include "mapped_file.hpp"
#include "rdma/rdma.hpp"
#include "region_table.hpp"

namespace rdtx::rdma::shm {

inline constexpr uint64_t kRecvQueueMagic = 0x0031'5152'5854'4452ull;  // "RDTXRQ1"

struct RecvQueueHeader {
  // Immutable after creation.
  uint64_t magic;
  uint32_t version;
  uint32_t capacity;  // slots, a power of two
  uint64_t node_token;
  uint32_t qpn;
  uint32_t reserved;
  // Each counter on its own cache line: different parties write them.
  alignas(64) uint64_t posted;   // owner: descriptors published (release)
  alignas(64) uint64_t claimed;  // senders: descriptors taken (CAS)
  alignas(64) uint64_t dropped;  // senders: messages that found no descriptor
  // Senders: faults injected into messages to this QP (devargs ud_drop,
  // ud_dup, ud_delay). Rare, so they share a line.
  alignas(64) uint64_t injected_drops;
  uint64_t injected_dups;
  uint64_t injected_delays;
};

struct alignas(64) RecvSlot {
  // Descriptor, written by the owner before `posted` covers the slot.
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
  // Completion, written by the sender before it stores `done`.
  uint64_t visible_tsc;  // 0: visible at once (no latency model)
  uint32_t byte_len;
  uint32_t src_qp;
  uint8_t status;  // rdma::Status
  uint8_t reserved[7];
  uint64_t done;  // round + 1 once the completion of round `round` is written
};

inline constexpr size_t kRecvSlotsOffset = sizeof(RecvQueueHeader);
inline size_t recv_queue_file_size(uint32_t capacity) {
  return round_up(kRecvSlotsOffset + size_t{capacity} * sizeof(RecvSlot), kPageSize);
}

// Owner side.
class RecvQueue {
 public:
  static Result<std::unique_ptr<RecvQueue>> create(const std::string& path, uint32_t qpn, uint64_t node_token,
                                                   uint32_t max_recv_wr);

  // post_recv(): checks each buffer against the owner's region table
  // (-EINVAL: not registered with kLocalWrite in protection domain `pd`;
  // -ENOMEM: queue full) and publishes the whole list with one store, or,
  // with publish false (a paused node), leaves it for the next harvest() or
  // publishing post() to publish.
  int post(RecvRequest* list, RecvRequest** bad, const RegionTable& regions, uint32_t pd, bool publish = true);
  // Publishes what post() left unpublished, then moves up to max finished
  // receives, in posting order, into out.
  int harvest(Completion* out, int max);
  uint64_t dropped() const;
  uint64_t injected_drops() const;
  uint64_t injected_dups() const;
  uint64_t injected_delays() const;

  // Use create(): `file` must hold an initialised queue of `capacity` slots.
  RecvQueue(MappedFile file, uint32_t capacity, uint32_t max_recv_wr);

 private:
  struct Posted {
    uint64_t wr_id;
    uint32_t length;
  };

  MappedFile file_;
  RecvQueueHeader* header_;
  RecvSlot* slots_;
  uint32_t mask_;
  uint32_t max_recv_wr_;
  uint64_t posted_ = 0;  // private copies: the shared ones may be scribbled on
  uint64_t published_ = 0;  // what the shared `posted` was last set to
  uint64_t head_ = 0;
  // What was posted, kept privately: wr_id and length are never read back
  // from shared memory.
  std::unique_ptr<Posted[]> posted_info_;
};

// Sender side: a peer's mapping of a receive queue. Copies share the
// mapping (a datagram held back by ud_delay keeps it alive).
class RemoteRecvQueue {
 public:
  static constexpr unsigned kMaxStaleViews = 64;

  static Result<RemoteRecvQueue> open(const std::string& path, uint32_t qpn, uint64_t node_token);
  // The same, over a mapping already made (shared with other handles).
  static Result<RemoteRecvQueue> attach(std::shared_ptr<const MappedFile> file, const std::string& path, uint32_t qpn,
                                        uint64_t node_token);
  const std::shared_ptr<const MappedFile>& file() const { return file_; }

  // Takes the next posted descriptor, or returns nullptr when there is none.
  // A verdict of "none" needs a consistent view: `claimed` read before and
  // after `posted` with no change between. A sender preempted between the
  // two loads otherwise judges a fresh `posted` against a stale `claimed`,
  // sees more than `capacity` posted, and drops a message that had a buffer
  // (seen as RPC timeouts across processes on an oversubscribed host).
  // Retries are bounded: a peer that keeps scribbling on `claimed` gets its
  // messages dropped, never a sender stuck here.
  RecvSlot* claim(uint64_t* round) const {
    // Acquire: the load of `posted` below is not moved before this one.
    uint64_t c = load_word(header_->claimed, std::memory_order_acquire);
    for (unsigned stale = 0;;) {
      // Acquire pairs with the owner's release of `posted`: the descriptor of
      // every slot below it is written.
      uint64_t p = load_word(header_->posted, std::memory_order_acquire);
      if (c >= p || p - c > mask_ + 1u) {
        uint64_t again = load_word(header_->claimed, std::memory_order_relaxed);
        if (again == c || ++stale > kMaxStaleViews) return nullptr;  // none posted (or counters scribbled on)
        c = again;
        continue;
      }
      if (std::atomic_ref<uint64_t>(header_->claimed)
              .compare_exchange_weak(c, c + 1, std::memory_order_acquire, std::memory_order_acquire))
        break;
    }
    *round = c;
    return &slots_[c & mask_];
  }
  // Publishes the completion written into a claimed slot.
  static void complete(RecvSlot* slot, uint64_t round) {
    // Release: the owner that sees `done` sees the payload and completion.
    store_word(slot->done, round + 1, std::memory_order_release);
  }
  uint64_t count_drop() const {
    return std::atomic_ref<uint64_t>(header_->dropped).fetch_add(1, std::memory_order_relaxed) + 1;
  }
  void count_injected_drop() const { count(header_->injected_drops); }
  void count_injected_dup() const { count(header_->injected_dups); }
  void count_injected_delay() const { count(header_->injected_delays); }

 private:
  static void count(uint64_t& counter) { std::atomic_ref<uint64_t>(counter).fetch_add(1, std::memory_order_relaxed); }

  std::shared_ptr<const MappedFile> file_;
  RecvQueueHeader* header_ = nullptr;
  RecvSlot* slots_ = nullptr;
  uint32_t mask_ = 0;  // validated against the file size once, never re-read
};

}  // namespace rdtx::rdma::shm
