#pragma once
// Llama forward and backward over flat fp32 buffers, one unit at a time (model.hpp says how
// a model meets its parameters), as Hugging Face's LlamaForCausalLM computes it: RMSNorm
// (eps 1e-5, Llama 2's rms_norm_eps), rotary position embeddings over the two halves of each
// head (rotate_half, not interleaved pairs), grouped-query attention, SwiGLU MLP
// (down(silu(gate x) * up x)), no biases, an untied LM head.
//
// The walk (L = n_layer; E = embeddings, N = final norm, H = LM head, as in layout.hpp;
// model/gpt_walk.hpp runs it, for this model and the GPU's). The embedding is a lookup:
// forward needs its parameters only to copy rows, backward scatters the incoming gradient by
// token id and reads none.
//   acquire(E,Fwd)  embed forward  release(E,Fwd)
//   for l in 0..L-1: acquire(1+l,Fwd)  block forward  release(1+l,Fwd)
//   acquire(N,Fwd)  acquire(H,Fwd)  final norm + LM head + loss  release(H,Fwd)  release(N,Fwd)
//   acquire(N,Bwd)  acquire(H,Bwd)  head backward into grads(H), grads(N)  release(H,Bwd)
//   release(N,Bwd)  grads_ready(H)  grads_ready(N)
//   for l in L-1..0: acquire(1+l,Bwd)  block backward into grads(1+l)  release(1+l,Bwd)  grads_ready(1+l)
//   embed backward into grads(E)  grads_ready(E)
#include <cstdint>
#include <memory>
#include <vector>

#include "base/cpu.hpp"
#include "model/kernels.hpp"
#include "model/model.hpp"

namespace strata::model {

inline constexpr float kRmsNormEps = 1e-5f;

class Llama final : public HostModel {
 public:
  // Activations for micro-batches of exactly `batch` sequences of `seq` tokens
  // (seq <= config.seq_len); throws Error on other sizes or another family. `kernels`: the
  // table it computes with (the compute device's; by default the host's).
  // `recompute`: forward keeps only each block's input and backward reruns the block's forward
  // first (activation recomputation: about one more forward, a block's activations instead of
  // every block's).
  // `tp`: this rank's slice of a tensor-parallel split and the group it all-reduces over
  // (tensor_parallel.hpp: q, k, v, gate and up column-parallel over heads and SwiGLU columns,
  // o_proj and down_proj row-parallel, the embedding and LM head vocab-parallel); its
  // layout() is then the slice's. Rotary embeddings rotate the rank's own heads.
  // `stage`: a pipeline stage's part of the walk (see GPT's); nullopt: the whole model.
  Llama(const ModelConfig& config, int batch, int seq, bool recompute = false,
        const Kernels& kernels = kernels_for(detected_isa()), const TensorParallel& tp = {},
        const std::optional<StageRange>& stage = std::nullopt);
  ~Llama() override;

  // Bytes of activations (and their gradient buffers) such a model allocates (see GPT's).
  // Under a TP split of `tp` (and sequence parallelism): one TP rank's; of `stage` only.
  static std::uint64_t activation_bytes(const ModelConfig& config, int batch, int seq, bool recompute, int tp = 1,
                                        bool sequence_parallel = false,
                                        const std::optional<StageRange>& stage = std::nullopt);
  using HostModel::activation_bytes;

  // StageModel: per-unit kernels, for callers that drive the walk themselves.
  void embed_forward(const float* embed_params, const std::int32_t* tokens) override;
  void block_forward(int layer, const float* p) override;
  float head_forward(const float* norm_params, const float* head_params, const std::int32_t* targets) override;
  void head_backward(const float* norm_params, const float* head_params, float* norm_grads, float* head_grads,
                     float grad_scale) override;
  void block_backward(int layer, const float* p, float* g) override;
  void embed_backward(float* embed_grads) override;
  float* residual(int layer) override;

 private:
  void norm_and_residual(float* out, float* rstd, const float* x, const float* w, float* residual, Range rows) const;
  void block_forward_sequence_parallel(int layer, const float* p);
  void block_backward_sequence_parallel(int layer, const float* p, float* g);

  struct Layer;  // a block's activations
  struct Impl;   // activations, their gradients, rotary tables; see llama.cpp
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::model
