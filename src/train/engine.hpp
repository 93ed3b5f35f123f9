#pragma once
// The trainer talks to an Engine: whoever holds the model state and moves it. The
// single-process LocalEngine (local_engine.hpp) holds everything; sharding engines
// (src/shard) hold a slice of each state and run collectives. The trainer loop, metrics and
// checkpoints are the same for all of them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "model/gpt.hpp"
#include "model/layout.hpp"
#include "optim/adamw.hpp"

namespace strata::train {

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

  // Forward + backward of one local micro-batch (B*T tokens and targets). Gradients of
  // grad_scale x (mean loss) accumulate until optimizer_step. Returns the local mean loss.
  virtual float micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) = 0;
  // Forward only; the local mean loss.
  virtual float eval_loss(const std::int32_t* tokens, const std::int32_t* targets) = 0;

  // Finishes gradient reduction, computes the global gradient L2 norm, clips to
  // hp.grad_clip (0 = off), applies AdamW with learning rate lr as update number `step`
  // (1-based), brings the updated weights to wherever the forward reads them, and zeroes
  // the gradients. Returns the global gradient norm before clipping.
  virtual double optimizer_step(const optim::AdamWConfig& hp, float lr, std::int64_t step) = 0;

  // Mean of a per-rank value over all ranks (the logged loss is the global mean).
  virtual double all_mean(double local) = 0;
  // Every rank's string, in rank order, on every rank. Checkpoints use it to collect the
  // shard records into one manifest and to agree on errors; it also orders file writes.
  virtual std::vector<std::string> all_gather_strings(const std::string& local) = 0;

  // Optimizer state this rank owns, for checkpoints. Together the shards of all ranks
  // cover the arena exactly once.
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
  virtual nlohmann::json summary_report() { return nlohmann::json::object(); }
};

// Runs `work` on every rank, then agrees: if it threw an Error on any rank, every rank
// throws (the lowest failing rank's message, prefixed "rank N: " when there are several), so
// no rank walks into a collective the others have left. Also a barrier.
template <class F>
void agree(Engine& engine, F&& work) {
  std::string local;
  try {
    work();
  } catch (const Error& e) {
    local = e.what();
    if (local.empty()) local = "unknown error";
  }
  auto all = engine.all_gather_strings(local);
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    if (all.size() == 1) throw Error(all[r]);
    throw Error("rank " + std::to_string(r) + ": " + all[r]);
  }
}

}  // namespace strata::train
