// Ring logs in registered memory, written by remote senders with one-sided
// WRITEs and read by the receiver's CPU: the framing the engine's log stage
// (replication.cpp) and FaRM's message logs (cc/farm) share.
//
//   region   [head word per ring, padded to 64 B][ring 0][ring 1]...
//            (RegionLayout); ring_bytes each, a power of two
//   entry    at ring position `pos` (bytes ever written to the ring before
//            it): [EntryHead][payload][uint64 bytes]. `bytes` (a multiple of
//            8) is at its start and its end (DrTM+H); `pos` tells this lap's
//            entry from an older one at the same offset; `sum` covers every
//            other word, so the receiver never takes an entry whose bytes
//            have not all landed, whatever order a WRITE's bytes land in.
//            count == 0: a skip marker (head alone) to the ring's start;
//            fewer than sizeof(EntryHead) bytes before the end are skipped
//            without one, by both sides
//   sender   RingTail: its reserved tail and the receiver's head as last
//            READ (the head word is READ only when the ring looks full)
//   receiver scan(): the entry at its head, copied out and checked; it
//            publishes its head in the ring's head word once it has freed
//            the room
//
// Thread-safety: a RingTail belongs to the sending worker's thread; scan()
// reads memory remote WRITEs land in (word loads), on the receiver's thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rdtx::txn::ringlog {

struct EntryHead {
  uint32_t bytes;
  uint32_t count;  // records in the entry (0: a skip marker)
  uint64_t pos;
  uint64_t sum;
};
static_assert(sizeof(EntryHead) == 24);
// Head and trailer of an entry with records.
inline constexpr uint32_t kEntryOverhead = sizeof(EntryHead) + 8;

// The checksum of an entry's words (all but EntryHead::sum).
uint64_t entry_sum(const std::byte* e, uint32_t bytes);

// Writes the head (with `count` and `pos`), the trailer (unless a skip
// marker) and the sum of an entry laid out at `e`.
void seal_entry(std::byte* e, uint32_t bytes, uint32_t count, uint64_t pos);

// A region of `rings` rings of `ring_bytes`, each with its head word.
struct RegionLayout {
  uint32_t rings;
  uint64_t ring_bytes;
  uint64_t head(uint32_t r) const { return uint64_t{r} * 8; }
  uint64_t ring(uint32_t r) const { return ((uint64_t{rings} * 8 + 63) & ~uint64_t{63}) + uint64_t{r} * ring_bytes; }
  uint64_t bytes() const { return ring(rings); }
};

// The bytes skipped before an entry of `bytes` at `pos` because it would
// wrap (0 if it fits before the ring's end).
inline uint64_t skip_before(uint64_t pos, uint32_t bytes, uint64_t cap) {
  const uint64_t to_end = cap - (pos & (cap - 1));
  return to_end < bytes ? to_end : 0;
}

// The sender's view of one ring.
struct RingTail {
  uint64_t tail = 0;  // bytes reserved
  uint64_t head = 0;  // bytes the receiver has freed, as last READ

  // Room for an entry of `bytes` now, keeping `keep` more bytes free.
  bool fits(uint32_t bytes, uint64_t cap, uint64_t keep = 0) const {
    return tail + skip_before(tail, bytes, cap) + bytes + keep - head <= cap;
  }
  // Reserves it (fits() checked): the position to seal_for_write() with.
  uint64_t reserve(uint32_t bytes, uint64_t cap) {
    const uint64_t pos = tail;
    tail += skip_before(tail, bytes, cap) + bytes;
    return pos;
  }
  // A head word READ from the receiver. It may run up to a head's bytes
  // past the tail: the receiver skips the ring's last bytes when fewer than
  // a head's are left, possibly before the next entry is written.
  void saw_head(uint64_t h) {
    if (h > head && h <= tail + sizeof(EntryHead)) head = h;
  }
};

// Seals an entry of `bytes` and `count` records laid out at `e` for the
// position `pos` reserved for it, and the skip marker before it if it
// wraps (laid out in the sizeof(EntryHead) bytes before `e`, which the
// caller keeps free). Calls put(local, length, ring_offset) for each piece
// to WRITE, skip marker first.
template <typename Put>
void seal_for_write(std::byte* e, uint32_t bytes, uint32_t count, uint64_t pos, uint64_t cap, Put&& put) {
  const uint64_t skipped = skip_before(pos, bytes, cap);
  if (skipped >= sizeof(EntryHead)) {
    std::byte* m = e - sizeof(EntryHead);
    seal_entry(m, static_cast<uint32_t>(skipped), 0, pos);
    put(m, static_cast<uint32_t>(sizeof(EntryHead)), pos & (cap - 1));
  }
  pos += skipped;
  seal_entry(e, bytes, count, pos);
  put(e, bytes, pos & (cap - 1));
}

enum class Scan : uint8_t {
  kNone,   // no complete entry at this position (yet)
  kEntry,  // an entry: copied out and checked
  kSkip,   // a skip marker or the ring's unusable end: advance
};
// The entry at position `pos` of `ring` (`cap` bytes), loaded word by word
// into `copy` (room for cap / 8 words) and checked (position, both sizes,
// sum). *advance: the bytes to move the head by (kEntry, kSkip).
Scan scan(const std::byte* ring, uint64_t cap, uint64_t pos, uint64_t* copy, EntryHead* eh, uint64_t* advance);
// True if an entry head for position `pos` is there (complete or not): a
// WRITE that began landing (after the run: one that never completed).
bool begun(const std::byte* ring, uint64_t cap, uint64_t pos);

}  // namespace rdtx::txn::ringlog
