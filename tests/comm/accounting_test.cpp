// Accounting snapshots, differences and JSON; the alpha-beta link time.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "comm/accounting.hpp"
#include "comm/emulation.hpp"
#include "comm/predict.hpp"

namespace strata::comm {
namespace {

TEST(Accounting, RecordsSnapshotsAndDifferences) {
  Accounting acc({"gpu", "node", "cluster"}, true);
  acc.record_send(0, 100);
  acc.record_send(2, 7);
  acc.record_receive(2, 9);
  acc.record_time("all_gather", 0.5);
  CommStats first = acc.snapshot();
  acc.record_send(2, 1);
  acc.record_time("all_gather", 0.25);
  acc.record_time("barrier", 0.125);
  CommStats delta = acc.snapshot() - first;
  EXPECT_EQ(delta.tier("cluster"), (TierTraffic{1, 0, 1}));
  EXPECT_EQ(delta.tier("gpu"), (TierTraffic{}));
  EXPECT_EQ(delta.kinds.at("all_gather").calls, 1u);
  EXPECT_DOUBLE_EQ(delta.kinds.at("all_gather").seconds, 0.25);
  EXPECT_EQ(first.total(), (TierTraffic{107, 9, 2}));
  EXPECT_THROW(first.tier("rack"), Error);

  nlohmann::json j = first.to_json();
  EXPECT_EQ(j["emulated"], true);
  EXPECT_EQ(j["tiers"]["gpu"]["bytes_sent"], 100);
  EXPECT_EQ(j["tiers"]["cluster"]["bytes_received"], 9);
  EXPECT_EQ(j["tiers"]["cluster"]["messages"], 1);
  EXPECT_EQ(j["collectives"]["all_gather"]["calls"], 1);

  acc.reset();
  EXPECT_EQ(acc.snapshot().total(), (TierTraffic{}));
  EXPECT_TRUE(acc.snapshot().kinds.empty());
}

TEST(Emulation, LinkSecondsIsAlphaPlusBytesOverBeta) {
  topo::Tier t{"node", 2, 50.0, 3.0, 0.8, ""};
  EXPECT_DOUBLE_EQ(link_seconds(t, 0), 3e-6);
  EXPECT_DOUBLE_EQ(link_seconds(t, 40'000'000), 3e-6 + 40e6 / 40e9);
  EXPECT_DOUBLE_EQ(link_seconds(t, 40'000'000, 0.1), 0.1 * (3e-6 + 1e-3));
}

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
}  // namespace strata::comm
