#include "model/model.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

#include "model/gpt.hpp"
#include "model/init.hpp"
#include "model/llama.hpp"

namespace strata::model {

void Model::init_params(float* params, std::uint64_t seed) const { model::init_params(layout(), params, seed); }

std::vector<UnitEvent> unit_event_order(const ModelConfig& config) {
  return config.family == Family::Llama ? Llama::event_order(config) : GPT::event_order(config);
}

// Sequence parallelism shards the micro-batch's token rows over the TP group.
static void check_sequence_parallel(int tp, int batch, int seq) {
  if (tp == 1) throw Error("--sequence-parallel: needs tensor parallelism (--tp 2 or more) to shard the rows over");
  if (static_cast<long long>(batch) * seq % tp != 0)
    throw Error(fmt::format("--sequence-parallel: --tp {} does not divide the micro-batch's {} x {} token rows", tp,
                            batch, seq));
}

std::vector<TensorParallelCall> tensor_parallel_calls(const ModelConfig& config, int tp, int batch, int seq,
                                                      bool recompute, bool sequence_parallel) {
  if (sequence_parallel) check_sequence_parallel(tp, batch, seq);
  if (tp == 1) return {};
  static_cast<void>(ParamLayout(config, {tp, 0}));  // refuses a model that does not split so
  TensorParallelWalk walk{config.n_layer, config.n_embd, batch, seq, recompute};
  walk.sequence_parallel = sequence_parallel;
  walk.degree = tp;
  walk.norm_params = config.family == Family::Llama ? config.n_embd : 2 * config.n_embd;  // RMSNorm: a gain
  return tensor_parallel_calls(walk);
}

std::uint64_t activation_bytes(const ModelConfig& config, int batch, int seq, bool recompute, int tp,
                               bool sequence_parallel) {
  return config.family == Family::Llama ? Llama::activation_bytes(config, batch, seq, recompute, tp, sequence_parallel)
                                        : GPT::activation_bytes(config, batch, seq, recompute, tp, sequence_parallel);
}

std::unique_ptr<Model> make_model(const ModelConfig& config, int batch, int seq, bool recompute,
                                  const Kernels& kernels, const TensorParallel& tp) {
  if (tp.sequence_parallel) check_sequence_parallel(tp.split.size, batch, seq);
  if (config.family == Family::Llama) return std::make_unique<Llama>(config, batch, seq, recompute, kernels, tp);
  return std::make_unique<GPT>(config, batch, seq, recompute, kernels, tp);
}

std::unique_ptr<StageModel> make_stage_model(const ModelConfig& config, int batch, int seq, bool recompute) {
  if (config.family == Family::Llama) return std::make_unique<Llama>(config, batch, seq, recompute);
  return std::make_unique<GPT>(config, batch, seq, recompute);
}

}  // namespace strata::model
