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

#include "model/gpt.hpp"
#include "model/layout.hpp"
#include "shard/spec.hpp"
#include "topo/topology.hpp"

namespace strata::shard {

enum class OpKind { AllGather, ReduceScatter };
enum class Algorithm { Ring, AllToAll };  // quantized reductions use all-to-all (ZeRO++ qgZ)
enum class When { Forward, Backward, Step };
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
};
std::string_view to_string(OpKind k);
std::string_view to_string(Algorithm a);
std::string_view to_string(When w);
std::string_view to_string(Purpose p);

struct ScheduledOp {
  When when;
  Purpose purpose;
  OpKind kind;
  Algorithm algorithm = Algorithm::Ring;
  int unit = -1;          // -1: not tied to a unit (scalars)
  int event = -1;         // micro-batch ops: index in UnitPlan::events of the Acquire or
                          // GradsReady it serves (what a cost model overlaps with compute)
  int level = 0;          // tier index; the group is that tier's across-group
  int group_size = 1;
  Wire wire = Wire::F32;
  std::size_t elements_in = 0;   // per rank: shard for a gather, full buffer for a reduce-scatter
  std::size_t elements_out = 0;
  std::size_t bytes_sent = 0;    // per rank, on the wire (scales included)
  std::size_t bytes_received = 0;
  int messages = 0;              // sends per rank
};

struct TierTraffic {
  std::string tier;
  std::uint64_t bytes_sent = 0, bytes_received = 0, messages = 0;
};

// Per-rank bytes held by each state, from the spec's formula (padded unit sizes).
struct StateMemory {
  std::uint64_t weights = 0;    // W shard in its wire format
  std::uint64_t secondary = 0;  // hpZ copy
  std::uint64_t grads = 0;      // G shard (the accumulator), compute_bytes an element
  std::uint64_t optimizer = 0;  // fp32 master + two Adam moments of the OS shard
  std::uint64_t gathered = 0;   // full-unit buffers alive at once (prefetch + 1), weights and grads
};

// A rank's slice of one unit at a given number of levels: [offset, offset + count).
struct Slice {
  std::size_t offset = 0, count = 0;
};

// What the schedule needs to know of a model: its units' sizes and the order in which a
// micro-batch touches them. The runtime takes it from the GPT's layout; the planner builds
// it for model shapes strata does not train (Llama, GPT-NeoX).
struct UnitPlan {
  std::vector<std::string> names;
  std::vector<std::size_t> numel;             // fp32 elements of each unit
  std::vector<model::UnitEvent> events;       // one micro-batch, see model/gpt.hpp
};
UnitPlan unit_plan(const model::ParamLayout& layout);

class Schedule {
 public:
  Schedule(UnitPlan units, const topo::Topology& topology, const ShardSpec& spec, int accumulation_steps);
  Schedule(const model::ParamLayout& layout, const topo::Topology& topology, const ShardSpec& spec,
           int accumulation_steps)
      : Schedule(unit_plan(layout), topology, spec, accumulation_steps) {}

  const ShardSpec& spec() const { return spec_; }
  const LevelSpec& levels() const { return levels_; }
  const topo::Topology& topology() const { return topology_; }
  int accumulation_steps() const { return accum_; }
  int world_size() const { return levels_.degree(levels_.num_levels); }

  // Unit sizes padded so every per-level chunk is a whole number of blocks and 16-float
  // aligned: padded = round_up(numel, world * lcm(16, block if quantized)).
  std::size_t padded_numel(int unit) const { return padded_[unit]; }
  std::size_t total_padded() const;
  // Where rank `rank`'s slice sits inside a padded unit when sharded over `levels` levels.
  Slice slice(int unit, int rank, int levels) const;

  const UnitPlan& units() const { return units_; }
  int num_units() const { return static_cast<int>(padded_.size()); }
  const std::vector<ScheduledOp>& micro_batch_ops() const { return micro_; }  // once per micro-batch
  const std::vector<ScheduledOp>& step_ops() const { return step_; }          // once per optimizer step

  // Bytes per rank per optimizer step, by tier: accumulation_steps x micro ops + step ops.
  std::vector<TierTraffic> traffic_per_step() const;
  // compute_bytes: bytes of one element of the gradient accumulator and the full-unit
  // compute buffers: 4 for strata's fp32 runtime, 2 for a bf16 mixed-precision system.
  StateMemory memory_per_rank(int compute_bytes = 4) const;

  nlohmann::json to_json() const;
  std::string table() const;  // --print-schedule: ops in order, then totals per tier

 private:
  UnitPlan units_;
  topo::Topology topology_;
  ShardSpec spec_;
  LevelSpec levels_;
  int accum_;
  std::vector<std::size_t> padded_;
  std::vector<ScheduledOp> micro_, step_;
};

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
