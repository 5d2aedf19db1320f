// stats::Histogram: bucket bounds, percentile accuracy, merging.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "stats/histogram.hpp"

using rdtx::stats::Histogram;

TEST(Histogram, BucketsCoverEveryValueInOrder) {
  for (uint64_t v : {0ull, 1ull, 15ull, 16ull, 17ull, 31ull, 32ull, 1000ull, 123456789ull, ~0ull}) {
    unsigned b = Histogram::bucket_of(v);
    ASSERT_LT(b, Histogram::kBuckets);
    EXPECT_LE(Histogram::lower_bound(b), v) << v;
    if (b + 1 < Histogram::kBuckets) {
      EXPECT_GT(Histogram::lower_bound(b + 1), v) << v;
    }
  }
}

TEST(Histogram, PercentilesWithinBucketPrecision) {
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> dist(8.0, 1.0);
  std::vector<uint64_t> v(100000);
  Histogram h;
  for (auto& x : v) {
    x = static_cast<uint64_t>(dist(rng));
    h.record(x);
  }
  std::sort(v.begin(), v.end());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    double exact = static_cast<double>(v[static_cast<size_t>(q * (v.size() - 1))]);
    EXPECT_NEAR(static_cast<double>(h.percentile(q)), exact, exact * 0.0625 + 1) << q;
  }
  EXPECT_EQ(h.count(), v.size());
  EXPECT_EQ(h.max(), v.back());
  EXPECT_EQ(h.min(), v.front());
}

TEST(Histogram, MergeEqualsRecordingEverythingInOne) {
  Histogram a, b, all;
  for (uint64_t i = 0; i < 1000; ++i) {
    (i % 3 ? a : b).record(i * 7);
    all.record(i * 7);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  for (double q : {0.1, 0.5, 0.99}) EXPECT_EQ(a.percentile(q), all.percentile(q));
  EXPECT_EQ(a.max(), all.max());
  EXPECT_DOUBLE_EQ(a.mean(), all.mean());
}

TEST(Histogram, EmptyReportsZero) {
  Histogram h;
  EXPECT_EQ(h.percentile(0.99), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
}
