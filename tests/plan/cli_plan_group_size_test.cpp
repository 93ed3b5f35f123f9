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
