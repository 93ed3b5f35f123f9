#pragma once
// The sharding runtime: an Engine that holds, for every unit, only this rank's slices of the
// weights (W, in the weight wire format), the secondary copy (hpZ), the gradient accumulator
// (G) and the optimizer state (OS), and runs shard::Schedule's program — its ops, at its
// issue points — to give the model full units when it needs them. The engine keeps unit
// state and compute; when an op is issued, waited for, and which buffer it fills is the
// schedule's (MicroBatchProgram), how it runs is the executor's (executor.hpp).
// Every buffer it holds is a device::Buffer of the compute device it is given, reserved up
// front from the schedule's memory formula (no allocation per step); the model is the one
// that device makes, and every copy, sum, encoding, norm and update of those buffers goes
// through the device (device/device.hpp), so the engine runs unchanged on memory the host
// cannot address. Its collectives are given per level, for that memory.
//
// In a pipeline stage (PipelineStage) it holds and walks the stage's units only (under TP,
// their TP slices).
//
// Under tensor parallelism (TensorParallelism) the model holds this rank's TP slice
// (model/tensor_parallel.hpp) and all-reduces over the TP group; the schedule shards that
// slice over the data-parallel ranks of the same TP index (the comms it is given span them).
//
// Each event's chain of per-level ops (a gather, a reduction) is one task on the
// communication thread (comm::Context), so it overlaps with the model's compute; the compute
// thread only waits where the program says. Time spent waiting is the step's exposed
// communication.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "base/aligned.hpp"
#include "comm/backends/tier_comms.hpp"
#include "comm/runtime/context.hpp"
#include "device/device.hpp"
#include "model/model.hpp"
#include "model/stage_walk.hpp"
#include "shard/executor.hpp"
#include "shard/schedule.hpp"
#include "train/engine.hpp"
#include "train/staged_state.hpp"

namespace strata::shard {

// A tensor-parallel run: its dims (tensor > 1) and this rank's TP group.
struct TensorParallelism {
  parallel::ParallelDims dims;
  comm::Collectives* group = nullptr;
  bool sequence_parallel = false;  // --sequence-parallel (model/tensor_parallel.hpp)
};

// A pipeline stage (PipelineEngine): the engine holds the stage's units only (its schedule
// indexes them 0..k-1, each mapped to its ParamLayout unit), walks model::StageWalk, and its
// levels span the stage's data-parallel ranks. What crosses stages at the optimizer step is
// the pipeline's: the tied embeddings' OS gradient summed with the other end's (an op of its
// PipelineSchedule), and the gradient norm's squares summed over the stages.
struct PipelineStage {
  parallel::ParallelDims dims;  // the run's (pipeline > 1)
  model::StageRange range;
  std::shared_ptr<const Schedule> schedule;  // the stage's (PipelineSchedule::sharding): the engine runs it
  std::function<void(float* os_grad, std::size_t n)> sum_tied;
  std::function<double(double)> sum_over_stages;
};

// strata's MPI Communicators over `comms`' tiers, which read host memory: both the device
// and the host levels of an engine on a device the host addresses.
LevelCollectives mpi_levels(comm::TierComms& comms);

struct StepTiming {
  double compute_s = 0;        // step wall time less exposed communication
  double exposed_comm_s = 0;   // compute thread waiting on communication
};

class ShardedEngine final : public train::Engine, private model::UnitAccess, private model::TensorParallelGroup {
 public:
  // Collective over the world. Parameters are initialised from `seed` exactly as the
  // single-process trainer does, each rank drawing only the slices it holds. `levels.device`
  // move the buffers in `device`'s memory, `levels.host` the host values (executor.hpp).
  // `recompute`: the model recomputes activations in backward (model::GPT); `precision`:
  // what its products read (the device refuses one it does not compute in). With `tp`,
  // `levels` span the ranks of this rank's TP index over tp->dims.data_parallel_topology()
  // (ShardedRuntime); tensor parallelism runs on a host-visible device only (its model
  // computes with kernels()). `in_flight`: the micro-batches whose halves may be in flight at
  // once (forward_half), each with activations of its own.
  ShardedEngine(const model::ModelConfig& config, int batch, int seq, comm::Context& ctx, LevelCollectives levels,
                const ShardSpec& spec, int accumulation_steps, std::uint64_t seed, device::Device& device,
                bool recompute = false, const std::optional<TensorParallelism>& tp = std::nullopt,
                Precision precision = Precision::F32, int in_flight = 1, const PipelineStage* stage = nullptr);
  // Over strata's MPI Communicators (host memory).
  ShardedEngine(const model::ModelConfig& config, int batch, int seq, comm::Context& ctx, comm::TierComms& comms,
                const ShardSpec& spec, int accumulation_steps, std::uint64_t seed, device::Device& device,
                bool recompute = false, const std::optional<TensorParallelism>& tp = std::nullopt,
                Precision precision = Precision::F32, int in_flight = 1)
      : ShardedEngine(config, batch, seq, ctx, mpi_levels(comms), spec, accumulation_steps, seed, device, recompute,
                      tp, precision, in_flight) {}
  ~ShardedEngine() override;

