// Drives `strata calibrate` under mpirun and `strata plan --calibration` with what it wrote.
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "plan/calibration.hpp"
#include "support.hpp"

namespace {

using strata::test::CommandResult;
using strata::test::parse_json_output;
using strata::test::run_command;
using strata::test::ScratchDir;
using strata::test::Stderr;

std::string example_file() {
  return strata::test::source_path("configs/topology/2node-2gpu-2die.toml").string();
}
std::string strata() { return STRATA_EXE; }
std::string mpirun(int np) { return std::string(STRATA_MPIEXEC_LINE) + " -np " + std::to_string(np) + " " + strata(); }

// Small sweeps: the point is the path from measurement to plan, not the figures.
std::string calibrate(int np, const std::string& out) {
  return mpirun(np) + " calibrate --topology " + example_file() + " --out " + out +
         " --max-mib 0.25 --points 3 --iterations 1 --micro-batch 2 --seq 32";
}

std::string plan(const std::string& extra) {
  return strata() + " plan --model tiny --topology " + example_file() +
         " --nodes 2 --micro-batch 2 --seq 32 --precision fp32 --device-memory-gb 3 --strategy ddp,zero3 " + extra;
}

}  // namespace

TEST(CalibrateCli, MeasuresEveryTierAndThePlanUsesIt) {
  ScratchDir dir;
  const std::string file = (dir / "cal.toml").string();
  CommandResult r = run_command(calibrate(8, file), Stderr::Capture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + file), std::string::npos) << r.output;

  const strata::plan::Calibration cal = strata::plan::Calibration::from_toml_file(file);
  EXPECT_EQ(cal.world_size, 8);
  EXPECT_EQ(cal.topology, "2node-2gpu-2die");
  ASSERT_EQ(cal.tiers.size(), 3u);
  const int sharing[] = {1, 2, 4};  // ranks of one inner domain crossing each tier at once
  for (std::size_t t = 0; t < 3; ++t) {
    EXPECT_EQ(cal.tiers[t].group_size, 2);
    EXPECT_EQ(cal.tiers[t].ranks_sharing, sharing[t]);
    for (strata::Collective k : strata::kCollectives) {
      EXPECT_GT(cal.tiers[t].curve(k).bus_GBps, 0);
      EXPECT_EQ(cal.tiers[t].curve(k).bytes.size(), 3u);
    }
    // A ring all-gather over 2 sends one message; an all-reduce two.
    EXPECT_EQ(cal.tiers[t].curve(strata::Collective::AllGather).messages, 1);
    EXPECT_EQ(cal.tiers[t].curve(strata::Collective::AllReduce).messages, 2);
    // Each collective again beside compute, at every size of the sweep.
    for (strata::Collective k : strata::kCollectives) {
      const strata::plan::CollectiveCurve& c = cal.tiers[t].curve(k);
      EXPECT_TRUE(c.has_under_compute());
      EXPECT_EQ(c.busy_bytes, c.bytes);
      EXPECT_EQ(c.busy_seconds.size(), c.seconds.size());
    }
    // Compute timed beside this tier's all-reduce, its own factor.
    EXPECT_GE(cal.tiers[t].overlap_slowdown, 1);
    EXPECT_GT(cal.tiers[t].overlap_all_reduce_bytes, 0) << "the all-reduces it was timed beside";
  }
  EXPECT_GT(cal.compute->int8_codec_GBps, 0);
  EXPECT_GT(cal.compute->int4_codec_GBps, 0);
  EXPECT_GT(cal.compute->peak_gflops, 0);
  EXPECT_GE(cal.compute->kernel_overhead, 1);
  EXPECT_EQ(cal.compute->overlap_slowdown, cal.tiers[2].overlap_slowdown);  // the outermost's
  EXPECT_EQ(cal.compute->gflop.size(), 15u);
  // Compute timed in three passes spread over the run; the output names each pass's matmul time.
  EXPECT_EQ(cal.compute->passes, 3);
  EXPECT_GE(cal.compute->pass_spread, 1);
  EXPECT_NE(r.output.find("compute passes (before the collective sweep, between its halves, after it): matmul time x"),
            std::string::npos)
      << r.output;

  // Priced with it: the calibration is in the assumptions, and the figures are its own.
  nlohmann::json with = parse_json_output(run_command(plan("--calibration " + file + " --json"), Stderr::Discard));
  nlohmann::json without =
      parse_json_output(run_command(plan("--peak-tflops 0.01 --hbm-gbps 2 --json"), Stderr::Discard));
  EXPECT_EQ(with["assumptions"]["calibration"]["world_size"], 8);
  EXPECT_EQ(with["assumptions"]["device"]["peak_tflops"], cal.compute->peak_gflops / 1e3);
  for (const char* s : {"ddp", "zero3"}) {
    EXPECT_NE(with["strategies"][s]["step_time_s"], without["strategies"][s]["step_time_s"]) << s;
    // Present, and not negative: on a loaded machine a fit can put a curve's fixed cost at
    // zero (fit_line_relative refits through the origin), so zero is a possible measurement.
    EXPECT_GE(with["strategies"][s]["comm_time_per_step"]["cluster"]["latency_s"].get<double>(), 0) << s;
  }
  CommandResult text = run_command(plan("--calibration " + file), Stderr::Capture);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("calibrated (a group of 2, 4 ranks crossing at once): all_gather"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("us; priced at its 3 measured sizes)"), std::string::npos) << text.output;
  EXPECT_EQ(with["assumptions"]["calibration"]["tiers"][0]["all_gather"]["priced_at"], 3);
  EXPECT_NE(text.output.find("calibrated compute: matmul"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find(fmt::format("compute beside its ops x{:.3g} at {:.3g} MB/s a rank",
                                         cal.tiers[0].overlap_slowdown,
                                         cal.overlap_bytes_per_second(cal.tiers[0].name) / 1e6)),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("calibrated terms"), std::string::npos) << text.output;

  // A file damaged by hand is refused, naming the field.
  std::string body = strata::read_file_text(file);
  body.replace(body.find("optimizer_GBps = "), 17, "optimizer_GBps = -");
  const std::string bad = (dir / "bad.toml").string();
  std::ofstream(bad) << body;
  CommandResult refused = run_command(plan("--calibration " + bad), Stderr::Capture);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.output.find("strata: error: " + bad + ": compute.optimizer_GBps = -"), std::string::npos)
      << refused.output;
}

// The planner prices an op between the sweep's points: sizes that send the same are refused
// before anything is measured.
TEST(CalibrateCli, SweepSizesThatSendTheSameAreRefused) {
  ScratchDir dir;
  CommandResult r = run_command(mpirun(8) + " calibrate --topology " + example_file() + " --out " +
                                    (dir / "cal.toml").string() + " --min-kib 1 --max-mib 0.001 --points 6",
                                Stderr::Capture);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("calibrate: --points 6: sizes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("send the same over tier"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "cal.toml"));
}

TEST(CalibrateCli, ATierNothingCrossesIsRefused) {
  ScratchDir dir;
  CommandResult r = run_command(calibrate(4, (dir / "cal.toml").string()), Stderr::Capture);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("tier 'cluster' has 1 member a group at 4 ranks"), std::string::npos) << r.output;
}
