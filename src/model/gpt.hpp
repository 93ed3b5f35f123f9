#pragma once
// GPT-2 forward and backward over flat fp32 buffers, one unit at a time.
//
// The model never owns parameters or gradients: every call takes a pointer to the start of
// one unit (see layout.hpp), so the caller decides where the unit lives — the single-process
// arena, or a buffer a sharding engine has just gathered. Activations are owned here, sized
// for a micro-batch of B sequences of T tokens (T <= config.seq_len).
//
// A training micro-step walks the units in the order UnitAccess documents; forward_backward()
// drives that walk and is what every engine calls.
#include <cstdint>
#include <memory>
#include <vector>

#include "base/cpu.hpp"
#include "model/config.hpp"
#include "model/kernels.hpp"
#include "model/layout.hpp"

namespace strata::model {

enum class Phase { Forward, Backward };

// What a training step asks of whoever holds the parameters. forward_backward() calls it in
// exactly this order (L = n_layer, unit ids as in layout.hpp; E = embeddings, F = ln_f):
//   acquire(E,Fwd)  embed forward
//   for l in 0..L-1: acquire(1+l,Fwd)  block forward  release(1+l,Fwd)
//   acquire(F,Fwd)  final norm + LM head (uses E's wte) + loss  release(F,Fwd)  release(E,Fwd)
//   acquire(F,Bwd)  acquire(E,Bwd)  head backward into grads(F), grads(E)  release(E,Bwd)
//   release(F,Bwd)  grads_ready(F)
//   for l in L-1..0: acquire(1+l,Bwd)  block backward into grads(1+l)  release(1+l,Bwd)  grads_ready(1+l)
//   embed backward into grads(E)  grads_ready(E)
// unit_event_order() returns the same sequence as data, for schedule builders.
class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  virtual const float* acquire(int unit, Phase phase) = 0;  // full (gathered) unit parameters
  virtual void release(int unit, Phase phase) = 0;
  virtual float* grads(int unit) = 0;     // full unit gradient buffer; backward accumulates (+=)
  virtual void grads_ready(int unit) = 0; // this micro-batch adds nothing more to grads(unit)
};

struct UnitEvent {
  enum Kind { Acquire, Release, GradsReady } kind;
  int unit;
  Phase phase;  // meaningless for GradsReady
  bool operator==(const UnitEvent&) const = default;
};
std::vector<UnitEvent> unit_event_order(const GPTConfig& config);

class GPT {
 public:
  // Activations for micro-batches of exactly `batch` sequences of `seq` tokens
  // (seq <= config.seq_len); throws Error on other sizes.
  // `kernels`: the table it computes with (the compute device's; by default the host's).
  GPT(const GPTConfig& config, int batch, int seq, const Kernels& kernels = kernels_for(detected_isa()));

  const GPTConfig& config() const { return layout_.config(); }
  const ParamLayout& layout() const { return layout_; }
  int batch() const { return B_; }
  int seq() const { return T_; }

  // GPT-2 initialisation (normal 0.02, residual projections scaled by 1/sqrt(2L), zero
  // biases, unit LayerNorm gains), deterministic in `seed`, written into a full arena.
  static void init_params(const ParamLayout& layout, float* params, std::uint64_t seed);

  // One micro-batch: forward, loss, backward. Gradients of (grad_scale x mean loss) are
  // accumulated (+=) into access.grads(). tokens/targets: B*T ids each (targets < vocab_size).
  // Returns the mean cross-entropy loss over the B*T positions.
  float forward_backward(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                         float grad_scale);
  // Forward only, for validation. Same access order as the forward half above.
  float forward(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets);

  // Logits of the last forward (B*T x padded_vocab_size), for tests and sampling.
  const float* logits() const;

  // Per-unit kernels, for callers that drive the walk themselves.
  void embed_forward(const float* embed_params, const std::int32_t* tokens);
  void block_forward(int layer, const float* block_params);
  float head_forward(const float* lnf_params, const float* embed_params, const std::int32_t* targets);
  void head_backward(const float* lnf_params, const float* embed_params, float* lnf_grads,
                     float* embed_grads, float grad_scale);
  void block_backward(int layer, const float* block_params, float* block_grads);
  void embed_backward(float* embed_grads);

 ~GPT();
  GPT(GPT&&) noexcept;
  GPT& operator=(GPT&&) noexcept;

 private:
  ParamLayout layout_;
  int B_, T_;
  struct Impl;  // activations, their gradients, the kernel table; see gpt.cpp
  std::unique_ptr<Impl> impl_;
};

// The trivial UnitAccess over one full parameter arena and one full gradient arena.
class ArenaAccess final : public UnitAccess {
 public:
  ArenaAccess(const ParamLayout& layout, const float* params, float* grads)
      : layout_(layout), params_(params), grads_(grads) {}
  const float* acquire(int unit, Phase) override { return params_ + layout_.units()[unit].offset; }
  void release(int, Phase) override {}
  float* grads(int unit) override { return grads_ + layout_.units()[unit].offset; }
  void grads_ready(int) override {}

 private:
  const ParamLayout& layout_;
  const float* params_;
  float* grads_;
};

}  // namespace strata::model
