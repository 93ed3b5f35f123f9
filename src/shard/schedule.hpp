#pragma once
// The step's schedule of collectives, as data. Built once from (model layout, topology,
// shard spec, accumulation steps); the sharding runtime executes exactly these ops, the
// accounting must measure exactly these bytes, and the planner prices them. Nothing else
// in strata decides what moves where.
//
// Every op runs over one *level*: the across-group of one tier (topo/groups.hpp), so every
// message it sends crosses exactly that tier. A collective over several tiers is a run of
// per-level ops: reduce-scatter inner level first, all-gather outer level first.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "comm/composition/compose.hpp"
#include "model/model.hpp"
#include "model/stage_walk.hpp"
#include "model/layout.hpp"
#include "parallel/dims.hpp"
#include "shard/spec.hpp"
#include "topo/topology.hpp"

namespace strata::shard {

enum class When { Forward, Backward, Step };
// How a collective over several tiers is composed (--collectives). Hierarchical: strata's
// own, one op per level (what the runtime executes). Nccl: as NCCL/RCCL run a PyTorch FSDP
// or DeepSpeed ZeRO all-gather and reduce-scatter, one call over every rank of the group (a
// flat op over the levels whose groups have more than one rank); the planner prices each
// call with NCCL's own model (docs/planner.md "NCCL's model") so a published run can be
// predicted as it ran. "flat-ring", the earlier name, is an alias. The runtime executes
// hierarchical schedules only.
enum class Composition { Hierarchical, Nccl };
enum class Purpose {
  WeightGatherForward,    // W shard -> full unit before its forward
  WeightGatherBackward,   // W (or secondary) shard -> full unit before its backward
  GradReduce,             // full unit gradient -> G shard, per micro-batch
  StepGradReduce,         // G shard -> OS shard, once per step
  StepGradGather,         //   ... and back to the G shard (ShardSpec::step_grad_allreduce only)
  ReplicaReduce,          // OS shard summed over replicas: reduce-scatter half
  ReplicaGather,          //   ... and all-gather half
  WeightGatherStep,       // updated OS shard -> W shard after the optimizer step
  GradNormAllReduce,      // squared gradient norm over one OS domain: one fp64 a rank, gathered, summed
  LossAllReduce,          // the logged loss and the stop (preemption) flag: two fp64 a rank, over all ranks
  TensorParallel,         // the model's TP collectives (model::TensorParallelCall), on the critical path
  TensorParallelScalars,  // the grad norm's and the loss's sums completed over the TP group, once a step
};
std::string_view to_string(When w);
std::string_view to_string(Composition c);
Composition parse_composition(std::string_view text);  // throws Error naming --collectives
std::string_view to_string(Purpose p);

// The buffers an op reads and writes (the device buffers of the runtime's unit state).
enum class Slot {
  None,
  WeightShard,     // W slice in the weight wire
  Secondary,       // hpZ slice
  Gathered,        // the full unit's weights, one buffer per acquire (see MicroBatchProgram)
  GradBuffer,      // the full unit's fp32 gradient, lent from the acquire to the reduction's end
  GradShard,       // the G slice (accumulator), or the replicated gradient
  OptimizerGrad,   // the OS slice's gradient
  Master,          // the fp32 master weights of the OS slice
  Scalars,         // a few fp64 a rank
};
std::string_view to_string(Slot s);

// A scheduled op is a step of comm's composition (kind, level: the tier, wire, elements; what
// the executor hands comm::run_chain as it is) with its place in the training step. Its kind
// is the one vocabulary's (base/collective.hpp): all-gathers and reduce-scatters run as rings,
// an all-to-all is a reduction whose received chunks are summed in fp32 in member order
// (ZeRO++ qgZ: what quantized reductions use, since int8/int4 cannot be summed on the wire);
// all-reduces are tensor parallelism's.
struct ScheduledOp : comm::LevelStep {
  When when = When::Forward;
  Purpose purpose = Purpose::WeightGatherForward;
  int unit = -1;          // -1: not tied to a unit (scalars, buckets)
  int bucket = -1;        // a bucket's step reduction: index into Schedule::buckets()
  int event = -1;         // micro-batch ops: index in UnitPlan::events of the Acquire or
                          // GradsReady it serves (what a cost model overlaps with compute)
  // Issue points of a micro-batch op (the same for every op of its event's chain, see
  // MicroBatchProgram): the event at which it is issued, and the event before whose
  // compute it must have completed (events.size(): the end of the micro-batch).
  int issue_event = -1;
  int complete_by = -1;
  Slot reads = Slot::None, writes = Slot::None;
  // `level` is a tier index; the group is that tier's across-group.
  // A flat op (Composition::Nccl) runs one ring over levels [level - levels_spanned + 1,
  // level]: group_size is their product and `level` the outermost, where its bytes are booked.
  int levels_spanned = 1;
  int group_size = 1;
  std::size_t bytes_sent = 0;    // per rank, on the wire (scales included)
  std::size_t bytes_received = 0;
  int messages = 0;              // sends per rank
};

// An op's kind and algorithm as the schedule's JSON and the flight recorder name them: an
// all-to-all reduction is a "reduce-scatter" by "all-to-all", every other op a "ring".
std::string_view kind_name(const ScheduledOp& op);
std::string_view algorithm_name(const ScheduledOp& op);

struct TierTraffic {
  std::string tier;
  std::uint64_t bytes_sent = 0, bytes_received = 0, messages = 0;
};

// --print-schedule's text, one format for every schedule (Schedule::table, and a pipeline's,
// shard/pipeline_report.hpp): a section of ops, one row each, and the bytes per tier a step.
struct OpRow {
  std::string when, purpose, unit, collective, tier;
  int group_size = 0;
  std::string wire;
  std::uint64_t bytes_sent = 0, messages = 0;
};
std::string op_section(std::string_view title, const std::vector<OpRow>& rows);
struct TierRow {  // a mean over ranks may be fractional
  std::string tier;
  double bytes_sent = 0, bytes_received = 0, messages = 0;
};
std::string tier_section(std::string_view title, const std::vector<TierRow>& rows);

// Per-rank bytes held by each state, from the spec's formula (padded unit sizes).
struct StateMemory {
  std::uint64_t weights = 0;    // W shard in its wire format
  std::uint64_t secondary = 0;  // hpZ copy
  std::uint64_t grads = 0;      // G shard (the accumulator), compute_bytes an element
  std::uint64_t optimizer = 0;  // of the OS shard, fp32: master + two Adam moments + the gradient
                                // the optimizer reads (the G shard reduced to the OS shard)
  std::uint64_t gathered = 0;   // full-unit buffers alive at once (weights and grads, the lifetime replay)
                                // + decoded replicated weights
  std::uint64_t communication = 0;  // the executor's scratch for per-level ops

