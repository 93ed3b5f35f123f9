#include <gtest/gtest.h>

#include <fmt/format.h>

#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "plan/cost_model.hpp"
#include "plan/model_parallel.hpp"
#include "plan/search.hpp"
#include "plan/svg.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::plan;
using shard::Purpose;
using strata::test::error_of;

namespace {

topo::Topology frontier(int nodes) {
  topo::Topology t = topo::Topology::preset("frontier");
  t.resolve(t.world_size_for_nodes(nodes));
  return t;
}

PlanContext neox_on_frontier(int nodes, std::vector<LeaveOut> leave_out = {}, Workload w = {}) {
  if (w.seq == 0) w.seq = 2048;
  topo::Topology t = frontier(nodes);
  return PlanContext(ModelShape::preset("gpt-neox-20b"), t, *device_for_topology("frontier"), w,
                     std::move(leave_out));
}

// The scalar all-gathers (gradient norm, loss) are left out where a closed form counts only
// the model's bytes.
std::vector<LeaveOut> no_scalars() { return {{Purpose::GradNormAllReduce, ""}, {Purpose::LossAllReduce, ""}}; }

double padded_params(const PlanContext& c, const shard::ShardSpec& spec) {
  return static_cast<double>(shard::Schedule(c.units(), c.topology(), spec, 1).total_padded());
}

Estimate priced(const PlanContext& c, const std::string& strategy) {
  return c.estimate(strategy, apply_precision(strategy_spec(strategy, c.topology()), c.workload().precision));
}

double total_sent(const Estimate& e) {
  double n = 0;
  for (const TierCost& t : e.tiers) n += static_cast<double>(t.traffic.bytes_sent);
  return n;
}

}  // namespace

TEST(CostModel, PrecisionMapsFp32WiresToBf16AndKeepsQuantizedOnes) {
  topo::Topology t = frontier(2);
  shard::ShardSpec z3 = apply_precision(strategy_spec("zero3", t), Precision::BF16);
  EXPECT_EQ(z3.weight_wire, DType::BF16);
  EXPECT_EQ(z3.grad_wire, DType::BF16);
  EXPECT_EQ(z3.step_grad_wire, DType::BF16);
  shard::ShardSpec zpp = apply_precision(strategy_spec("zeropp", t), Precision::BF16);
  EXPECT_EQ(zpp.weight_wire, DType::I8);
  EXPECT_EQ(zpp.grad_wire, DType::I4);
  EXPECT_EQ(zpp.step_grad_wire, DType::BF16);
  EXPECT_EQ(apply_precision(strategy_spec("zero3", t), Precision::F32).weight_wire, DType::F32);
}

TEST(CostModel, Zero3MovesThreeTimesTwoPsiPerRankPerStep) {
  PlanContext c = neox_on_frontier(48, no_scalars());
  Estimate e = priced(c, "zero3");
  const double d = 384, psi = padded_params(c, e.spec);
  // NeoX's input embedding is a lookup: its backward needs no weights, so it is gathered
  // once a micro-batch, every other unit twice.
  const double embedding = static_cast<double>(shard::Schedule(c.units(), c.topology(), e.spec, 1).padded_numel(0));
  EXPECT_DOUBLE_EQ(total_sent(e), (3 * 2 * psi - 2 * embedding) * (d - 1) / d);
  // Padding aside, that is 3 x 2ψ of the real model.
  EXPECT_NEAR(total_sent(e) / (6.0 * static_cast<double>(c.model().num_params())), 1.0, 0.01);
}

TEST(CostModel, HsdpCrossNodeIsARingAllReduceOfTheNodeShard) {
  PlanContext c = neox_on_frontier(48, no_scalars());
  Estimate e = priced(c, "hsdp");
  const double g = 8, R = 48, psi = padded_params(c, e.spec);
  EXPECT_DOUBLE_EQ(static_cast<double>(e.bytes_on("cluster")), 2 * (2 * psi / g) * (R - 1) / R);
}

TEST(CostModel, ZeroppCrossNodeIsAboutAQuarterOfZero3) {
  PlanContext c = neox_on_frontier(48);
  const double ratio = static_cast<double>(priced(c, "zeropp").bytes_on("cluster")) /
                       static_cast<double>(priced(c, "zero3").bytes_on("cluster"));
  EXPECT_NEAR(ratio, 0.25, 0.01);  // int8 weights (+ scales) and int4 gradients (+ scales), no backward gather
}

