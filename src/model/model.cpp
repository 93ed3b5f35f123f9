#include "model/model.hpp"

#include "base/error.hpp"

#include "model/gpt.hpp"
#include "model/init.hpp"
#include "model/llama.hpp"

namespace strata::model {

void Model::init_params(float* params, std::uint64_t seed) const { model::init_params(layout(), params, seed); }

std::vector<UnitEvent> unit_event_order(const GPTConfig& config) {
  return config.family == Family::Llama ? Llama::event_order(config) : GPT::event_order(config);
}

std::vector<TensorParallelCall> tensor_parallel_calls(const GPTConfig& config, int tp, int batch, int seq,
                                                      bool recompute) {
  if (tp == 1) return {};
  static_cast<void>(ParamLayout(config, {tp, 0}));  // refuses a model that does not split so
  return tensor_parallel_calls(TensorParallelWalk{config.n_layer, config.n_embd, batch, seq, recompute});
}

std::uint64_t activation_bytes(const GPTConfig& config, int batch, int seq, bool recompute) {
  return config.family == Family::Llama ? Llama::activation_bytes(config, batch, seq, recompute)
                                        : GPT::activation_bytes(config, batch, seq, recompute);
}

std::unique_ptr<Model> make_model(const GPTConfig& config, int batch, int seq, bool recompute,
                                  const Kernels& kernels, const TensorParallel& tp) {
  if (config.family == Family::Llama) return std::make_unique<Llama>(config, batch, seq, recompute, kernels, tp);
  return std::make_unique<GPT>(config, batch, seq, recompute, kernels, tp);
}

}  // namespace strata::model