  // What the engine reserves of `device` before its first allocation: every buffer it holds,
  // from the schedule's memory formula at the device pool's alignment, and the model's.
  static std::uint64_t device_bytes(const Schedule& schedule, const device::Device& device,
                                    const model::ModelConfig& config, int batch, int seq, bool recompute,
                                    Precision precision, int in_flight = 1);

  const model::ParamLayout& layout() const override { return models_.front()->layout(); }  // the whole model's
  int rank() const override { return rank_; }
  int world_size() const override { return ctx_.world_size(); }
  parallel::ParallelDims parallel_dims() const override { return dims_; }
  float micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) override;
  float eval_loss(const std::int32_t* tokens, const std::int32_t* targets) override;
  // micro_step cut in two (Schedule::halves_program), for a pipeline stage's 1F1B: the
  // forward of a micro-batch on activation slot `slot` (< in_flight), returning its loss, and
  // later that slot's backward, other micro-batches' halves running between them. Backwards
  // run in the order of their forwards; the step's last backward is its last micro-batch.
  float forward_half(int slot, const std::int32_t* tokens, const std::int32_t* targets, float grad_scale);
  void backward_half(int slot);
  // A pipeline stage's walk on activation slot `slot` (its StageModel's residual stream is
  // what the stage sends and receives). Error unless built with a PipelineStage.
  model::StageWalk& stage_walk(int slot);
  // `local` summed over this rank's levels by the schedule's scalar op of `purpose`
  // (GradNormAllReduce, LossAllReduce), and under TP over its TP group (every TP rank's value
  // counted): a pipeline stage's part of a sum over the world.
  std::vector<double> sum_over_levels(std::vector<double> local, Purpose purpose) {
    std::vector<double> sum = scalar_sum(std::move(local), purpose);
    tensor_parallel_sum(sum);
    return sum;
  }
  train::StepOutcome optimizer_step(const optim::AdamWConfig& hp, const train::StepArgs& args) override;
  std::pair<double, bool> all_mean_and_any(double local, bool flag) override;
  std::vector<std::string> all_gather_strings(const std::string& local) override;
  std::vector<train::StateShard> state_shards() override;
  std::vector<train::StateShard> saved_shards() override;
  void state_loaded() override;
  void gather_params(float* full) override;
  nlohmann::json step_report() override;
  nlohmann::json summary_report() override;
  nlohmann::json describe() const override;
  bool fp16_gradients() const override;

  const Schedule& schedule() const { return schedule_; }
  StateMemory memory_bytes() const;            // what this rank actually allocated, by state
  // summary.json's "memory_bytes": memory_bytes() and the activations of every slot in flight.
  nlohmann::json memory_report() const;
  std::uint64_t activation_bytes() const { return models_.front()->activation_bytes(); }  // one slot's
  StepTiming take_timing();                    // since the last call
  comm::Context& context() { return ctx_; }
  // The ops the communication thread ran in the last micro-batch (training or evaluation)
  // and in the last optimizer step, in the order it ran them.
  const std::vector<const ScheduledOp*>& last_micro_batch_trace() const { return micro_trace_; }
  const std::vector<const ScheduledOp*>& last_step_trace() const { return step_trace_; }
  // The most full-unit buffers of the pool lent at once in the last micro-batch (training or
  // evaluation): what the walk needed, against the schedule's lifetime replay.
  int last_micro_batch_peak_buffers() const { return peak_lent_; }

 private:
  struct Unit;

  // model::UnitAccess
  const float* acquire(int unit, model::Phase phase) override;
  void release(int unit, model::Phase phase) override;
  float* grads(int unit) override;
  void grads_ready(int unit) override;

  // model::TensorParallelGroup: the model's TP collectives, waited for as exposed communication.
  void all_reduce_sum(float* data, std::size_t n) override;
  void all_gather(const float* mine, std::size_t n, float* all) override;
  void reduce_scatter_sum(const float* all, std::size_t n, float* mine) override;
  // fp64 values summed over the TP group in member order (the same bits on every member).
  void tensor_parallel_sum(std::vector<double>& values);
  double tensor_parallel_sum_squares(const Unit& unit) const;
  const ScheduledOp& next_tensor_parallel_op(Collective kind, std::size_t n);
  void check_tensor_parallel_done(int ops) const;
  void gather_over_tensor_group(comm::CBuf mine, comm::Buf all);
  void gather_slice_params(float* slice_arena);  // this rank's layout's parameters, whole