TEST(CostModel, TopoPaperAllReducesTheNodeShardAndStrataReduceScattersIt) {
  PlanContext c = neox_on_frontier(48, no_scalars());
  Estimate paper = priced(c, "topo-paper"), strata_topo = priced(c, "topo");
  double reduce = 0, gather = 0;  // bytes of one cluster-level reduce-scatter (bf16) and weight gather (int8)
  shard::Schedule s(c.units(), c.topology(), paper.spec, 1);
  for (int u = 0; u < s.num_units(); ++u) {
    const std::size_t os_slice = s.padded_numel(u) / 384;
    reduce += 47.0 * static_cast<double>(wire_bytes(DType::BF16, os_slice, 256));
    gather += 47.0 * static_cast<double>(wire_bytes(DType::I8, os_slice, 256));
  }
  EXPECT_DOUBLE_EQ(static_cast<double>(paper.bytes_on("cluster")), 2 * reduce + gather);
  EXPECT_DOUBLE_EQ(static_cast<double>(strata_topo.bytes_on("cluster")), reduce + gather);
  // The paper's table: leave both step collectives out and nothing crosses nodes.
  PlanContext table = neox_on_frontier(
      48, {{Purpose::StepGradReduce, ""}, {Purpose::StepGradGather, ""}, {Purpose::WeightGatherStep, ""},
           {Purpose::GradNormAllReduce, ""}, {Purpose::LossAllReduce, ""}});
  Estimate t = priced(table, "topo-paper");
  EXPECT_EQ(t.bytes_on("cluster"), 0u);
  // Named once for each tier they ran on: reduce and all-gather over cluster, the weight
  // gather over cluster and node, the two scalars over all three tiers.
  EXPECT_EQ(t.left_out.size(), 10u);
  EXPECT_LT(t.step_time_s, priced(c, "topo-paper").step_time_s);
}

// The same cluster tier, once with a port for each of a node's 8 ranks and once with 2
// shared by all 8: the bytes are the same, the cross-node time 4x, and the step slower.
TEST(CostModel, SharedPortsSlowTheCrossNodeOps) {
  Workload w;
  w.seq = 2048;
  auto on = [&](int ports) {
    topo::Topology t = topo::Topology::preset("dgx-h100");
    t.apply_override(topo::parse_tier_override(fmt::format("cluster.ports={}", ports)));
    t.resolve(t.world_size_for_nodes(4));
    PlanContext c(ModelShape::preset("llama2-7b"), t, *device_for_topology("dgx-h100"), w);
    return priced(c, "zero3");
  };
  const Estimate own = on(8), shared = on(2);
  EXPECT_EQ(own.bytes_on("cluster"), shared.bytes_on("cluster"));
  EXPECT_NEAR(shared.tiers[1].busy_s / own.tiers[1].busy_s, 4.0, 0.05);  // latency terms aside
  EXPECT_EQ(shared.tiers[0].busy_s, own.tiers[0].busy_s);
  EXPECT_GT(shared.step_time_s, own.step_time_s);
}

