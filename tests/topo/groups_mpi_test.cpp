#include "topo/groups.hpp"

#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/plural.hpp"
#include "mpi_world.hpp"
#include "support.hpp"
#include "util.hpp"

namespace strata::topo {
namespace {

using test::plain_tier;
using test::world_rank;
using test::world_size;

Topology example() {
  return Topology::load(test::source_path("configs/topology/2node-2gpu-2die.toml").string());
}

// The members a communicator really has, in its rank order, as ranks of `base`.
std::vector<int> gathered_members(MPI_Comm comm, MPI_Comm base) {
  int base_rank = 0, n = 0;
  MPI_Comm_rank(base, &base_rank);
  MPI_Comm_size(comm, &n);
  std::vector<int> got(n);
  MPI_Allgather(&base_rank, 1, MPI_INT, got.data(), 1, MPI_INT, comm);
  return got;
}

void check_group(const Group& g, MPI_Comm base, const std::string& name, const std::vector<int>& members) {
  EXPECT_EQ(g.name, name);
  EXPECT_EQ(g.members, members) << g.name;
  EXPECT_EQ(gathered_members(g.comm, base), members) << g.name;
  int base_rank = 0, comm_rank = -1;
  MPI_Comm_rank(base, &base_rank);
  MPI_Comm_rank(g.comm, &comm_rank);
  EXPECT_EQ(g.index, comm_rank) << g.name;
  ASSERT_GE(g.index, 0);
  ASSERT_LT(g.index, g.size());
  EXPECT_EQ(g.members[g.index], base_rank) << g.name;
}

// The issue-3 example written out by hand: 2 nodes x 2 GPUs x 2 dies.
TEST(ProcessGroups, TwoNodesTwoGpusTwoDies) {
  if (world_size() != 8) GTEST_SKIP() << "needs 8 ranks";
  struct Row {
    std::string gpu, node, across_node, across_cluster;
    std::vector<int> gpu_members, node_members, across_node_members, across_cluster_members;
  };
  const Row table[8] = {
      {"gpu#0", "node#0", "across-node#0.0", "across-cluster#0.0", {0, 1}, {0, 1, 2, 3}, {0, 2}, {0, 4}},
      {"gpu#0", "node#0", "across-node#0.1", "across-cluster#0.1", {0, 1}, {0, 1, 2, 3}, {1, 3}, {1, 5}},
      {"gpu#1", "node#0", "across-node#0.0", "across-cluster#0.2", {2, 3}, {0, 1, 2, 3}, {0, 2}, {2, 6}},
      {"gpu#1", "node#0", "across-node#0.1", "across-cluster#0.3", {2, 3}, {0, 1, 2, 3}, {1, 3}, {3, 7}},
      {"gpu#2", "node#1", "across-node#1.0", "across-cluster#0.0", {4, 5}, {4, 5, 6, 7}, {4, 6}, {0, 4}},
      {"gpu#2", "node#1", "across-node#1.1", "across-cluster#0.1", {4, 5}, {4, 5, 6, 7}, {5, 7}, {1, 5}},
      {"gpu#3", "node#1", "across-node#1.0", "across-cluster#0.2", {6, 7}, {4, 5, 6, 7}, {4, 6}, {2, 6}},
      {"gpu#3", "node#1", "across-node#1.1", "across-cluster#0.3", {6, 7}, {4, 5, 6, 7}, {5, 7}, {3, 7}},
  };
  Topology topo = example();
  topo.resolve(8);
  ProcessGroups groups(topo);
  const Row& row = table[world_rank()];
  EXPECT_EQ(groups.rank(), world_rank());
  EXPECT_EQ(groups.size(), 8);
  check_group(groups.within_group(0), MPI_COMM_WORLD, row.gpu, row.gpu_members);
  check_group(groups.across_group(0), MPI_COMM_WORLD, "across-" + row.gpu + ".0", row.gpu_members);
  check_group(groups.within_group(1), MPI_COMM_WORLD, row.node, row.node_members);
  check_group(groups.across_group(1), MPI_COMM_WORLD, row.across_node, row.across_node_members);
  check_group(groups.within_group(2), MPI_COMM_WORLD, "cluster#0", {0, 1, 2, 3, 4, 5, 6, 7});
  check_group(groups.across_group(2), MPI_COMM_WORLD, row.across_cluster, row.across_cluster_members);
  // within() and across() hand out those communicators.
  EXPECT_EQ(groups.within(1), groups.within_group(1).comm);
  EXPECT_EQ(groups.across(2), groups.across_group(2).comm);

  nlohmann::json j = groups.to_json();
  EXPECT_EQ(j["rank"], world_rank());
  ASSERT_EQ(j["tiers"].size(), 3u);
  EXPECT_EQ(j["tiers"][1]["tier"], "node");
  EXPECT_EQ(j["tiers"][1]["within"]["name"], row.node);
  EXPECT_EQ(j["tiers"][1]["across"]["members"], row.across_node_members);
  EXPECT_EQ(j["tiers"][2]["across"]["index"], world_rank() / 4);
}

// Every topology whose inner tiers divide the world: members from a brute-force scan.
TEST(ProcessGroups, MembersMatchTheArithmetic) {
  const int n = world_size(), rank = world_rank();
  const std::vector<std::vector<int>> inner_sizes = {{},     {1},    {2},       {3},      {4},
                                                     {2, 2}, {1, 2}, {2, 1, 2}, {2, 2, 2}};
  int tried = 0;
  for (const auto& sizes : inner_sizes) {
    const int inner = std::accumulate(sizes.begin(), sizes.end(), 1, std::multiplies<>());
    if (n % inner != 0) continue;
    ++tried;
    std::vector<Tier> tiers;
    for (std::size_t t = 0; t < sizes.size(); ++t)
      tiers.push_back(plain_tier(fmt::format("t{}", t), sizes[t], 1, 1));
    tiers.push_back(plain_tier("cluster", 0, 1, 1));
    Topology topo(tiers, "scan");
    topo.resolve(n);
    ProcessGroups groups(topo);
    std::vector<int> span;  // ranks in one domain of each tier
    for (int s : sizes) span.push_back((span.empty() ? 1 : span.back()) * s);
    span.push_back(n);
    for (int t = 0; t < topo.num_tiers(); ++t) {
      const int below = t == 0 ? 1 : span[t - 1];
      std::vector<int> within, across;
      for (int q = 0; q < n; ++q) {
        if (q / span[t] != rank / span[t]) continue;
        within.push_back(q);
        if (q % below == rank % below) across.push_back(q);
      }
      SCOPED_TRACE(fmt::format("sizes [{}], tier {}", fmt::join(sizes, ","), t));
      const std::string& name = topo.tier(t).name;
      check_group(groups.within_group(t), MPI_COMM_WORLD, fmt::format("{}#{}", name, rank / span[t]), within);
      check_group(groups.across_group(t), MPI_COMM_WORLD,
                  fmt::format("across-{}#{}.{}", name, rank / span[t], rank % below), across);
      EXPECT_EQ(groups.across_group(t).size(), topo.tier(t).size);
    }
  }
  EXPECT_GE(tried, 3);
}

// A base communicator other than the world: ranks are counted inside it.
TEST(ProcessGroups, OnASubCommunicator) {
  const int n = world_size(), rank = world_rank();
  if (n % 4 != 0) GTEST_SKIP() << "needs a multiple of 4 ranks";
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank < n / 2, rank, &half);
  {
    Topology topo({plain_tier("pair", 2, 1, 1), plain_tier("rest", 0, 1, 1)}, "halves");
    topo.resolve(n / 2);
    ProcessGroups groups(topo, half);
    const int local = rank % (n / 2);
    EXPECT_EQ(groups.rank(), local);
    check_group(groups.within_group(0), half, fmt::format("pair#{}", local / 2),
                {local / 2 * 2, local / 2 * 2 + 1});
    std::vector<int> same_position;
    for (int q = local % 2; q < n / 2; q += 2) same_position.push_back(q);
    check_group(groups.across_group(1), half, fmt::format("across-rest#0.{}", local % 2), same_position);
  }
  MPI_Comm_free(&half);
}

TEST(ProcessGroups, MovedFromOwnsNothing) {
  Topology topo = Topology({plain_tier("all", 0, 1, 1)}, "flat");
  topo.resolve(world_size());
  ProcessGroups first(topo);
  ProcessGroups second(std::move(first));
  int sum = 0, one = 1;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, second.within(0));
  EXPECT_EQ(sum, world_size());
}

