#pragma once
// The single-process engine: one full parameter arena, one gradient arena and the AdamW
// moments, all in the layout's order. Its one state shard is the whole arena.
#include <cstdint>

#include "base/aligned.hpp"
#include <memory>

#include "model/model.hpp"
#include "train/engine.hpp"

namespace strata::train {

class LocalEngine final : public Engine {
 public:
  // Activations for micro-batches of `batch` x `seq` tokens (recomputed in backward with
  // `recompute`); parameters initialised from `seed`.
  LocalEngine(const model::GPTConfig& config, int batch, int seq, std::uint64_t seed, bool recompute = false);

  const model::ParamLayout& layout() const override { return model_->layout(); }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }

  float micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) override;
  float eval_loss(const std::int32_t* tokens, const std::int32_t* targets) override;
  StepOutcome optimizer_step(const optim::AdamWConfig& hp, const StepArgs& args) override;

  std::pair<double, bool> all_mean_and_any(double local, bool flag) override { return {local, flag}; }
  std::vector<std::string> all_gather_strings(const std::string& local) override { return {local}; }

  std::vector<StateShard> state_shards() override;
  void state_loaded() override {}  // the master weights are the weights the forward reads
  void gather_params(float* full) override;
  nlohmann::json describe() const override { return {{"strategy", "single"}, {"world_size", 1}}; }

  const model::Model& model() const { return *model_; }
  const float* params() const { return params_.data(); }
  const float* grads() const { return grads_.data(); }

 private:
  std::unique_ptr<model::Model> model_;
  AlignedBuffer<float> params_, grads_, exp_avg_, exp_avg_sq_;
  model::ArenaAccess access_;
};

}  // namespace strata::train
