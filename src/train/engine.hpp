#pragma once
// The trainer talks to an Engine: whoever holds the model state and moves it. The
// single-process LocalEngine (local_engine.hpp) holds everything; sharding engines
// (src/shard) hold a slice of each state and run collectives. The trainer loop, metrics and
// checkpoints are the same for all of them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/agree.hpp"
#include "base/error.hpp"
#include "model/layout.hpp"
#include "model/model.hpp"
#include "optim/adamw.hpp"
#include "parallel/dims.hpp"

namespace strata::train {

// One optimizer step's inputs besides the AdamW hyper-parameters.
struct StepArgs {
  float lr = 0;
  std::int64_t update = 1;  // 1-based number of this update among those applied (bias correction)
  double loss_scale = 1;    // the gradients carry this factor (grad_scale of micro_step); it is
                            // divided out before the norm, clipping and the update
  bool skip = false;        // finish the step's reductions but change nothing (all ranks agree)
};

struct StepOutcome {
  double grad_norm = 0;  // global L2 norm of the unscaled gradients, before clipping
  bool applied = false;  // false: skipped (asked to, or grad_norm is not finite)
};

// A run [begin, end) of the flat parameter arena whose optimizer state this rank owns:
// fp32 master weights and the two Adam moments, each `end - begin` floats.
struct StateShard {
  std::size_t begin = 0, end = 0;
  float* master = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};

class Engine {
 public:
  virtual ~Engine() = default;

  virtual const model::ParamLayout& layout() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // How the ranks split into data-parallel replicas: the data a rank reads and what the
  // gradient is averaged over follow these. By default every rank is one replica.
  virtual parallel::ParallelDims parallel_dims() const { return {{world_size()}}; }

  // Forward + backward of one local micro-batch (B*T tokens and targets). Gradients of
  // grad_scale x (mean loss) accumulate until optimizer_step. Returns the local mean loss.
  virtual float micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) = 0;
  // Forward only; the local mean loss.
  virtual float eval_loss(const std::int32_t* tokens, const std::int32_t* targets) = 0;

  // Finishes gradient reduction, computes the global gradient L2 norm, clips to
  // hp.grad_clip (0 = off), applies AdamW with args.lr as update number args.update, brings
  // the updated weights to wherever the forward reads them, and zeroes the gradients. A
  // non-finite norm (every rank computes the same bits) or args.skip leaves weights and
  // optimizer state untouched: the step's gradients are dropped on every rank alike.
  virtual StepOutcome optimizer_step(const optim::AdamWConfig& hp, const StepArgs& args) = 0;

  // Mean of a per-rank value over all ranks and whether any rank's flag is set, in one
  // collective: each step's logged loss and its stop request (preemption) travel together.
  virtual std::pair<double, bool> all_mean_and_any(double local, bool flag) = 0;
  double all_mean(double local) { return all_mean_and_any(local, false).first; }
  // Every rank's string, in rank order, on every rank. Checkpoints use it to collect the
  // shard records into one manifest and to agree on errors; it also orders file writes.
  virtual std::vector<std::string> all_gather_strings(const std::string& local) = 0;

  // Optimizer state this rank owns, for checkpoints, in its layout's arena (a TP rank's: its
  // slice; checkpoints map it to the whole model's, model::ParamLayout::whole_runs). Together
  // the shards of the ranks of one TP index cover that arena exactly once.
  virtual std::vector<StateShard> state_shards() = 0;
  // The shards this rank writes into a checkpoint: those of state_shards() that no other
  // rank writes (ranks holding replicas of a slice leave it to one of them).
  virtual std::vector<StateShard> saved_shards() { return state_shards(); }
  // After the shards were overwritten from a checkpoint: rebuild every derived copy of
  // the weights (gathered or low-precision ones) from the master shards.
  virtual void state_loaded() = 0;

  // The full fp32 parameters, assembled on every rank (for export and tests).
  virtual void gather_params(float* full) = 0;

  // What engines that communicate add to the step's metrics line (called once after each
  // step's all_mean) and to summary.json (called once at the end): strategy, traffic per
  // tier, compute and exposed communication time, memory per state. Empty by default.
  virtual nlohmann::json step_report() { return nlohmann::json::object(); }
  // How the state is laid out, for checkpoint manifests: {"strategy": ...} and, for sharding
  // engines, the shard spec and topology.
  virtual nlohmann::json describe() const = 0;
  // True when gradients cross an fp16 wire, where small values flush to zero and large ones
  // overflow: the trainer then scales the loss dynamically.
  virtual bool fp16_gradients() const { return false; }
  virtual nlohmann::json summary_report() { return nlohmann::json::object(); }
};

// Runs `work` on every rank, then agrees (base/agree.hpp): if it threw on any rank, every
// rank throws the same AgreedError. Also a barrier.
template <class F>
void agree(Engine& engine, F&& work) {
  settle(engine.all_gather_strings(failure_of(work)));
}

}  // namespace strata::train
