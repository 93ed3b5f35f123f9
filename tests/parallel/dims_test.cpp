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
