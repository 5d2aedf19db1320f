// The shm driver's source of adversarial choices (word orders, datagram
// faults): SplitMix64, one generator per QP, seeded from the devargs seed,
// the node and the QP number, so that a QP's choices repeat for one seed
// whatever other threads do. Not for anything that must be unpredictable.
// Thread-safety: a generator belongs to the thread of its QP.
#pragma once

#include <cstdint>

namespace rdtx::rdma::shm {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_(seed) {}
  // Independent streams for different (seed, stream) pairs.
  Rng(uint64_t seed, uint64_t stream) : state_(seed ^ mix(stream + 0x632b'e59b'd9b4'e019ull)) {}

  uint64_t next() { return mix(state_ += 0x9e37'79b9'7f4a'7c15ull); }

  // A threshold t such that next() < t happens with probability p in [0, 1]
  // (p = 1: always, as 2^64 - 1 misses one value in 2^64).
  static uint64_t threshold(double p) {
    if (p <= 0) return 0;
    if (p >= 1) return UINT64_MAX;
    return static_cast<uint64_t>(p * 18446744073709551616.0);
  }
  bool chance(uint64_t threshold) { return next() < threshold; }

 private:
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58'476d'1ce4'e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d0'49bb'1331'11ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

}  // namespace rdtx::rdma::shm
