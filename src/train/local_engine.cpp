#include "train/local_engine.hpp"

#include <cmath>
#include <cstring>

namespace strata::train {

LocalEngine::LocalEngine(const model::GPTConfig& config, int batch, int seq, std::uint64_t seed)
    : gpt_(config, batch, seq),
      params_(gpt_.layout().total_floats()),
      grads_(gpt_.layout().total_floats()),
      exp_avg_(gpt_.layout().total_floats()),
      exp_avg_sq_(gpt_.layout().total_floats()),
      access_(gpt_.layout(), params_.data(), grads_.data()) {
  model::GPT::init_params(gpt_.layout(), params_.data(), seed);
}

float LocalEngine::micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) {
  return gpt_.forward_backward(access_, tokens, targets, grad_scale);
}

float LocalEngine::eval_loss(const std::int32_t* tokens, const std::int32_t* targets) {
  return gpt_.forward(access_, tokens, targets);
}

double LocalEngine::optimizer_step(const optim::AdamWConfig& hp, float lr, std::int64_t step) {
  const std::size_t n = params_.size();
  const double norm = std::sqrt(optim::sum_squares(grads_.data(), n));
  // Clip by scaling inside the update rather than rewriting the gradients first: one pass.
  float clip_scale = 1.0f;
  if (hp.grad_clip > 0 && norm > hp.grad_clip) clip_scale = static_cast<float>(hp.grad_clip / norm);
  optim::adamw_update_range(layout(), 0, n, params_.data(), grads_.data(), exp_avg_.data(), exp_avg_sq_.data(), hp,
                            lr, step, clip_scale);
  grads_.zero();
  return norm;
}

std::vector<StateShard> LocalEngine::state_shards() {
  return {{0, params_.size(), params_.data(), exp_avg_.data(), exp_avg_sq_.data()}};
}

void LocalEngine::gather_params(float* full) { std::memcpy(full, params_.data(), params_.size() * sizeof(float)); }

}  // namespace strata::train