TEST(ProcessGroups, RefusesATopologyForAnotherWorld) {
  Topology topo = Topology({plain_tier("pair", 1, 1, 1), plain_tier("rest", 0, 1, 1)}, "other");
  EXPECT_THROW(ProcessGroups{topo}, Error);
  topo.resolve(world_size() * 2);
  try {
    ProcessGroups groups(topo);
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("resolved for {} ranks but the communicator has {}",
                                                     world_size() * 2, world_size())),
              std::string::npos)
        << e.what();
  }
}

// The host preset, detected under mpirun on this one machine: one node holds every rank.
TEST(HostPreset, DetectsOneNodeWithAllRanks) {
  Topology topo = Topology::load("host");
  EXPECT_EQ(topo.name(), "host");
  const int node = topo.tier_index("node");
  EXPECT_EQ(topo.tier(topo.outermost()).name, "cluster");
  EXPECT_EQ(topo.ranks_per_outer_domain(), world_size());
  topo.resolve(world_size());
  EXPECT_EQ(topo.num_domains(node), 1);
  EXPECT_EQ(topo.tier(topo.outermost()).size, 1);
  EXPECT_NE(topo.tier(node).source.find(fmt::format("{} a node", strata::count_of(world_size(), "rank"))), std::string::npos)
      << topo.tier(node).source;
  ProcessGroups groups(topo);
  std::vector<int> all(world_size());
  std::iota(all.begin(), all.end(), 0);
  check_group(groups.within_group(node), MPI_COMM_WORLD, "node#0", all);
}

}  // namespace
}  // namespace strata::topo