  std::uint64_t total() const { return weights + secondary + grads + optimizer + gathered + communication; }
};

// A rank's slice of one unit at a given number of levels: [offset, offset + count).
struct Slice {
  std::size_t offset = 0, count = 0;
};

// The micro-batch as a program over its events: what the runtime does at each event, and
// what the planner replays and the memory replay counts. Built from the schedule's
// parameters (prefetch depth, reductions in flight, weights kept after forward); entry
// events.size() is the end of the micro-batch. At one event, in this order:
//   issue     the op chains (named by the event they serve) issued here; a weight gather
//             writes a new Gathered buffer
//   complete  the chains that must be done before this event's compute; a completed
//             reduction gives its gradient buffer back
//   lend      units whose gradient buffer is lent here (the compute after this event
//             writes their gradient first)
//   free      acquires whose Gathered buffer is given back here (a Release)
//   bucket_issue, bucket_complete
//             the step's last micro-batch only: the buckets whose step reduction is issued
//             here (after `issue`), and those that must be done here (after `complete`)
// An acquire reads the Gathered buffer written for acquire `reads[event]` (itself, or with
// weights kept, the same unit's forward acquire; -1: weights are not gathered).
struct EventStep {
  std::vector<int> issue, complete, lend, free;
  std::vector<int> bucket_issue, bucket_complete;
};
struct MicroBatchProgram {
  std::vector<EventStep> steps;   // events.size() + 1
  std::vector<int> reads;         // per event; -1 where no Gathered buffer is read
  int last_event = 0;             // events walked: all, or the forward ones (evaluation)
};

// What the schedule needs to know of a model: its units' sizes and the order in which a
// micro-batch touches them. The runtime takes it from the GPT's layout; the planner builds
// it for model shapes strata does not train (Llama, GPT-NeoX).
struct UnitPlan {
  std::vector<std::string> names;
  std::vector<std::size_t> numel;             // fp32 elements of each unit
  std::vector<model::UnitEvent> events;       // one micro-batch, see model/model.hpp
  // The ParamLayout unit each unit holds (a pipeline stage's: model::StageUnits); empty: unit u is layout unit u.
  std::vector<int> layout_unit;
  int layout_unit_of(int unit) const { return layout_unit.empty() ? unit : layout_unit[unit]; }
};
UnitPlan unit_plan(const model::ParamLayout& layout);
// A pipeline stage's units (model/stage_walk.hpp): its walk's events, each unit's size its layout unit's.
UnitPlan stage_unit_plan(const model::ParamLayout& layout, const model::StageUnits& stage);

// Tensor parallelism: the TP group's size, the tier it lies in (its messages cross that tier)
// and the model's collectives of one training micro-batch (model::tensor_parallel_calls).
struct TensorParallelPlan {
  int degree = 1;
  int level = 0;
  std::vector<model::TensorParallelCall> calls;
};
// The plan of a run's dims for micro-batches of `batch` x `seq` tokens (none without TP).
TensorParallelPlan tensor_parallel_plan(const parallel::ParallelDims& dims, const model::ModelConfig& config, int batch,
                                        int seq, bool recompute, bool sequence_parallel = false);

// What a schedule holds besides its inputs (schedule.cpp's ScheduleBuilder makes it).
struct ScheduleParts {
  std::vector<ScheduledOp> micro, step, bucket_ops, tensor_parallel;
  std::vector<std::vector<int>> buckets;
  MicroBatchProgram training, last_training, eval;
  MicroBatchProgram halves, last_halves;  // no steps: not cut (Schedule::halves_program)
  int forward_events = 0;
};

class Schedule {
 public:
  // `topology`: what the sharding runs over (under TP the data-parallel topology, whose tiers
  // are the physical ones by index).
  Schedule(UnitPlan units, const topo::Topology& topology, const ShardSpec& spec, int accumulation_steps,
           Composition collectives = Composition::Hierarchical, const TensorParallelPlan& tp = {});
  Schedule(const model::ParamLayout& layout, const topo::Topology& topology, const ShardSpec& spec,
           int accumulation_steps, const TensorParallelPlan& tp = {})
      : Schedule(unit_plan(layout), topology, spec, accumulation_steps, Composition::Hierarchical, tp) {}

