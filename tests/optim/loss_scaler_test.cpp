#include <gtest/gtest.h>

#include "base/error.hpp"
#include "optim/loss_scaler.hpp"

using strata::optim::LossScaler;

TEST(LossScaler, HalvesOnOverflowDoublesAfterAWindowOfGoodSteps) {
  LossScaler s(1024, 3);
  EXPECT_TRUE(s.dynamic());
  s.update(false);
  EXPECT_EQ(s.scale(), 512);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 512);
  s.update(true);
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.good_steps(), 0);
  s.update(true);
  s.update(false);  // an overflow restarts the window
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 512);
}

TEST(LossScaler, NeverGoesBelowOneAndDisabledStaysAtOne) {
  LossScaler s(2, 100);
  for (int i = 0; i < 5; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 1);
  LossScaler off;
  off.update(false);
  EXPECT_FALSE(off.dynamic());
  EXPECT_EQ(off.scale(), 1);
}

TEST(LossScaler, RefusesScalesThatAreNotPowersOfTwo) {
  EXPECT_THROW(LossScaler(1000, 10), strata::Error);
  EXPECT_THROW(LossScaler(0.5, 10), strata::Error);
  EXPECT_THROW(LossScaler(1024, 0), strata::Error);
  LossScaler s(1024, 10);
  EXPECT_THROW(s.restore(3, 0), strata::Error);
  s.restore(256, 7);
  EXPECT_EQ(s.scale(), 256);
  EXPECT_EQ(s.good_steps(), 7);
}