  Chain ops_for(const std::vector<ScheduledOp>& ops, Purpose purpose, int unit) const;
  // The flight recorder (comm/flight.hpp): `ops` issued now over `levels`; returns the first
  // one's number (0: not recording), which the chain's task hands the executor.
  std::uint64_t record_issue(const Chain& ops, const std::vector<comm::Collectives*>& levels) const;
  comm::FlightOp flight_op(const ScheduledOp& op, std::string_view group) const;
  // `body` as the communication thread's task `name`, `ops` recorded as issued (record_issue).
  template <class F>
  comm::Work run_chain(const char* name, const Chain& ops, F body);
  // A TP op, run and waited for on this thread: started when issued.
  std::uint64_t record_tensor_parallel(const ScheduledOp& op) const;
  // The program's walk: the model's next call must be the next event.
  int advance(model::UnitEvent::Kind kind, int unit, model::Phase phase);
  void begin_walk(const MicroBatchProgram& program, int first_event, int first_tp_op);
  // The step's next training micro-batch, counted at its backward: whether it is the last.
  bool next_training_micro_batch();
  model::Model& slot_model(int slot);
  void run_event(int event);  // issue, complete, lend, free (schedule.hpp)
  void issue(int chain);
  void complete(int chain);
  void issue_bucket(int bucket);
  // The step's reduction of one unit's gradient (`ops` from `input`) into its OS slice's gradient.
  void reduce_for_step(Unit& unit, const Chain& ops, const float* input);
  void wait(comm::Work& work);
  void refresh_weights_from_master();
  std::vector<double> scalar_sum(std::vector<double> local, Purpose purpose);
  float* borrow_full();
  void give_back(float* buffer);

  // Whether unit `u` is the tied embeddings' copy on a pipeline's last stage: counted once in
  // the norm and in checkpoints, as the first stage's embeddings.
  bool is_tied_copy(int u) const;
  // The optimizer state in the device's memory (saved: without the tied copy).
  std::vector<train::StateShard> device_shards(bool saved);

  device::Device& device_;  // where every buffer below lives, which makes the model
  std::optional<PipelineStage> stage_;
  model::StageUnits stage_units_;  // of stage_
  Schedule schedule_;       // built before the model: the device's pool is sized from it
  std::vector<std::unique_ptr<model::Model>> models_;  // one a micro-batch in flight
  comm::Context& ctx_;
  parallel::ParallelDims dims_;
  int rank_ = 0;       // in the world
  int dp_rank_ = 0;    // among the ranks of this TP index: the schedule's rank
  comm::Collectives* tp_group_ = nullptr;  // nullptr: no tensor parallelism
  int next_tp_op_ = 0;                     // in Schedule::tensor_parallel_ops, this micro-batch
  std::vector<std::unique_ptr<Unit>> units_;
  OpExecutor executor_;
  // The micro-batch being walked: its program, the next event, and per event the chain's
  // work, the Gathered buffer an acquire's gather fills, the gradient buffer a reduction reads.
  const MicroBatchProgram* program_ = nullptr;
  int next_event_ = 0;
  std::vector<Chain> chains_;  // micro-batch ops by the event they serve
  std::vector<comm::Work> work_;
  std::vector<Chain> bucket_chains_;  // the buckets' step reductions (Schedule::buckets)
  std::vector<comm::Work> bucket_work_;
  int micro_batches_in_step_ = 0;  // training micro-batches since the last optimizer step
  int forwards_in_step_ = 0;       // forward halves since the last optimizer step
  std::vector<float*> gathered_, reducing_;
  std::vector<float*> grad_buffer_;  // per unit, while lent
  std::vector<device::Buffer<float>> pool_;  // Schedule::pool_buffers(), allocated up front
  std::vector<float*> free_buffers_;
  int peak_lent_ = 0;  // pool buffers lent at once, the most since the micro-batch began
  device::Buffer<float> replicated_params_;  // W replicated in a non-fp32 wire: decoded weights
  device::Buffer<float> replicated_grads_;   // G replicated: the full fp32 gradients
  std::vector<const ScheduledOp*> micro_trace_, step_trace_;
  std::vector<std::vector<const ScheduledOp*>> forward_traces_;  // per slot, until its backward
  double wall_s_ = 0, exposed_s_ = 0;
  // Step reports: traffic since the last report, and whether an evaluation ran in it.
  comm::CommStats last_stats_;
  bool evaluated_since_report_ = false;
  std::vector<nlohmann::json> step_reports_;
  std::int64_t updates_ = 0;   // applied optimizer steps
  std::int64_t steps_ = 0;     // optimizer steps run (applied or skipped): the flight records' step
  int micro_batch_ = -1;       // within the step, the flight records' micro-batch
  train::StagedState staged_;  // host copies of the state for checkpoints, where the host cannot address it
};

}  // namespace strata::shard
