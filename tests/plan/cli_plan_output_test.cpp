// What `strata plan` shows a user: the non-fit mark of the single-plan table, NCCL's calls, and a sweep SVG
// whose text fits the picture, whose coinciding lines are noted, whose colours read on white.
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/fileio.hpp"
#include "plan/svg.hpp"
#include "support.hpp"

namespace {

strata::test::CommandResult run_strata(const std::string& args) {
  return strata::test::run_command(std::string(STRATA_EXE) + " " + args, strata::test::Stderr::Capture);
}

// Every left-anchored <text> (titles, legend, caption) ends inside the viewBox's width, by the
// layout's own width estimate; every line's colour has 3:1 contrast on white.
void expect_readable(const std::string& svg) {
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex(R"re(viewBox="0 0 (\d+) (\d+)")re"))) << svg.substr(0, 300);
  const double width = std::stod(m[1]), height = std::stod(m[2]);
  const std::regex text(R"re(<text x="([0-9.]+)" y="([0-9.]+)"( font-size="([0-9.]+)")?[^>]*>([^<]*)</text>)re");
  int checked = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), text); it != std::sregex_iterator(); ++it) {
    const std::smatch& t = *it;
    if (t.str(0).find("text-anchor") != std::string::npos) continue;  // centred or right-aligned ticks
    const double size = t[4].matched ? std::stod(t[4]) : 13;
    EXPECT_LE(std::stod(t[1]) + strata::plan::estimated_text_width(t.str(5), size), width) << t.str(0);
    EXPECT_LE(std::stod(t[2]), height) << t.str(0);
    ++checked;
  }
  EXPECT_GT(checked, 5);
  const std::regex stroke(R"re(<polyline fill="none" stroke="(#[0-9A-Fa-f]{6})")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), stroke); it != std::sregex_iterator(); ++it)
    EXPECT_GE(strata::plan::contrast_on_white((*it)[1]), 3.0) << (*it)[1];
}

}  // namespace

TEST(PlanOutput, TheSinglePlanTableMarksStrategiesThatDoNotFitAndByHowMuch) {
  auto r = run_strata("plan --model llama2-70b --topology dgx-h100 --nodes 4 --strategy ddp,zero2,zero3 --recompute");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\nddp!  "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nzero2!  "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nzero3   "), std::string::npos) << r.output;  // fits: no mark
  // The note says by how much: what it needs less the device's 80 GB (the figures are the memory
  // model's, tested in cost_model_test; here only that the note states them consistently).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m, std::regex(R"(\n  ! zero2: does not fit: needs (\d+\.\d) GB of 80 GB \((\d+\.\d) GB over\); its row assumes)")))
      << r.output;
  EXPECT_NEAR(std::stod(m.str(1)) - 80.0, std::stod(m.str(2)), 0.11) << r.output;
  EXPECT_EQ(r.output.find("! zero3"), std::string::npos) << r.output;
}

