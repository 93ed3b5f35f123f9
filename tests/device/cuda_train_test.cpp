// The single-GPU trainer (LocalEngine on the cuda device, CudaGPT) against the CPU trainer on
// the same data, seed and schedule: the whole path a user runs with --device cuda (data
// loader, engine, AdamW, gradient norm and clipping, checkpoints through host copies).
// Bands, per step, on the loss relative to the CPU's:
//   fp32  1e-4 over 50 steps (different summation orders only: no TF32, no bf16)
//   bf16  3e-2 over 50 steps (bf16 inputs to every product; fp32 master weights and state)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "device/cuda/cuda_device.hpp"
#include "gpu_skip.hpp"
#include "train/local_engine.hpp"
#include "train/trainer.hpp"
#include "train/util.hpp"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;

namespace {

TrainConfig gpu_config(const test::ScratchDir& dir, std::int64_t steps) {
  if (!fs::exists(dir / "train.bin")) {
    test::write_tokens(dir / "train.bin", test::sample_text_tokens(60000, 1));
    test::write_tokens(dir / "val.bin", test::sample_text_tokens(8000, 2));
  }
  TrainConfig c;
  c.batch = 4;
  c.seq = 64;
  c.steps = steps;
  c.lr = 3e-3f;
  c.min_lr = 3e-4f;
  c.warmup = 5;
  c.train_data = (dir / "train.bin").string();
  c.val_data = (dir / "val.bin").string();
  c.val_batches = 2;
  return c;
}

TrainResult run_on(const TrainConfig& c, device::Device& device, device::Precision precision) {
  LocalEngine engine(c.model, c.batch, c.seq_len(), c.seed, c.recomputes(), device, precision);
  Trainer trainer(c, engine);
  return trainer.run();
}

void expect_loss_curve_within(const TrainResult& cpu, const TrainResult& gpu, double band, const char* what) {
  ASSERT_EQ(cpu.steps.size(), gpu.steps.size());
  for (std::size_t i = 0; i < cpu.steps.size(); ++i) {
    const double rel = std::abs(gpu.steps[i].loss - cpu.steps[i].loss) / std::abs(cpu.steps[i].loss);
    EXPECT_LE(rel, band) << what << ": step " << i + 1 << " loss " << gpu.steps[i].loss << " on the GPU, "
                         << cpu.steps[i].loss << " on the CPU";
  }
  ASSERT_TRUE(cpu.steps.back().val_loss && gpu.steps.back().val_loss);
  EXPECT_LE(std::abs(*gpu.steps.back().val_loss - *cpu.steps.back().val_loss) / *cpu.steps.back().val_loss, band)
      << what << ": validation loss";
  // It learned: the curve is not flat (a GPU model that never updated would pass no band above).
  EXPECT_LT(gpu.steps.back().loss, gpu.steps.front().loss - 0.5) << what;
}

class CudaTrainer : public ::testing::Test {
 protected:
  void SetUp() override { STRATA_REQUIRE_GPU(); }
};

}  // namespace

TEST_F(CudaTrainer, Fp32MatchesTheCpuLossCurveWithin1e4Over50Steps) {
  test::ScratchDir dir;
  const TrainConfig c = gpu_config(dir, 50);
  const TrainResult cpu = run_on(c, device::host(), device::Precision::F32);
  const TrainResult gpu = run_on(c, device::cuda::gpu(), device::Precision::F32);
  expect_loss_curve_within(cpu, gpu, 1e-4, "fp32");
  for (std::size_t i = 0; i < cpu.steps.size(); ++i)
    EXPECT_LE(std::abs(gpu.steps[i].grad_norm - cpu.steps[i].grad_norm) / cpu.steps[i].grad_norm, 1e-3)
        << "step " << i + 1 << " gradient norm";
}

TEST_F(CudaTrainer, Bf16StaysWithin3e2OfTheCpuLossCurveOver50Steps) {
  test::ScratchDir dir;
  const TrainConfig c = gpu_config(dir, 50);
  const TrainResult cpu = run_on(c, device::host(), device::Precision::F32);
  const TrainResult gpu = run_on(c, device::cuda::gpu(), device::Precision::BF16);
  expect_loss_curve_within(cpu, gpu, 3e-2, "bf16");
}

TEST_F(CudaTrainer, SameSeedGivesTheSameLossesBitForBit) {
  test::ScratchDir dir;
  const TrainConfig c = gpu_config(dir, 8);
  for (device::Precision p : {device::Precision::F32, device::Precision::BF16}) {
    const TrainResult a = run_on(c, device::cuda::gpu(), p), b = run_on(c, device::cuda::gpu(), p);
    ASSERT_EQ(a.steps.size(), b.steps.size());
    for (std::size_t i = 0; i < a.steps.size(); ++i) {
      EXPECT_EQ(std::memcmp(&a.steps[i].loss, &b.steps[i].loss, sizeof(double)), 0)
          << device::precision_name(p) << " step " << i + 1;
      EXPECT_EQ(std::memcmp(&a.steps[i].grad_norm, &b.steps[i].grad_norm, sizeof(double)), 0)
          << device::precision_name(p) << " step " << i + 1;
    }
  }
}

TEST_F(CudaTrainer, ACheckpointTakenOnTheGpuResumesToTheSameLosses) {
  test::ScratchDir dir;
  TrainConfig whole = gpu_config(dir, 12);
  whole.out_dir = (dir / "whole").string();
  const TrainResult straight = run_on(whole, device::cuda::gpu(), device::Precision::F32);

  TrainConfig first = whole;
  first.out_dir = (dir / "split").string();
  first.stop_after = 6;
  run_on(first, device::cuda::gpu(), device::Precision::F32);
  TrainConfig rest = whole;
  rest.out_dir = first.out_dir;
  rest.resume = "latest";
  const TrainResult resumed = run_on(rest, device::cuda::gpu(), device::Precision::F32);
  ASSERT_EQ(resumed.steps.size(), 6u);
  for (std::size_t i = 0; i < resumed.steps.size(); ++i)
    EXPECT_EQ(resumed.steps[i].loss, straight.steps[6 + i].loss) << "step " << 7 + i;
}

TEST_F(CudaTrainer, TheInitialWeightsAreTheCpusAndComeBackThroughHostCopies) {
  const model::GPTConfig config = model::GPTConfig::preset("tiny");
  LocalEngine cpu(config, 2, 32, 7);
  LocalEngine gpu(config, 2, 32, 7, false, device::cuda::gpu(), device::Precision::F32);
  const std::size_t n = cpu.layout().total_floats();
  std::vector<float> a(n), b(n, std::nanf(""));
  cpu.gather_params(a.data());
  gpu.gather_params(b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0);
}

TEST_F(CudaTrainer, TheCommandLineTrainsOnTheGpuInBf16) {
  test::ScratchDir dir;
  gpu_config(dir, 1);  // writes the token files
  const auto r = test::run_strata("train --model tiny --batch 4 --seq 64 --steps 5 --device cuda --precision bf16 "
                                  "--train-data " + (dir / "train.bin").string() + " --out " + (dir / "run").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cuda in bf16"), std::string::npos) << r.output;
  const auto summary = test::read_json(dir / "run" / "summary.json");
  EXPECT_EQ(summary["config"]["train"]["device"], "cuda") << summary.dump();
  EXPECT_EQ(summary["config"]["train"]["precision"], "bf16") << summary.dump();
}
