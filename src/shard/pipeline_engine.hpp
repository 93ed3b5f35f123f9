#pragma once
// Pipeline parallelism in the runtime (--pp P): the blocks split into P equal stages
// (parallel::stage_split; the embeddings with the first, the final norm and the LM head with
// the last: gpt2's tied head a copy of the embeddings, llama's lm_head its own unit), each stage a group of data-parallel
// replicas whose units any sharding spec shards as the sharding runtime does a whole model's
// (every preset, quantized wires and hpZ's secondary copy included): a ShardedEngine running
// the stage's shard::Schedule.
// A rank holds its stage's units only (PipelineSchedule::stage_units): nothing of the other
// stages. One step runs parallel::one_f_one_b over the step's micro-batches:
// each rank walks its stage's program, activations and their gradients crossing to the
// neighbouring stage's rank of the same replica as one message each. Under --tp a stage's
// replica is its TP group: each TP rank runs the stage's TP slice with the TP collectives as
// ops of the stage's schedule, and sends the whole activation to the same TP rank of the next
// stage; with --sequence-parallel (Megatron's) the stage's blocks run on the rank's 1/tp of the
// token rows and a rank sends just those rows (parallel::stage_message_elements): the first
// stage's embeddings scatter to them, the last stage's head gathers. The tied embeddings'
// gradients of the first and last stage are summed between them, so both copies stay equal.
//
// The program and its messages are one schedule (PipelineSchedule): the engine runs its ops
// and nothing else through the accounted collectives, so the bytes the accounting measures
// per tier are the schedule's (PipelineSchedule::traffic_per_step). The step's scalars (loss,
// gradient norm, stop flag) travel over plain MPI, outside that accounting.
//
// The trainer hands the engine one micro-batch at a time; 1F1B needs them all, so the engine
// keeps them and runs the step's program at the last (micro_steps()-th) one. That call
// returns the sum of the step's micro-batch losses on the last stage, every other call 0,
// and all_mean_and_any averages over the last stage's ranks: the trainer's mean loss is the
// global batch's.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <mpi.h>

#include "base/collective.hpp"
#include "comm/backends/tier_comms.hpp"
#include "comm/host/communicator.hpp"
#include "comm/instrument/accounting.hpp"
#include "comm/runtime/context.hpp"
#include "model/model.hpp"
#include "parallel/dims.hpp"
#include "parallel/options.hpp"
#include "parallel/pipeline.hpp"
#include "shard/schedule.hpp"
#include "shard/sharded_engine.hpp"
#include "shard/spec.hpp"
#include "topo/groups.hpp"
#include "topo/topology.hpp"
#include "train/engine.hpp"

