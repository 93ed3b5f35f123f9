#include "train/local_engine.hpp"

#include <cmath>

namespace strata::train {

namespace {

// The model comes first among the engine's members, so the pool is reserved here, before it.
std::unique_ptr<model::Model> reserve_and_make_model(const model::ModelConfig& config, int batch, int seq,
                                                     bool recompute, device::Device& device,
                                                     Precision precision) {
  device.reserve(LocalEngine::device_bytes(config, batch, seq, recompute, device, precision));
  return device.make_model(config, batch, seq, recompute, precision);
}

}  // namespace

std::uint64_t LocalEngine::device_bytes(const model::ModelConfig& config, int batch, int seq, bool recompute,
                                        const device::Device& device, Precision precision) {
  const model::ParamLayout layout(config);
  return 4 * device::pool_bytes(layout.total_floats() * sizeof(float)) +
         device.model_bytes(config, batch, seq, recompute, precision);
}

LocalEngine::LocalEngine(const model::ModelConfig& config, int batch, int seq, std::uint64_t seed, bool recompute,
                         device::Device& device, Precision precision)
    : device_(device),
      model_(reserve_and_make_model(config, batch, seq, recompute, device, precision)),
      params_(device, model_->layout().total_floats()),
      grads_(device, model_->layout().total_floats()),
      exp_avg_(device, model_->layout().total_floats()),
      exp_avg_sq_(device, model_->layout().total_floats()),
      access_(model_->layout(), params_.data(), grads_.data()) {
  if (device_.host_visible()) {
    model_->init_params(params_.data(), seed);
  } else {
    std::vector<float> initial(params_.size());
    model_->init_params(initial.data(), seed);
    device_.from_host(params_.data(), initial.data(), initial.size() * sizeof(float));
  }
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
  out.grad_norm = std::sqrt(device_.sum_squares(grads_.data(), n)) / args.loss_scale;
  out.applied = !args.skip && std::isfinite(out.grad_norm);
  if (out.applied) {
    // Unscale and clip inside the update rather than rewriting the gradients first: one pass.
    const float scale = optim::gradient_multiplier(hp, out.grad_norm, args.loss_scale);
    device_.adamw_update_range(layout(), 0, n, params_.data(), grads_.data(), exp_avg_.data(), exp_avg_sq_.data(),
                               hp, args.lr, args.update, scale);
    ++updates_;
  }
  grads_.zero();
  return out;
}

std::vector<StateShard> LocalEngine::device_shards() {
  return {{0, params_.size(), params_.data(), exp_avg_.data(), exp_avg_sq_.data()}};
}

std::vector<StateShard> LocalEngine::state_shards() {
  if (device_.host_visible()) return device_shards();
  return staged_.host_shards(device_, device_shards(), updates_);
}

void LocalEngine::state_loaded() {
  // On the host the master weights are the weights the forward reads: nothing to rebuild.
  if (!device_.host_visible()) staged_.put_back(device_, device_shards());
}

void LocalEngine::gather_params(float* full) {
  device_.to_host(full, params_.data(), params_.size() * sizeof(float));
}

}  // namespace strata::train
