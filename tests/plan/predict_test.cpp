// The alpha-beta times of strata's host algorithms on emulated links (plan/predict.hpp).
#include <gtest/gtest.h>

#include "plan/predict.hpp"

namespace strata::plan {
namespace {

TEST(Predict, RingAndPairwiseStepsLastAsLongAsTheirSlowestHop) {
  auto topo = topo::Topology::from_toml_string(
      "[[tiers]]\nname = \"gpu\"\nsize = 2\nbandwidth_GBps = 200\nlatency_us = 2\n"
      "[[tiers]]\nname = \"node\"\nsize = 2\nbandwidth_GBps = 50\nlatency_us = 3\n"
      "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n",
      "test");
  topo.resolve(8);
  const std::size_t chunk = 1 << 20;
  const double gpu = 2e-6 + chunk / 200e9, node = 3e-6 + chunk / 50e9, cluster = 5e-6 + chunk / 25e9;
  // The world ring 0..7 crosses the cluster tier at 3->4 and 7->0.
  EXPECT_DOUBLE_EQ(ring_pass_seconds(topo, {0, 1, 2, 3, 4, 5, 6, 7}, chunk, 1.0), 7 * cluster);
  EXPECT_DOUBLE_EQ(ring_pass_seconds(topo, {4, 5}, chunk, 1.0), gpu);       // one die pair
  EXPECT_DOUBLE_EQ(ring_pass_seconds(topo, {4, 6}, chunk, 2.0), 2 * node);  // across GPUs of a node
  EXPECT_DOUBLE_EQ(ring_pass_seconds(topo, {3}, chunk, 1.0), 0.0);
  // Inside one node, every shift has a message between GPUs.
  EXPECT_DOUBLE_EQ(pairwise_exchange_seconds(topo, {0, 1, 2, 3}, chunk, 1.0), 3 * node);
}

}  // namespace
}  // namespace strata::plan
