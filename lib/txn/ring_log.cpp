#include "txn/ring_log.hpp"

#include <atomic>
#include <cstring>

#include "store/tuple.hpp"

namespace rdtx::txn::ringlog {

namespace {
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The head at `off`, word by word (a WRITE may be landing in it). False:
// fewer than a head's bytes before the end.
bool peek(const std::byte* ring, uint64_t cap, uint64_t off, EntryHead* eh) {
  if (cap - off < sizeof(EntryHead)) return false;
  uint64_t w[3];
  store::load_words(w, reinterpret_cast<const uint64_t*>(ring + off), 3);
  std::memcpy(eh, w, sizeof *eh);
  return true;
}
}  // namespace

uint64_t entry_sum(const std::byte* e, uint32_t bytes) {
  uint64_t h = 0x6a09e667f3bcc909ull;
  for (uint32_t off = 0; off < bytes; off += 8) {
    if (off == offsetof(EntryHead, sum)) continue;
    uint64_t w;
    std::memcpy(&w, e + off, 8);
    h = mix(h ^ w);
  }
  return h;
}

void seal_entry(std::byte* e, uint32_t bytes, uint32_t count, uint64_t pos) {
  EntryHead eh{bytes, count, pos, 0};
  std::memcpy(e, &eh, sizeof eh);
  if (count > 0) {
    const uint64_t trailer = bytes;
    std::memcpy(e + bytes - 8, &trailer, 8);
  }
  eh.sum = entry_sum(e, count > 0 ? bytes : sizeof eh);
  std::memcpy(e, &eh, sizeof eh);
}

Scan scan(const std::byte* ring, uint64_t cap, uint64_t pos, uint64_t* copy, EntryHead* eh, uint64_t* advance) {
  const uint64_t off = pos & (cap - 1);
  if (!peek(ring, cap, off, eh)) {  // too close to the end for an entry: skipped
    *advance = cap - off;
    return Scan::kSkip;
  }
  if (eh->pos != pos || eh->bytes < sizeof(EntryHead) || eh->bytes % 8 != 0 || eh->bytes > cap - off)
    return Scan::kNone;  // not (completely) here yet
  if (eh->count > 0 && eh->bytes < kEntryOverhead) return Scan::kNone;
  const uint32_t len = eh->count == 0 ? static_cast<uint32_t>(sizeof(EntryHead)) : eh->bytes;
  store::load_words(copy, reinterpret_cast<const uint64_t*>(ring + off), len / 8);
  const std::byte* e = reinterpret_cast<const std::byte*>(copy);
  uint64_t trailer = eh->bytes;
  if (eh->count > 0) std::memcpy(&trailer, e + eh->bytes - 8, 8);
  if (trailer != eh->bytes || entry_sum(e, len) != eh->sum) return Scan::kNone;
  *advance = eh->bytes;
  return eh->count == 0 ? Scan::kSkip : Scan::kEntry;
}

bool begun(const std::byte* ring, uint64_t cap, uint64_t pos) {
  EntryHead eh;
  return peek(ring, cap, pos & (cap - 1), &eh) && eh.pos == pos;
}

}  // namespace rdtx::txn::ringlog