TEST(CostModel, MemoryByStateFollowsTheSpecFormula) {
  PlanContext c = neox_on_frontier(48);
  Estimate e = priced(c, "topo");
  shard::Schedule s(c.units(), c.topology(), e.spec, 1);
  std::uint64_t weights = 0, grads = 0, optimizer = 0;
  std::size_t largest = 0;
  for (int u = 0; u < s.num_units(); ++u) {
    const std::size_t n = s.padded_numel(u);
    weights += wire_bytes(DType::I8, n / 2, 256);  // W over the 2 GCDs, int8 with scales
    grads += 2 * (n / 8);                                // G over the node's 8, bf16
    optimizer += 16 * (n / 384);                         // OS over all: master, m, v, gradient in fp32
    largest = std::max(largest, n);
  }
  EXPECT_EQ(e.memory.weights, weights);
  EXPECT_EQ(e.memory.grads, grads);
  EXPECT_EQ(e.memory.optimizer, optimizer);
  EXPECT_EQ(e.memory.secondary, 0u);
  // Activations of one 2048-token sequence in bf16, counted from NeoX-20B's tensors (h = 6144,
  // 64 heads, ffn 4h, vocab 50432, dense attention). A block keeps, a token: ln_1's input and
  // output 2h, Q, K, V 3h, the attention output h, ln_2's input and output 2h, the GELU's input
  // and output 2 x 4h (16h = 98304 elements) and a softmax row per head, 64 x 2048 = 131072:
  // 229376 elements x 2 bytes x 44 blocks = 20185088 bytes. The head keeps ln_f's input and
  // output, 2h x 2 bytes = 24576, and the fp32 logits, 4 x 50432 = 201728.
  const std::uint64_t activations = 2048ull * (20185088 + 24576 + 201728);  // 41,802,530,816
  EXPECT_EQ(e.activation_bytes, activations);
  // Full-unit buffers (bf16, each of the largest unit): in backward at once the computing
  // block's gathered weights, the next block's (prefetch 1), the computing block's gradient
  // and the two before it still reducing (reductions_in_flight 2): five.
  const std::uint64_t gathered = 5 * 2 * static_cast<std::uint64_t>(largest);
  EXPECT_EQ(e.total_memory_bytes, weights + grads + optimizer + gathered + activations);
  EXPECT_EQ(e.device_memory_bytes, 64'000'000'000u);
}

TEST(CostModel, AModelThatDoesNotFitSaysWhatItNeedsAgainstWhatTheDeviceHas) {
  topo::Topology t = topo::Topology::preset("dgx-a100");
  t.resolve(8);
  Workload w;
  w.seq = 4096;
  PlanContext c(ModelShape::preset("llama2-70b"), t, *device_for_topology("dgx-a100"), w);
  Estimate ddp = priced(c, "ddp");
  EXPECT_FALSE(ddp.fits);
  // ddp keeps every state whole: 2 + 2 + 16 bytes a parameter before activations.
  EXPECT_GT(ddp.total_memory_bytes, 20u * static_cast<std::uint64_t>(c.model().num_params()));
  const std::string verdict = ddp.memory_verdict();
  EXPECT_NE(verdict.find(fmt::format("does not fit: needs {:.1f} GB of 80 GB", ddp.total_memory_bytes / 1e9)),
            std::string::npos)
      << verdict;
  EXPECT_EQ(ddp.to_json()["fits"], false);
}

TEST(CostModel, AlphaBetaTimeOfOneOp) {
  topo::Topology t = topo::Topology::from_toml_string(R"(
[[tiers]]
name = "node"
size = 4
bandwidth_GBps = 100
latency_us = 1
[[tiers]]
name = "cluster"
bandwidth_GBps = 25
latency_us = 5
efficiency = 0.8
)");
  t.resolve(16);
  shard::ScheduledOp op{{strata::Collective::AllGather}, shard::When::Forward, Purpose::WeightGatherForward};
  op.level = 1;
  op.group_size = 4;
  op.messages = 3;
  op.bytes_sent = 3'000'000;
  // 3 messages x 5 us + 3 MB / (25 GB/s x 0.8)
  EXPECT_DOUBLE_EQ(op_time_s(op, t), 3 * 5e-6 + 3e6 / 20e9);
  // 2 ports of 25 GB/s shared by the node's 4 ranks: 12.5 GB/s a rank.
  t.apply_override(topo::parse_tier_override("cluster.port_GBps=25"));
  t.apply_override(topo::parse_tier_override("cluster.ports=2"));
  EXPECT_DOUBLE_EQ(op_time_s(op, t), 3 * 5e-6 + 3e6 / 10e9);
}

namespace {

// Two ranks on one tier of `GBps`, without latency.
topo::Topology two_ranks(int GBps) {
  topo::Topology t = topo::Topology::from_toml_string(
      fmt::format("[[tiers]]\nname = \"node\"\nbandwidth_GBps = {}\nlatency_us = 0\n", GBps));
  t.resolve(2);
  return t;
}

// Two units A, B on two ranks of one tier, every state sharded: gathers before each forward
// and backward, reductions after each backward; each op takes 1 s in the tests below.
shard::Schedule two_unit_schedule(int prefetch) {
  const topo::Topology t = two_ranks(1);
  using K = model::UnitEvent;
  const auto F = model::Phase::Forward, B = model::Phase::Backward;
  shard::UnitPlan p{{"A", "B"},
                    {1024, 1024},
                    {{K::Acquire, 0, F}, {K::Release, 0, F}, {K::Acquire, 1, F}, {K::Release, 1, F},
                     {K::Acquire, 1, B}, {K::Release, 1, B}, {K::GradsReady, 1, B}, {K::Acquire, 0, B},
                     {K::Release, 0, B}, {K::GradsReady, 0, B}},
                    {}};
  shard::ShardSpec spec;
  spec.weights = spec.grads = spec.optimizer = "node";
  spec.prefetch = prefetch;
  return shard::Schedule(p, t, spec, 1);
}

}  // namespace

TEST(CostModel, EveryMicroBatchOpNamesTheEventItServes) {
  PlanContext c = neox_on_frontier(2);
  for (const char* name : {"zero3", "zeropp", "topo"}) {
    shard::Schedule s(c.units(), c.topology(), strategy_spec(name, c.topology()), 1);
    for (const shard::ScheduledOp& op : s.micro_batch_ops()) {
      ASSERT_GE(op.event, 0);
      const model::UnitEvent& ev = c.units().events.at(op.event);
      EXPECT_EQ(ev.unit, op.unit) << name;
      if (op.purpose == Purpose::GradReduce) {
        EXPECT_EQ(ev.kind, model::UnitEvent::GradsReady) << name;
      } else {
        EXPECT_EQ(ev.kind, model::UnitEvent::Acquire) << name;
        EXPECT_EQ(ev.phase == model::Phase::Forward, op.purpose == Purpose::WeightGatherForward) << name;
      }
    }
  }
  shard::Schedule s(c.units(), c.topology(), strategy_spec("zero3", c.topology()), 1);
  EXPECT_NE(error_of([&] { s.memory_per_rank(3); }).find("compute_bytes = 3"), std::string::npos);
  EXPECT_NE(error_of([&] { replay_micro_batch(s, {1}, {1}, {}); }).find("replay:"), std::string::npos);
}

// The same timeline with compute at half speed while an op is on the stream: each of the
// four compute runs meets one 1 s op at its start, so each does 0.5 s of work in that
// second and ends 0.5 s later than before.
TEST(CostModel, ReplaySlowsComputeBesideCommunication) {
  shard::Schedule s = two_unit_schedule(1);
  std::vector<double> ones(6, 1.0);
  Timeline t = replay_micro_batch(s, {2, 2}, {4, 4}, ones, false, {std::vector<double>(6, 2.0), {}});
  EXPECT_DOUBLE_EQ(t.compute_s, 12);
  EXPECT_DOUBLE_EQ(t.slowdown_s, 2);
  EXPECT_DOUBLE_EQ(t.makespan_s, 16);
  EXPECT_EQ(replay_micro_batch(s, {2, 2}, {4, 4}, ones).slowdown_s, 0);
}

// Compute slows by the factor of the op on the stream, op by op. Slowed only beside the
// gradient reductions (on the timeline of ReplayHidesPrefetchedGathersBehindCompute below):
// of the compute runs, only A's backward [9,13] meets one, reduce B [9,10], and does half a
// second of work in it: it ends at 13.5, reduce A runs [13.5,14.5]. A wrong-length list is refused.
TEST(CostModel, ReplaySlowsComputeByTheFactorOfTheOpOnTheStream) {
  shard::Schedule s = two_unit_schedule(1);
  const std::vector<double> ones(6, 1.0);
  std::vector<double> slows(6, 1.0);
  const std::vector<shard::ScheduledOp>& ops = s.micro_batch_ops();
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].purpose == Purpose::GradReduce) slows[i] = 2.0;
  const Timeline t = replay_micro_batch(s, {2, 2}, {4, 4}, ones, false, {slows, {}});
  EXPECT_DOUBLE_EQ(t.compute_s, 12);
  EXPECT_DOUBLE_EQ(t.slowdown_s, 0.5);
  EXPECT_DOUBLE_EQ(t.makespan_s, 14.5);
  EXPECT_NE(error_of([&] { replay_micro_batch(s, {2, 2}, {4, 4}, ones, false, {{2.0}, {}}); }).find("compute slowdown"),
            std::string::npos);
}

