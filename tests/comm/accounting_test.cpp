// Accounting snapshots, differences and JSON; the alpha-beta link time.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "comm/instrument/accounting.hpp"
#include "comm/instrument/emulation.hpp"
#include "comm/instrument/traffic.hpp"

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

TEST(Traffic, RingAndPairwiseCountsPerPeer) {
  EXPECT_TRUE(algorithm_transfers(Algorithm::RingAllReduce, 1, 0, 64).empty());
  // Member 0 of 4: three chunks to 1, three from 3; twice that for an all-reduce.
  auto ag = algorithm_transfers(Algorithm::RingAllGather, 4, 0, 64);
  ASSERT_EQ(ag.size(), 6u);
  for (std::size_t i = 0; i < ag.size(); i += 2) {
    EXPECT_EQ(ag[i], (Transfer{1, true, 64}));
    EXPECT_EQ(ag[i + 1], (Transfer{3, false, 64}));
  }
  EXPECT_EQ(algorithm_transfers(Algorithm::RingAllReduce, 4, 2, 64).size(), 12u);
  auto a2a = algorithm_transfers(Algorithm::PairwiseAllToAll, 3, 1, 10);
  EXPECT_EQ(a2a, (std::vector<Transfer>{{2, true, 10}, {0, false, 10}, {0, true, 10}, {2, false, 10}}));
  Accounting acc({"gpu", "node"});
  const std::vector<int> tiers{1, 0, 0};  // member 0 across a node, 2 on this one
  charge_transfers(acc, a2a, tiers);
  EXPECT_EQ(acc.snapshot().tiers[0], (TierTraffic{10, 10, 1}));
  EXPECT_EQ(acc.snapshot().tiers[1], (TierTraffic{10, 10, 1}));
}

TEST(Traffic, BroadcastTreeReachesEveryMemberOnceAndBarrierIsEmpty) {
  for (int d : {1, 2, 3, 5, 8})
    for (int root = 0; root < d; ++root) {
      std::vector<int> received(d, 0);
      int sent = 0;
      for (int m = 0; m < d; ++m)
        for (const Transfer& t : algorithm_transfers(Algorithm::BinomialBroadcast, d, m, 7, root)) {
          EXPECT_EQ(t.bytes, 7u);
          if (t.sent)
            ++sent;
          else
            ++received[m];
        }
      EXPECT_EQ(sent, d - 1) << "d=" << d << " root=" << root;
      for (int m = 0; m < d; ++m) EXPECT_EQ(received[m], m == root ? 0 : 1) << "d=" << d << " root=" << root;
    }
  auto barrier = algorithm_transfers(Algorithm::DisseminationBarrier, 5, 4, 99);
  EXPECT_EQ(barrier, (std::vector<Transfer>{{0, true, 0}, {3, false, 0}, {1, true, 0}, {2, false, 0},
                                            {3, true, 0}, {0, false, 0}}));
  EXPECT_THROW(algorithm_transfers(Algorithm::RingAllGather, 4, 4, 1), Error);
  EXPECT_THROW(algorithm_transfers(Algorithm::BinomialBroadcast, 4, 0, 1, 4), Error);
}

}  // namespace
}  // namespace strata::comm
