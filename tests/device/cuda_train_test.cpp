// The single-GPU trainer (LocalEngine on the cuda device: CudaGPT, CudaLlama) against the CPU
// trainer on the same data, seed and schedule: the whole path a user runs with --device cuda
// (data loader, engine, AdamW, gradient norm and clipping, checkpoints through host copies),
// for each family's smallest preset (tiny: GPT-2; llama-tiny: Llama, grouped-query).
// Bands, per step, on the loss relative to the CPU's:
//   fp32  1e-4 over 50 steps (different summation orders only: no TF32, no bf16)
//   bf16  3e-2 over 50 steps (bf16 inputs to every product; fp32 master weights and state)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
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

TrainResult run_on(const TrainConfig& c, device::Device& device, Precision precision) {
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

void expect_same_losses(const TrainResult& a, const TrainResult& b, const std::string& what) {
  ASSERT_EQ(a.steps.size(), b.steps.size()) << what;
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.steps[i].loss, &b.steps[i].loss, sizeof(double)), 0) << what << " step " << i + 1;
    EXPECT_EQ(std::memcmp(&a.steps[i].grad_norm, &b.steps[i].grad_norm, sizeof(double)), 0)
        << what << " step " << i + 1;
  }
}

// Every test runs once per model preset (the parameter), on token files of its own.
class CudaTrainer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    STRATA_REQUIRE_GPU();
    test::write_tokens(dir_ / "train.bin", test::sample_text_tokens(60000, 1));
    test::write_tokens(dir_ / "val.bin", test::sample_text_tokens(8000, 2));
  }

  TrainConfig config(std::int64_t steps) const {
    TrainConfig c;
    c.model_name = GetParam();
    c.model = model::ModelConfig::preset(GetParam());
    c.batch = 4;
    c.seq = 64;
    c.steps = steps;
    c.lr = 3e-3f;
    c.min_lr = 3e-4f;
    c.warmup = 5;
    c.train_data = (dir_ / "train.bin").string();
    c.val_data = (dir_ / "val.bin").string();
    c.val_batches = 2;
    return c;
  }

  test::ScratchDir dir_;
};

}  // namespace

TEST_P(CudaTrainer, Fp32MatchesTheCpuLossCurveWithin1e4Over50Steps) {
  const TrainConfig c = config(50);
  const TrainResult cpu = run_on(c, device::host(), Precision::F32);
  const TrainResult gpu = run_on(c, device::cuda::gpu(), Precision::F32);
  expect_loss_curve_within(cpu, gpu, 1e-4, "fp32");
  for (std::size_t i = 0; i < cpu.steps.size(); ++i)
    EXPECT_LE(std::abs(gpu.steps[i].grad_norm - cpu.steps[i].grad_norm) / cpu.steps[i].grad_norm, 1e-3)
        << "step " << i + 1 << " gradient norm";
}

TEST_P(CudaTrainer, Bf16StaysWithin3e2OfTheCpuLossCurveOver50Steps) {
  const TrainConfig c = config(50);
  const TrainResult cpu = run_on(c, device::host(), Precision::F32);
  const TrainResult gpu = run_on(c, device::cuda::gpu(), Precision::BF16);
  expect_loss_curve_within(cpu, gpu, 3e-2, "bf16");
}

TEST_P(CudaTrainer, SameSeedGivesTheSameLossesBitForBit) {
  const TrainConfig c = config(8);
  for (Precision p : {Precision::F32, Precision::BF16})
    expect_same_losses(run_on(c, device::cuda::gpu(), p), run_on(c, device::cuda::gpu(), p),
                       std::string(precision_name(p)));
}

// Recomputation reruns each block's forward with the same kernels on the same inputs: the
// same losses and gradients as keeping the activations, bit for bit, as on the CPU.
TEST_P(CudaTrainer, RecomputationGivesTheSameLossesBitForBit) {
  TrainConfig kept = config(8), recomputed = kept;
  recomputed.recompute = "full";
  for (Precision p : {Precision::F32, Precision::BF16})
    expect_same_losses(run_on(kept, device::cuda::gpu(), p), run_on(recomputed, device::cuda::gpu(), p),
                       std::string(precision_name(p)) + " recompute full");
}

TEST_P(CudaTrainer, ACheckpointTakenOnTheGpuResumesToTheSameLosses) {
  TrainConfig whole = config(12);
  whole.out_dir = (dir_ / "whole").string();
  const TrainResult straight = run_on(whole, device::cuda::gpu(), Precision::F32);

  TrainConfig first = whole;
  first.out_dir = (dir_ / "split").string();
  first.stop_after = 6;
  run_on(first, device::cuda::gpu(), Precision::F32);
  TrainConfig rest = whole;
  rest.out_dir = first.out_dir;
  rest.resume = "latest";
  const TrainResult resumed = run_on(rest, device::cuda::gpu(), Precision::F32);
  ASSERT_EQ(resumed.steps.size(), 6u);
  for (std::size_t i = 0; i < resumed.steps.size(); ++i)
    EXPECT_EQ(resumed.steps[i].loss, straight.steps[6 + i].loss) << "step " << 7 + i;
}

TEST_P(CudaTrainer, TheInitialWeightsAreTheCpusAndComeBackThroughHostCopies) {
  const model::ModelConfig config = model::ModelConfig::preset(GetParam());
  LocalEngine cpu(config, 2, 32, 7);
  LocalEngine gpu(config, 2, 32, 7, false, device::cuda::gpu(), Precision::F32);
  const std::size_t n = cpu.layout().total_floats();
  std::vector<float> a(n), b(n, std::nanf(""));
  cpu.gather_params(a.data());
  gpu.gather_params(b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0);
}

TEST_P(CudaTrainer, TheCommandLineTrainsOnTheGpuInBf16) {
  const auto r = test::run_strata("train --model " + GetParam() +
                                  " --batch 4 --seq 64 --steps 5 --device cuda --precision bf16 --train-data " +
                                  (dir_ / "train.bin").string() + " --out " + (dir_ / "run").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cuda in bf16"), std::string::npos) << r.output;
  const auto summary = test::read_json(dir_ / "run" / "summary.json");
  EXPECT_EQ(summary["config"]["train"]["device"], "cuda") << summary.dump();
  EXPECT_EQ(summary["config"]["train"]["precision"], "bf16") << summary.dump();
  EXPECT_EQ(summary["model"]["config"], model::ModelConfig::preset(GetParam()).to_json()) << summary.dump();
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaTrainer, ::testing::Values("tiny", "llama-tiny"), [](const auto& info) {
  std::string name = info.param;
  for (char& ch : name)
    if (ch == '-') ch = '_';  // gtest names: letters, digits and underscores
  return name;
});
