// A sharded run on GPUs as a user starts it: `strata train --strategy zero3 --device cuda`
// under mpirun, one GPU a rank (local rank % GPUs), the tier levels NCCL communicators and the
// work between them on the device (shard::nccl_tier_collectives), against the same run on the
// cpu: fp32, each step's loss within 1e-4 relative (different summation orders only, as the
// single-GPU trainer's band). 1 rank, and 2 where the machine has 2 GPUs (NCCL refuses two
// ranks on one GPU). Label gpu: skipped, saying why, without a GPU or without NCCL.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/backends/tier_comms.hpp"
#include "device/cuda/cuda_device.hpp"
#include "gpu_skip.hpp"
#include "train/util.hpp"

using namespace strata;
namespace fs = std::filesystem;

namespace {

class CudaSharded : public ::testing::Test {
 protected:
  void SetUp() override {
    STRATA_REQUIRE_GPU();
    if (!comm::nccl_built()) GTEST_SKIP() << "needs NCCL: this strata was built without it";
    test::write_tokens(dir_ / "train.bin", test::sample_text_tokens(60000, 1));
    // Two tiers: each rank alone in its node, the nodes across the cluster (NCCL groups of 1
    // and of every rank).
    test::write_bytes(dir_ / "topology.toml",
                      "[[tiers]]\nname = \"node\"\nsize = 1\nbandwidth_GBps = 100\nlatency_us = 2\n\n"
                      "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n");
  }

  // Each step's loss of `ranks` ranks training zero3 on `device`.
  std::vector<double> losses(int ranks, const std::string& device) const {
    const fs::path out = dir_ / (device + std::to_string(ranks));
    const test::CommandResult r = test::run_command(
        std::string(STRATA_MPIEXEC_LINE) + " -np " + std::to_string(ranks) + " " + STRATA_BIN +
            " train --model tiny --strategy zero3 --topology " + (dir_ / "topology.toml").string() +
            " --train-data " + (dir_ / "train.bin").string() +
            " --batch 4 --seq 64 --steps 30 --lr 3e-3 --min-lr 3e-4 --warmup 5 --precision fp32 --device " + device +
            " --out " + out.string(),
        test::Stderr::Capture);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (device == "cuda") {
      EXPECT_NE(r.output.find("strategy zero3 on " + std::to_string(ranks) + " rank"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("cuda in fp32 a rank"), std::string::npos) << r.output;
    }
    std::vector<double> out_losses;
    if (r.exit_code != 0) return out_losses;
    for (const nlohmann::json& step : test::read_jsonl(out / "metrics.jsonl"))
      out_losses.push_back(step["loss"].get<double>());
    return out_losses;
  }

  void expect_gpu_matches_cpu(int ranks) const {
    const std::vector<double> cpu = losses(ranks, "cpu"), gpu = losses(ranks, "cuda");
    ASSERT_EQ(cpu.size(), 30u);
    ASSERT_EQ(gpu.size(), cpu.size());
    for (std::size_t i = 0; i < cpu.size(); ++i)
      EXPECT_LE(std::abs(gpu[i] - cpu[i]) / std::abs(cpu[i]), 1e-4)
          << ranks << " ranks, step " << i + 1 << ": loss " << gpu[i] << " on GPUs, " << cpu[i] << " on the cpu";
    EXPECT_LT(gpu.back(), gpu.front() - 0.5) << "it learned";
  }

  test::ScratchDir dir_;
};

}  // namespace

TEST_F(CudaSharded, OneRankZero3MatchesTheCpuRunWithin1e4) { expect_gpu_matches_cpu(1); }

TEST_F(CudaSharded, TwoRanksZero3OnTwoGpusMatchTheCpuRunWithin1e4) {
  if (device::cuda::gpu_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs (NCCL refuses two ranks on one GPU); this machine has "
                 << device::cuda::gpu_count();
  expect_gpu_matches_cpu(2);
}
