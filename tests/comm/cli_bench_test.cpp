// Drives `strata bench collectives` under mpirun -np 8 as a user would and checks its JSON:
// every collective timed three ways, the per-tier traffic of one call against the ring and
// hierarchical closed forms, and emulated times never below the alpha-beta prediction.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support.hpp"

namespace {

using strata::test::CommandResult;
using strata::test::parse_json_output;

// The bench's messages go into the output: the refusals below are checked there.
CommandResult bench(const std::string& args, const std::string& mpirun_args = "") {
  const std::string topology = strata::test::source_path("configs/topology/2node-2gpu-2die.toml").string();
  const std::string command = std::string(STRATA_MPIEXEC_LINE) + " " + mpirun_args + " -np 8 " + STRATA_EXE +
                              " bench collectives --topology " + topology + " --iterations 1 --warmup 0 " + args;
  return strata::test::run_command(command, strata::test::Stderr::Capture);
}

const nlohmann::json& result(const nlohmann::json& doc, const std::string& kind) {
  for (const auto& r : doc["results"])
    if (r["collective"] == kind) return r;
  static const nlohmann::json none;
  ADD_FAILURE() << "no result for " << kind;
  return none;
}

TEST(BenchCollectivesCli, TimesEveryCollectiveAndCountsTrafficPerTier) {
  nlohmann::json doc = parse_json_output(bench("--sizes-mib 0.25 --json"));
  ASSERT_EQ(doc["world_size"], 8);
  EXPECT_EQ(doc["emulated"], false);
  ASSERT_EQ(doc["results"].size(), 4u);
  for (const auto& r : doc["results"]) {
    EXPECT_EQ(r["bytes"], 262144);
    for (const char* impl : {"ring", "hier", "mpi"}) {
      EXPECT_GT(r[impl]["seconds"].get<double>(), 0) << r["collective"] << " " << impl;
      EXPECT_GT(r[impl]["algbw_GBps"].get<double>(), 0);
    }
    EXPECT_FALSE(r["mpi"].contains("per_rank_traffic"));  // Open MPI's messages are not strata's
  }
  // One all-gather of S = 256 KiB, bytes sent per rank averaged over the 8 ranks.
  // Ring 0..7: each rank sends 7 chunks of S/8 to its right neighbour; 4 of those hops stay
  // on a GPU (0-1, 2-3, 4-5, 6-7), 2 cross GPUs of a node (1-2, 5-6), 2 cross nodes (3-4, 7-0).
  const std::uint64_t S = 262144, chunk = S / 8;
  const auto& ag = result(doc, "all_gather");
  EXPECT_EQ(ag["ring"]["per_rank_traffic"]["gpu"]["bytes_sent"], 4 * 7 * chunk / 8);
  EXPECT_EQ(ag["ring"]["per_rank_traffic"]["node"]["bytes_sent"], 2 * 7 * chunk / 8);
  EXPECT_EQ(ag["ring"]["per_rank_traffic"]["cluster"]["bytes_sent"], 2 * 7 * chunk / 8);
  // Hierarchical: every rank sends S/2 inside its GPU, S/4 across GPUs, S/8 across nodes.
  EXPECT_EQ(ag["hier"]["per_rank_traffic"]["gpu"]["bytes_sent"], S / 2);
  EXPECT_EQ(ag["hier"]["per_rank_traffic"]["node"]["bytes_sent"], S / 4);
  EXPECT_EQ(ag["hier"]["per_rank_traffic"]["cluster"]["bytes_sent"], S / 8);
  const auto& ar = result(doc, "all_reduce");
  EXPECT_EQ(ar["hier"]["per_rank_traffic"]["cluster"]["bytes_sent"], 2 * S / 8);
  EXPECT_EQ(ar["hier"]["per_rank_traffic"]["cluster"]["messages"], 2);
  // Two TCP connections a peer unless the user says otherwise (docs/cluster.md, "Transport").
  EXPECT_EQ(doc["transport"]["btl_tcp_links"]["value"], "2");
  EXPECT_EQ(doc["transport"]["btl_tcp_links"]["given"], false);
  EXPECT_EQ(doc["piece_bytes"], 1048576);  // comm.piece_kib's default
}

TEST(BenchCollectivesCli, TheUsersTransportSettingWinsOverStratasDefault) {
  nlohmann::json doc = parse_json_output(bench("--sizes-mib 0.0625 --json", "--mca btl_tcp_links 3"));
  EXPECT_EQ(doc["transport"]["btl_tcp_links"]["value"], "3");
  EXPECT_EQ(doc["transport"]["btl_tcp_links"]["given"], true);
}

TEST(BenchCollectivesCli, PiecesOnTheWireAreTheSettingsTablesAndMoveTheSameBytes) {
  // 256 KiB in 1 KiB pieces: every message of 4-32 KiB cut, the traffic that of whole ones.
  nlohmann::json doc = parse_json_output(bench("--sizes-mib 0.25 --piece-kib 1 --json"));
  EXPECT_EQ(doc["piece_bytes"], 1024);
  const std::uint64_t S = 262144, chunk = S / 8;
  const auto& ag = result(doc, "all_gather");
  EXPECT_EQ(ag["ring"]["per_rank_traffic"]["cluster"]["bytes_sent"], 2 * 7 * chunk / 8);
  EXPECT_EQ(ag["hier"]["per_rank_traffic"]["cluster"]["bytes_sent"], S / 8);
  EXPECT_EQ(ag["hier"]["per_rank_traffic"]["cluster"]["messages"], 1);  // 32 pieces, one message
  const auto& ar = result(doc, "all_reduce");
  EXPECT_EQ(ar["hier"]["per_rank_traffic"]["cluster"]["bytes_sent"], 2 * S / 8);
  EXPECT_EQ(ar["hier"]["per_rank_traffic"]["cluster"]["messages"], 2);

  CommandResult negative = bench("--sizes-mib 1 --piece-kib -1");
  EXPECT_NE(negative.exit_code, 0);
  EXPECT_NE(negative.output.find("--piece-kib = -1: must lie in [0, 1048576]"), std::string::npos) << negative.output;
}

TEST(BenchCollectivesCli, EmulatedTimesAreNeverBelowTheAlphaBetaPrediction) {
  // Scale 200: the cluster tier runs at 125 MB/s, so emulated link time dominates.
  nlohmann::json doc = parse_json_output(bench("--sizes-mib 0.5 --emulate-links --emulate-scale 200 --json"));
  EXPECT_EQ(doc["emulated"], true);
  EXPECT_EQ(doc["emulate_scale"], 200.0);
  for (const char* kind : {"all_gather", "reduce_scatter", "all_reduce"})
    for (const char* impl : {"ring", "hier"}) {
      const auto& r = result(doc, kind)[impl];
      EXPECT_GT(r["predicted_seconds"].get<double>(), 0) << kind << " " << impl;
      EXPECT_GE(r["seconds"].get<double>(), r["predicted_seconds"].get<double>()) << kind << " " << impl;
    }
  // The hierarchy sends 1/8 of the buffer over the slow cluster tier, the flat ring 7/8.
  const auto& ag = result(doc, "all_gather");
  EXPECT_LT(ag["hier"]["predicted_seconds"].get<double>(), ag["ring"]["predicted_seconds"].get<double>());
}

TEST(BenchCollectivesCli, TextSaysWhetherLinksAreEmulatedAndBadOptionsAreRefused) {
  CommandResult text = bench("--sizes-mib 0.0625 --emulate-links --emulate-scale 2");
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("link emulation ON (scale 2)"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("all_to_all"), std::string::npos) << text.output;

  CommandResult int8 = bench("--sizes-mib 1 --dtype int8");
  EXPECT_NE(int8.exit_code, 0);
  EXPECT_NE(int8.output.find("--dtype int8"), std::string::npos) << int8.output;
  CommandResult scale_alone = bench("--sizes-mib 1 --emulate-scale 2");
  EXPECT_NE(scale_alone.exit_code, 0);
  EXPECT_NE(scale_alone.output.find("--emulate-links"), std::string::npos) << scale_alone.output;
}

}  // namespace
