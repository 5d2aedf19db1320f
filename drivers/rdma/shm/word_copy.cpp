#include "word_copy.hpp"

#include <bit>

namespace rdtx::rdma::shm {

// kRandom: a pseudo-random permutation of the word indexes [0, words), new
// for every call, without a table: over the next power of two 2^k, the
// bijection x -> a2 * (y ^ (y >> s)) + b2 with y = a1 * x + b1 (a1, a2 odd,
// everything mod 2^k) is walked for x = 0 .. 2^k - 1, skipping images past
// the payload (fewer than half of them). Not uniform over all permutations,
// but neither ascending nor descending and different every time: a
// concurrent reader sees a WRITE land, or a READ sample, in many orders.
void copy_words(uint8_t* dst, const uint8_t* src, size_t n, WordOrder order, Rng& rng) {
  if (order == WordOrder::kAscending || !words_aligned(dst, src, n)) {
    copy_ascending(dst, src, n);
    return;
  }
  auto* d = reinterpret_cast<uint64_t*>(dst);
  auto* s = reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(src));
  const size_t words = n / 8;
  if (order == WordOrder::kDescending) {
    for (size_t i = words; i-- > 0;) move_word(d, s, i);
    return;
  }
  if (words == 0) return;
  const uint64_t mask = std::bit_ceil(words) - 1;
  const unsigned shift = static_cast<unsigned>(std::bit_width(mask)) / 2 + 1;
  const uint64_t r1 = rng.next(), r2 = rng.next();
  const uint64_t a1 = (r1 | 1) & mask, b1 = (r1 >> 32) & mask;
  const uint64_t a2 = (r2 | 1) & mask, b2 = (r2 >> 32) & mask;
  for (uint64_t x = 0; x <= mask; ++x) {
    uint64_t y = (a1 * x + b1) & mask;
    y ^= y >> shift;
    y = (a2 * y + b2) & mask;
    if (y < words) move_word(d, s, y);
  }
}

}  // namespace rdtx::rdma::shm
