#pragma once
// Prices a shard::Schedule: the same list of collectives the runtime executes, timed by an
// α-β model per tier and replayed against the model's compute with the overlap the runtime
// does (docs/planner.md). Nothing here decides what moves where; the schedule does.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/precision.hpp"
#include "plan/calibration.hpp"
#include "plan/device.hpp"
#include "plan/model_shapes.hpp"
#include "plan/nccl_model.hpp"
#include "plan/peer.hpp"
#include "shard/schedule.hpp"
#include "shard/spec.hpp"
#include "topo/topology.hpp"

namespace strata::plan {

// bf16: weights and gradients as published mixed-precision systems keep them (2 bytes in
// memory and on the wire; int8/int4 wires stay); fp32: exactly what strata's runtime does.
int compute_bytes(Precision p);  // bytes of a weight/gradient/activation element in compute
// Under bf16, every fp32 wire of the spec becomes bf16; other wires are kept.
shard::ShardSpec apply_precision(shard::ShardSpec spec, Precision precision);

// The strategies the planner prices: shard presets, plus "topo-paper": topo with the
// cross-node gradient reduction as an all-reduce, as ZeRO-topo's paper describes it.
std::vector<std::string> strategy_names();
shard::ShardSpec strategy_spec(std::string_view name, const topo::Topology& topology);  // Error names --strategy

// How many collective calls the system being priced makes for one unit's op (docs/planner.md
// "Granularity"): strata and PyTorch FSDP (auto-wrap per transformer block) one per unit;
// DeepSpeed ZeRO coalesces parameters into buckets of its own sizes, so a unit's op stands for
// unit elements / bucket elements calls, each paying the op's fixed cost (latency, launch).
// The peers' own (--peer, docs/planner.md "Peers"): DeepSpeed v0.5's ZeRO-3 gathers one call a
// gathered tensor, v0.14's one coalesced call a gathered module, both reducing in
// reduce_bucket_size buckets; Megatron-Core's distributed optimizer one call a bucket.
enum class Granularity { Unit, DeepSpeed, DeepSpeedTensors, DeepSpeedModules, MegatronBuckets };
// unit | fsdp | deepspeed | deepspeed-tensors | deepspeed-modules | megatron-buckets; Error names --granularity
Granularity parse_granularity(std::string_view text);
std::string_view granularity_name(Granularity g);
std::string_view granularity_means(Granularity g);  // for the plan's assumptions
// The granularity a peer calls its collectives at (Strata: `given`, what --granularity says).
Granularity peer_granularity(Peer peer, Granularity given);

struct Workload {
  int micro_batch = 1;          // sequences a rank runs per micro-batch
  int seq = 0;                  // tokens a sequence
  int accumulation_steps = 1;   // micro-batches per optimizer step
  Recompute recompute;          // activation recomputation: none, full, selective-op (model_shapes.hpp)
  bool flash_attention = false; // attention keeps no seq x seq probabilities
  // --sequence-parallel: Megatron's sequence parallelism under tensor parallelism (splits with
  // tp > 1; model/tensor_parallel.hpp): its collectives and activations.
  bool sequence_parallel = false;
  Precision precision = Precision::BF16;
  // --batch-per-device: micro_batch and accumulation_steps are what one device would run
  // alone; a TP group of t runs t x micro_batch and a pipeline of p runs p x the
  // micro-batches, so every (tp, pp) split trains the same global batch (plan/model_parallel.hpp).
  bool batch_per_device = false;
  // How multi-tier collectives are formed and priced: strata's per-tier ops, or one call over
  // the group as NCCL runs FSDP and DeepSpeed, priced by NCCL's model (shard::Composition).
  shard::Composition collectives = shard::Composition::Hierarchical;
  Granularity granularity = Granularity::Unit;
  Peer peer = Peer::Strata;  // the software whose calls and overlap are priced (--peer)
  void validate(const ModelShape& model) const;  // throws Error naming the flag
};

// Ops the account leaves out, to reproduce an account that omits them (--leave-out
// PURPOSE[@TIER]); the output lists them.
struct LeaveOut {
  shard::Purpose purpose;
  std::string tier;  // empty: on every tier
};
LeaveOut parse_leave_out(std::string_view text, const topo::Topology& topology);
std::string_view purpose_flag(shard::Purpose p);  // "step-grad-reduce", ...

// α-β time of one op over its tier: messages·α + bytes_sent/β, with α = latency_us and
// β = the rank's bandwidth (Topology::rank_bandwidth_GBps: the pair rate, or the share of
// the shared ports) x efficiency. A ring takes group_size-1 steps of one chunk each; an
// all-to-all sends group_size-1 chunks; both are what the schedule's messages and bytes say.
double op_time_s(const shard::ScheduledOp& op, const topo::Topology& topology);

// One op's time in two parts: the fixed cost (latency, launch) and the bytes' time at the
// bandwidth. Without a calibration, op_time_s's α-β; with one, the measured curve of the
// op's tier and collective (CollectiveCurve::seconds_for): a ring all-gather is an
// all-gather, a ring reduce-scatter a reduce-scatter, a quantized reduction an all-to-all, a
// tensor-parallel all-reduce an all-reduce (2(t-1) messages of one chunk: α-β prices it as a
// reduce-scatter plus an all-gather).
// With a calibration that measured them, two more terms: the op's block quantization on the
// cores (codec_s: its wire's encode and decode at the calibrated codec rate), and how much
// slower it runs while compute runs beside it (under_compute: its curve's busy form / alone,
// applied by the replay to the part of the op that overlaps compute).
struct OpPrice {
  double latency_s = 0, bandwidth_s = 0, codec_s = 0;
  double under_compute = 1;
  std::optional<NcclCall> nccl{};  // the call NCCL's model chose, where it priced the op
  double seconds() const { return latency_s + bandwidth_s + codec_s; }
};
// With `nccl` (--collectives nccl), every ring collective (all-gather, reduce-scatter,
// all-reduce) is one call priced by NCCL's model (nccl_model.hpp) at its group's ring rate:
// the slowest over the tiers it spans of (ranks of a domain inside the tier / ranks of a
// domain inside the op's innermost tier) x rank_bandwidth x efficiency, or that tier's
// calibrated bus bandwidth; a calibrated curve with a measured latency on the bounding tier
// prices the op instead (a measurement of the library beats its model). An all-to-all (point-
// to-point sends, not a tuned collective) over several tiers keeps the α-β rule at that rate:
// messages x the largest latency of its tiers (docs/planner.md "NCCL's model"). A flat op
// (levels_spanned > 1) needs `nccl`.
// Elements an op of a quantized wire encodes and decodes a rank (0 for other wires): a gather
// decodes what it brought in (its weights travel in their stored wire format); an all-to-all
// reduction encodes its input and decodes (and sums) the group's chunks of its output.
double codec_elements(const shard::ScheduledOp& op);
// `launches`: the collective calls the op stands for (collective_launches); each pays the fixed cost.
OpPrice price_op(const shard::ScheduledOp& op, const topo::Topology& topology, const Calibration* calibration,
                 double launches = 1.0, const NcclSystem* nccl = nullptr);
// The nodes (domains of the topology's second-outermost tier) an op's group spans.
int nodes_of(const shard::ScheduledOp& op, const topo::Topology& topology);
// Calls one op of the schedule stands for under `granularity`: 1 for ops not tied to a unit
// (scalars, ddp's buckets, which --bucket-bytes already sizes) and under Unit; under DeepSpeed
// the unit's elements / the bucket of the op's purpose (weight gathers: prefetch bucket;
// reductions: reduce bucket; post-step and replica gathers: allgather bucket), amortized:
// DeepSpeed fills a bucket with whatever parameters are in flight, so a large unit is several
// calls and small units share one. Under DeepSpeedTensors / DeepSpeedModules a weight gather is
// `gathered`'s tensors / modules of its unit (at least one: the schedule still moves its bytes);
// under MegatronBuckets every gradient reduction and post-step gather is unit elements / the
// bucket of its group (megatron_bucket_elements).
double collective_launches(const shard::ScheduledOp& op, const shard::UnitPlan& units, Granularity granularity,
                           const std::vector<GatheredParams>& gathered = {});

// The time a micro-batch's forward waits for per-unit gathers issued one ahead, as Megatron-Core's
// --overlap-param-gather runs the distributed optimizer's post-step all-gathers: the first is
// issued at forward's start, each next one when forward reaches the unit before it (its
// forward pre-hook waits for its own and dispatches the next), one at a time on the stream.
// `gather_s` per unit (0: none), in the walk's first acquire of each unit.
double forward_wait_for_gathers(const shard::UnitPlan& units, const std::vector<double>& gather_s,
                                const std::vector<double>& forward_s);

// How two streams slow each other, per op of a replay (empty: 1 for every op).
struct OverlapFactors {
  // Compute's slowdown while op i is on the communication stream (Calibration::compute_slowdown
  // of its tier at the bytes a second it moves: beside a copy through shared memory and a wait
  // on a NIC, or a large op and a trickle of small ones, compute is not slowed alike).
  std::vector<double> slows_compute;
  // Op i's slowdown while compute runs beside it (its busy curve / alone).
  std::vector<double> under_compute;
};

// One micro-batch replayed on two streams (docs/planner.md "Overlap"): compute walks the
// unit events; communication runs one op at a time in the order ops are issued. Issue and
// wait points are the schedule's micro-batch program, the one the runtime executes (no
// policy of its own here): the timeline is the runtime's order by construction. While op i
// is on the stream and compute runs, compute goes `factors.slows_compute[i]` times slower
// and the op `factors.under_compute[i]` times slower; each advances at its slowed rate.
// `last_of_step`: the step's last micro-batch (Schedule::last_micro_batch_program), which
// also runs the buckets' step reductions; ops are then numbered micro-batch ops first, bucket
// ops after (op_seconds, factors and order alike).
struct Timeline {
  double makespan_s = 0;               // until both streams are idle
  double compute_s = 0;
  double slowdown_s = 0;               // compute time added by running beside communication
  std::vector<double> busy_by_level;   // time ops of each tier occupy the stream
  std::vector<double> stretch_by_level;  // of it, added by compute running beside the ops
  std::vector<double> exposed_by_level;  // time compute waits (or the micro-batch runs on) per tier
  std::vector<int> order;              // ops (indices) in the order the stream runs them
};
Timeline replay_micro_batch(const shard::Schedule& schedule, const std::vector<double>& forward_s,
                            const std::vector<double>& backward_s, const std::vector<double>& op_seconds,
                            bool last_of_step = false, const OverlapFactors& factors = {});

struct TierCost {
  shard::TierTraffic traffic;   // bytes and messages a rank sends and receives per step
  double busy_s = 0;            // time its ops occupy the communication stream, per step
  double latency_s = 0;         //   of which their fixed costs (latency, launch), the rest bytes at bandwidth
  double codec_s = 0;           //   of which block quantization on the cores (calibrated codec rate)
  double under_compute_s = 0;   //   of which added by compute running beside the ops (calibrated busy curves)
  double exposed_micro_s = 0;   // per-micro-batch communication not hidden by compute, per step
  double step_phase_s = 0;      // optimizer-step phase communication (never hidden)
};

struct Estimate {
  std::string strategy;
  shard::ShardSpec spec;
  int world_size = 0;
  std::vector<TierCost> tiers;       // topology order, innermost first
  shard::StateMemory memory;
  std::uint64_t activation_bytes = 0;
  std::uint64_t total_memory_bytes = 0;
  std::uint64_t device_memory_bytes = 0;
  bool fits = false;
  double tokens_per_step = 0;        // all ranks
  double compute_s = 0;              // per step: every micro-batch's forward and backward
  // Per step, of compute_s: backward's rerun of forward work under --recompute: its matmuls
  // (full: the whole forward) and, under selective-op, its memory-bound non-matmul ops.
  double recompute_matmul_s = 0, recompute_memory_bound_s = 0;
  double exposed_micro_s = 0;        // per step
  double overlap_slowdown_s = 0;     // per step: compute time added while communication runs beside it
  double step_comm_s = 0;            // per step
  double optimizer_s = 0;            // Adam over the OS shard, bound by memory bandwidth
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tflops_per_device = 0;      // model FLOPs (6·ψ + attention) achieved
  double mfu = 0;                    // tflops_per_device / peak
  double hfu = 0;                    // with recomputed FLOPs counted
  std::vector<std::string> left_out;
  // Under --collectives nccl: each distinct call NCCL's model priced (purpose, tier, group,
  // bytes), with its algorithm, protocol, hops by type and achieved bus bandwidth.
  struct NcclOp {
    std::string purpose, tier, collective;
    int group_size = 0, nodes = 0;
    double bytes_a_call = 0, calls_a_step = 0;
    double achieved_bus_GBps = 0;  // bytes a rank sends / the call's time (nccl-tests' busbw)
    NcclCall call;
  };
  std::vector<NcclOp> nccl_ops;
  // Under --peer: the peer's collective calls a step by purpose, and the time its own
  // behaviour moves (docs/planner.md "Peers").
  struct PeerTerms {
    std::string peer;
    std::vector<std::pair<std::string, double>> calls_a_step;  // purpose -> calls, in first-booked order
    double serial_reduction_s = 0;   // reductions on the compute stream (DeepSpeed stage 1/2: overlap_comm off)
    double hidden_param_gather_s = 0;  // post-step gathers hidden behind the next forward (Megatron)
    double tp_hidden_s = 0;          // tensor-parallel time hidden behind the GEMMs (Megatron --tp-comm-overlap)
    double copy_s = 0;               // FSDP2's copy-in/copy-out on the compute stream
  };
  std::optional<PeerTerms> peer;
  // Under --compute-anchor: the compute efficiency by shape of the slice that priced it (with
  // pipeline parallelism the slowest stage's).
  std::optional<ShapeEfficiency> compute_shape;
  // Tensor and pipeline parallelism (plan/model_parallel.hpp); data parallelism alone: 1, 1, zeros.
  int tensor_parallel = 1, pipeline_stages = 1;
  double tp_allreduce_s = 0;         // per step: the schedule's tensor-parallel ops, on the critical path
  double pp_p2p_s = 0;               // per step: activation sends between stages, on the critical path
  double pp_bubble_s = 0;            // per step: 1F1B fill and drain
  double pp_bubble_fraction = 0;     // the slowest stage's idle share: (p-1)/(m+p-1) for equal stages
  // Each pipeline stage, in stage order (empty without a pipeline): its blocks, the parameters
  // it holds (its units; the last stage of a tied head also its copy of the embeddings), its
  // memory and its micro-batch's compute (TP included, messages not).
  struct PipelineStage {
    int blocks = 0;
    std::uint64_t params = 0;
    shard::StateMemory memory;
    std::uint64_t activation_bytes = 0, total_memory_bytes = 0;
    double micro_batch_s = 0;
  };
  std::vector<PipelineStage> stages;
  int pace_stage = 0;  // the stage that sets the pace: the step is its, the tiers its first replica's
  // Energy (plan/model_parallel.hpp); zeros when the device's TDP is not known.
  double utilization = 0, power_watts = 0, joules_per_token = 0, tokens_per_kwh = 0;