  const ShardSpec& spec() const { return spec_; }
  const LevelSpec& levels() const { return levels_; }
  const topo::Topology& topology() const { return topology_; }
  int accumulation_steps() const { return accum_; }
  Composition collectives() const { return collectives_; }
  int world_size() const { return levels_.degree(levels_.num_levels); }  // the sharding's: data-parallel ranks
  int tensor_parallel_degree() const { return tp_degree_; }

  // Unit sizes padded so every per-level chunk is a whole number of blocks and 16-float
  // aligned: padded = round_up(numel, world * lcm(16, block if quantized)).
  std::size_t padded_numel(int unit) const { return padded_[unit]; }
  std::size_t total_padded() const;
  // Where rank `rank`'s slice sits inside a padded unit when sharded over `levels` levels.
  Slice slice(int unit, int rank, int levels) const;

  const UnitPlan& units() const { return units_; }
  int num_units() const { return static_cast<int>(padded_.size()); }
  const std::vector<ScheduledOp>& micro_batch_ops() const { return parts_.micro; }  // once per micro-batch
  const std::vector<ScheduledOp>& step_ops() const { return parts_.step; }          // once per optimizer step
  // The micro-batch's program: training (forward and backward), or evaluation (forward
  // only, every gathered buffer freed at its release).
  const MicroBatchProgram& training_program() const { return parts_.training; }
  // The step's last training micro-batch: the training program plus the buckets' step
  // reductions (the same program when there are no buckets).
  const MicroBatchProgram& last_micro_batch_program() const { return parts_.last_training; }
  // The step's gradient reductions that run in the last micro-batch's backward, as buckets
  // of units in the order backward finishes them. Replicated gradients (ShardSpec::
  // bucket_bytes): each bucket at most bucket_bytes of fp32 gradient (the first at most
  // first_bucket_bytes) unless one unit alone is larger, issued at its last unit's GradsReady. Sharded gradients the step still reduces
  // (OS over more levels than G, or replicas: hsdp, topo): one unit a bucket, issued right
  // behind the unit's micro-batch reduction. Empty when the step phase reduces unit by unit
  // (bucket_bytes 0, or gradients sharded over every level: a copy).
  const std::vector<std::vector<int>>& buckets() const { return parts_.buckets; }
  // The buckets' step reductions, once per step in the last micro-batch (issue points as
  // micro-batch ops'; a one-unit bucket's ops name their unit); they replace the per-unit
  // step reductions in step_ops().
  const std::vector<ScheduledOp>& bucket_ops() const { return parts_.bucket_ops; }
  const MicroBatchProgram& eval_program() const { return parts_.eval; }
  // The training program cut into a forward half (events [0, forward_events())) and a
  // backward half (the rest), for a runtime that runs other micro-batches between them (a
  // pipeline stage's 1F1B): the same ops, but no gather prefetched across the cut, so every
  // chain a half issues completes within it and nothing is held from one half to the other
  // (the model keeps the activations). `last_of_step`: with the buckets' step reductions, as
  // last_micro_batch_program(). Throws Error naming shard.free_after_forward where gathered
  // weights are kept from forward to backward.
  const MicroBatchProgram& halves_program(bool last_of_step) const;
  int forward_events() const { return parts_.forward_events; }
  // The TP collectives of a training micro-batch, in the model's order (empty without TP);
  // evaluation runs the first eval_tensor_parallel_ops() of them (forward's). The step's TP
  // scalar sums are step ops (Purpose::TensorParallelScalars).
  const std::vector<ScheduledOp>& tensor_parallel_ops() const { return parts_.tensor_parallel; }
  int eval_tensor_parallel_ops() const;
  // An op's id: its place in micro_batch_ops, tensor_parallel_ops, bucket_ops, step_ops
  // taken in that order (what the flight recorder names). -1 for an op not of this schedule.
  int op_id(const ScheduledOp* op) const;

