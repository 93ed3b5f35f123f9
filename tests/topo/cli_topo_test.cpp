// Drives the strata executable: `strata topo` alone and under mpirun, checking its JSON.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support.hpp"

namespace {

using strata::test::CommandResult;
using strata::test::parse_json_output;
using strata::test::run_command;
using strata::test::Stderr;

std::string example_file() {
  return strata::test::source_path("configs/topology/2node-2gpu-2die.toml").string();
}

std::string strata() { return STRATA_EXE; }
std::string mpirun(int np) {
  return std::string(STRATA_MPIEXEC_LINE) + " -np " + std::to_string(np) + " " + strata();
}

TEST(TopoCli, EightRanksPrintTheirGroups) {
  nlohmann::json doc = parse_json_output(
      run_command(mpirun(8) + " topo --topology " + example_file() + " --json", Stderr::Discard));
  EXPECT_EQ(doc["processes"], 8);
  EXPECT_EQ(doc["topology"]["name"], "2node-2gpu-2die");
  EXPECT_EQ(doc["topology"]["world_size"], 8);
  ASSERT_EQ(doc["topology"]["tiers"].size(), 3u);
  EXPECT_EQ(doc["topology"]["tiers"][2]["name"], "cluster");
  EXPECT_EQ(doc["topology"]["tiers"][2]["size"], 2);
  // Written out by hand: per rank, the gpu, node, across-node and across-cluster members.
  const std::vector<std::vector<std::vector<int>>> expected = {
      {{0, 1}, {0, 1, 2, 3}, {0, 2}, {0, 4}}, {{0, 1}, {0, 1, 2, 3}, {1, 3}, {1, 5}},
      {{2, 3}, {0, 1, 2, 3}, {0, 2}, {2, 6}}, {{2, 3}, {0, 1, 2, 3}, {1, 3}, {3, 7}},
      {{4, 5}, {4, 5, 6, 7}, {4, 6}, {0, 4}}, {{4, 5}, {4, 5, 6, 7}, {5, 7}, {1, 5}},
      {{6, 7}, {4, 5, 6, 7}, {4, 6}, {2, 6}}, {{6, 7}, {4, 5, 6, 7}, {5, 7}, {3, 7}},
  };
  const std::vector<int> everyone = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_EQ(doc["ranks"].size(), 8u);
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const nlohmann::json& rank = doc["ranks"][r];
    EXPECT_EQ(rank["rank"], r);
    EXPECT_TRUE(rank["host"].is_string());
    const nlohmann::json& tiers = rank["tiers"];
    ASSERT_EQ(tiers.size(), 3u);
    EXPECT_EQ(tiers[0]["tier"], "gpu");
    EXPECT_EQ(tiers[0]["within"]["name"], "gpu#" + std::to_string(r / 2));
    EXPECT_EQ(tiers[0]["within"]["members"], expected[r][0]);
    EXPECT_EQ(tiers[0]["within"]["index"], r % 2);
    EXPECT_EQ(tiers[1]["within"]["name"], "node#" + std::to_string(r / 4));
    EXPECT_EQ(tiers[1]["within"]["members"], expected[r][1]);
    EXPECT_EQ(tiers[1]["across"]["name"],
              "across-node#" + std::to_string(r / 4) + "." + std::to_string(r % 2));
    EXPECT_EQ(tiers[1]["across"]["members"], expected[r][2]);
    EXPECT_EQ(tiers[2]["within"]["name"], "cluster#0");
    EXPECT_EQ(tiers[2]["within"]["members"], everyone);
    EXPECT_EQ(tiers[2]["within"]["index"], r);
    EXPECT_EQ(tiers[2]["across"]["name"], "across-cluster#0." + std::to_string(r % 4));
    EXPECT_EQ(tiers[2]["across"]["members"], expected[r][3]);
    EXPECT_EQ(tiers[2]["across"]["index"], r / 4);
  }
}

