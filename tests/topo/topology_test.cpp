#include "topo/topology.hpp"

#include <unistd.h>

#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "support.hpp"
#include "topo/host.hpp"
#include "util.hpp"

namespace strata::topo {
namespace {

using test::expect_error;
using test::plain_tier;

// The issue-3 example, kept in the repository as configs/topology/2node-2gpu-2die.toml.
std::filesystem::path example_file() { return test::source_path("configs/topology/2node-2gpu-2die.toml"); }

constexpr const char* kGpu = "[[tiers]]\nname = \"gpu\"\nsize = 2\nbandwidth_GBps = 200\nlatency_us = 2\n";
constexpr const char* kNode = "[[tiers]]\nname = \"node\"\nsize = 2\nbandwidth_GBps = 50\nlatency_us = 3\n";
constexpr const char* kCluster = "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n";

void expect_toml_error(const std::string& text, std::initializer_list<std::string_view> parts) {
  expect_error([&] { Topology::from_toml_string(text, "bad.toml"); }, parts);
}

TEST(Topology, ParsesTheIssueExampleFile) {
  Topology topo = Topology::from_toml_file(example_file());
  EXPECT_EQ(topo.name(), "2node-2gpu-2die");
  ASSERT_EQ(topo.num_tiers(), 3);
  EXPECT_EQ(topo.tier(0).name, "gpu");
  EXPECT_EQ(topo.tier(0).size, 2);
  EXPECT_EQ(topo.tier(0).bandwidth_GBps, 200);
  EXPECT_EQ(topo.tier(0).latency_us, 2);
  EXPECT_EQ(topo.tier(0).efficiency, 1.0);  // the default when a file leaves it out
  EXPECT_EQ(topo.tier(1).name, "node");
  EXPECT_EQ(topo.tier(1).bandwidth_GBps, 50);
  EXPECT_EQ(topo.tier(2).name, "cluster");
  EXPECT_EQ(topo.tier(2).size, 0);
  EXPECT_EQ(topo.tier(2).latency_us, 5);
  EXPECT_FALSE(topo.resolved());
  EXPECT_EQ(topo.ranks_per_outer_domain(), 4);
  EXPECT_EQ(topo.world_size_for_nodes(2), 8);
}

TEST(Topology, OptionalFieldsAndFloats) {
  Topology topo = Topology::from_toml_string(
      "[[tiers]]\nname = \"node\"\nsize = 4\nbandwidth_GBps = 12.5\nlatency_us = 0.5\nefficiency = 0.75\n"
      "source = \"measured\"\n[[tiers]]\nname = \"cluster\"\nsize = 3\nbandwidth_GBps = 10\nlatency_us = 7\n",
      "x.toml");
  EXPECT_EQ(topo.tier(0).bandwidth_GBps, 12.5);
  EXPECT_EQ(topo.tier(0).latency_us, 0.5);
  EXPECT_EQ(topo.tier(0).efficiency, 0.75);
  EXPECT_EQ(topo.tier(0).source, "measured");
  EXPECT_EQ(topo.tier(1).size, 3);
  topo.resolve(12);
  EXPECT_EQ(topo.num_domains(0), 3);
}

// Found by tests/fuzz/fuzz_topology: an integer above 2^53 has no exact double, and the figure
// became whatever an empty std::optional<double> held (4.6e-310 GB/s, accepted as positive).
TEST(Topology, IntegerFiguresBeyondDoublePrecisionAreRounded) {
  Topology topo = Topology::from_toml_string(
      "[[tiers]]\nname = \"node\"\nsize = 2\nbandwidth_GBps = 9007199254740993\nlatency_us = 9007199254740993\n"
      "efficiency = 1\n[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 9223372036854775807\nlatency_us = 0\n",
      "x.toml");
  EXPECT_EQ(topo.tier(0).bandwidth_GBps, 9007199254740992.0);
  EXPECT_EQ(topo.tier(0).latency_us, 9007199254740992.0);
  EXPECT_EQ(topo.tier(0).efficiency, 1.0);
  EXPECT_EQ(topo.tier(1).bandwidth_GBps, 9223372036854775808.0);
}

TEST(Topology, RankArithmeticOfTheExample) {
  Topology topo = Topology::from_toml_file(example_file());
  topo.resolve(8);
  EXPECT_TRUE(topo.resolved());
  EXPECT_EQ(topo.world_size(), 8);
  EXPECT_EQ(topo.tier(2).size, 2);
  EXPECT_EQ(topo.domain_ranks(-1), 1);
  EXPECT_EQ(topo.domain_ranks(0), 2);
  EXPECT_EQ(topo.domain_ranks(1), 4);
  EXPECT_EQ(topo.domain_ranks(2), 8);
  EXPECT_EQ(topo.num_domains(0), 4);
  EXPECT_EQ(topo.num_domains(1), 2);
  EXPECT_EQ(topo.num_domains(2), 1);
  // Contiguous ranks share the innermost domain.
  const int gpu_of[8] = {0, 0, 1, 1, 2, 2, 3, 3};
  const int node_of[8] = {0, 0, 0, 0, 1, 1, 1, 1};
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(topo.domain_of(r, 0), gpu_of[r]) << r;
    EXPECT_EQ(topo.domain_of(r, 1), node_of[r]) << r;
    EXPECT_EQ(topo.domain_of(r, 2), 0) << r;
  }
  EXPECT_EQ(topo.tier_between(4, 5), 0);
  EXPECT_EQ(topo.tier_between(5, 4), 0);
  EXPECT_EQ(topo.tier_between(5, 7), 1);
  EXPECT_EQ(topo.tier_between(0, 3), 1);
  EXPECT_EQ(topo.tier_between(1, 5), 2);
  EXPECT_EQ(topo.tier_between(3, 4), 2);
  EXPECT_EQ(topo.tier_between(6, 6), 0);  // the same rank: its innermost domain holds both
  expect_error([&] { topo.tier_between(0, 8); }, {"rank 8 out of range [0, 8)"});
  expect_error([&] { topo.tier_between(-1, 0); }, {"rank -1"});
}

TEST(Topology, ResolveAgainForAnotherWorld) {
  Topology topo = Topology::from_toml_file(example_file());
  topo.resolve(8);
  topo.resolve(24);
  EXPECT_EQ(topo.tier(2).size, 6);
  EXPECT_EQ(topo.num_domains(1), 6);
  EXPECT_EQ(topo.tier_between(3, 23), 2);
  EXPECT_EQ(topo.tier_between(21, 23), 1);
  topo.resolve(4);
  EXPECT_EQ(topo.tier(2).size, 1);
}

TEST(Topology, TierBetweenInFourTiers) {
  Topology topo(
      {plain_tier("a", 3, 1, 0), plain_tier("b", 2, 1, 0), plain_tier("c", 2, 1, 0), plain_tier("d", 0, 1, 0)},
      "four");
  topo.resolve(36);
  // a-domains of 3 ranks, b-domains of 6, c-domains of 12.
  EXPECT_EQ(topo.tier_between(0, 2), 0);
  EXPECT_EQ(topo.tier_between(2, 3), 1);
  EXPECT_EQ(topo.tier_between(5, 6), 2);
  EXPECT_EQ(topo.tier_between(11, 12), 3);
  EXPECT_EQ(topo.tier_between(12, 17), 1);
  EXPECT_EQ(topo.tier_between(24, 35), 2);
  EXPECT_EQ(topo.domain_of(35, 2), 2);
}

TEST(Topology, WorldSizeTheTiersDoNotDivide) {
  Topology frontier = Topology::preset("frontier");
  expect_error([&] { frontier.resolve(12); },
               {"preset 'frontier'", "world size 12 is not a multiple of 8 ranks per node (gpu 2 x node 4)"});
  EXPECT_FALSE(frontier.resolved());
  Topology dgx = Topology::preset("dgx-a100");
  expect_error([&] { dgx.resolve(4); }, {"world size 4 is not a multiple of 8 ranks per node (node 8)"});
  expect_error([&] { dgx.resolve(0); }, {"world size 0 must be positive"});
}

TEST(Topology, OutermostSizeMustAgreeWithTheWorld) {
  std::string text = std::string(kGpu) + kNode +
                     "[[tiers]]\nname = \"cluster\"\nsize = 3\nbandwidth_GBps = 25\nlatency_us = 5\n";
  Topology topo = Topology::from_toml_string(text, "three.toml");
  topo.resolve(12);
  EXPECT_EQ(topo.world_size(), 12);
  expect_error([&] { topo.resolve(8); },
               {"three.toml", "tier 'cluster' size = 3 needs world size 12 (4 ranks per node x 3), not 8"});
}

TEST(Topology, SingleTier) {
  Topology topo = Topology::from_toml_string(kCluster, "one.toml");
  topo.resolve(5);
  EXPECT_EQ(topo.tier(0).size, 5);
  EXPECT_EQ(topo.tier_between(0, 4), 0);
  EXPECT_EQ(topo.ranks_per_outer_domain(), 1);
  expect_error([&] { topo.world_size_for_nodes(2); }, {"one.toml", "--nodes needs at least two tiers"});
}

TEST(Topology, WorldSizeForNodes) {
  Topology frontier = Topology::preset("frontier");
  EXPECT_EQ(frontier.world_size_for_nodes(1), 8);
  EXPECT_EQ(frontier.world_size_for_nodes(3), 24);
  expect_error([&] { frontier.world_size_for_nodes(0); }, {"--nodes 0 must be positive"});
  EXPECT_EQ(Topology::preset("dgx-h100").world_size_for_nodes(4), 32);
}

TEST(Topology, UnresolvedOutermostIsRefused) {
  Topology topo = Topology::from_toml_file(example_file());
  EXPECT_EQ(topo.domain_ranks(1), 4);
  expect_error([&] { topo.domain_ranks(2); }, {"not known before resolve"});
  expect_error([&] { topo.domain_ranks(3); }, {"tier index 3 out of range"});
  expect_error([&] { topo.tier_between(0, 1); }, {"needs a resolved world size"});
}

// Two ranks a node share one 100 GB/s port: each gets 50 GB/s, under its 80 GB/s pair rate.
TEST(Topology, PortsSharedByTheRanksOfTheInnerDomain) {
  const std::string text =
      "[[tiers]]\nname = \"node\"\nsize = 2\nbandwidth_GBps = 200\nlatency_us = 1\n"
      "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 80\nlatency_us = 5\nports = 1\nport_GBps = 100\n";
  Topology topo = Topology::from_toml_string(text, "ports.toml");
  EXPECT_EQ(topo.tier(1).ports, 1);
  EXPECT_EQ(topo.tier(1).port_GBps, 100);
  EXPECT_EQ(topo.rank_bandwidth_GBps(0), 200);  // no ports described: the pair rate
  EXPECT_EQ(topo.rank_bandwidth_GBps(1), 50);
  topo.apply_override(parse_tier_override("cluster.ports=4"));
  EXPECT_EQ(topo.rank_bandwidth_GBps(1), 80);  // 200 GB/s a rank of ports: the pair rate caps it
  topo.resolve(4);
  EXPECT_EQ(topo.to_json()["tiers"][1]["rank_bandwidth_GBps"], 80);
  EXPECT_EQ(topo.to_json()["tiers"][1]["ports"], 4);
  // Frontier's 4 NICs of 25 GB/s serve 8 GCDs.
  EXPECT_EQ(Topology::preset("frontier").rank_bandwidth_GBps(2), 12.5);
  EXPECT_EQ(Topology::preset("dgx-h100").rank_bandwidth_GBps(1), 50);
}

TEST(TopologyErrors, Ports) {
  expect_toml_error("[[tiers]]\nname = \"c\"\nbandwidth_GBps = 1\nlatency_us = 1\nports = 2\n",
                    {"tiers[0] ('c')", "missing port_GBps"});
  expect_toml_error("[[tiers]]\nname = \"c\"\nbandwidth_GBps = 1\nlatency_us = 1\nports = 0\nport_GBps = 1\n",
                    {"tiers[0] ('c')", "ports = 0 must be positive"});
  expect_toml_error("[[tiers]]\nname = \"c\"\nbandwidth_GBps = 1\nlatency_us = 1\nports = 1.5\nport_GBps = 1\n",
                    {"tiers[0] ('c')", "ports must be an integer"});
  expect_toml_error("[[tiers]]\nname = \"c\"\nbandwidth_GBps = 1\nlatency_us = 1\nports = 2\nport_GBps = 0\n",
                    {"tiers[0] ('c')", "port_GBps = 0 must be positive"});
  expect_toml_error("[[tiers]]\nname = \"c\"\nbandwidth_GBps = 1\nlatency_us = 1\nport_GBps = 3\n",
                    {"tiers[0] ('c')", "port_GBps without ports"});
  Topology topo = Topology::preset("frontier");
  expect_error([&] { topo.apply_override(parse_tier_override("cluster.ports=-1")); },
               {"--tier cluster.ports=-1", "ports must be a whole number"});
  expect_error([&] { topo.apply_override(parse_tier_override("node.ports=2")); },
               {"tiers[1] ('node')", "port_GBps = 0 must be positive"});
}

TEST(TopologyErrors, UnknownTierField) {
  expect_toml_error(std::string(kGpu) + kNode + "bandwith_GBps = 3\n" + kCluster,
                    {"bad.toml", "tiers[1] ('node')", "unknown field 'bandwith_GBps'", "bandwidth_GBps"});
}

TEST(TopologyErrors, MissingBandwidth) {
  expect_toml_error(std::string(kGpu) + "[[tiers]]\nname = \"node\"\nsize = 2\nlatency_us = 3\n" + kCluster,
                    {"bad.toml", "tiers[1] ('node')", "missing bandwidth_GBps"});
}

TEST(TopologyErrors, MissingLatency) {
  expect_toml_error(std::string(kGpu) + "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\n",
                    {"tiers[1] ('cluster')", "missing latency_us"});
}

TEST(TopologyErrors, MissingSizeOnAnInnerTier) {
  expect_toml_error(
      std::string(kGpu) + "[[tiers]]\nname = \"node\"\nbandwidth_GBps = 50\nlatency_us = 3\n" + kCluster,
      {"bad.toml", "tiers[1] ('node')", "missing size"});
}

TEST(TopologyErrors, ZeroAndNegativeSize) {
  expect_toml_error(
      "[[tiers]]\nname = \"gpu\"\nsize = 0\nbandwidth_GBps = 1\nlatency_us = 1\n" + std::string(kCluster),
      {"tiers[0] ('gpu')", "size = 0 must be positive"});
  expect_toml_error(
      std::string(kGpu) + "[[tiers]]\nname = \"cluster\"\nsize = -2\nbandwidth_GBps = 1\nlatency_us = 1\n",
      {"tiers[1] ('cluster')", "size = -2 must be positive"});
  expect_toml_error(
      "[[tiers]]\nname = \"gpu\"\nsize = 2.5\nbandwidth_GBps = 1\nlatency_us = 1\n" + std::string(kCluster),
      {"tiers[0] ('gpu')", "size must be an integer"});
}

TEST(TopologyErrors, BadFigures) {
  expect_toml_error("[[tiers]]\nname = \"c\"\nbandwidth_GBps = 0\nlatency_us = 1\n",
                    {"tiers[0] ('c')", "bandwidth_GBps = 0 must be positive"});
  expect_toml_error("[[tiers]]\nname = \"c\"\nbandwidth_GBps = \"fast\"\nlatency_us = 1\n",
                    {"tiers[0] ('c')", "bandwidth_GBps must be a number"});
  expect_toml_error("[[tiers]]\nname = \"c\"\nbandwidth_GBps = 1\nlatency_us = -1\n",
                    {"tiers[0] ('c')", "latency_us = -1 must be zero or positive"});
  expect_toml_error("[[tiers]]\nname = \"c\"\nbandwidth_GBps = 1\nlatency_us = 1\nefficiency = 1.5\n",
                    {"tiers[0] ('c')", "efficiency = 1.5 must be in (0, 1]"});
  expect_toml_error("[[tiers]]\nname = \"c\"\nbandwidth_GBps = 1\nlatency_us = 1\nsource = 3\n",
                    {"tiers[0] ('c')", "source must be a string"});
}

TEST(TopologyErrors, Names) {
  expect_toml_error(std::string(kGpu) + kGpu + kCluster, {"tiers[1] ('gpu')", "duplicate tier name"});
  expect_toml_error("[[tiers]]\nsize = 2\nbandwidth_GBps = 1\nlatency_us = 1\n" + std::string(kCluster),
                    {"tiers[0]", "missing name"});
  expect_toml_error(
      "[[tiers]]\nname = \"none\"\nsize = 2\nbandwidth_GBps = 1\nlatency_us = 1\n" + std::string(kCluster),
      {"tiers[0]", "name 'none'", "replicated"});
  expect_toml_error("[[tiers]]\nname = \"a.b\"\nbandwidth_GBps = 1\nlatency_us = 1\n",
                    {"tiers[0]", "name 'a.b'"});
}

TEST(TopologyErrors, DocumentShape) {
  expect_toml_error("", {"bad.toml", "no tiers"});
  expect_toml_error("nodes = 2\n" + std::string(kCluster), {"bad.toml", "unknown top-level key 'nodes'"});
  expect_toml_error("tiers = 3\n", {"bad.toml", "no tiers"});
  expect_toml_error("[[tiers]]\nname = \"gpu\"\nsize = = 2\n",
                    {"bad.toml:3:"});  // TOML syntax, with its line
}

TEST(TopologyErrors, ConstructorValidates) {
  expect_error(
      [] {
        Topology({plain_tier("node", 0, 1, 1), plain_tier("cluster", 0, 1, 1)}, "mine");
      },
      {"topology 'mine'", "tiers[0] ('node')", "size = 0 must be positive"});
  expect_error([] { Topology({}, "empty"); }, {"topology 'empty'", "no tiers"});
}

TEST(TopologyFile, ErrorsNameTheFile) {
  auto path =
      std::filesystem::temp_directory_path() / ("strata-topo-test-" + std::to_string(::getpid()) + ".toml");
  {
    std::ofstream out(path);
    out << kGpu << "[[tiers]]\nname = \"node\"\nsize = 0\nbandwidth_GBps = 1\nlatency_us = 1\n" << kCluster;
  }
  expect_error([&] { Topology::load(path.string()); }, {path.string(), "tiers[1] ('node')", "size = 0"});
  std::filesystem::remove(path);
  expect_error([&] { Topology::load(path.string()); }, {path.string(), "neither a preset", "frontier"});
}

TEST(TopologyOverride, ParseSpec) {
  TierOverride o = parse_tier_override("node.bandwidth_GBps=100");
  EXPECT_EQ(o.tier, "node");
  EXPECT_EQ(o.field, "bandwidth_GBps");
  EXPECT_EQ(o.value, "100");
  EXPECT_EQ(parse_tier_override("cluster.source=my lab.x=y").value, "my lab.x=y");
  for (const char* bad : {"node", "node.size", "nodesize=2", ".size=2", "node.=2"})
    expect_error([&] { parse_tier_override(bad); }, {bad, "expected NAME.FIELD=VALUE"});
}

TEST(TopologyOverride, ChangesFields) {
  Topology topo = Topology::load(example_file().string());
  topo.apply_override({"node", "bandwidth_GBps", "100"});
  topo.apply_override({"node", "latency_us", "1.5"});
  topo.apply_override({"gpu", "efficiency", "0.9"});
  topo.apply_override({"cluster", "source", "our lab"});
  EXPECT_EQ(topo.tier(1).bandwidth_GBps, 100);
  EXPECT_EQ(topo.tier(1).latency_us, 1.5);
  EXPECT_EQ(topo.tier(0).efficiency, 0.9);
  EXPECT_EQ(topo.tier(2).source, "our lab");
}

TEST(TopologyOverride, SizeChangesTheArithmetic) {
  Topology topo = Topology::load(example_file().string());
  topo.resolve(8);
  topo.apply_override({"node", "size", "4"});
  EXPECT_FALSE(topo.resolved());
  expect_error([&] { topo.resolve(12); },
               {"world size 12 is not a multiple of 8 ranks per node (gpu 2 x node 4)"});
  topo.resolve(16);
  EXPECT_EQ(topo.tier(2).size, 2);
  topo.apply_override({"cluster", "size", "3"});
  expect_error([&] { topo.resolve(16); }, {"tier 'cluster' size = 3 needs world size 24"});
  topo.resolve(24);
  EXPECT_EQ(topo.num_domains(1), 3);
}

TEST(TopologyOverride, Errors) {
  Topology topo = Topology::load(example_file().string());
  expect_error(
      [&] {
        topo.apply_override({"nod", "size", "2"});
      },
      {"--tier nod.size=2", "unknown tier 'nod'", "gpu, node, cluster"});
  expect_error(
      [&] {
        topo.apply_override({"node", "speed", "2"});
      },
      {"--tier node.speed=2", "unknown field 'speed'"});
  expect_error(
      [&] {
        topo.apply_override({"node", "size", "0"});
      },
      {"node.size=0", "size must be a positive integer"});
  expect_error(
      [&] {
        topo.apply_override({"node", "size", "2x"});
      },
      {"size must be a positive integer, not '2x'"});
  expect_error([&] { topo.apply_override({"node", "latency_us", "fast"}); }, {"latency_us must be a number"});
  expect_error(
      [&] {
        topo.apply_override({"node", "bandwidth_GBps", "0"});
      },
      {"--tier node.bandwidth_GBps=0", "tiers[1] ('node')", "bandwidth_GBps = 0 must be positive"});
  expect_error(
      [&] {
        topo.apply_override({"gpu", "efficiency", "0"});
      },
      {"efficiency = 0 must be in (0, 1]"});
  // Found by tests/fuzz/fuzz_topology: bytes that are not UTF-8 made to_json().dump() throw
  // nlohmann's type_error, and `strata topo --json` abort.
  expect_error([&] { topo.apply_override(parse_tier_override("gpu.source=lab \x8f")); },
               {"--tier gpu.source: not UTF-8 text"});
  // A refused override leaves the topology as it was.
  EXPECT_EQ(topo.tier(1).size, 2);
  EXPECT_EQ(topo.tier(1).bandwidth_GBps, 50);
  EXPECT_EQ(topo.tier(0).efficiency, 1.0);
  EXPECT_EQ(topo.tier(0).source, "");
}

TEST(TopologyPresets, FiguresAndSources) {
  struct Expect {
    const char* name;
    std::vector<std::string> tiers;
    std::vector<int> sizes;
    std::vector<double> bandwidth;
  };
  const Expect expected[] = {
      {"frontier", {"gpu", "node", "cluster"}, {2, 4, 0}, {200, 50, 25}},
      {"dgx-a100", {"node", "cluster"}, {8, 0}, {300, 25}},
      {"dgx-h100", {"node", "cluster"}, {8, 0}, {450, 50}},
  };
  for (const auto& e : expected) {
    Topology topo = Topology::load(e.name);
    EXPECT_EQ(topo.name(), e.name);
    ASSERT_EQ(topo.num_tiers(), static_cast<int>(e.tiers.size())) << e.name;
    for (int t = 0; t < topo.num_tiers(); ++t) {
      const Tier& tier = topo.tier(t);
      EXPECT_EQ(tier.name, e.tiers[t]) << e.name;
      EXPECT_EQ(tier.size, e.sizes[t]) << e.name << " " << tier.name;
      EXPECT_EQ(tier.bandwidth_GBps, e.bandwidth[t]) << e.name << " " << tier.name;
      EXPECT_GT(tier.latency_us, 0) << e.name << " " << tier.name;
      EXPECT_GT(tier.efficiency, 0.5) << e.name << " " << tier.name;
      EXPECT_LE(tier.efficiency, 1.0) << e.name << " " << tier.name;
      // Each figure cites where it comes from.
      const bool cited = tier.source.find("datasheet") != std::string::npos ||
                         tier.source.find("User Guide") != std::string::npos;
      EXPECT_TRUE(cited) << e.name << " " << tier.name << ": " << tier.source;
      EXPECT_NE(tier.source.find(fmt::format("~{} GB/s", tier.bandwidth_GBps)), std::string::npos)
          << tier.source;
      EXPECT_NE(tier.source.find("latency"), std::string::npos) << e.name << " " << tier.name;
    }
    EXPECT_EQ(topo.tier(topo.outermost()).name, "cluster");
    EXPECT_EQ(topo.ranks_per_outer_domain(), 8) << e.name;
  }
  EXPECT_NE(Topology::preset("frontier").tier(2).source.find("Slingshot"), std::string::npos);
  EXPECT_NE(Topology::preset("dgx-h100").tier(1).source.find("NDR"), std::string::npos);
  expect_error([] { Topology::preset("summit"); },
               {"unknown preset 'summit'", "frontier, dgx-a100, dgx-h100, host"});
}

TEST(TopologyJson, ResolvedAndNot) {
  Topology topo = Topology::load(example_file().string());
  nlohmann::json j = topo.to_json();
  EXPECT_EQ(j["name"], "2node-2gpu-2die");
  EXPECT_TRUE(j["world_size"].is_null());
  EXPECT_TRUE(j["tiers"][2]["size"].is_null());
  EXPECT_EQ(j["tiers"][1]["domain_ranks"], 4);
  topo.resolve(16);
  j = topo.to_json();
  EXPECT_EQ(j["world_size"], 16);
  ASSERT_EQ(j["tiers"].size(), 3u);
  EXPECT_EQ(j["tiers"][0]["name"], "gpu");
  EXPECT_EQ(j["tiers"][0]["bandwidth_GBps"], 200.0);
  EXPECT_EQ(j["tiers"][0]["efficiency"], 1.0);
  EXPECT_EQ(j["tiers"][2]["size"], 4);
  EXPECT_EQ(j["tiers"][2]["domain_ranks"], 16);
  EXPECT_EQ(j["tiers"][0]["num_domains"], 8);
  EXPECT_EQ(j["tiers"][1]["latency_us"], 3.0);
}

// The host preset's decision, fed with facts (detection itself runs in the MPI test).
TEST(HostTiers, OnePackage) {
  HostFacts f{"box", 4, 1, 8, {0, 0, 0, 0}};
  auto tiers = host_tiers(f);
  ASSERT_EQ(tiers.size(), 2u);
  EXPECT_EQ(tiers[0].name, "node");
  EXPECT_EQ(tiers[0].size, 4);
  EXPECT_EQ(tiers[1].name, "cluster");
  EXPECT_EQ(tiers[1].size, 0);
  EXPECT_NE(tiers[0].source.find("estimate"), std::string::npos);
  EXPECT_NE(tiers[0].source.find("box: 1 package, 8 cores, 4 ranks"), std::string::npos);
  EXPECT_NE(tiers[1].source.find("estimate"), std::string::npos);
  Topology topo(tiers, "host");
  topo.resolve(8);
  EXPECT_EQ(topo.num_domains(0), 2);
}

TEST(HostTiers, SocketTierWhenPackagesHoldContiguousBlocks) {
  auto tiers = host_tiers({"box", 6, 2, 32, {1, 1, 1, 0, 0, 0}});
  ASSERT_EQ(tiers.size(), 3u);
  EXPECT_EQ(tiers[0].name, "socket");
  EXPECT_EQ(tiers[0].size, 3);
  EXPECT_EQ(tiers[1].name, "node");
  EXPECT_EQ(tiers[1].size, 2);
  EXPECT_GT(tiers[0].bandwidth_GBps, tiers[1].bandwidth_GBps);
  auto four = host_tiers({"box", 8, 4, 64, {0, 0, 1, 1, 2, 2, 3, 3}});
  ASSERT_EQ(four.size(), 3u);
  EXPECT_EQ(four[0].size, 2);
  EXPECT_EQ(four[1].size, 4);
}

TEST(HostTiers, NoSocketTierOtherwise) {
  const HostFacts cases[] = {
      {"box", 4, 2, 32, {0, 1, 0, 1}},        // round-robin placement
      {"box", 4, 2, 32, {0, 0, 0, 0}},        // all ranks on one package
      {"box", 4, 2, 32, {0, 0, -1, 1}},       // one rank unbound
      {"box", 6, 2, 32, {0, 0, 1, 1, 1, 1}},  // unequal blocks
      {"box", 6, 2, 32, {0, 0, 1, 1, 0, 0}},  // a package appears twice
      {"box", 1, 2, 32, {0}},
  };
  for (const auto& f : cases) {
    auto tiers = host_tiers(f);
    ASSERT_EQ(tiers.size(), 2u) << ::testing::PrintToString(f.rank_package);
    EXPECT_EQ(tiers[0].name, "node");
    EXPECT_EQ(tiers[0].size, f.ranks_per_node);
  }
}

}  // namespace
}  // namespace strata::topo