// Ops three times slower while compute runs beside them (compute itself not slowed): each
// prefetched op runs under compute at a third of its speed and finishes alone once compute
// waits for it. Gather A [0,1] alone; B from 1 under A fwd [1,3] (2/3 done), then alone to
// 10/3; B' under B fwd [10/3,16/3], alone to 17/3; A' under B bwd [17/3,29/3], done at
// 26/3; reduce B under A bwd [29/3,41/3], done at 38/3; reduce A [41/3,44/3] alone.
TEST(CostModel, ReplaySlowsCommunicationBesideCompute) {
  shard::Schedule s = two_unit_schedule(1);
  const std::vector<double> ones(6, 1.0), threes(6, 3.0);
  Timeline t = replay_micro_batch(s, {2, 2}, {4, 4}, ones, false, {{}, threes});
  EXPECT_DOUBLE_EQ(t.compute_s, 12);
  EXPECT_DOUBLE_EQ(t.slowdown_s, 0);
  EXPECT_DOUBLE_EQ(t.makespan_s, 44.0 / 3);
  EXPECT_DOUBLE_EQ(t.exposed_by_level[0], 8.0 / 3);
  EXPECT_DOUBLE_EQ(t.stretch_by_level[0], 20.0 / 3);  // B 4/3, B' 4/3, A' 2, reduce B 2
  EXPECT_DOUBLE_EQ(t.busy_by_level[0], 6 + 20.0 / 3);
  // Factors of 1 are the plain replay; a factor list of the wrong length is refused.
  const Timeline plain = replay_micro_batch(s, {2, 2}, {4, 4}, ones, false, {{}, ones});
  EXPECT_DOUBLE_EQ(plain.makespan_s, 14);
  EXPECT_EQ(plain.stretch_by_level[0], 0);
  EXPECT_NE(error_of([&] { replay_micro_batch(s, {2, 2}, {4, 4}, ones, false, {{}, {3.0}}); }).find("under-compute"),
            std::string::npos);
}

TEST(CostModel, ReplayHidesPrefetchedGathersBehindCompute) {
  shard::Schedule s = two_unit_schedule(1);
  ASSERT_EQ(s.micro_batch_ops().size(), 6u);
  std::vector<double> ones(6, 1.0);
  // forward 2 s a unit, backward 4 s. Prefetch 1 by hand: gather A [0,1] (compute waits),
  // A fwd [1,3] while gather B [1,2]; B fwd [3,5] while gather B' [3,4]; B bwd [5,9] while
  // gather A' [5,6]; reduce B issued at 9 runs [9,10] under A bwd [9,13]; reduce A [13,14]
  // runs after compute: exposed 1 + 1.
  Timeline t = replay_micro_batch(s, {2, 2}, {4, 4}, ones);
  EXPECT_DOUBLE_EQ(t.compute_s, 12);
  EXPECT_DOUBLE_EQ(t.makespan_s, 14);
  EXPECT_DOUBLE_EQ(t.exposed_by_level[0], 2);
  EXPECT_DOUBLE_EQ(t.busy_by_level[0], 6);
}

TEST(CostModel, ReplayWithoutPrefetchWaitsForEveryGather) {
  shard::Schedule s = two_unit_schedule(0);
  std::vector<double> ones(6, 1.0);
  // On demand: gather A [0,1], A fwd [1,3]; gather B [3,4], B fwd [4,6]; gather B' [6,7],
  // B bwd [7,11]; reduce B and gather A' are both issued at 11, reduce B first (schedule
  // order): [11,12], [12,13]; A bwd [13,17]; reduce A [17,18].
  Timeline t = replay_micro_batch(s, {2, 2}, {4, 4}, ones);
  EXPECT_DOUBLE_EQ(t.compute_s, 12);
  EXPECT_DOUBLE_EQ(t.makespan_s, 18);
  EXPECT_DOUBLE_EQ(t.exposed_by_level[0], 6);
}