  // Bytes per rank per optimizer step, by tier: accumulation_steps x (micro ops + TP ops) +
  // bucket ops + step ops.
  std::vector<TierTraffic> traffic_per_step() const;
  // compute_bytes: bytes of one element of the gradient accumulator and the full-unit
  // compute buffers: 4 for strata's fp32 runtime, 2 for a bf16 mixed-precision system.
  // align_bytes: each buffer the runtime holds rounded up to it, as a device pool carves them
  // (device::kPoolAlignBytes): what the runtime reserves before it allocates (1: the bytes).
  StateMemory memory_per_rank(int compute_bytes = 4, std::size_t align_bytes = 1) const;
  // The most full-unit buffers alive at once over a program, replaying their lifetimes.
  int peak_buffers(const MicroBatchProgram& program) const;
  // The runtime's pool of full-unit buffers (each of the largest padded unit), allocated up
  // front and lent to gathers and gradients: the peak over training and evaluation.
  int pool_buffers() const;
  // Elements of the executor's scratch buffers: the largest per-rank buffer of a unit's op.
  std::size_t scratch_elements() const;

  nlohmann::json to_json() const;
  std::string table() const;  // --print-schedule: ops in order, then totals per tier

 private:
  UnitPlan units_;
  topo::Topology topology_;
  ShardSpec spec_;
  LevelSpec levels_;
  int accum_;
  Composition collectives_;
  int tp_degree_ = 1;
  std::vector<std::size_t> padded_;
  ScheduleParts parts_;
};

// Bytes of the executor's scratch for buffers of `elements` (executor.hpp allocates them),
// each buffer rounded up to align_bytes.
std::uint64_t scratch_bytes(std::size_t elements, int block_size, std::size_t align_bytes = 1);

// A run [begin, end) of the flat parameter arena inside one unit.
struct ArenaRun {
  int unit = 0;
  std::size_t begin = 0, end = 0;
};
// The arena runs whose optimizer state rank `rank` holds: its OS slice of each unit with the
// padding cut off (units whose slice is all padding give none). The runtime allocates them;
// checkpoints and `strata ckpt convert` lay shards out by them.
std::vector<ArenaRun> optimizer_runs(const Schedule& schedule, const model::ParamLayout& layout, int rank);
// Ranks outside the first OS domain hold replicas of its slices: only the first domain's
// ranks write optimizer state into checkpoints.
bool saves_optimizer_state(const Schedule& schedule, int rank);

}  // namespace strata::shard
