#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/error.hpp"
#include "base/rng.hpp"

using strata::Rng;

TEST(Rng, MatchesTheReferenceAlgorithms) {
  // Published first outputs: splitmix64 from 0, and xoshiro256** from the state {1, 2, 3, 4}.
  std::uint64_t x = 0;
  EXPECT_EQ(strata::splitmix64(x), 0xe220a8397b1dcdafULL);
  Rng rng(0);
  rng.set_state({1, 2, 3, 4});
  EXPECT_EQ(rng.next_u64(), 11520u);
  EXPECT_EQ(rng.next_u64(), 0u);
  EXPECT_EQ(rng.next_u64(), 1509978240u);
}

TEST(Rng, SeedsAndStreamsAreReproducibleAndDistinct) {
  Rng a(42), b(42), c(43), d(42, 1);
  for (int i = 0; i < 100; ++i) {
    const auto va = a.next_u64();
    EXPECT_EQ(va, b.next_u64());
    EXPECT_NE(va, c.next_u64());
    EXPECT_NE(va, d.next_u64());
  }
}

TEST(Rng, StateRoundTripsAndContinuesTheSequence) {
  Rng a(7);
  for (int i = 0; i < 10; ++i) a.next_u64();
  Rng b(99);
  b.set_state(a.state());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.normal(), b.normal());
  EXPECT_THROW(b.set_state({0, 0, 0, 0}), strata::Error);
}

TEST(Rng, DistributionsHaveTheRightMoments) {
  Rng rng(1);
  const int n = 200000;
  double u_sum = 0, z_sum = 0, z_sq = 0;
  std::vector<int> counts(10, 0);
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    u_sum += u;
    const auto k = rng.below(10);
    ASSERT_LT(k, 10u);
    ++counts[k];
    const double z = rng.normal();
    z_sum += z;
    z_sq += z * z;
  }
  EXPECT_NEAR(u_sum / n, 0.5, 0.005);
  EXPECT_NEAR(z_sum / n, 0.0, 0.01);
  EXPECT_NEAR(z_sq / n, 1.0, 0.01);
  for (int c : counts) EXPECT_NEAR(c, n / 10, 600);  // ~4.5 standard deviations
}
