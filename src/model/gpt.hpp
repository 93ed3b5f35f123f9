#pragma once
// GPT-2 forward and backward over flat fp32 buffers, one unit at a time (model.hpp says how
// a model meets its parameters).
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "base/cpu.hpp"
#include "model/config.hpp"
#include "model/kernels.hpp"
#include "model/layout.hpp"
#include "model/model.hpp"
#include "model/tensor_parallel.hpp"

namespace strata::model {

// GPT-2's walk (L = n_layer, unit ids as in layout.hpp; E = embeddings, F = ln_f):
//   acquire(E,Fwd)  embed forward
//   for l in 0..L-1: acquire(1+l,Fwd)  block forward  release(1+l,Fwd)
//   acquire(F,Fwd)  final norm + LM head (uses E's wte) + loss  release(F,Fwd)  release(E,Fwd)
//   acquire(F,Bwd)  acquire(E,Bwd)  head backward into grads(F), grads(E)  release(E,Bwd)
//   release(F,Bwd)  grads_ready(F)
//   for l in L-1..0: acquire(1+l,Bwd)  block backward into grads(1+l)  release(1+l,Bwd)  grads_ready(1+l)
//   embed backward into grads(E)  grads_ready(E)
class GPT final : public HostModel {
 public:
  // Activations for micro-batches of exactly `batch` sequences of `seq` tokens
  // (seq <= config.seq_len); throws Error on other sizes or another family. With `recompute`
  // (full activation recomputation) forward keeps only each block's input, and block_backward
  // first runs the block's forward again: the same losses and gradients, bit for bit, for one
  // more forward.
  // `kernels`: the table it computes with (the compute device's; by default the host's).
  // `tp`: this rank's slice of a tensor-parallel split and the group it all-reduces over
  // (tensor_parallel.hpp); its layout() is then the slice's.
  // `stage`: a pipeline stage's part of the walk, the only activations it holds (StageModel's
  // calls of that part; HostModel::check_residual); nullopt: the whole model.
  GPT(const ModelConfig& config, int batch, int seq, bool recompute = false,
      const Kernels& kernels = kernels_for(detected_isa()), const TensorParallel& tp = {},
      const std::optional<StageRange>& stage = std::nullopt);

  // Bytes of activations (and their gradient buffers) such a model allocates: one source for
  // the engines' memory reports and the planner. The attention backward's T x T scratch per
  // thread is not included.
  // Under a TP split of `tp` (and sequence parallelism): one TP rank's; of `stage` only.
  static std::uint64_t activation_bytes(const ModelConfig& config, int batch, int seq, bool recompute, int tp = 1,
                                        bool sequence_parallel = false,
                                        const std::optional<StageRange>& stage = std::nullopt);
  using HostModel::activation_bytes;

  // StageModel: per-unit kernels, for callers that drive the walk themselves (the head's
  // parameters are the embeddings: the tied LM head).
  void embed_forward(const float* embed_params, const std::int32_t* tokens) override;
  void block_forward(int layer, const float* block_params) override;
  float head_forward(const float* lnf_params, const float* embed_params, const std::int32_t* targets) override;
  void head_backward(const float* lnf_params, const float* embed_params, float* lnf_grads, float* embed_grads,
                     float grad_scale) override;
  void block_backward(int layer, const float* block_params, float* block_grads) override;
  void embed_backward(float* embed_grads) override;
  float* residual(int layer) override;

  ~GPT() override;

 private:
  void block_forward_sequence_parallel(int layer, const float* params);
  void block_backward_sequence_parallel(int layer, const float* params, float* grads);
  // A block's sizes on this rank: BT rows in all, R of them its own (sequence parallelism's
  // share), its heads NH of width Ca in all, MLP width F.
  struct BlockDims {
    int B, T, BT, R, C, NH, Ca, F;
  };
  BlockDims block_dims() const;
  // What a block's forward and backward work on: the activations, the kernel table, the unit's
  // offsets, layer `layer`'s buffers, block_dims().
  struct Block;
  Block block(int layer);

  struct Layer;  // a block's activations
  struct Impl;   // activations, their gradients, the kernel table; see gpt.cpp
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::model
