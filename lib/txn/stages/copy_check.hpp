// Reading a tuple copy lock-free: its words (copy_word), and the proof that
// it is not torn: a checksum the writer stores with each version, over the
// version word and the words it covers, which the reader recomputes. A READ may copy a tuple's words in any order
// while a commit installs them in any order (neither verbs nor PCIe promise
// one), so a copy may pair a new version word with old record words; such a
// copy does not match the checksum (barring a 64-bit collision) and is read
// again. Cost: one multiply-xor per covered word.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rdtx::txn {

// The 8-byte word at byte `off` of a tuple copy (unaligned-safe), and its
// store: how protocols read and fill their metadata in a local copy.
inline uint64_t copy_word(const std::byte* p, uint32_t off) {
  uint64_t v;
  std::memcpy(&v, p + off, 8);
  return v;
}
inline void set_copy_word(std::byte* p, uint32_t off, uint64_t v) { std::memcpy(p + off, &v, 8); }

// Starts a checksum with the version word it vouches for.
inline uint64_t checksum_start(uint64_t version) { return version * 0x9e3779b97f4a7c15ull; }

// Mixes the 8-byte words of p[from, to) into h (from, to multiples of 8).
inline uint64_t checksum_words(uint64_t h, const std::byte* p, uint32_t from, uint32_t to) {
  for (uint32_t off = from; off < to; off += 8) {
    uint64_t w;
    std::memcpy(&w, p + off, 8);
    h ^= w;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return h;
}

}  // namespace rdtx::txn
