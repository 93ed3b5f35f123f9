#include "device/cuda/cuda_model.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "base/error.hpp"
#include "device/cuda/cuda_device.hpp"
#include "model/gpt_walk.hpp"
#include "model/team.hpp"

namespace strata::device::cuda {

ModelBuffers::ModelBuffers(Device& device, const ModelSizes& sizes, Precision precision)
    : device(device),
      storage(device, sizes.activation_floats),
      tables(device, sizes.table_floats),
      scratch(device, std::max<std::size_t>(sizes.kernel_scratch_bytes, 1)),
      matmul(device, precision, sizes.largest_operand, gpu_stream()),
      ids_(device, 2 * sizes.tokens),
      host_losses_(sizes.tokens) {}

std::uint64_t ModelBuffers::device_bytes(const ModelSizes& sizes, Precision precision) {
  return pool_bytes(sizes.activation_floats * sizeof(float)) + pool_bytes(sizes.table_floats * sizeof(float)) +
         pool_bytes(std::max<std::size_t>(sizes.kernel_scratch_bytes, 1)) +
         Matmul::device_bytes(precision, sizes.largest_operand) + pool_bytes(2 * sizes.tokens * sizeof(std::int32_t));
}

void ModelBuffers::upload_tokens(const std::int32_t* tokens) {
  device.from_host(ids_.data(), tokens, host_losses_.size() * sizeof(std::int32_t));
}

void ModelBuffers::upload_targets(const std::int32_t* targets) {
  device.from_host(this->targets(), targets, host_losses_.size() * sizeof(std::int32_t));
}

float ModelBuffers::mean_loss(const float* losses) {
  device.to_host(host_losses_.data(), losses, host_losses_.size() * sizeof(float));
  double total = 0;  // in row order, as the CPU models sum
  for (float loss : host_losses_) total += loss;
  return static_cast<float>(total / static_cast<double>(host_losses_.size()));
}

CudaModel::CudaModel(Device& device, const model::ModelConfig& config, model::Family family, int batch, int seq,
                     bool recompute, Precision precision, Sizes sizes)
    : layout_(config), B_(batch), T_(seq), recompute_(recompute) {
  if (config.family != family)
    throw Error(fmt::format("model: the GPU's {} model built for family {}", model::family_name(family),
                            model::family_name(config.family)));
  if (batch <= 0) throw Error(fmt::format("model: batch = {}: must be positive", batch));
  if (seq <= 0 || seq > config.seq_len)
    throw Error(fmt::format("model: seq = {}: must be in [1, model.seq_len = {}]", seq, config.seq_len));
  if (config.head_dim() > 128)
    throw Error(fmt::format("train.device = 'cuda': head size {} (model.n_embd / model.n_head): the GPU attention "
                            "takes at most 128",
                            config.head_dim()));
  buffers_ = std::make_unique<ModelBuffers>(device, sizes(config, batch, seq, recompute), precision);
}

float CudaModel::forward(model::UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets) {
  return forward_training(access, tokens, targets, 0.0f);  // a logits' gradient of zero, unused
}

float CudaModel::forward_walk(model::UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                              float dlogits_scale) {
  return model::forward_walk(
      layout_, access, [&](const float* embed) { embed_forward(embed, tokens); },
      [&](int l, const float* p) { block_forward(l, p); },
      [&](const float* norm, const float* head) { return head_forward(norm, head, targets, dlogits_scale); });
}

float CudaModel::forward_training(model::UnitAccess& access, const std::int32_t* tokens,
                                  const std::int32_t* targets, float grad_scale) {
  const std::size_t BT = static_cast<std::size_t>(B_) * T_;
  model::check_ids(tokens, BT, config().vocab_size, "token");
  model::check_ids(targets, BT, config().vocab_size, "target");
  return forward_walk(access, tokens, targets, grad_scale / static_cast<float>(BT));
}

void CudaModel::backward(model::UnitAccess& access) {
  model::backward_walk(
      layout_, access,
      [&](const float* norm, const float* head, float* norm_grads, float* head_grads) {
        head_backward(norm, head, norm_grads, head_grads);
      },
      [&](int l, const float* p, float* g) { block_backward(l, p, g); },
      [&](float* embed_grads) { embed_backward(embed_grads); });
  synchronize("forward/backward");
}

}  // namespace strata::device::cuda
