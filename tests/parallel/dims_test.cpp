#include <gtest/gtest.h>

#include "base/error.hpp"
#include "parallel/dims.hpp"
#include "shard/test_topologies.hpp"

using namespace strata;

TEST(ParallelDims, EveryRankOfTheTopologyIsADataParallelReplica) {
  const parallel::ParallelDims d = parallel::ParallelDims::data_parallel(two_node_topology(8));
  EXPECT_EQ(d.data_levels, (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(d.data_parallel_size(), 8);
  EXPECT_EQ(d.world_size(), 8);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(d.data_parallel_rank(r), r);
}

TEST(ParallelDims, TensorRanksShareOneReplicasData) {
  parallel::ParallelDims d;
  d.data_levels = {2, 3};
  d.tensor = 2;
  EXPECT_EQ(d.data_parallel_size(), 6);
  EXPECT_EQ(d.world_size(), 12);
  EXPECT_EQ(d.data_parallel_rank(0), d.data_parallel_rank(1));
  EXPECT_EQ(d.data_parallel_rank(11), 5);
}

TEST(ParallelDims, AnUnresolvedTopologyIsRefused) {
  const topo::Topology t = topo::Topology::preset("dgx-a100");
  try {
    parallel::ParallelDims::data_parallel(t);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not resolved"), std::string::npos) << e.what();
  }
}

TEST(ParallelDims, TensorGroupsAreConsecutiveDomainsOfTheirTier) {
  // 2 nodes x 2 GPUs x 2 dies. TP 2 in the innermost tier: pairs of consecutive ranks.
  const topo::Topology t = two_node_topology(8);
  const parallel::ParallelDims inner = parallel::ParallelDims::model_parallel(t, 2, 0, 1, 2);
  EXPECT_EQ(inner.data_levels, (std::vector<int>{1, 2, 2}));
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(inner.tensor_rank(r), r % 2) << r;
    EXPECT_EQ(inner.data_parallel_rank(r), r / 2) << r;
  }
  // TP 2 in the node tier: the two GPU domains of a node, ranks 2 apart.
  const parallel::ParallelDims node = parallel::ParallelDims::model_parallel(t, 2, 1, 1, 2);
  EXPECT_EQ(node.data_levels, (std::vector<int>{2, 1, 2}));
  const std::vector<int> tensor_rank{0, 0, 1, 1, 0, 0, 1, 1}, replica{0, 1, 0, 1, 2, 3, 2, 3};
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(node.tensor_rank(r), tensor_rank[r]) << r;
    EXPECT_EQ(node.data_parallel_rank(r), replica[r]) << r;
  }
  // What the sharding then runs over: the tiers' data-parallel sizes, the same names.
  const topo::Topology dp = inner.data_parallel_topology(t);
  EXPECT_EQ(dp.world_size(), 4);
  EXPECT_EQ(dp.tier(0).name, "gpu");
  EXPECT_EQ(dp.tier(0).size, 1);
  EXPECT_EQ(dp.tier(1).size, 2);
}

TEST(ParallelDims, ATensorDegreeThatDoesNotDivideItsTierIsRefusedNamingTheFlag) {
  try {
    parallel::ParallelDims::model_parallel(two_node_topology(8), 3, 0, 1, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tp 3"), std::string::npos) << e.what();
  }
}