TEST(CostModel, UncalibratedStepsNeitherSlowComputeNorHideTheFirstGather) {
  Workload w;
  w.accumulation_steps = 4;
  PlanContext c = neox_on_frontier(48, {}, w);
  for (const char* name : {"zero3", "zeropp", "topo", "hsdp"}) {
    Estimate e = priced(c, name);
    EXPECT_EQ(e.overlap_slowdown_s, 0) << name;  // uncalibrated: communication does not slow compute
    // The first gather of a micro-batch is never hidden.
    shard::Schedule s(c.units(), c.topology(), e.spec, 4);
    double first = 0;
    for (const auto& op : s.micro_batch_ops())
      if (op.event == s.micro_batch_ops().front().event) first += op_time_s(op, c.topology());
    EXPECT_GE(e.exposed_micro_s, 4 * first * (1 - 1e-12)) << name;
  }
}

// Step time is compute + exposed communication + the step phase (never hidden) + Adam, on a
// step small enough to price by hand: ddp without buckets on two ranks of one 100 GB/s tier
// without latency, so the micro-batch has no communication and the step phase is the
// gradient all-reduce and the loss's.
TEST(CostModel, StepTimeOfASmallDdpStepByHand) {
  const topo::Topology t = two_ranks(100);
  DeviceFacts device;  // 100 TFLOP/s, at half of it, and 1000 GB/s of HBM
  device.name = "hand";
  device.peak_tflops = 100;
  device.memory_gb = 80;
  device.hbm_GBps = 1000;
  device.compute_efficiency = 0.5;
  // No biases, RMSNorm, a tied head: units 256 x 64 = 16384 (embeddings), 2 x 64 (norms) +
  // 4 x 64² (Q, K, V, O) + 2 x 64 x 256 (MLP) = 49280 (a block), 64 (the final norm); all even,
  // so unpadded on two ranks (multiples of 2 x 16): 16384 + 2 x 49280 + 64 = 115008.
  const ModelShape m = ModelShape::from_name_and_fields(
      "custom", {"layers=2", "hidden=64", "heads=2", "ffn=256", "vocab=256", "seq=64", "biases=false",
                 "norm=rmsnorm", "tied_head=true"});
  auto step = [&](int accumulation) {
    Workload w;
    w.seq = 64;
    w.accumulation_steps = accumulation;
    PlanContext c(m, t, device, w, {});
    shard::ShardSpec spec = apply_precision(strategy_spec("ddp", t), w.precision);
    spec.bucket_bytes = 0;
    return c.estimate("ddp", spec);
  };
  const Estimate e = step(2);
  // Model FLOPs a token: 6 x the matmul parameters (2 x 49152 in blocks + the 16384 of the
  // head) + 12 x 2 layers x 64 x 64 tokens of attention = 688128 + 98304 = 786432. A
  // micro-batch of 64 tokens at 50 TFLOP/s: 786432 x 64 / 5e13 s.
  const double micro_batch = 786432.0 * 64 / 5e13;
  // The bf16 gradients' ring all-reduce sends each rank's half twice, 2 x 115008 bytes, and
  // the loss's all-gather two fp64 values, 16 bytes, at 100 GB/s.
  const double comm = (2.0 * 115008 + 16) / 100e9;
  // Adam on the whole (replicated) optimizer state: 24 bytes of master, m, v in and out and
  // 2 x 2 of bf16 gradient and weight an element, at 1000 GB/s.
  const double adam = 115008.0 * 28 / 1000e9;
  EXPECT_DOUBLE_EQ(e.compute_s, 2 * micro_batch);
  EXPECT_DOUBLE_EQ(e.exposed_micro_s, 0);
  EXPECT_DOUBLE_EQ(e.step_comm_s, comm);
  EXPECT_DOUBLE_EQ(e.optimizer_s, adam);
  const double seconds = 2 * micro_batch + comm + adam;
  EXPECT_DOUBLE_EQ(e.step_time_s, seconds);
  // 64 tokens x 2 micro-batches x 2 ranks; MFU: a rank's 128 tokens of model FLOPs over the
  // step at 100 TFLOP/s.
  EXPECT_DOUBLE_EQ(e.tokens_per_s, 256 / seconds);
  EXPECT_DOUBLE_EQ(e.mfu, 786432.0 * 128 / seconds / 100e12);
  // Twice the micro-batches a step add only their compute.
  EXPECT_DOUBLE_EQ(step(4).step_time_s, seconds + 2 * micro_batch);
}

TEST(CostModel, ComputeTimeIsFlopsOverPeakTimesEfficiency) {
  PlanContext c = neox_on_frontier(1);
  // Without buckets nothing overlaps in ddp's micro-batch: it is pure compute.
  shard::ShardSpec spec = apply_precision(strategy_spec("ddp", c.topology()), c.workload().precision);
  spec.bucket_bytes = 0;
  Estimate ddp = c.estimate("ddp", spec);
  const double flops = c.model().model_flops_per_token(2048) * 2048;
  EXPECT_NEAR(ddp.compute_s, flops / (191.5e12 * 0.5), 1e-9 * ddp.compute_s);
  EXPECT_DOUBLE_EQ(ddp.exposed_micro_s, 0);
}

