#pragma once
// AdamW with decoupled weight decay over flat fp32 runs, and the learning-rate schedule.
// The update works on any [begin, end) run of the arena, so an optimizer shard is just a
// shorter run; weight decay follows the layout's decay segments (none on norms and biases).
//
// Bit-exactness: every element goes through the same sequence of IEEE operations (no FMA,
// no reciprocal approximations) whatever its position, vector lane, thread or instruction
// set, so updating the arena in any split of [begin, end) pieces gives exactly the numbers
// of one whole-arena update. Sharding engines rely on this.
#include <cstddef>
#include <cstdint>

#include "base/adamw_coefficients.hpp"
#include "base/cpu.hpp"
#include "model/layout.hpp"

namespace strata::optim {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // global L2 norm; 0 turns clipping off

  // Throws Error naming the field ("adamw.beta1 = 1: must be in [0, 1)").
  void validate() const;
};

// One AdamW update of n elements. grad_scale multiplies every gradient first (clipping).
// step is the 1-based update count used for bias correction.
void adamw_update(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t n,
                  const AdamWConfig& hp, float lr, float weight_decay, std::int64_t step, float grad_scale);

// The constants adamw_update computes for these arguments (also what the CUDA kernel takes);
// throws Error for a step below 1.
AdamWCoefficients adamw_coefficients(const AdamWConfig& hp, float lr, float weight_decay, std::int64_t step,
                                     float grad_scale);

// Update the arena run [begin, end): params/grads/moments point at element `begin`.
// Decay is applied only where the layout says so.
void adamw_update_range(const model::ParamLayout& layout, std::size_t begin, std::size_t end, float* params,
                        const float* grads, float* exp_avg, float* exp_avg_sq, const AdamWConfig& hp, float lr,
                        std::int64_t step, float grad_scale);

// The factor the update multiplies every gradient by: 1 / loss_scale (gradients computed from
// a scaled loss), times grad_clip / grad_norm when clipping applies. grad_norm is the global
// norm of the unscaled gradients.
float gradient_multiplier(const AdamWConfig& hp, double grad_norm, double loss_scale);

// Sum of squares in double. Deterministic for a given n: the summation order is fixed by n
// alone, not by the thread count or instruction set.
double sum_squares(const float* x, std::size_t n);

// Linear warm-up to max_lr over warmup_steps, then cosine decay to min_lr at total_steps
// (and min_lr after it).
struct LrSchedule {
  float max_lr = 6e-4f;
  float min_lr = 6e-5f;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  float at(std::int64_t step) const;  // step is 1-based
  // Throws Error naming the field ("lr_schedule.min_lr = ... exceeds max_lr = ...").
  void validate() const;
};

namespace detail {
// The same operations on an explicitly chosen instruction set, so tests can check that
// every path gives the same bits. The public functions use strata::detected_isa().
void adamw_update_isa(Isa isa, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                      std::size_t n, const AdamWConfig& hp, float lr, float weight_decay, std::int64_t step,
                      float grad_scale);
double sum_squares_isa(Isa isa, const float* x, std::size_t n);
}  // namespace detail

}  // namespace strata::optim
