#pragma once
// The training loop, written against the Engine interface only, so the single-process engine
// and the sharding engines run the same loop, metrics and checkpoints. Rank 0 writes files
// and prints; every logged loss is the mean over ranks.
//
// Output folder (--out):
//   metrics.jsonl  one JSON object per step: step, loss, lr, grad_norm, tokens_per_s, and
//                  val_loss on the steps that validate
//   summary.json   written at the end: loss.first/final, val_loss, tokens_per_s, steps, model,
//                  data (with the unigram entropy of the training tokens), timing, threads, isa
//   ckpt/          checkpoints (checkpoint.hpp)
// A folder holding an earlier run's results is refused unless the run continues it (--resume
// from one of its checkpoints) or --overwrite replaces them. Every check, including reading
// the checkpoint, happens in the constructor, before anything is written.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/loader.hpp"
#include "train/config.hpp"
#include "train/engine.hpp"

namespace strata::train {

struct StepMetrics {
  std::int64_t step = 0;
  double loss = 0;        // mean over micro-batches and ranks
  double lr = 0;
  double grad_norm = 0;   // global, before clipping
  double tokens_per_s = 0;
  std::optional<double> val_loss;
  nlohmann::json to_json() const;
};

struct TrainResult {
  std::vector<StepMetrics> steps;  // the steps this invocation ran
  nlohmann::json summary;
};

class Trainer {
 public:
  // The engine must have been built for config.model, config.batch and config.seq_len().
  Trainer(const TrainConfig& config, Engine& engine);

  std::int64_t start_step() const { return start_step_; }  // steps done before this invocation
  TrainResult run();

 private:
  void resume_from(const std::filesystem::path& path);
  void prepare_output_folder();
  double validate();
  std::filesystem::path save(std::int64_t step);
  nlohmann::json run_identity() const;

  TrainConfig config_;
  Engine& engine_;
  bool leader_;
  std::filesystem::path out_;
  data::DataLoader train_loader_;
  std::optional<data::DataLoader> val_loader_;
  int val_batches_ = 0;
  std::int64_t start_step_ = 0;
  std::filesystem::path resumed_from_;
  bool continue_output_ = false;  // resuming into the folder that holds the checkpoint
  std::vector<nlohmann::json> earlier_metrics_;  // lines of the resumed run up to start_step_
  std::ofstream metrics_;
};

}  // namespace strata::train
