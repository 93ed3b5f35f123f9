#pragma once
// Tensor parallelism (Megatron splits over one tier) and pipeline parallelism (1F1B stages
// across another) priced beside data-parallel sharding, and an energy estimate
// (docs/planner.md "Tensor and pipeline parallelism", "Energy").
//
// The split comes from parallel::ParallelDims: a tier of size s holding a TP slice of t
// becomes a data-parallel tier of s/t, and likewise for the pipeline's slice. Each stage is a
// PlanContext over that smaller topology: the ordinary shard::Schedule of the stage's
// TP-split units, with the TP collectives as ops of that schedule (the runtime's own list,
// model::tensor_parallel_calls), priced with every other op. The stage-to-stage messages are
// the runtime's too (parallel::stage_messages of each stage's 1F1B program, what
// shard::PipelineSchedule sends).
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "parallel/dims.hpp"
#include "parallel/options.hpp"
#include "plan/cost_model.hpp"
#include "plan/search.hpp"

namespace strata::plan {

// "zero3+tp2+pp4" -> ("zero3", tp 2, pp 4); a suffix overrides `defaults` (--tp, --pp).
// Throws Error naming --strategy for a malformed suffix.
std::pair<std::string, ModelParallel> parse_strategy_variant(std::string_view text, const ModelParallel& defaults);
// "zero3", "zero3+tp2", "hsdp+tp2+pp4": the strategy's name with its model-parallel degrees.
std::string variant_name(std::string_view strategy, const ModelParallel& mp);

// The strategies `strategies` names ("all": every preset and topo-paper; else a comma list),
// each with its tensor and pipeline parallelism (`options`' tp and pp, or a +tpN+ppN
// suffix), the workload's precision and peer applied, then `options`' overrides; a name gets a
// '*' when an override changed its preset. Each spec is checked against the data-parallel
// topology its split leaves of `physical`. Error names --strategy for an empty list.
std::vector<NamedSpec> chosen_strategies(std::string_view strategies, const parallel::ShardOptions& options,
                                         const topo::Topology& physical, const Workload& workload);

// The dims of (tp, pp) on a resolved topology; Error names --tp/--pp (a degree that does not
// divide its tier, an unknown tier).
parallel::ParallelDims model_parallel_dims(const topo::Topology& topology, const ModelParallel& mp);

// One message between pipeline stages, as one rank of a stage sends or receives it: an
// entry of parallel::stage_messages, the runtime's own list from the stage's 1F1B program
// (micro_batch·seq·hidden activations up or their gradients down, under --sequence-parallel
// the TP rank's 1/tp of them: parallel::stage_message_elements, at --precision's width:
// fp32, what the CPU runtime sends, under --precision fp32); and on the first and last stage
// of a tied head, the embeddings' gradient summed between them once a step (the runtime's
// "tied embeddings" all-reduce, over the stage's optimizer-state shard of them). Every one
// blocks the stage: on the critical path.
struct PipelineMessage {
  std::string purpose;         // "activation-send", "activation-grad-send" or "tied embeddings"
  shard::When when = shard::When::Forward;
  int level = 0;               // tier of the physical topology the two stages span
  std::size_t elements = 0;
  DType wire = DType::F32;
  bool sent = true;            // a send this rank makes (else one it receives)
  bool all_reduce = false;     // the tied embeddings' sum (both ends send)

  shard::ScheduledOp op() const;  // what price_op prices: the transfer both ends wait for
  void book(shard::TierTraffic& traffic) const;  // this rank's bytes and messages of it
};

// A step's messages of one rank of `slice`'s stage over m = --accum micro-batches.
std::vector<PipelineMessage> stage_messages(const ModelShape& slice, const parallel::ParallelDims& dims,
                                            const Workload& workload);

// Every stage of one (tp, pp) split of a cluster, ready to price any shard spec.
class ModelParallelPlan {
 public:
  ModelParallelPlan(const ModelShape& model, const topo::Topology& topology, const DeviceFacts& device,
                    const Workload& workload, ModelParallel mp, const std::vector<LeaveOut>& leave_out = {},
                    const std::optional<Calibration>& calibration = std::nullopt);

