#pragma once
// Tensor parallelism (Megatron splits over one tier) and pipeline parallelism (1F1B stages
// across another) priced beside data-parallel sharding, and an energy estimate
// (docs/planner.md "Tensor and pipeline parallelism", "Energy").
//
// The split comes from parallel::ParallelDims: a tier of size s holding a TP slice of t
// becomes a data-parallel tier of s/t, and likewise for the pipeline's slice. Each stage is a
// PlanContext over that smaller topology: the ordinary shard::Schedule of the stage's
// TP-split units, with the TP collectives as ops of that schedule (the runtime's own list,
// model::tensor_parallel_calls), priced with every other op. The stage-to-stage sends are
// the one planner-only list (PipelineSend below); the runtime's pipeline
// (shard/pipeline_engine.hpp) keeps its own, which this does not read yet.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "parallel/dims.hpp"
#include "plan/cost_model.hpp"
#include "plan/search.hpp"

namespace strata::plan {

// "zero3+tp2+pp4" -> ("zero3", tp 2, pp 4); a suffix overrides `defaults` (--tp, --pp).
// Throws Error naming --strategy for a malformed suffix.
std::pair<std::string, ModelParallel> parse_strategy_variant(std::string_view text, const ModelParallel& defaults);
// "zero3", "zero3+tp2", "hsdp+tp2+pp4": the strategy's name with its model-parallel degrees.
std::string variant_name(std::string_view strategy, const ModelParallel& mp);

// The dims of (tp, pp) on a resolved topology; Error names --tp/--pp (a degree that does not
// divide its tier, an unknown tier).
parallel::ParallelDims model_parallel_dims(const topo::Topology& topology, const ModelParallel& mp);

// One send between pipeline stages, per rank, as the planner prices it: one message of the
// whole tensor, on the critical path.
struct PipelineSend {
  std::string purpose;        // "activation-send" or "activation-grad-send"
  shard::When when = shard::When::Forward;
  int level = 0;              // tier of the physical topology the two stages span
  std::size_t elements = 0;   // B·T·hidden
  int element_bytes = 2;

  shard::ScheduledOp op() const;  // what price_op prices: a two-member exchange of one message
  std::size_t bytes_sent() const { return elements * element_bytes; }
};

// The sends one rank of `slice`'s stage makes per micro-batch: B·T·hidden activations forward
// (all but the last stage) and their gradients back (all but the first).
std::vector<PipelineSend> pipeline_sends(const ModelShape& slice, const parallel::ParallelDims& dims,
                                         const Workload& workload);

// 1F1B's idle share: (p-1)/(m+p-1) for p stages and m micro-batches.
double pipeline_bubble_fraction(int stages, int micro_batches);

// Device power = idle + (TDP - idle) x utilization, utilization = the share of the step the
// device computes; J/token = power x devices / tokens a second. Leaves zeros when the TDP is
// not known.
void add_energy(Estimate& e, const DeviceFacts& device);

// Every stage of one (tp, pp) split of a cluster, ready to price any shard spec.
class ModelParallelPlan {
 public:
  ModelParallelPlan(const ModelShape& model, const topo::Topology& topology, const DeviceFacts& device,
                    const Workload& workload, ModelParallel mp, const std::vector<LeaveOut>& leave_out = {},
                    const std::optional<Calibration>& calibration = std::nullopt);

  const ModelParallel& model_parallel() const { return mp_; }
  const parallel::ParallelDims& dims() const { return dims_; }
  const topo::Topology& topology() const { return topology_; }  // the physical one
  const topo::Topology& data_parallel_topology() const { return stages_.front().topology(); }
  const PlanContext& stage(int s) const { return stages_.at(s); }
  const std::vector<PipelineSend>& sends(int s) const { return sends_.at(s); }

  // Nothing split (tp 1, pp 1): exactly PlanContext's estimate of the whole model (its strata
  // layout kept), with the energy added.
  // `spec` (resolved against the data-parallel topology) over every stage. Stages run in
  // lockstep at the slowest stage's pace: step = its step (TP ops included) + m x (its send
  // time a micro-batch) + (p-1) x its micro-batch time (the bubble). Memory is the largest
  // stage's, with min(p - s, m) micro-batches of activations in flight on stage s.
  Estimate estimate(std::string strategy, const shard::ShardSpec& spec) const;

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
  std::vector<std::vector<PipelineSend>> sends_;
  std::vector<double> send_seconds_;  // per stage: its sends' time a micro-batch
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