namespace strata::shard {

// One collective the step runs, as the accounting counts it.
struct PipelineOp {
  std::string purpose;  // "activation-send", "activation-grad-send", "tied embeddings"
  std::optional<Collective> kind;  // none: a send (a broadcast from one end of a link)
  enum Group { Previous, Next, Tied } group;  // over which of the engine's groups
  int micro_batch = -1;                       // sends only
  // The gradient arena run [begin, end) it sums (sends: none) and the bytes of the buffer.
  std::size_t begin = 0, end = 0;
  std::uint64_t bytes = 0;
};

// How a stage's replicas hold its units: `sharding`, a spec resolved over `topology`, the
// stage's data-parallel topology; this rank is replica `index` of its stage. The stage's
// shard::Schedule (PipelineSchedule::sharding) holds its gathers and reductions; the
// ShardedEngine of the stage runs it. Under tensor parallelism (`tensor`, over the tier
// `tensor_level`) the stage's units are this TP rank's slices (model/tensor_parallel.hpp) and
// the stage's schedule holds the stage walk's TP collectives too.
struct StageReplicas {
  int index = 0;
  ShardSpec sharding;
  topo::Topology topology;
  model::TensorSplit tensor;
  int tensor_level = 0;
  bool recompute = false;  // the TP walk's backward runs each block's forward collectives again
  bool sequence_parallel = false;  // --sequence-parallel over the TP group (refused without one)
};

// This rank's step: its stage's program (with the sends and receives as ops), the tied sum,
// and the stage's sharding schedule.
class PipelineSchedule {
 public:
  // `stage_layers`: --pp-layers (parallel::stage_split), empty for equal stages.
  PipelineSchedule(const model::ModelConfig& config, int batch, int seq, int micro_batches, int stages, int stage,
                   const StageReplicas& replicas, const std::vector<int>& stage_layers = {});
  const parallel::StageSplit& split() const { return split_; }
  const std::vector<parallel::PipelineAction>& program() const { return program_; }
  // The op of each program entry that communicates (sends and receives), in program order,
  // then the tied sum of this rank's OS slice of the embeddings; the rest is sharding()'s.
  const std::vector<PipelineOp>& ops() const { return ops_; }
  // A stage message's floats (parallel::stage_message_elements): this TP rank's rows under
  // sequence parallelism.
  std::size_t activation_floats() const { return activation_floats_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  bool tied() const { return tied_; }
  // The stage's sharding schedule (StageReplicas::sharding) over its units (stage_units(): its
  // blocks, the embeddings on the first stage, the final norm (and llama's lm_head) on the
  // last, and on gpt2's last its copy of the embeddings, the tied head, last of all).
  const std::shared_ptr<const Schedule>& sharding() const { return sharding_; }
  const model::StageUnits& stage_units() const { return stage_units_; }
  model::StageRange range() const { return {split_.first_layer, split_.end_layer(), split_.first, split_.last}; }

 private:
  void add_sends();
  void add_tied_sum(const model::ParamLayout& layout, int replica);

  parallel::StageSplit split_;
  std::vector<parallel::PipelineAction> program_;
  std::vector<PipelineOp> ops_;
  std::size_t activation_floats_ = 0;
  bool sequence_parallel_ = false;
  bool tied_ = false;  // the LM head is the embeddings (gpt2): the last stage holds a copy
  model::StageUnits stage_units_;
  std::shared_ptr<const Schedule> sharding_;
};

// The ranks a pipelined run's groups span (world ranks; a group of one rank where there is
// no such neighbour), and with them the bytes a step's ops send per tier.
struct PipelineGroups {
  // stage: the stage's ranks of this rank's TP index (its replicas); the others link this
  // rank to the ranks of its replica and TP index in the neighbouring (first, last) stages.
  std::vector<int> previous, next, stage, tied;  // members in member order (stage: its replicas)
  const std::vector<int>& of(PipelineOp::Group g) const;
};
// The schedule and the groups of `world_rank` in a pipeline of `dims` over `physical` (a
// stage's replicas sharded by `sharding`: a spec resolved over the stage's data-parallel
// topology; under dims.tensor > 1 this rank's TP slice, with `recompute` and
// `sequence_parallel` the TP walk's), as the engine builds them: what the planner prices.
PipelineSchedule pipeline_schedule_of(const model::ModelConfig& config, int batch, int seq, int micro_batches,
                                      const parallel::ParallelDims& dims, const topo::Topology& physical,
                                      int world_rank, const ShardSpec& sharding,
                                      const std::vector<int>& stage_layers = {}, bool recompute = false,
                                      bool sequence_parallel = false);
PipelineGroups pipeline_groups(const parallel::ParallelDims& dims, const topo::Topology& physical, int world_rank,
                               bool tied);
comm::CommStats scheduled_traffic(const PipelineSchedule& schedule, const PipelineGroups& groups,
                                  const topo::Topology& physical, int world_rank);
comm::CommStats op_traffic(const PipelineOp& op, const PipelineGroups& groups, const topo::Topology& physical,
                           int world_rank);  // one op's part of scheduled_traffic
std::string_view kind_name(const std::optional<Collective>& kind);  // "send", "all-reduce", ...: the schedule's names

class PipelineEngine final : public train::Engine {
 public:
  // Collective over MPI_COMM_WORLD. `options.pp` stages over `options.pp_tier`; each rank
  // starts from the whole model's initial weights (`seed`), as the single-process trainer.
  PipelineEngine(const parallel::ShardOptions& options, const model::ModelConfig& config, int batch, int seq,
                 int micro_batches, std::uint64_t seed, bool recompute = false);
  ~PipelineEngine() override;

