// Compute by shape (issue 40 item 3): GEMMs priced with wave and tile quantization on the SM
// count and a roofline on HBM, attention from FlashAttention's published curves, anchored on a
// held-out measurement. Each expected figure below is worked out by hand in its comment.
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "plan/compute_shape.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::plan;
using strata::test::error_of;

namespace {

const ChipFacts kA100{108, 312, 2000, false};
const ChipFacts kH100{132, 989, 3350, true};

ModelShape mpt7b() {
  return ModelShape::from_name_and_fields("custom", {"layers=32", "hidden=4096", "heads=32", "ffn=16384", "vocab=50368",
                                                     "seq=2048", "norm=layernorm", "biases=false", "tied_head=true"});
}

}  // namespace

TEST(ComputeShape, TheAnchorsShapeGetsExactlyTheAnchorsEfficiency) {
  // MosaicML's MPT-7B, micro-batch 6 of 2048, on the A100 80GB and H100 they ran on.
  const ModelShape m = mpt7b().slice(1, 0, 1);
  EXPECT_DOUBLE_EQ(anchored_efficiency(m, 6, 2048, KernelGeneration::Y2021, compute_anchor("a100"), 312, 2000, 2).efficiency,
                   0.6423);
  EXPECT_DOUBLE_EQ(anchored_efficiency(m, 6, 2048, KernelGeneration::Y2021, compute_anchor("h100"), 989, 3350, 2).efficiency,
                   0.4644);
  // LUMI's Llama 2 7B, TP 2, micro-batch 2 of 4096, with Megatron's 2024 kernels.
  const ModelShape llama = ModelShape::from_name_and_fields("llama2-7b", {"seq=4096"}).slice(2, 0, 1);
  EXPECT_DOUBLE_EQ(
      anchored_efficiency(llama, 2, 4096, KernelGeneration::Y2024, compute_anchor("mi250x"), 191.5, 1600, 2).efficiency,
      0.4752);
  // Another shape moves it: half the micro-batch leaves the MLP's last wave less full.
  EXPECT_NE(anchored_efficiency(m, 3, 2048, KernelGeneration::Y2021, compute_anchor("a100"), 312, 2000, 2).efficiency,
            0.6423);
}

TEST(ComputeShape, AShapeJustOverAWaveBoundaryIsSlowerPerFlopThanOneJustUnder) {
  // A100, 256x128 tiles, N = 1536 (12 tile columns), K = 4096. M = 2304 = 9 x 256: 108 tiles,
  // one full wave, compute-bound (116 us against 19 us of bytes): efficiency = peak share 0.8.
  const KernelFacts& k = kernel_facts(KernelGeneration::Y2021);
  const GemmCost under = gemm_cost({"under", 2304, 1536, 4096}, kA100, k, 2);
  EXPECT_EQ(under.tiles, 108);
  EXPECT_EQ(under.waves, 1);
  EXPECT_NEAR(under.efficiency, 0.8, 1e-12);
  // M = 2305: a 10th tile row, 120 tiles, 2 waves for 1/2304 more FLOPs: 0.8 x 2305 / 4608.
  const GemmCost over = gemm_cost({"over", 2305, 1536, 4096}, kA100, k, 2);
  EXPECT_EQ(over.waves, 2);
  EXPECT_NEAR(over.efficiency, 0.400174, 1e-6);
}

TEST(ComputeShape, MoreTokensNeverLowerAGemmsEfficiencyWhileItsWaveCountHolds) {
  // M from 2305 to 4608 keeps 2 waves of the shape above; the last fills both (216 tiles): 0.8.
  const KernelFacts& k = kernel_facts(KernelGeneration::Y2021);
  double last = 0;
  for (int m = 2305; m <= 4608; m += 37) {
    const GemmCost c = gemm_cost({"g", m, 1536, 4096}, kA100, k, 2);
    ASSERT_EQ(c.waves, 2) << m;
    EXPECT_GE(c.efficiency, last) << m;
    last = c.efficiency;
  }
  EXPECT_NEAR(gemm_cost({"g", 4608, 1536, 4096}, kA100, k, 2).efficiency, 0.8, 1e-12);
}

TEST(ComputeShape, AMemoryBoundSmallShapeRunsBelowTheComputeBoundOnes) {
  // H100, 2024 tiles 128x256: M = 128 tokens, N = 65536, K = 8192: 256 tiles, 2 waves of 89.6 us
  // of compute, but 1.093 GB of A, B and C take 326 us at 3350 GB/s: 137.4 GFLOP / 326 us =
  // 421 TFLOP/s = 0.4261 of 989.
  const KernelFacts& k = kernel_facts(KernelGeneration::Y2024);
  const GemmCost small = gemm_cost({"small", 128, 65536, 8192}, kH100, k, 2);
  EXPECT_TRUE(small.memory_bound);
  EXPECT_NEAR(small.efficiency, 0.42608, 1e-5);
  const GemmCost big = gemm_cost({"big", 16384, 8192, 8192}, kH100, k, 2);
  EXPECT_FALSE(big.memory_bound);
  EXPECT_LT(small.efficiency, big.efficiency);
}

TEST(ComputeShape, AttentionEfficiencyRisesWithSequenceLength) {
  // FlashAttention-3 on H100, head dim 128, forward / backward TFLOP/s: 1k 565 / 424, 2k 625 /
  // 501, 8k 646 / 559; 3 / (1/fwd + 2.5/bwd) / 989 = 0.3957, 0.4603, 0.5039.
  EXPECT_NEAR(attention_efficiency(KernelGeneration::Y2024, kH100, 128, 1024), 0.39568, 1e-5);
  EXPECT_NEAR(attention_efficiency(KernelGeneration::Y2024, kH100, 128, 2048), 0.46030, 1e-5);
  EXPECT_NEAR(attention_efficiency(KernelGeneration::Y2024, kH100, 128, 8192), 0.50386, 1e-5);
  // Between points, log-linear: 4096 (542 backward, 638 forward) lies between 2k's and 8k's.
  const double at4k = attention_efficiency(KernelGeneration::Y2024, kH100, 128, 4096);
  EXPECT_GT(at4k, 0.46030);
  EXPECT_LT(at4k, 0.50386);
  // No published curve for A100 in these tables: none, priced as a whole-wave GEMM.
  EXPECT_EQ(attention_efficiency(KernelGeneration::Y2021, kA100, 128, 2048), 0);
}

TEST(ComputeShape, UnknownGenerationsAndAnchorsAreRefusedNamingTheField) {
  EXPECT_NE(error_of([] { parse_kernel_generation("2019"); }).find("--kernels = '2019'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_kernel_generation(""); }).find("--kernels"), std::string::npos);
  EXPECT_NE(error_of([] { compute_anchor("v100"); }).find("--compute-anchor = 'v100'"), std::string::npos);
  EXPECT_EQ(peer_kernel_generation(Peer::Fsdp1), KernelGeneration::Y2021);
  EXPECT_EQ(peer_kernel_generation(Peer::Fsdp2), KernelGeneration::Y2024);
}
