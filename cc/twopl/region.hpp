// 2PL's protocol region (ProtocolDef::region_bytes), per worker: the 2PC
// vote words, then the mailboxes.
//
// Mailboxes: 2PL's lock requests and their grants as messages WRITten into
// slots of the receiver's registered memory and polled there
// (txn.pipeline.fetch = "mailbox"), the paper's messaging layer ("Strong
// consistency is not hard to get", 3.3: a mailbox with room for one message
// from each transaction agent, written with MPI put-with-notify; an RC
// WRITE and a polled slot are its RDMA form). The same requests and replies
// as the RPC form (ItemBatch's items), another transport.
//
// Slots, all kSlotBytes, in the protocol region of each worker (after the
// 2PC vote words), for a run of N nodes x W workers x C coroutines:
//
//   request  [sender node n][coroutine c][shard worker j], in the region of
//            worker i of the shard's node, where i is the sender's worker
//            index (a worker's QP to a node reaches its counterpart's
//            region only); shard j polls the slots meant for it in every
//            region of its node (local memory)
//   reply    [coordinator worker i][coroutine c][shard node m], in the
//            region of worker j of the coordinator's node, j the shard's
//            worker index (the shard's QP reaches that region); the
//            coordinator polls it (local memory)
//   staging  the local sources of this worker's WRITEs: per coroutine one
//            slot per call of a batch (ItemBatch::kMaxCalls, or fewer when
//            the cluster has fewer shards), and kReplyStaging for the
//            shard's replies
//
// A message is a ring-log entry (ring_log.hpp) of one record at position
// seq x kSlotBytes: its head, both sizes and a checksum are checked before
// it is taken, so it is never read before every byte of its WRITE landed,
// in whatever order they land. seq is the coordinator's call number: a
// reply carries its request's, so a late reply of an earlier call is not
// taken for the current one, and a shard takes each request once.
#pragma once

#include <algorithm>
#include <cstdint>

#include "txn/item_batch.hpp"

namespace rdtx::cc::twopl {

// The 2PC vote words (protocol 2pl), in the protocol region of each worker
// j of a node: one 64-byte slot per coordinator of the node (its worker i,
// coroutine c) and attempt parity, which shard j's FAAs reach; then the
// 8-byte destination of shard j's own FAAs (their fetched values are not
// used). Two slots a coordinator, by the parity of the attempt's sequence:
// a vote of an earlier attempt that lands late (it was posted before that
// attempt's end message fenced it) cannot count for the next one.
struct VoteLayout {
  static constexpr uint64_t kSlot = 64;
  static uint64_t offset(uint32_t worker, uint32_t coroutine, uint32_t coroutines, uint64_t attempt) {
    return ((uint64_t{worker} * coroutines + coroutine) * 2 + (attempt & 1)) * kSlot;
  }
  static uint64_t scratch_offset(uint32_t workers, uint32_t coroutines) {
    return uint64_t{workers} * coroutines * 2 * kSlot;
  }
  static uint64_t region_bytes(uint32_t workers, uint32_t coroutines) {
    return scratch_offset(workers, coroutines) + kSlot;
  }
};
inline constexpr uint64_t kVoteYes = 1;
inline constexpr uint64_t kVoteAbort = uint64_t{1} << 32;


struct MailboxLayout {
  static constexpr uint32_t kSlotBytes = 4096;  // a power of two (ring_log positions)
  static constexpr uint32_t kReplyStaging = 16;  // a shard's reply WRITEs in flight
  uint32_t nodes = 0, workers = 0, coroutines = 0;

  static MailboxLayout of(uint32_t nodes, uint32_t workers, uint32_t coroutines) {
    return {nodes, workers, coroutines};
  }
  uint64_t base() const { return (VoteLayout::region_bytes(workers, coroutines) + 63) & ~uint64_t{63}; }
  uint64_t request(uint32_t n, uint32_t c, uint32_t j) const {
    return base() + ((uint64_t{n} * coroutines + c) * workers + j) * kSlotBytes;
  }
  uint64_t replies() const { return base() + uint64_t{nodes} * coroutines * workers * kSlotBytes; }
  uint64_t reply(uint32_t i, uint32_t c, uint32_t m) const {
    return replies() + ((uint64_t{i} * coroutines + c) * nodes + m) * kSlotBytes;
  }
  uint32_t calls_per_coroutine() const {
    return std::min<uint32_t>(txn::ItemBatch::kMaxCalls, nodes * workers);
  }
  uint64_t staging() const { return replies() + uint64_t{workers} * coroutines * nodes * kSlotBytes; }
  uint64_t request_staging(uint32_t c, uint32_t k) const {
    return staging() + (uint64_t{c} * calls_per_coroutine() + k) * kSlotBytes;
  }
  uint64_t reply_staging(uint32_t k) const {
    return staging() + (uint64_t{coroutines} * calls_per_coroutine() + k) * kSlotBytes;
  }
  uint64_t region_bytes() const { return reply_staging(kReplyStaging); }
  // The ring position of message `seq` (ring_log.hpp: entries at offset 0).
  static uint64_t pos(uint64_t seq) { return seq * kSlotBytes; }
};

}  // namespace rdtx::cc::twopl
