#include "train/local_engine.hpp"

#include <cmath>
#include <cstring>

namespace strata::train {

LocalEngine::LocalEngine(const model::GPTConfig& config, int batch, int seq, std::uint64_t seed, bool recompute)
    : model_(model::make_model(config, batch, seq, recompute)),
      params_(model_->layout().total_floats()),
      grads_(model_->layout().total_floats()),
      exp_avg_(model_->layout().total_floats()),
      exp_avg_sq_(model_->layout().total_floats()),
      access_(model_->layout(), params_.data(), grads_.data()) {
  model_->init_params(params_.data(), seed);
}

float LocalEngine::micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) {
  return model_->forward_backward(access_, tokens, targets, grad_scale);
}

float LocalEngine::eval_loss(const std::int32_t* tokens, const std::int32_t* targets) {
  return model_->forward(access_, tokens, targets);
}

StepOutcome LocalEngine::optimizer_step(const optim::AdamWConfig& hp, const StepArgs& args) {
  const std::size_t n = params_.size();
  StepOutcome out;
  out.grad_norm = std::sqrt(optim::sum_squares(grads_.data(), n)) / args.loss_scale;
  out.applied = !args.skip && std::isfinite(out.grad_norm);
  if (out.applied) {
    // Unscale and clip inside the update rather than rewriting the gradients first: one pass.
    const float scale = optim::gradient_multiplier(hp, out.grad_norm, args.loss_scale);
    optim::adamw_update_range(layout(), 0, n, params_.data(), grads_.data(), exp_avg_.data(), exp_avg_sq_.data(),
                              hp, args.lr, args.update, scale);
  }
  grads_.zero();
  return out;
}

std::vector<StateShard> LocalEngine::state_shards() {
  return {{0, params_.size(), params_.data(), exp_avg_.data(), exp_avg_sq_.data()}};
}

void LocalEngine::gather_params(float* full) { std::memcpy(full, params_.data(), params_.size() * sizeof(float)); }

}  // namespace strata::train
