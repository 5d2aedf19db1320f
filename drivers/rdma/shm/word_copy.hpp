// How READ and WRITE payloads move between registered buffers: aligned
// 8-byte words, each stored at once (word-sized atomic accesses, so a
// concurrent reader or writer sees every word either before or after), in
// the order the devargs read_order/write_order ask for. Payloads whose
// address or length is not a multiple of 8 are moved by memmove, whose
// order is its own.
// Thread-safety: pure functions of their arguments (and the caller's Rng).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rng.hpp"
#include "shm_config.hpp"

namespace rdtx::rdma::shm {

inline bool words_aligned(const uint8_t* dst, const uint8_t* src, size_t n) {
  return ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | n) & 7) == 0;
}

// Acquire/release per word: plain moves on x86, and they keep the words in
// the order the caller stores them, so the order is the configured one and
// not the compiler's.
inline void move_word(uint64_t* d, uint64_t* s, size_t i) {
  std::atomic_ref<uint64_t>(d[i]).store(std::atomic_ref<uint64_t>(s[i]).load(std::memory_order_acquire),
                                        std::memory_order_release);
}

// Ascending address order, as an RNIC's DMA usually places data (it does not
// promise to). The default, inline so that it stays a tight loop. memmove
// may copy the tail first, or in pieces, which is why aligned payloads go
// word by word. A loopback READ that overlaps its own destination is
// unspecified, as on an RNIC, but not undefined.
inline void copy_ascending(uint8_t* dst, const uint8_t* src, size_t n) {
  if (!words_aligned(dst, src, n)) {
    std::memmove(dst, src, n);
    return;
  }
  auto* d = reinterpret_cast<uint64_t*>(dst);
  auto* s = reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(src));
  for (size_t i = 0; i < n / 8; ++i) move_word(d, s, i);
}

// Any order: kAscending as above, kDescending from the last word to the
// first, kRandom in a permutation of the words drawn from `rng` for this
// call (see word_copy.cpp). Never allocates.
void copy_words(uint8_t* dst, const uint8_t* src, size_t n, WordOrder order, Rng& rng);

}  // namespace rdtx::rdma::shm
