#include "plan/compute_shape.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "plan/device.hpp"
#include "plan/names.hpp"

namespace strata::plan {

namespace {

struct GenerationEntry {
  KernelGeneration value;
  std::string_view name;
  KernelFacts facts;
};

// docs/planner.md "Compute by shape" gives each figure's source and what is assumed.
const GenerationEntry kGenerations[] = {
    {KernelGeneration::Y2021, "2021",
     {256, 128, 0.8,
      "tile 256x128: NVIDIA Deep Learning Performance guide, Matrix Multiplication Background (wave quantization "
      "on A100's 108 SMs with 256x128 thread-block tiles); peak share 0.8: the FlashAttention-2 paper (Dao 2023) "
      "puts optimized GEMMs at 80-90% of the theoretical maximum, the low end taken"}},
    {KernelGeneration::Y2024, "2024",
     {128, 256, 0.8,
      "tile 128x256: CUTLASS 3's Hopper warp-specialized bf16 GEMMs (which tile cuBLAS 12 picks per shape is "
      "not published); peak share 0.8 as the 2021 stack's (no H100 figure found)"}},
};

// FlashAttention TFLOP/s on H100 80GB SXM5, bf16, without causal mask, at sequence lengths
// 512..16k (FlashAttention-3 paper, Shah et al. 2024, figures 5 and 6: forward and backward,
// head dims 64 and 128): the FlashAttention-2 series for the 2021 stack, FlashAttention-3's for 2024.
constexpr std::array<double, 6> kSeqs = {512, 1024, 2048, 4096, 8192, 16384};
struct AttentionCurve {
  std::array<double, 6> fwd64, fwd128, bwd64, bwd128;
};
constexpr AttentionCurve kFa2OnH100 = {{282, 306, 318, 321, 322, 324},
                                       {309, 350, 362, 368, 370, 370},
                                       {198, 238, 264, 279, 287, 291},
                                       {214, 260, 291, 310, 318, 322}};
constexpr AttentionCurve kFa3OnH100 = {{333, 392, 460, 476, 496, 497},
                                       {467, 565, 625, 638, 646, 648},
                                       {272, 363, 422, 453, 472, 474},
                                       {316, 424, 501, 542, 559, 561}};
constexpr double kH100CurvePeakTflops = 989;  // the chip the curves were measured on

double at_seq(const std::array<double, 6>& curve, int seq) {
  const double x = std::log2(static_cast<double>(seq));
  if (seq <= kSeqs.front()) return curve.front();
  if (seq >= kSeqs.back()) return curve.back();
  for (std::size_t i = 1; i < kSeqs.size(); ++i)
    if (seq <= kSeqs[i]) {
      const double x0 = std::log2(kSeqs[i - 1]), x1 = std::log2(kSeqs[i]);
      return curve[i - 1] + (curve[i] - curve[i - 1]) * (x - x0) / (x1 - x0);
    }
  return curve.back();
}

double at_head_dim(double at64, double at128, int head_dim) {
  const double t = std::clamp((head_dim - 64) / 64.0, 0.0, 1.0);
  return at64 + (at128 - at64) * t;
}

// MosaicML's MPT-7B (the repository's yamls: ALiBi, no biases, tied embeddings).
const std::vector<std::string_view> kMpt7b = {"layers=32",     "hidden=4096",   "heads=32",
                                              "ffn=16384",     "vocab=50368",   "seq=2048",
                                              "norm=layernorm", "biases=false", "tied_head=true"};

const std::vector<ComputeAnchor>& anchors() {
  static const std::vector<ComputeAnchor> table = {
      {"a100", "a100-80", 0.6423, "custom",
       kMpt7b,
       2048, 6, 1, KernelGeneration::Y2021,
       "MosaicML LLM Foundry, scripts/train/benchmarking/README.md, A100 80GB table: MPT-7B, seq 2048, 8 GPUs, "
       "micro-batch 6, no activation checkpointing, MFU = HFU 64.23% (Composer's FSDP1 of 2023: the 2021 stack)"},
      {"h100", "h100-sxm", 0.4644, "custom",
       kMpt7b,
       2048, 6, 1, KernelGeneration::Y2021,
       "MosaicML LLM Foundry, scripts/train/benchmarking/README.md, H100 80GB BF16 table: MPT-7B, seq 2048, 8 GPUs, "
       "micro-batch 6, no activation checkpointing, MFU = HFU 46.44% (Composer's FSDP1 of 2023: the 2021 stack)"},
      {"mi250x", "mi250x", 0.4752, "llama2-7b", {"seq=4096"}, 4096, 2, 2, KernelGeneration::Y2024,
       "LUMI's Megatron-LM Llama 2 7B on 2 nodes (16 GCDs, TP 2, micro-batch 2 of seq 4096), 91 TFLOP/s a GCD of "
       "191.5 (docs/validation.md, Sources: LUMI; Megatron-Core of 2024: the 2024 stack)"},
  };
  return table;
}

ChipFacts chip_of(const ComputeAnchor& anchor, double peak_tflops, double hbm_GBps) {
  const GpuDatasheet& d = gpu_datasheet(anchor.gpu);
  return {d.compute_units, peak_tflops, hbm_GBps, d.hopper};
}

ModelShape anchor_slice(const ComputeAnchor& a) {
  const std::vector<std::string> fields(a.fields.begin(), a.fields.end());
  return ModelShape::from_name_and_fields(a.model, fields).slice(a.tp, 0, 1);
}

// One block's GEMMs on a rank of `tp` (column-parallel outputs and row-parallel inputs split):
// the forward's, then each one's data gradient and weight gradient.
std::vector<GemmShape> block_gemms(const ModelShape& slice, std::int64_t tokens) {
  std::vector<GemmShape> forward;
  const int tp = slice.tensor_parallel;
  for (const BlockLinear& l : slice.block_linears())
    forward.push_back({l.name, tokens, l.row_parallel ? l.out : l.out / tp, l.row_parallel ? l.in / tp : l.in});
  std::vector<GemmShape> out = forward;
  for (const GemmShape& g : forward) out.push_back({g.name + ".dgrad", g.m, g.k, g.n});
  for (const GemmShape& g : forward) out.push_back({g.name + ".wgrad", g.n, g.k, g.m});
  return out;
}

}  // namespace

KernelGeneration parse_kernel_generation(std::string_view text) {
  if (const KernelGeneration* g = value_of(kGenerations, text)) return *g;
  throw Error(fmt::format("--kernels = '{}': unknown kernel generation (known: {})", text,
                          fmt::join(names_of(kGenerations), ", ")));
}

std::string_view kernel_generation_name(KernelGeneration g) { return row_of(kGenerations, g).name; }

const KernelFacts& kernel_facts(KernelGeneration g) { return row_of(kGenerations, g).facts; }

GemmCost gemm_cost(const GemmShape& g, const ChipFacts& chip, const KernelFacts& kernels, int element_bytes) {
  GemmCost c;
  c.shape = g;
  const auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  c.tiles = ceil_div(g.m, kernels.tile_m) * ceil_div(g.n, kernels.tile_n);
  c.waves = ceil_div(c.tiles, chip.compute_units);
  c.flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  // A wave runs one tile on every SM: a whole-wave GEMM's FLOPs at peak x peak_share.
  const double wave_flops = 2.0 * kernels.tile_m * kernels.tile_n * static_cast<double>(g.k) * chip.compute_units;
  const double compute_s = static_cast<double>(c.waves) * wave_flops / (chip.peak_tflops * 1e12 * kernels.peak_share);
  const double bytes = static_cast<double>(element_bytes) *
                       (static_cast<double>(g.m) * g.k + static_cast<double>(g.k) * g.n + static_cast<double>(g.m) * g.n);
  const double memory_s = bytes / (chip.hbm_GBps * 1e9);
  c.memory_bound = memory_s > compute_s;
  c.seconds = std::max(compute_s, memory_s);
  c.efficiency = c.flops / c.seconds / (chip.peak_tflops * 1e12);
  return c;
}

double attention_efficiency(KernelGeneration g, const ChipFacts& chip, int head_dim, int seq) {
  if (!chip.hopper) return 0;
  const AttentionCurve& c = g == KernelGeneration::Y2021 ? kFa2OnH100 : kFa3OnH100;
  const double fwd = at_head_dim(at_seq(c.fwd64, seq), at_seq(c.fwd128, seq), head_dim);
  const double bwd = at_head_dim(at_seq(c.bwd64, seq), at_seq(c.bwd128, seq), head_dim);
  // The planner counts backward as twice the forward; FlashAttention's backward runs 2.5x the
  // forward's FLOPs at the backward rate.
  return 3.0 / (1.0 / fwd + 2.5 / bwd) / kH100CurvePeakTflops;
}

const ComputeAnchor& compute_anchor(std::string_view key) {
  for (const ComputeAnchor& a : anchors())
    if (a.key == key) return a;
  throw Error(fmt::format("--compute-anchor = '{}': unknown anchor (known: {})", key,
                          fmt::join(compute_anchor_names(), ", ")));
}

std::vector<std::string> compute_anchor_names() {
  std::vector<std::string> out;
  for (const ComputeAnchor& a : anchors()) out.emplace_back(a.key);
  return out;
}

ShapeModel shape_model(const ModelShape& slice, int micro_batch, int seq, KernelGeneration g, const ChipFacts& chip,
                       int element_bytes) {
  ShapeModel out;
  const KernelFacts& kernels = kernel_facts(g);
  const std::int64_t tokens = static_cast<std::int64_t>(micro_batch) * seq;
  double block_flops = 0, block_s = 0;
  for (const GemmShape& shape : block_gemms(slice, tokens)) {
    out.gemms.push_back(gemm_cost(shape, chip, kernels, element_bytes));
    block_flops += out.gemms.back().flops;
    block_s += out.gemms.back().seconds;
  }
  // QK^T and AV of the rank's heads, forward and backward (twice), as the planner counts them.
  const double attention_flops =
      3.0 * 4.0 * static_cast<double>(tokens) * seq * (slice.heads / slice.tensor_parallel) * slice.head_dim();
  out.attention_efficiency = attention_efficiency(g, chip, slice.head_dim(), seq);
  const double attention_rate = out.attention_efficiency > 0 ? out.attention_efficiency : kernels.peak_share;
  block_flops += attention_flops;
  block_s += attention_flops / (attention_rate * chip.peak_tflops * 1e12);
  double flops = block_flops * (slice.layers / slice.stages), seconds = block_s * (slice.layers / slice.stages);
  const GemmShape head{"lm_head", tokens, slice.vocab / slice.tensor_parallel, slice.hidden};
  for (const GemmShape& shape : {head, GemmShape{"lm_head.dgrad", tokens, head.k, head.n},
                                 GemmShape{"lm_head.wgrad", head.n, head.k, tokens}}) {
    out.gemms.push_back(gemm_cost(shape, chip, kernels, element_bytes));
    flops += out.gemms.back().flops;
    seconds += out.gemms.back().seconds;
  }
  out.efficiency = flops / seconds / (chip.peak_tflops * 1e12);
  return out;
}

ShapeEfficiency anchored_efficiency(const ModelShape& slice, int micro_batch, int seq, KernelGeneration g,
                                    const ComputeAnchor& anchor, double peak_tflops, double hbm_GBps,
                                    int element_bytes) {
  ShapeEfficiency e;
  e.anchor = anchor.key;
  e.kernels = g;
  e.anchor_efficiency = anchor.efficiency;
  const DeviceFacts& own = gpu_datasheet(anchor.gpu).device;
  e.here = shape_model(slice, micro_batch, seq, g, chip_of(anchor, peak_tflops, hbm_GBps), element_bytes);
  e.at_anchor = shape_model(anchor_slice(anchor), anchor.micro_batch, anchor.seq, anchor.kernels,
                            chip_of(anchor, own.peak_tflops, own.hbm_GBps), element_bytes);
  e.efficiency = anchor.efficiency * e.here.efficiency / e.at_anchor.efficiency;
  return e;
}

nlohmann::json ShapeEfficiency::to_json() const {
  nlohmann::json gemms = nlohmann::json::array();
  for (const GemmCost& c : here.gemms)
    gemms.push_back({{"gemm", c.shape.name},
                     {"m", c.shape.m},
                     {"n", c.shape.n},
                     {"k", c.shape.k},
                     {"tiles", c.tiles},
                     {"waves", c.waves},
                     {"efficiency", c.efficiency},
                     {"memory_bound", c.memory_bound}});
  const KernelFacts& k = kernel_facts(kernels);
  const auto attention = [](double a) { return a > 0 ? nlohmann::json(a) : nlohmann::json("no curve: as a whole-wave GEMM"); };
  return {{"anchor", anchor},
          {"anchor_efficiency", anchor_efficiency},
          {"kernels", kernel_generation_name(kernels)},
          {"tile", fmt::format("{}x{}", k.tile_m, k.tile_n)},
          {"peak_share", k.peak_share},
          {"kernels_source", k.source},
          {"model_efficiency", here.efficiency},
          {"model_efficiency_at_anchor", at_anchor.efficiency},
          {"attention_efficiency", attention(here.attention_efficiency)},
          {"attention_efficiency_at_anchor", attention(at_anchor.attention_efficiency)},
          {"efficiency", efficiency},
          {"means", "efficiency = anchor_efficiency x model_efficiency / model_efficiency_at_anchor; each GEMM's time "
                    "max(waves x tile_m x tile_n x 2k x SMs / (peak x peak_share), bytes of A, B and C / HBM), "
                    "attention at FlashAttention's published forward+backward rate for the sequence length and "
                    "head dim"},
          {"gemms", gemms}};
}

}  // namespace strata::plan