// ddp's gradient all-reduce in buckets during the last backward (the default, 25 MiB):
// the same bytes, and the step phase loses it; what the last buckets leave after backward
// is exposed in the micro-batch. Less exposed communication in all, a shorter step.
TEST(CostModel, BucketsHideDdpsGradientReductionBehindBackward) {
  PlanContext c = neox_on_frontier(2);
  shard::ShardSpec spec = apply_precision(strategy_spec("ddp", c.topology()), c.workload().precision);
  const Estimate on = c.estimate("ddp", spec);
  spec.bucket_bytes = 0;
  const Estimate off = c.estimate("ddp", spec);
  for (std::size_t t = 0; t < on.tiers.size(); ++t)
    EXPECT_EQ(on.tiers[t].traffic.bytes_sent, off.tiers[t].traffic.bytes_sent) << on.tiers[t].traffic.tier;
  EXPECT_DOUBLE_EQ(off.exposed_micro_s, 0);
  EXPECT_GT(on.exposed_micro_s, 0);
  EXPECT_LT(on.step_comm_s, off.step_comm_s);
  EXPECT_LT(on.exposed_micro_s + on.step_comm_s, off.exposed_micro_s + off.step_comm_s);
  EXPECT_LT(on.step_time_s, off.step_time_s);
  EXPECT_DOUBLE_EQ(on.compute_s, off.compute_s);
}

// Llama 3.1 8B at 8192 tokens on one DGX H100, as torchtitan's R18 row (docs/validation.md).
PlanContext llama3_8b_on_dgx_h100(Recompute recompute) {
  topo::Topology t = topo::Topology::preset("dgx-h100");
  t.resolve(t.world_size_for_nodes(1));
  Workload w;
  w.seq = 8192;
  w.micro_batch = 2;
  w.flash_attention = true;
  w.recompute = recompute;
  return PlanContext(ModelShape::from_name_and_fields("llama2-7b", {"vocab=128256", "kv_heads=8", "ffn=14336"}), t,
                     *device_for_topology("dgx-h100"), w);
}

TEST(CostModel, SelectiveOpRecomputationCostsLessTimeThanFullAndKeepsLessMemoryThanNone) {
  const PlanContext none = llama3_8b_on_dgx_h100(Recompute::None);
  const PlanContext selective = llama3_8b_on_dgx_h100(Recompute::SelectiveOp);
  const PlanContext full = llama3_8b_on_dgx_h100(Recompute::Full);
  const Estimate n = priced(none, "zero3"), s = priced(selective, "zero3"), f = priced(full, "zero3");
  EXPECT_LT(n.step_time_s, s.step_time_s);
  EXPECT_LT(s.step_time_s, f.step_time_s);
  EXPECT_LT(n.compute_s, s.compute_s);
  EXPECT_LT(s.compute_s, f.compute_s);
  EXPECT_LT(f.activation_bytes, s.activation_bytes);
  EXPECT_LT(s.activation_bytes, n.activation_bytes);
  EXPECT_LT(f.total_memory_bytes, s.total_memory_bytes);
  EXPECT_LT(s.total_memory_bytes, n.total_memory_bytes);
  // The rerun matmuls are wk, wo, w3 of 32 blocks at peak x efficiency; the memory-bound ops
  // their bytes at the HBM rate; together what selective-op adds to compute.
  const DeviceFacts d = selective.device();
  const double tokens = 2.0 * 8192;
  const double flops = 32 * 2.0 * (4096.0 * 1024 + 4096.0 * 4096 + 4096.0 * 14336) * tokens;
  EXPECT_NEAR(s.recompute_matmul_s, flops / (d.peak_tflops * 1e12 * d.compute_efficiency), 1e-9 * s.recompute_matmul_s);
  const double bytes = 32 * 2.0 * (7 * 4096 + 2 * (4096 + 1024) + 3 * 14336) * tokens;
  EXPECT_NEAR(s.recompute_memory_bound_s, bytes / (d.hbm_GBps * 1e9), 1e-9 * s.recompute_memory_bound_s);
  EXPECT_NEAR(s.compute_s - n.compute_s, s.recompute_matmul_s + s.recompute_memory_bound_s, 1e-9 * s.compute_s);
  EXPECT_EQ(n.recompute_matmul_s, 0);
  EXPECT_EQ(f.recompute_memory_bound_s, 0);
  // Rerun FLOPs count in HFU only.
  EXPECT_NEAR(s.tflops_per_device * s.step_time_s, n.tflops_per_device * n.step_time_s,
              1e-12 * n.tflops_per_device * n.step_time_s);
  EXPECT_GT(s.hfu, s.mfu);
  // HFU over MFU is the FLOPs run over the model's, a token, counted by hand (h = 4096, kv 1024,
  // ffn 14336, vocab 128256, 32 layers, 8192 tokens): matmul parameters 32 x (2h² + 2h·kv +
  // 3h·ffn) + vocab·h = 32 x 218103808 + 525336576 = 7504658432, so 6 x that + 12 x 32 x h x
  // 8192 of attention = 45027950592 + 12884901888 = 57912852480 model FLOPs; the reruns add
  // 32 x 2 x (h·kv + h² + h·ffn) = 64 x 79691776 = 5100273664.
  EXPECT_NEAR(s.hfu / s.mfu, (57912852480.0 + 5100273664.0) / 57912852480.0, 1e-12);
  const nlohmann::json j = s.to_json();
  EXPECT_EQ(j["recompute_matmul_s"].get<double>(), s.recompute_matmul_s);
  EXPECT_EQ(j["recompute_memory_bound_s"].get<double>(), s.recompute_memory_bound_s);
  const nlohmann::json a = selective.assumptions();
  EXPECT_EQ(a["recompute"], "selective-op");
  EXPECT_NE(a["recompute_means"].get<std::string>().find("(wk, wo, w3:"), std::string::npos) << a["recompute_means"];
}