  const parallel::ParallelDims& dims() const { return dims_; }
  const topo::Topology& topology() const { return topology_; }  // the physical one
  const topo::Topology& data_parallel_topology() const { return stages_.front().topology(); }
  const PlanContext& stage(int s) const { return stages_.at(s); }
  const std::vector<PipelineMessage>& messages(int s) const { return messages_.at(s); }
  // Stage s's traffic on the pipeline's tier a step under `spec` (resolved against the
  // data-parallel topology): its messages and the tied embeddings' sum. The stages' own
  // replicas never cross that tier (a stage is one domain of it), so this is all it carries.
  shard::TierTraffic pipeline_tier_traffic(int s, const shard::ShardSpec& spec) const;
  // Per tier, what a run's summary.json reports a step (comm.scheduled_per_step: the mean over
  // its ranks): without a pipeline every tier of the estimate; with one the runtime runs
  // (runs_pipeline) every tier, the mean of every world rank's shard::PipelineSchedule (its
  // sends, tied sum and sharding schedule's traffic); with
  // another the pipeline's tier, averaged over the stages, and the tiers the stages' own
  // reductions cross in `not_compared` (priced by the stage's shard::Schedule, which no
  // runtime pipeline runs).
  struct RunTraffic {
    std::string tier;
    double bytes_sent = 0, bytes_received = 0, messages = 0;
    template <class Traffic>  // shard:: or comm::TierTraffic, over `ranks`
    void add(const Traffic& t, double ranks = 1) {
      bytes_sent += double(t.bytes_sent) / ranks;
      bytes_received += double(t.bytes_received) / ranks;
      messages += double(t.messages) / ranks;
    }
  };
  std::vector<RunTraffic> run_traffic(const Estimate& e, const shard::ShardSpec& spec,
                                      std::vector<std::string>& not_compared) const;

  // Nothing split (tp 1, pp 1): exactly PlanContext's estimate of the whole model (its strata
  // layout kept), with the energy added.
  // `spec` (resolved against the data-parallel topology) over every stage. Where the runtime
  // runs the plan (runs_pipeline), a stage is priced by replaying its shard::PipelineSchedule's
  // sharding() (the stage's shard::Schedule the runtime runs); otherwise the stage's own
  // shard::Schedule over the planner's slice prices it. Stages run in
  // lockstep at the slowest stage's pace: step = its step (TP ops included) + its messages'
  // time + every other stage's micro-batch time (the bubble: the fill and drain through them;
  // (p-1) x t for equal stages; a message holds both ends, so they wait for the other stages'
  // compute only). Memory is the largest stage's, with min(p - s, m) micro-batches of
  // activations in flight on stage s; Estimate::stages has each stage's.
  Estimate estimate(std::string strategy, const shard::ShardSpec& spec) const;
  // Whether strata's pipeline runtime runs this plan (shard::PipelineEngine): a pipeline of a
  // strata model (its ModelConfig), a stage's replicas composed as the runtime composes them
  // (not --collectives nccl); every sharding spec runs in a stage, TP inside it too, with or
  // without sequence parallelism (the stage's schedules then hold its TP collectives; under
  // sequence parallelism a stage message is the TP rank's 1/tp of the rows).
  bool runs_pipeline() const;

 private:
  const Calibration* calibrated_() const {
    return stages_.front().calibration() ? &*stages_.front().calibration() : nullptr;
  }

  ModelShape model_;
  topo::Topology topology_;
  DeviceFacts device_;
  Workload workload_;
  ModelParallel mp_;
  parallel::ParallelDims dims_;
  std::vector<PlanContext> stages_;
  // The tied embeddings' sum of stage s under `spec` (none: a stage between, or untied).
  std::optional<PipelineMessage> tied_message(int s, const shard::ShardSpec& spec) const;
  // The schedule and groups world rank `rank` runs in the runtime's pipeline under `spec`
  // (runs_pipeline), as the engine builds them.
  struct RankPipeline;  // shard::PipelineSchedule and shard::PipelineGroups (model_parallel.cpp)
  RankPipeline rank_pipeline(int rank, const shard::ShardSpec& spec) const;
  int first_rank(int s) const;  // stage s's first replica
  // Stage s priced without its messages: where the runtime runs the plan, by the runtime's
  // own stage shard::Schedule; else by the stage's own shard::Schedule.
  Estimate stage_estimate(const std::string& strategy, const shard::ShardSpec& spec, int s) const;

  std::vector<std::vector<PipelineMessage>> messages_;
  std::vector<double> message_seconds_;  // per stage: its messages' time a step
};

// What the tensor/pipeline terms and the energy figure assume, for --json's assumptions.
nlohmann::json model_parallel_assumptions();

// The (tp, pp) splits --search tries: tp in the divisors of the innermost tier up to
// `max_tp`, pp in {1, 2, 4, 8} dividing the layers and the outermost tier; splits the model
// or the topology refuses are left out.
std::vector<ModelParallel> candidate_splits(const ModelShape& model, const topo::Topology& topology, int max_tp = 8);
// --search over (tp, pp, spec): every spec each split's data-parallel topology accepts,
// ranked together by time a token, every split at the same global batch (the workload's
// micro-batch and accumulation taken as one device's, as under --batch-per-device).
SearchResult search_model_parallel(const ModelShape& model, const topo::Topology& topology, const DeviceFacts& device,
                                   const Workload& workload, const std::vector<LeaveOut>& leave_out,
                                   const std::optional<Calibration>& calibration, const SearchSpace& space,
                                   const std::vector<ModelParallel>& splits);

}  // namespace strata::plan