  std::uint64_t bytes_on(std::string_view tier) const;  // bytes sent a rank a step over that tier
  // "fits: 40.1 of 64 GB" / "does not fit: needs 71.2 GB of 64 GB (7.2 GB over)"
  std::string memory_verdict() const;
  nlohmann::json to_json() const;
};

// Throughput of an estimate whose tokens_per_step, step_time_s and world_size are set:
// tokens/s, model TFLOP/s per device, MFU and HFU of the whole model.
void set_throughput(Estimate& e, const ModelShape& model, const Workload& workload, const DeviceFacts& device);

// What every estimate of one plan shares; the model's units are built once.
class PlanContext {
 public:
  // With a calibration, its measured curves price communication, compute and Adam (the
  // device's peak then only scales MFU); it must cover every tier of the topology.
  // A model sliced by tensor parallelism (ModelShape::slice) runs its TP collectives over
  // tier `tensor_parallel_level` (`topology` is then the data-parallel one, whose tiers are
  // the physical ones by index).
  PlanContext(ModelShape model, topo::Topology topology, DeviceFacts device, Workload workload,
              std::vector<LeaveOut> leave_out = {}, std::optional<Calibration> calibration = std::nullopt,
              int tensor_parallel_level = 0);

  const ModelShape& model() const { return model_; }
  const topo::Topology& topology() const { return topology_; }
  const DeviceFacts& device() const { return device_; }
  const Workload& workload() const { return workload_; }
  const shard::UnitPlan& units() const { return units_; }
  const std::optional<Calibration>& calibration() const { return calibration_; }
  const std::optional<ShapeEfficiency>& shape_efficiency() const { return shape_; }

