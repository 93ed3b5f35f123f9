#pragma once
// Achieved compute by shape (issue 40 item 3; docs/planner.md "Compute by shape"): each GEMM of
// a block priced with wave and tile quantization on the chip's SM count and a roofline on its
// HBM rate, attention from published FlashAttention throughput by sequence length and head
// size, both for the kernels of a software generation; anchored so that the shape of a held-out
// measurement gets exactly that measurement's efficiency, and other shapes that figure scaled
// by the model's ratio.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "plan/model_shapes.hpp"
#include "plan/peer.hpp"

namespace strata::plan {

// The kernels of a software stack (--kernels; by default the peer's): 2021 = cuBLAS 11's Ampere
// tiles and FlashAttention-2-class attention, 2024 = cuBLAS 12 / CUTLASS 3's Hopper tiles and
// FlashAttention-3-class attention on Hopper.
enum class KernelGeneration { Y2021, Y2024 };
KernelGeneration parse_kernel_generation(std::string_view text);  // Error names --kernels, lists the known
std::string_view kernel_generation_name(KernelGeneration g);
KernelGeneration peer_kernel_generation(Peer peer);

struct KernelFacts {
  int tile_m = 0, tile_n = 0;  // one thread block's output tile: M (tokens) x N
  double peak_share = 0;       // fraction of peak a compute-bound GEMM of whole waves reaches
  std::string_view source;
};
const KernelFacts& kernel_facts(KernelGeneration g);

// What the shape model needs of a chip.
struct ChipFacts {
  int compute_units = 0;  // SMs (NVIDIA) or CUs (AMD): thread blocks of one wave
  double peak_tflops = 0;
  double hbm_GBps = 0;
  bool hopper = false;  // the chip FlashAttention-3's curves were measured on
};

// C[m x n] = A[m x k] B[k x n]; tiles of the output, waves of tiles over the chip's SMs.
struct GemmShape {
  std::string name;
  std::int64_t m = 0, n = 0, k = 0;
};
struct GemmCost {
  GemmShape shape;
  std::int64_t tiles = 0, waves = 0;
  double flops = 0, seconds = 0;
  double efficiency = 0;  // flops / seconds over the chip's peak
  bool memory_bound = false;
};
// Time = max(waves x one tile's K-loop at peak x peak_share / SMs, bytes of A, B and C / HBM).
GemmCost gemm_cost(const GemmShape& g, const ChipFacts& chip, const KernelFacts& kernels, int element_bytes);

// FlashAttention's forward+backward fraction of peak (backward 2.5x the forward's FLOPs, the
// papers' count) by sequence length (log-linear between the papers' points, the nearest outside)
// and head dim (linear between 64 and 128, the nearest outside); 0 where no curve is published
// for the chip and generation.
double attention_efficiency(KernelGeneration g, const ChipFacts& chip, int head_dim, int seq);

// A held-out single-node measurement and its shape (--compute-anchor): at this shape the model
// gives exactly `efficiency`.
struct ComputeAnchor {
  std::string_view key;  // as --compute-anchor names it
  std::string_view gpu;  // gpu_datasheet key of the chip (its SMs)
  double efficiency = 0;
  std::string_view model;                  // a preset or "custom"
  std::vector<std::string_view> fields;    // ModelShape::from_name_and_fields overrides
  int seq = 0, micro_batch = 0, tp = 1;
  KernelGeneration kernels = KernelGeneration::Y2021;
  std::string_view source;
};
const ComputeAnchor& compute_anchor(std::string_view key);  // Error names --compute-anchor, lists the known
std::vector<std::string> compute_anchor_names();

// The model's figures for one rank's slice at micro_batch x seq tokens.
struct ShapeModel {
  std::vector<GemmCost> gemms;  // a block's forward, data-gradient and weight-gradient GEMMs, then the LM head's
  double attention_efficiency = 0;  // 0: no curve, attention priced as a whole-wave GEMM
  double efficiency = 0;            // all FLOPs of layers blocks and the head / their time, over peak
};
ShapeModel shape_model(const ModelShape& slice, int micro_batch, int seq, KernelGeneration g, const ChipFacts& chip,
                       int element_bytes);

struct ShapeEfficiency {
  std::string anchor;
  KernelGeneration kernels = KernelGeneration::Y2021;
  ShapeModel here, at_anchor;
  double anchor_efficiency = 0;
  double efficiency = 0;  // anchor_efficiency x here.efficiency / at_anchor.efficiency
  nlohmann::json to_json() const;
};
// The anchor's chip with the device's peak and HBM rate (the row's memory).
ShapeEfficiency anchored_efficiency(const ModelShape& slice, int micro_batch, int seq, KernelGeneration g,
                                    const ComputeAnchor& anchor, double peak_tflops, double hbm_GBps,
                                    int element_bytes);

}  // namespace strata::plan