TEST(TopoCli, TextUnderMpirun) {
  CommandResult r = run_command(mpirun(8) + " topo --topology frontier", Stderr::Discard);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("topology 'frontier': 8 ranks = gpu 2 x node 4 x cluster 1"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("gpu#2 {4,5} across-gpu#2.0 {4,5} | node#0 {0-7} across-node#0.1 {1,3,5,7}"),
            std::string::npos)
      << r.output;
  // Rank 0 prints once for everyone.
  EXPECT_EQ(r.output.find("topology 'frontier'", r.output.find("topology 'frontier'") + 1), std::string::npos)
      << r.output;
}

TEST(TopoCli, OneProcessWithNodes) {
  nlohmann::json doc = parse_json_output(
      run_command(strata() + " topo --topology frontier --nodes 2 --json", Stderr::Discard));
  EXPECT_EQ(doc["processes"], 1);
  EXPECT_EQ(doc["topology"]["world_size"], 16);
  EXPECT_EQ(doc["topology"]["tiers"][0]["size"], 2);
  EXPECT_EQ(doc["topology"]["tiers"][1]["size"], 4);
  EXPECT_EQ(doc["topology"]["tiers"][2]["size"], 2);
  EXPECT_FALSE(doc.contains("ranks"));
  EXPECT_NE(doc["note"].get<std::string>().find("mpirun -np 16"), std::string::npos);
}

TEST(TopoCli, OneProcessThatDoesNotFitSaysWhatItNeeds) {
  nlohmann::json doc = parse_json_output(
      run_command(strata() + " topo --topology " + example_file() + " --json", Stderr::Discard));
  EXPECT_TRUE(doc["topology"]["world_size"].is_null());
  EXPECT_NE(doc["note"].get<std::string>().find(
                "world size 1 is not a multiple of 4 ranks per node (gpu 2 x node 2)"),
            std::string::npos)
      << doc["note"];
}

TEST(TopoCli, OverridesApply) {
  nlohmann::json doc = parse_json_output(
      run_command(strata() + " topo --topology " + example_file() +
                      " --nodes 3 --tier node.bandwidth_GBps=100 --tier cluster.efficiency=0.5 --json",
                  Stderr::Discard));
  EXPECT_EQ(doc["topology"]["world_size"], 12);
  EXPECT_EQ(doc["topology"]["tiers"][1]["bandwidth_GBps"], 100.0);
  EXPECT_EQ(doc["topology"]["tiers"][2]["efficiency"], 0.5);
}

TEST(TopoCli, BadInputIsRefusedWithTheFieldNamed) {
  auto path =
      std::filesystem::temp_directory_path() / ("strata-cli-topo-" + std::to_string(::getpid()) + ".toml");
  {
    std::ofstream out(path);
    out << "[[tiers]]\nname = \"node\"\nsize = 2\nlatency_us = 1\n[[tiers]]\nname = \"cluster\"\n"
           "bandwidth_GBps = 1\nlatency_us = 1\n";
  }
  CommandResult r = run_command(strata() + " topo --topology " + path.string(), Stderr::Capture);
  std::filesystem::remove(path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(path.string() + ": tiers[0] ('node'): missing bandwidth_GBps"), std::string::npos)
      << r.output;

  r = run_command(strata() + " topo --topology frontier --tier nod.size=2", Stderr::Capture);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown tier 'nod' (tiers: gpu, node, cluster)"), std::string::npos) << r.output;

  r = run_command(mpirun(2) + " topo --topology " + example_file() + " --nodes 1", Stderr::Capture);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(
      r.output.find("--nodes 1 of topology '2node-2gpu-2die' makes 4 ranks, but 2 processes were started"),
      std::string::npos)
      << r.output;

  r = run_command(mpirun(2) + " topo --topology frontier", Stderr::Capture);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("world size 2 is not a multiple of 8 ranks per node (gpu 2 x node 4)"),
            std::string::npos)
      << r.output;
}

}  // namespace