  // The schedule of `spec` on this topology, with the model slice's TP collectives (the
  // runtime's own walk, model::tensor_parallel_calls, at the workload's precision).
  shard::Schedule schedule(const shard::ShardSpec& spec) const;
  // That schedule, priced: its TP ops on the critical path (tp_allreduce_s, in the step and
  // in their tier's exposed time). `spec` is taken as given (apply precision and overrides
  // before).
  Estimate estimate(std::string strategy, const shard::ShardSpec& spec) const;
  // A schedule built elsewhere priced the same way: a pipeline stage's as the runtime builds
  // it (shard::PipelineSchedule::sharding), whose units are this slice's in the runtime's order,
  // each naming its whole-model unit (UnitPlan::layout_unit). Error if a unit is not the slice's.
  Estimate estimate(std::string strategy, const shard::Schedule& schedule) const;
  nlohmann::json assumptions() const;
  // What --recompute reruns and keeps, with its per-block figures (the explanation's line).
  std::string recompute_means() const;

 private:
  class EstimateSteps;
  Estimate priced(std::string strategy, const shard::Schedule& schedule) const;
  bool left_out(const shard::ScheduledOp& op) const;

  ModelShape model_;
  topo::Topology topology_;
  DeviceFacts device_;
  Workload workload_;
  std::vector<LeaveOut> leave_out_;
  std::optional<Calibration> calibration_;
  std::optional<NcclSystem> nccl_;  // under --collectives nccl
  std::optional<ShapeEfficiency> shape_;  // under --compute-anchor: device_.compute_efficiency's making
  std::vector<GatheredParams> gathered_;  // DeepSpeed's gathered tensors and modules a unit
  shard::UnitPlan units_;
  shard::TensorParallelPlan tensor_parallel_;
  std::vector<double> forward_s_, backward_s_;  // per unit, one micro-batch
  double memory_GBps_ = 0;  // memory-bound work's rate (Adam's): the HBM's, or the calibration's
  double rerun_matmul_s_ = 0, rerun_memory_bound_s_ = 0;  // one micro-batch, all units
};

}  // namespace strata::plan