TEST(CostModel, JsonCarriesTheFieldsAUserReads) {
  PlanContext c = neox_on_frontier(48);
  nlohmann::json j = priced(c, "zeropp").to_json();
  for (const char* key : {"bytes_per_step", "memory_bytes", "step_time_s", "tflops_per_device", "mfu", "fits",
                          "tokens_per_s", "comm_time_per_step", "spec"})
    EXPECT_TRUE(j.contains(key)) << key;
  for (const char* tier : {"gpu", "node", "cluster"})
    for (const char* f : {"bytes_sent", "bytes_received", "messages"}) EXPECT_TRUE(j["bytes_per_step"][tier].contains(f));
  for (const char* state : {"weights", "secondary", "grads", "optimizer", "activations", "total"})
    EXPECT_TRUE(j["memory_bytes"].contains(state)) << state;
  nlohmann::json a = c.assumptions();
  for (const char* key : {"precision", "device", "tiers", "overlap", "flops", "activations", "comm_time"})
    EXPECT_TRUE(a.contains(key)) << key;
}

TEST(CostModel, BadInputIsRefusedNamingTheField) {
  topo::Topology t = frontier(2);
  EXPECT_NE(error_of([&] { strategy_spec("zero4", t); }).find("--strategy 'zero4'"), std::string::npos);
  EXPECT_NE(error_of([] { precision_named("fp8", "--precision"); }).find("--precision = 'fp8'"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_leave_out("weight-gather", t); }).find("--leave-out 'weight-gather'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_leave_out("loss@rack", t); }).find("no tier 'rack'"), std::string::npos);
  EXPECT_NE(error_of([] { topo::Topology::preset("frontier").world_size_for_nodes(0); }).find("--nodes 0"),
            std::string::npos);
  Workload w;
  w.seq = 2048;
  w.micro_batch = 0;
  EXPECT_NE(error_of([&] { w.validate(ModelShape::preset("llama2-7b")); }).find("--micro-batch 0"),
            std::string::npos);
  w.micro_batch = 1;
  w.seq = 2048;
  EXPECT_NE(error_of([&] { w.validate(ModelShape::preset("gpt2-124m")); }).find("--seq 2048"), std::string::npos);
  w.recompute = Recompute::SelectiveOp;  // its attention is the fused kernel, kept
  EXPECT_NE(error_of([&] { w.validate(ModelShape::preset("llama2-7b")); }).find("--recompute selective-op"),
            std::string::npos);
  w.flash_attention = true;
  w.validate(ModelShape::preset("llama2-7b"));
  EXPECT_NE(error_of([] { resolve_device(std::nullopt, "my-cluster", {}); })
                .find("give --peak-tflops, --device-memory-gb, --hbm-gbps"),
            std::string::npos);
  DeviceOverrides bad;
  bad.compute_efficiency = 1.5;
  EXPECT_NE(error_of([&] { resolve_device(device_for_topology("frontier"), "frontier", bad); }).find("--compute-efficiency = 1.5"), std::string::npos);
}

TEST(Search, EnumeratesEveryValidSpecAndNamesThePresets) {
  topo::Topology t = frontier(4);
  std::vector<NamedSpec> specs = enumerate_specs(t, Precision::BF16, {});
  // (W, G, OS) with W <= G <= OS over {none, gpu, node, cluster}: 20 triples; secondary tiers
  // inside W; int8 weights where weights are gathered; 3 gradient wires where G is sharded.
  std::size_t expected = 0;
  for (int w = 0; w <= 3; ++w)
    for (int g = w; g <= 3; ++g)
      for (int o = g; o <= 3; ++o)
        expected += static_cast<std::size_t>(std::max(1, w)) * (w > 0 || o > w ? 2 : 1) * (g > 0 ? 3 : 1);
  EXPECT_EQ(specs.size(), expected);
  std::set<std::string> names;
  for (const NamedSpec& s : specs) names.insert(s.name);
  for (const char* preset : {"ddp", "zero1", "zero2", "zero3", "hsdp", "zeropp", "topo"})
    EXPECT_TRUE(names.count(preset)) << preset;
}

TEST(Search, RanksFittingSpecsByThroughputAndSaysWhyOthersLost) {
  Workload w;
  w.seq = 2048;
  w.recompute = Recompute::Full;
  topo::Topology t = frontier(48);
  SearchResult r = search(ModelParallelPlan(ModelShape::preset("gpt-neox-20b"), t, *device_for_topology("frontier"), w, {}), {});
  ASSERT_FALSE(r.fitting.empty());
  ASSERT_FALSE(r.not_fitting.empty());  // ddp keeps 16 bytes of 20.6B parameters a rank
  for (std::size_t i = 1; i < r.fitting.size(); ++i) EXPECT_LE(r.fitting[i - 1].step_time_s, r.fitting[i].step_time_s);
  for (const Estimate& e : r.fitting) EXPECT_LE(e.total_memory_bytes, e.device_memory_bytes);
  for (const Estimate& e : r.not_fitting) EXPECT_GT(e.total_memory_bytes, e.device_memory_bytes);
  const std::string slower = why_lost(r.fitting.back(), r.fitting.front());
  EXPECT_EQ(slower.rfind("+", 0), 0u) << slower;
  EXPECT_NE(slower.find("% time a token"), std::string::npos) << slower;
  const std::string unfit = why_lost(r.not_fitting.front(), r.fitting.front());
  EXPECT_NE(unfit.find("does not fit: needs"), std::string::npos) << unfit;
  EXPECT_NE(unfit.find("of 64 GB"), std::string::npos) << unfit;
  nlohmann::json j = search_json(r, 3);
  EXPECT_EQ(j["best"].size(), 3u);
  EXPECT_EQ(j["evaluated"], r.fitting.size() + r.not_fitting.size());
}

TEST(Sweep, ScalingEfficiencyIsRelativeToTheFirstNodeCount) {
  topo::Topology t = topo::Topology::preset("frontier");
  Workload w;
  w.seq = 2048;
  w.recompute = Recompute::Full;
  std::vector<NamedSpec> strategies;
  for (const char* name : {"zero3", "topo"}) {
    strategies.push_back({name, apply_precision(strategy_spec(name, t), Precision::BF16)});
  }
  auto series = sweep(ModelShape::preset("gpt-neox-20b"), topo::Topology::preset("frontier"),
                      *device_for_topology("frontier"), w, {}, strategies, {1, 4, 16});
  ASSERT_EQ(series.size(), 2u);
  for (const SweepSeries& s : series) {
    ASSERT_EQ(s.points.size(), 3u);
    EXPECT_DOUBLE_EQ(s.points[0].scaling_efficiency, 1.0);
    EXPECT_EQ(s.points[2].estimate.world_size, 128);
    const auto& p = s.points[2];
    EXPECT_DOUBLE_EQ(p.scaling_efficiency,
                     (p.estimate.tokens_per_s / 128) / (s.points[0].estimate.tokens_per_s / 8));
  }
  // One node: nothing crosses nodes.
  EXPECT_EQ(series[0].points[0].estimate.bytes_on("cluster"), 0u);
  EXPECT_GT(series[0].points[1].estimate.bytes_on("cluster"), 0u);
  const std::string svg = sweep_svg(series, "NeoX <20B> & co", "cluster");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("NeoX &lt;20B&gt; &amp; co"), std::string::npos);  // escaped
  std::size_t lines = 0;
  for (std::size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 6u);  // two strategies on three charts
  EXPECT_NE(error_of([] { parse_node_list("1,2,x"); }).find("--sweep-nodes '1,2,x'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_node_list("4,2"); }).find("must increase"), std::string::npos);
  EXPECT_NE(error_of([] { parse_node_list("0,2"); }).find("'0' is not a positive"), std::string::npos);
}

TEST(Svg, NiceTicksCoverTheRangeFromNearItsLowestValue) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  std::vector<double> t = nice_ticks(0, 0.37, 6);
  EXPECT_GE(t.back(), 0.37);
  EXPECT_EQ(t.front(), 0);
  EXPECT_EQ(nice_ticks(870, 1030, 4), (std::vector<double>{850, 900, 950, 1000, 1050}));  // not from 0
}

TEST(Svg, TickLabelsOfOneAxisShareOneNotation) {
  EXPECT_EQ(tick_labels({0, 5000, 10000, 15000}), (std::vector<std::string>{"0", "5k", "10k", "15k"}));
  EXPECT_EQ(tick_labels({850, 900, 950, 1000, 1050}), (std::vector<std::string>{"850", "900", "950", "1000", "1050"}));
  EXPECT_EQ(tick_labels({0, 5e5, 1e6, 1.5e6}), (std::vector<std::string>{"0", "0.5M", "1.0M", "1.5M"}));
  EXPECT_EQ(tick_labels({0, 0.1, 0.2, 0.3}), (std::vector<std::string>{"0", "0.1", "0.2", "0.3"}));
  EXPECT_EQ(tick_labels({0, 0.002, 0.004}), (std::vector<std::string>{"0", "2.0e-03", "4.0e-03"}));
  EXPECT_EQ(tick_labels({1, 2, 4, 8, 16}), (std::vector<std::string>{"1", "2", "4", "8", "16"}));
}

// Megatron's --overlap-param-gather: unit i+1's gather is issued when forward reaches unit i.
// Three units, forward 2 s each, gathers 1, 3, 1 s: A's gather 0-1, A computes 1-3; B's issued
// at 1, runs 1-4, B computes 4-6; C's issued at 4, runs 4-5, C computes 6-8: forward waits 2 s.
TEST(CostModel, PostStepGathersWaitOnlyWhereForwardOvertakesThem) {
  using K = model::UnitEvent;
  const auto F = model::Phase::Forward, B = model::Phase::Backward;
  shard::UnitPlan p{{"A", "B", "C"},
                    {1, 1, 1},
                    {{K::Acquire, 0, F}, {K::Release, 0, F}, {K::Acquire, 1, F}, {K::Release, 1, F},
                     {K::Acquire, 2, F}, {K::Release, 2, F}, {K::Acquire, 2, B}, {K::Acquire, 1, B}},
                    {}};
  EXPECT_DOUBLE_EQ(forward_wait_for_gathers(p, {1, 3, 1}, {2, 2, 2}), 2.0);
  // Gathers shorter than the forward before them hide but the first.
  EXPECT_DOUBLE_EQ(forward_wait_for_gathers(p, {0.5, 1, 1}, {2, 2, 2}), 0.5);
}