  // The whole model's; under --tp this rank's TP slice's (the stage's engine's), in which its
  // state shards lie.
  const model::ParamLayout& layout() const override { return sharded_ ? sharded_->layout() : layout_; }
  int rank() const override { return rank_; }
  int world_size() const override { return dims_.world_size(); }
  parallel::ParallelDims parallel_dims() const override { return dims_; }

  float micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) override;
  float eval_loss(const std::int32_t* tokens, const std::int32_t* targets) override;
  train::StepOutcome optimizer_step(const optim::AdamWConfig& hp, const train::StepArgs& args) override;
  std::pair<double, bool> all_mean_and_any(double local, bool flag) override;
  std::vector<std::string> all_gather_strings(const std::string& local) override;
  std::vector<train::StateShard> state_shards() override;
  std::vector<train::StateShard> saved_shards() override;
  void state_loaded() override;
  void gather_params(float* full) override;
  nlohmann::json describe() const override;
  // The step's traffic and busy time per tier and its timing; at the end, what the flat
  // engine's summary reports (measured_summary: the means over the counted steps and the
  // world, beside the schedule's bytes; memory_bytes, this rank's stage's), and "stages":
  // each stage's memory_bytes as its first rank holds it. Collective over the world.
  nlohmann::json step_report() override;
  nlohmann::json summary_report() override;

  const PipelineSchedule& schedule() const { return *schedule_; }
  const PipelineGroups& groups() const { return members_; }
  const topo::Topology& topology() const { return topology_; }
  comm::Context& context() { return *context_; }
  // The bytes a step sends and receives per tier, by the schedule.
  comm::CommStats traffic_per_step() const;
  // Those bytes per tier, the mean over the world's ranks: summary.json's
  // comm.scheduled_per_step. Collective over the world.
  nlohmann::json scheduled_per_step() const;
  int stage() const { return stage_; }
  // The state this rank holds: what the stage's engine allocated.
  StateMemory state_memory() const { return sharded_->memory_bytes(); }

 private:
  void build_groups();
  void build_sharded(const model::ModelConfig& config, int batch, int seq, std::uint64_t seed, bool recompute);
  model::StageModel& stage_model(int micro_batch);
  double sum_over_stages(double value);  // the same value a stage's ranks hold, summed over the stages
  void run_program();
  void communicate(const PipelineOp& op, float* data);  // a send or receive of `data`

  topo::Topology topology_;
  parallel::ParallelDims dims_;
  std::string strategy_;
  model::ParamLayout layout_;
  int rank_ = 0, stage_ = 0, micro_batches_ = 1;
  std::size_t tokens_per_batch_ = 0;  // of one micro-batch
  std::unique_ptr<PipelineSchedule> schedule_;
  std::unique_ptr<comm::Context> context_;
  PipelineGroups members_;
  std::vector<MPI_Comm> mpi_comms_;
  std::array<std::unique_ptr<comm::Communicator>, 3> links_;  // by PipelineOp::Group
  std::vector<std::vector<std::int32_t>> tokens_, targets_;
  std::vector<float> grad_scales_;
  // The stage's tier groups (over its communicator), the ranks of this replica index across
  // the stages (the scalar sums, plain MPI), and the stage's engine.
  std::unique_ptr<topo::ProcessGroups> stage_groups_;
  std::unique_ptr<comm::TierComms> stage_comms_;
  std::unique_ptr<comm::Communicator> tensor_group_;  // under --tp: the stage's ranks of this replica
  MPI_Comm across_stages_ = MPI_COMM_NULL;  // one rank a stage: of this replica and TP index
  std::unique_ptr<ShardedEngine> sharded_;
  std::vector<double> losses_;
  comm::CommStats last_stats_;
  std::vector<nlohmann::json> step_reports_;  // what step_report returned, summed by summary_report
  bool evaluated_since_report_ = false;
  // Seconds of the step so far: in the engine, and waiting on its messages (all exposed:
  // every send and reduction blocks the compute thread).
  double wall_s_ = 0, exposed_s_ = 0;
};

}  // namespace strata::shard
