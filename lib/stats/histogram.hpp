// Histogram: a log-linear latency histogram (16 sub-buckets per power of two,
// so a reported percentile is within 6.25% of the true value). Recording is
// a few instructions and never allocates; histograms of different workers are
// merged after a run by adding their counts, so the hot path takes no lock.
// Thread-safety: one writer; merge when writers are done.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace rdtx::stats {

class Histogram {
 public:
  static constexpr unsigned kSubBits = 4;
  static constexpr unsigned kSub = 1u << kSubBits;
  static constexpr unsigned kBuckets = (64 - kSubBits + 1) * kSub;

  void record(uint64_t v) {
    ++counts_[bucket_of(v)];
    ++count_;
    sum_ += v;
    if (v > max_) max_ = v;
    if (v < min_) min_ = v;
  }
  void merge(const Histogram& o) {
    for (unsigned i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
    count_ += o.count_;
    sum_ += o.sum_;
    if (o.max_ > max_) max_ = o.max_;
    if (o.min_ < min_) min_ = o.min_;
  }
  void reset() { *this = Histogram{}; }

  uint64_t count() const { return count_; }
  uint64_t max() const { return max_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  double mean() const { return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0.0; }

  // The value at quantile q in [0, 1]: the midpoint of the bucket holding the
  // q-th recorded value, clamped to [min, max]. 0 when empty.
  uint64_t percentile(double q) const {
    if (count_ == 0) return 0;
    uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(count_ - 1)) + 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        uint64_t lo = lower_bound(i), hi = lower_bound(i + 1) - 1;
        uint64_t mid = lo + (hi - lo) / 2;
        return mid < min() ? min() : (mid > max_ ? max_ : mid);
      }
    }
    return max_;
  }

  static unsigned bucket_of(uint64_t v) {
    if (v < kSub) return static_cast<unsigned>(v);
    unsigned msb = 63u - static_cast<unsigned>(std::countl_zero(v));
    unsigned shift = msb - kSubBits;
    return (shift + 1) * kSub + static_cast<unsigned>((v >> shift) & (kSub - 1));
  }
  static uint64_t lower_bound(unsigned b) {
    if (b < kSub) return b;
    unsigned shift = b / kSub - 1;
    if (shift + kSubBits >= 64) return UINT64_MAX;
    return (static_cast<uint64_t>(kSub + b % kSub)) << shift;
  }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t max_ = 0;
  uint64_t min_ = UINT64_MAX;
};

}  // namespace rdtx::stats
