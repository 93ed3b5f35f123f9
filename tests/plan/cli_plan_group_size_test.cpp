// `strata plan --calibration` with a tier's bus bandwidth by group size (issue 40 item 4): one
// flat NCCL ring over 8 DGX H100 nodes priced on the hand-written curve at its own size, and
// what the plan says of a machine without such a curve.
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support.hpp"

namespace {

using namespace strata::test;

const std::string kPlan =
    "plan --model llama2-7b --topology dgx-h100 --nodes 8 --strategy zero3 --micro-batch 1 --flash-attention "
    "--collectives nccl --peer fsdp1";

nlohmann::json plan(const std::string& extra) {
  return parse_json_output(run_command(std::string(STRATA_EXE) + " " + kPlan + " --json " + extra, Stderr::Capture));
}

}  // namespace

// The curve gives 40 GB/s a rank at 4 nodes and 10 at 16; a ring over 8 nodes is half-way in
// log size: 25 GB/s, the preset's 50 GB/s a rank at efficiency 0.5. Every figure of the plan
// equals that uncalibrated plan's, and the plan names the curve; without one it says so.
TEST(PlanGroupSize, AFlatRingRunsAtTheCurvesRateForItsNodeCount) {
  const nlohmann::json curve = plan("--calibration " + strata::test::source_path("tests/plan/group_size_curve.toml").string());
  const nlohmann::json same = plan("--tier cluster.efficiency=0.5");
  const nlohmann::json preset = plan("");
  const auto step = [](const nlohmann::json& doc) { return doc["strategies"]["zero3"]["step_time_s"].get<double>(); };
  EXPECT_NEAR(step(curve), step(same), 1e-12 * step(same));
  EXPECT_GT(step(curve), step(preset));  // 25 GB/s against 40
  EXPECT_EQ(curve["strategies"]["zero3"]["nccl_calls"], same["strategies"]["zero3"]["nccl_calls"]);
  EXPECT_NE(curve["assumptions"]["network_by_group_size"][0].get<std::string>().find(
                "tier cluster: bus bandwidth a rank by nodes in the ring, 4 40 GB/s, 16 10 GB/s"),
            std::string::npos);
  EXPECT_NE(preset["assumptions"]["network_by_group_size"][0].get<std::string>().find(
                "tier cluster: no curve of achieved bandwidth by group size (no --calibration)"),
            std::string::npos);
  const auto text = run_command(std::string(STRATA_EXE) + " " + kPlan, Stderr::Capture);
  EXPECT_NE(text.output.find("  tier cluster: no curve of achieved bandwidth by group size"), std::string::npos)
      << text.output;
}

// The shipped Alps curve (configs/calibration/alps-gh200.toml, De Sensi et al.'s measurements):
// it loads with its topology, moves no byte, and prices each flat ring at its own node count:
// faster than the topology's 25 x 0.8 GB/s a rank up to 64 nodes, where the measured rate is
// above it, slower from 128, where it fell; past 512 nodes the plan warns it is outside the curve.
TEST(PlanGroupSize, TheShippedAlpsCurvePricesEachRingAtItsOwnNodeCount) {
  const std::string base = std::string(STRATA_EXE) + " plan --model llama2-7b --topology " +
                           source_path("configs/topology/alps-gh200.toml").string() +
                           " --peak-tflops 989 --hbm-gbps 4000 --device-memory-gb 96 --strategy zero3 "
                           "--micro-batch 2 --flash-attention --collectives nccl --json";
  const std::string curve = " --calibration " + source_path("configs/calibration/alps-gh200.toml").string();
  const auto cluster_seconds = [](const nlohmann::json& doc) {
    return doc["strategies"]["zero3"]["comm_time_per_step"]["cluster"]["bandwidth_s"].get<double>();
  };
  for (int nodes : {16, 64, 128, 512, 1024}) {
    const std::string args = base + " --nodes " + std::to_string(nodes);
    const nlohmann::json plain = parse_json_output(run_command(args, Stderr::Capture));
    const nlohmann::json measured = parse_json_output(run_command(args + curve, Stderr::Capture));
    EXPECT_EQ(measured["strategies"]["zero3"]["bytes_per_step"], plain["strategies"]["zero3"]["bytes_per_step"]);
    EXPECT_EQ(measured["strategies"]["zero3"]["compute_s"], plain["strategies"]["zero3"]["compute_s"]);
    if (nodes <= 64)
      EXPECT_LT(cluster_seconds(measured), cluster_seconds(plain)) << nodes << " nodes";
    else
      EXPECT_GT(cluster_seconds(measured), 1.3 * cluster_seconds(plain)) << nodes << " nodes";
    const std::string note = measured["assumptions"]["network_by_group_size"][0].get<std::string>();
    EXPECT_NE(note.find("tier cluster: bus bandwidth a rank by nodes in the ring, 4 22.68 GB/s"), std::string::npos)
        << note;
    EXPECT_EQ(note.find("outside the measured sizes") != std::string::npos, nodes > 512) << note;
  }
}