TEST(PlanOutput, TheSweepSvgFitsItsTextNotesCoincidingLinesAndReadsOnWhite) {
  strata::test::ScratchDir dir;
  const auto svg = dir / "sweep.svg";
  auto r = run_strata("plan --model gpt-neox-20b --topology frontier --sweep-nodes 1,2,4,8,16,32,64 --flash-attention "
                      "--tier cluster.bandwidth_GBps=20 --svg " + svg.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string text = strata::read_file_text(svg);
  expect_readable(text);
  // The title carries every option that changes the figures.
  EXPECT_NE(text.find(">gpt-neox-20b on frontier, micro-batch 1 x 2048, 1 micro-batch a step, bf16, flash"),
            std::string::npos) << text;
  EXPECT_NE(text.find("tier cluster.bandwidth_GBps=20</text>"), std::string::npos) << text;
  // Every tick label of the y axes in one notation: digits with an optional k/M/G suffix.
  const std::regex tick(R"re(<text x="(\d+)" y="[\d.]+" text-anchor="end">([^<]*)</text>)re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), tick); it != std::sregex_iterator(); ++it)
    EXPECT_TRUE(std::regex_match((*it)[2].str(), std::regex(R"(0|\d+(\.\d+)?[kMGT]?)"))) << (*it)[2];
  // zero2 sends what zero1 sends over the cluster tier: dashed, and said so.
  EXPECT_NE(text.find(">zero2 (= zero1)</text>"), std::string::npos);
  EXPECT_NE(text.find("dashed lines lie on an earlier one: zero2 = zero1"), std::string::npos);
  EXPECT_NE(text.find("stroke-dasharray"), std::string::npos);
}

TEST(PlanOutput, SvgTitlesWrapInsideThePicture) {
  using strata::plan::Series;
  std::string long_title, long_caption;
  for (int i = 0; i < 30; ++i) long_title += " title" + std::to_string(i);
  for (int i = 0; i < 40; ++i) long_caption += " caption" + std::to_string(i);
  strata::plan::Chart chart{long_title, "n", "y", false,
                            {Series{"a", {1, 2}, {1, 2}, {}}, Series{"b", {1, 2}, {3, 1}, {}},
                             Series{"c", {1, 2}, {1, 2}, {}}}};
  const std::string svg = strata::plan::svg_document({chart}, long_caption);
  expect_readable(svg);
  EXPECT_NE(svg.find(">c (= a)</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">b (="), std::string::npos);
  EXPECT_NE(svg.find(" title29</text>"), std::string::npos) << svg;  // wrapped, nothing cut
}

// --collectives nccl: each distinct call shows NCCL's pick, its hops by type and the bus
// bandwidth it achieves; the system's constants are named. zero3 over 2 dgx-h100 nodes: a
// block's gather is a ring of 16 ranks with 14 NVLink and 1 network step.
TEST(PlanOutput, NcclCallsShowTheirAlgorithmProtocolHopsAndBusBandwidth) {
  const nlohmann::json doc = strata::test::parse_json_output(
      run_strata("plan --model llama2-7b --topology dgx-h100 --nodes 2 --strategy zero3 --collectives nccl --json"));
  EXPECT_EQ(doc["assumptions"]["collectives"], "nccl");
  EXPECT_EQ(doc["assumptions"]["nccl"]["generation"], "hopper");
  EXPECT_EQ(doc["assumptions"]["nccl"]["channels"], 16);
  const nlohmann::json& calls = doc["strategies"]["zero3"]["nccl_calls"];
  ASSERT_FALSE(calls.empty());
  bool block_gather = false;
  for (const nlohmann::json& c : calls) {
    for (const char* key : {"algorithm", "protocol", "nvlink_hops", "network_hops", "latency_us", "achieved_bus_GBps",
                            "calls_a_step", "bytes_a_call"})
      EXPECT_TRUE(c.contains(key)) << key << " in " << c.dump();
    // A Llama-2-7B block: 202,383,360 elements in bf16.
    if (c["purpose"] == "weight-gather-forward" && c["bytes_a_call"] == 404766720.0) {
      block_gather = true;
      EXPECT_EQ(c["group_size"], 16);
      EXPECT_EQ(c["algorithm"], "ring");
      EXPECT_EQ(c["nvlink_hops"], 14);
      EXPECT_EQ(c["network_hops"], 1);
      EXPECT_EQ(c["calls_a_step"], 32);  // one a block
      EXPECT_GT(c["achieved_bus_GBps"].get<double>(), 250);
      EXPECT_LE(c["achieved_bus_GBps"].get<double>(), 320);
    }
  }
  EXPECT_TRUE(block_gather) << calls.dump();
  // Hierarchical plans have no NCCL calls.
  const nlohmann::json h = strata::test::parse_json_output(
      run_strata("plan --model llama2-7b --topology dgx-h100 --nodes 2 --strategy zero3 --json"));
  EXPECT_TRUE(h["strategies"]["zero3"]["nccl_calls"].empty());
}
