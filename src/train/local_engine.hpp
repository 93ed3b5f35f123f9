#pragma once
// The single-process engine: one full parameter arena, one gradient arena and the AdamW
// moments, all in the layout's order, in the memory of one compute device (the host CPU by
// default, or a GPU: device/device.hpp). Its one state shard is the whole arena.
#include <cstdint>
#include <memory>
#include <vector>

#include "device/device.hpp"
#include "model/model.hpp"
#include "train/engine.hpp"
#include "train/staged_state.hpp"

namespace strata::train {

class LocalEngine final : public Engine {
 public:
  // Activations for micro-batches of `batch` x `seq` tokens (recomputed in backward with
  // `recompute`); parameters initialised from `seed`; everything held and computed on
  // `device` at `precision` (the device refuses a precision it does not compute in).
  LocalEngine(const model::ModelConfig& config, int batch, int seq, std::uint64_t seed, bool recompute = false,
              device::Device& device = device::host(), Precision precision = Precision::F32);

  // Device memory such an engine takes: the four arenas and the model's activations. The
  // engine reserves exactly this from its device before allocating anything.
  static std::uint64_t device_bytes(const model::ModelConfig& config, int batch, int seq, bool recompute,
                                    const device::Device& device, Precision precision);

  const model::ParamLayout& layout() const override { return model_->layout(); }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }

  float micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) override;
  float eval_loss(const std::int32_t* tokens, const std::int32_t* targets) override;
  StepOutcome optimizer_step(const optim::AdamWConfig& hp, const StepArgs& args) override;

  std::pair<double, bool> all_mean_and_any(double local, bool flag) override { return {local, flag}; }
  std::vector<std::string> all_gather_strings(const std::string& local) override { return {local}; }

  // On a device the host cannot address, the shards are host copies: taken from the device
  // here (again only after an update), put back by state_loaded().
  std::vector<StateShard> state_shards() override;
  void state_loaded() override;
  void gather_params(float* full) override;
  nlohmann::json describe() const override { return {{"strategy", "single"}, {"world_size", 1}}; }

  const model::Model& model() const { return *model_; }
  // In the device's memory.
  const float* params() const { return params_.data(); }
  const float* grads() const { return grads_.data(); }

 private:
  device::Device& device_;
  std::unique_ptr<model::Model> model_;
  device::Buffer<float> params_, grads_, exp_avg_, exp_avg_sq_;
  model::ArenaAccess access_;
  std::vector<StateShard> device_shards();  // the state in the device's memory
  StagedState staged_;       // its host copies for checkpoints, where the host cannot address it
  std::int64_t updates_ = 0;  // applied ones
};

}  // namespace strata::train
