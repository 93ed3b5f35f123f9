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
//   ckpt/          checkpoints (checkpoint.hpp); train.keep_last prunes old ones
//
// Faults: a step whose loss or gradient norm is not finite (every rank sees the same global
// values) is skipped and counted; train.max_skipped_steps of them in a row stop the run with
// an Error, the last checkpoint left as it was. With gradients on an fp16 wire the loss is
// scaled dynamically (optim/loss_scaler.hpp). A preemption signal (preemption.hpp) ends the
// run after the current step with a checkpoint.
// One run at a time in an output folder: rank 0 locks it (base/folder_lock.hpp) first thing,
// so a second run, with or without --overwrite, is refused naming the first one's pid and
// host. A folder holding an earlier run's results is refused unless the run continues it
// (--resume from one of its checkpoints) or --overwrite replaces them; the refusal says which
// exists: an intact checkpoint to resume, or none. Every check, including reading the
// checkpoint, happens in the constructor, before anything but the lock file is written.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/folder_lock.hpp"
#include "data/loader.hpp"
#include "optim/loss_scaler.hpp"
#include "train/config.hpp"
#include "train/engine.hpp"
#include "train/faults.hpp"
#include "train/progress.hpp"

namespace strata::train {

class Checkpoint;
struct TrainerState;

struct StepMetrics {
  std::int64_t step = 0;
  double loss = 0;        // mean over micro-batches and ranks
  double lr = 0;
  double grad_norm = 0;   // global, before clipping
  double tokens_per_s = 0;
  std::optional<double> val_loss;
  bool skipped = false;   // not applied: the loss or gradient norm was not finite
  double loss_scale = 1;  // the dynamic loss scale the step ran with
  nlohmann::json to_json() const;
};

struct TrainResult {
  std::vector<StepMetrics> steps;  // the steps this invocation ran
  nlohmann::json summary;
  bool preempted = false;          // stopped early by a preemption signal, after a checkpoint
};

class Trainer {
 public:
  // The engine must have been built for config.model, config.batch and config.seq_len().
  Trainer(const TrainConfig& config, Engine& engine);

  std::int64_t start_step() const { return start_step_; }  // steps done before this invocation
  // Polled once per step on every rank; true on any rank stops the run after that step
  // (with a checkpoint). The default reads PreemptionHandler::requested().
  void set_stop_request(std::function<bool()> poll) { stop_request_ = std::move(poll); }
  // Called at each step (faults.hpp); the default injects STRATA_FAULT's faults. Not owned.
  void set_step_hook(const StepHook& hook) { step_hook_ = &hook; }
  TrainResult run();

 private:
  std::filesystem::path resume_source() const;
  // Why a folder with results is refused, pointing at what exists: an intact checkpoint to
  // continue with --resume latest, or none (then only --overwrite).
  std::string earlier_results_refusal() const;
  void resume_from(const std::filesystem::path& path);
  // Throws Error naming what differs from this run or is malformed; returns what to continue from.
  TrainerState check_resumable(const Checkpoint& ckpt) const;
  void prepare_output_folder();
  double validate();
  std::filesystem::path save(std::int64_t step);
  nlohmann::json run_identity() const;

  // run()'s phases: a step's micro-batches and update, a skipped step counted (a streak of them
  // ends the run), the step's metrics line and progress, the checkpoint it saves (true: a stop
  // was requested), and the summary at the end.
  struct StepDone {
    StepMetrics metrics;
    nlohmann::json report;  // Engine::step_report()
    bool stop = false;      // a rank was asked to stop
  };
  StepDone train_step(std::int64_t step, const StepHook& hook, Progress& progress);
  void count_skipped(std::int64_t step, double loss, double grad_norm, bool scaler_absorbs, Progress& progress);
  void log_step(const StepMetrics& m, const nlohmann::json& report, double eta_s, Progress& progress);
  bool save_or_stop(std::int64_t step, bool stop, Progress& progress);
  nlohmann::json summary(const TrainResult& result, double elapsed_s) const;
  void note(Progress& progress, const std::string& text) const;  // rank 0's

  TrainConfig config_;
  Engine& engine_;
  bool leader_;
  std::filesystem::path out_;
  std::optional<FolderLock> out_lock_;  // rank 0's, on out_, for the trainer's life
  parallel::ParallelDims dims_;  // the engine's: data sharding follows the replicas
  double tokens_per_step_;       // over all replicas and micro-batches
  data::DataLoader train_loader_;
  std::optional<data::DataLoader> val_loader_;
  int val_batches_ = 0;
  std::int64_t start_step_ = 0;
  std::filesystem::path resumed_from_;
  std::vector<std::string> passed_over_;  // newer checkpoints --resume found damaged
  std::uint64_t resumed_digest_ = 0;
  std::int64_t skipped_steps_ = 0;        // over the whole run, resumed ones included
  optim::LossScaler scaler_;
  std::function<bool()> stop_request_;
  const StepHook* step_hook_ = nullptr;  // nullptr: FaultPlan::from_environment()
  bool continue_output_ = false;  // resuming into the folder that holds the checkpoint
  std::vector<nlohmann::json> earlier_metrics_;  // lines of the resumed run up to start_step_
  std::ofstream metrics_;
  // What run() tallies over its steps.
  double train_seconds_ = 0, timed_tokens_ = 0;  // over the timed steps
  std::optional<double> last_val_;
  std::filesystem::path last_checkpoint_;
  std::int64_t skipped_in_a_row_ = 0;
};

}  // namespace strata::train
