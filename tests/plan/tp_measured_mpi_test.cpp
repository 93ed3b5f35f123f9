// The planner's bytes against a run's, under tensor parallelism: `strata plan --strategy
// S+tp2 --precision fp32` prices, tier by tier, exactly the bytes and messages 8 ranks of
// `--strategy S --tp 2` measure a step (2x2x2 test topology, TP in the GPU tier), with and
// without recomputation, for GPT-2 (tiny) and Llama (llama-tiny), and for tiny under
// --sequence-parallel, whose activation memory the plan prices as the run's model holds it;
// and under --pp 2 (stages across the cluster tier, ddp, zero1, zero3 or hsdp replicas a
// stage), the pipeline tier's bytes and messages a step on every rank: the stage messages and
// the tied embeddings' sum the planner prices from the runtime's own program; and every tier
// of the estimate, the stage's own reductions and gathers included, the pace-setting stage's;
// and under --pp 2 --tp 2 (zero3, hsdp stages) every tier, the stages' TP collectives included,
// with --sequence-parallel too (each stage's activation memory as its engine holds it).
#include <gtest/gtest.h>

#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "device/device.hpp"
#include "plan/model_parallel.hpp"
#include "shard/pipeline_engine.hpp"
#include "shard/runtime.hpp"

using namespace strata;

namespace {

constexpr int kTp = 2, kBatch = 4, kSeq = 32, kAccum = 2, kSteps = 2;

std::string topology_path() {
  const char* src = std::getenv("STRATA_SOURCE_DIR");
  return std::string(src ? src : ".") + "/configs/topology/2node-2gpu-2die.toml";
}

// The micro-batch every step of every run trains on.
struct Batch {
  std::vector<std::int32_t> tokens, targets;
  Batch() : tokens(kBatch * kSeq), targets(kBatch * kSeq) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<std::int32_t>((7 * i + 3) % 256);
      targets[i] = static_cast<std::int32_t>((11 * i + 5) % 256);
    }
  }
};

// kSteps steps of an engine on Batch; the bytes and messages by tier it measured each step.
template <class Engine>
std::vector<comm::CommStats> step_traffic(Engine& engine) {
  const Batch batch;
  std::vector<comm::CommStats> steps;
  for (int step = 1; step <= kSteps; ++step) {
    const comm::CommStats before = engine.context().accounting().snapshot();
    double loss = 0;
    for (int m = 0; m < kAccum; ++m)
      loss += engine.micro_step(batch.tokens.data(), batch.targets.data(), 1.0f / kAccum);
    engine.optimizer_step({}, train::StepArgs{1e-3f, step});
    engine.all_mean(loss / kAccum);  // the logged loss, as the trainer reduces it each step
    steps.push_back(engine.context().accounting().snapshot() - before);
  }
  return steps;
}

struct Measured {
  std::vector<comm::CommStats> steps;  // bytes and messages by tier this rank measured, a step
  std::uint64_t activation_bytes = 0;  // what the rank's model holds
};

Measured measure(const std::string& model, const std::string& strategy, bool recompute, bool sequence_parallel) {
  parallel::ShardOptions options;
  options.strategy = strategy;
  options.topology = topology_path();
  options.tp = kTp;
  options.sequence_parallel = sequence_parallel;
  shard::ShardedRuntime runtime(options, model::ModelConfig::preset(model), kBatch, kSeq, kAccum, 7, device::host(),
                                recompute);
  shard::ShardedEngine& engine = runtime.engine();
  return {step_traffic(engine), engine.activation_bytes()};
}

// The plan of a run below: 8 ranks of the test topology, their micro-batches in fp32.
plan::ModelParallelPlan plan_of(const plan::ModelShape& model, const plan::ModelParallel& mp, bool recompute = false,
                                bool sequence_parallel = false) {
  topo::Topology physical = topo::Topology::load(topology_path());
  physical.resolve(8);
  plan::Workload w;
  w.micro_batch = kBatch;
  w.seq = kSeq;
  w.accumulation_steps = kAccum;
  w.recompute = recompute ? plan::Recompute::Full : plan::Recompute::None;
  w.precision = Precision::F32;
  w.sequence_parallel = sequence_parallel;
  return plan::ModelParallelPlan(model, physical,
                                 plan::DeviceFacts{"test", 1, 1, 10, 1, 0, 0, "test", nullptr, std::nullopt}, w, mp);
}

plan::Estimate planned(const std::string& model, const std::string& strategy, bool recompute, bool sequence_parallel) {
  const plan::ModelParallelPlan p =
      plan_of(plan::ModelShape::preset(model), {kTp, 1, "", ""}, recompute, sequence_parallel);
  return p.estimate(strategy, plan::strategy_spec(strategy, p.data_parallel_topology()));
}

// The planned traffic of `what` equals every measured step's, tier by tier.
void expect_planned_bytes(const plan::Estimate& e, const Measured& run, const std::string& what) {
  for (const comm::CommStats& step : run.steps) {
    ASSERT_EQ(step.tiers.size(), e.tiers.size()) << what;
    for (std::size_t t = 0; t < e.tiers.size(); ++t) {
      EXPECT_EQ(step.tiers[t].bytes_sent, e.tiers[t].traffic.bytes_sent) << what << " " << e.tiers[t].traffic.tier;
      EXPECT_EQ(step.tiers[t].bytes_received, e.tiers[t].traffic.bytes_received) << what;
      EXPECT_EQ(step.tiers[t].messages, e.tiers[t].traffic.messages) << what;
    }
  }
  EXPECT_GT(e.tp_allreduce_s, 0) << what;
  EXPECT_GT(e.tiers[0].traffic.bytes_sent, 0u) << what;  // the TP group's tier
}

}  // namespace

TEST(PlanVsRun, TensorParallelBytesPerTierEqualWhatTheRunMeasures) {
  for (const char* model : {"tiny", "llama-tiny"})
  for (bool recompute : {false, true})
    for (const char* strategy : {"zero3", "hsdp"}) {
      const std::string what = std::string(model) + " " + strategy + "+tp2" + (recompute ? " recompute" : "");
      const plan::Estimate e = planned(model, strategy, recompute, false);
      EXPECT_EQ(e.strategy, std::string(strategy) + "+tp2");
      expect_planned_bytes(e, measure(model, strategy, recompute, false), what);
    }
}

// Sequence parallelism: its reduce-scatters and all-gathers priced as the run measures them,
// and the rank's activations as its model holds them, fewer than without it.
TEST(PlanVsRun, SequenceParallelBytesAndActivationsEqualTheRuns) {
  for (const char* model : {"tiny", "llama-tiny"})
  for (bool recompute : {false, true}) {
    const std::string what = std::string(model) + " zero3+tp2 --sequence-parallel" + (recompute ? " recompute" : "");
    const Measured sp = measure(model, "zero3", recompute, true);
    const plan::Estimate e = planned(model, "zero3", recompute, true);
    expect_planned_bytes(e, sp, what);
    EXPECT_EQ(e.activation_bytes, sp.activation_bytes) << what;
    const Measured tp = measure(model, "zero3", recompute, false);
    EXPECT_EQ(planned(model, "zero3", recompute, false).activation_bytes, tp.activation_bytes) << what;
    EXPECT_LT(sp.activation_bytes, tp.activation_bytes) << what;
  }
}

namespace {

// Every tier of a pipelined run, as its summary.json reports a step (the mean over the world's
// ranks), equals what the plan prices for it: the stages' own reductions (4 replicas a stage
// over the gpu and node tiers, one flat ring) as much as the messages and the tied sum.
void expect_every_tier_as_run(const plan::ModelParallelPlan& plan, const plan::Estimate& e,
                              const shard::ShardSpec& spec, const std::vector<comm::CommStats>& steps,
                              const std::string& what) {
  std::vector<std::string> not_compared;
  const std::vector<plan::ModelParallelPlan::RunTraffic> planned = plan.run_traffic(e, spec, not_compared);
  EXPECT_TRUE(not_compared.empty()) << what;
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (const comm::CommStats& step : steps) {
    ASSERT_EQ(planned.size(), step.tiers.size()) << what;
    for (std::size_t t = 0; t < planned.size(); ++t) {
      double measured[3] = {double(step.tiers[t].bytes_sent), double(step.tiers[t].bytes_received),
                            double(step.tiers[t].messages)};
      MPI_Allreduce(MPI_IN_PLACE, measured, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      EXPECT_EQ(planned[t].tier, step.tier_names[t]) << what;
      EXPECT_EQ(planned[t].bytes_sent, measured[0] / world) << what << " " << planned[t].tier;
      EXPECT_EQ(planned[t].bytes_received, measured[1] / world) << what << " " << planned[t].tier;
      EXPECT_EQ(planned[t].messages, measured[2] / world) << what << " " << planned[t].tier;
      EXPECT_GT(planned[t].bytes_sent, 0) << what << " " << planned[t].tier;
    }
  }
}

}  // namespace

// --pp 2 on 8 ranks: the stages across the cluster tier, 4 replicas a stage inside the nodes,
// so only the stages' messages and the tied embeddings' sum cross the cluster tier; and every
// tier's bytes, the stages' sharding schedules (ddp, zero1, zero3, hsdp; zeropp and topo with
// their quantized wires and hpZ copy) included, equal the run's: the world's mean
// (summary.json's) and the estimate's, that of the first rank of the stage that sets its pace.
TEST(PlanVsRun, PipelineTierBytesEqualTheStageMessagesAndTiedSumTheRunMeasures) {
  const plan::ModelParallelPlan plan = plan_of(plan::ModelShape::preset("tiny"), {1, 2, "", ""});
  const int cluster = plan.topology().outermost();
  for (const char* strategy : {"ddp", "zero1", "zero3", "hsdp", "zeropp", "topo"}) {
    parallel::ShardOptions options;
    options.strategy = strategy;
    options.topology = topology_path();
    options.pp = 2;
    shard::PipelineEngine engine(options, model::ModelConfig::preset("tiny"), kBatch, kSeq, kAccum, 7);
    const shard::ShardSpec spec = plan::strategy_spec(strategy, plan.data_parallel_topology());
    const shard::TierTraffic planned = plan.pipeline_tier_traffic(engine.stage(), spec);
    const plan::Estimate e = plan.estimate(strategy, spec);
    const std::vector<comm::CommStats> steps = step_traffic(engine);
    expect_every_tier_as_run(plan, e, spec, steps, std::string(strategy) + "+pp2");
    for (const comm::CommStats& step : steps) {
      const comm::TierTraffic measured = step.tiers.at(cluster);
      const std::string what = std::string(strategy) + "+pp2 stage " + std::to_string(engine.stage());
      EXPECT_EQ(measured.bytes_sent, planned.bytes_sent) << what;
      EXPECT_EQ(measured.bytes_received, planned.bytes_received) << what;
      EXPECT_EQ(measured.messages, planned.messages) << what;
      // Two stages send and receive alike: the estimate's cluster tier is every rank's.
      EXPECT_EQ(e.tiers.at(cluster).traffic.bytes_sent, planned.bytes_sent) << what;
      EXPECT_EQ(e.tiers.at(cluster).traffic.messages, planned.messages) << what;
      // The estimate prices the pace-setting stage's first replica (a flat ring's ranks cross
      // different tiers).
      if (engine.stage() != e.pace_stage || engine.groups().stage.front() != engine.rank()) continue;
      ASSERT_EQ(step.tiers.size(), e.tiers.size()) << what;
      for (std::size_t t = 0; t < e.tiers.size(); ++t) {
        const shard::TierTraffic& priced = e.tiers[t].traffic;
        EXPECT_EQ(step.tiers[t].bytes_sent, priced.bytes_sent) << what << " " << priced.tier;
        EXPECT_EQ(step.tiers[t].bytes_received, priced.bytes_received) << what << " " << priced.tier;
        EXPECT_EQ(step.tiers[t].messages, priced.messages) << what << " " << priced.tier;
      }
    }
    EXPECT_GT(planned.bytes_sent, 0u);
  }
}

// --pp 2 --tp 2 on 8 ranks: the TP groups in the gpu tier, 2 replicas a stage over the node
// tier, the stages across the cluster tier. Every tier (the TP collectives of each stage's
// walk, the sends, the tied sum, the replicas' gathers and reductions) equals the run's: the
// world's mean and the estimate's (the pace-setting stage's first replica's), for both
// families, with and without recomputation (which repeats each block's forward TP ops).
TEST(PlanVsRun, PipelineWithTensorParallelBytesPerTierEqualTheRuns) {
  for (const char* model : {"tiny", "llama-tiny"})
    for (bool recompute : {false, true})
      for (const char* strategy : {"zero3", "hsdp"}) {
        const std::string what = fmt::format("{} {}+tp2+pp2{}", model, strategy, recompute ? " recompute" : "");
        const plan::ModelParallelPlan plan = plan_of(plan::ModelShape::preset(model), {kTp, 2, "", ""}, recompute);
        parallel::ShardOptions options;
        options.strategy = strategy;
        options.topology = topology_path();
        options.tp = kTp;
        options.pp = 2;
        shard::PipelineEngine engine(options, model::ModelConfig::preset(model), kBatch, kSeq, kAccum, 7, recompute);
        const shard::ShardSpec spec = plan::strategy_spec(strategy, plan.data_parallel_topology());
        ASSERT_TRUE(plan.runs_pipeline()) << what;
        const plan::Estimate e = plan.estimate(strategy, spec);
        EXPECT_EQ(e.strategy, std::string(strategy) + "+tp2+pp2") << what;
        EXPECT_GT(e.tp_allreduce_s, 0) << what;
        const std::vector<comm::CommStats> steps = step_traffic(engine);
        expect_every_tier_as_run(plan, e, spec, steps, what);
        const int first = engine.groups().stage.front();
        if (engine.stage() != e.pace_stage || first != engine.rank() || engine.parallel_dims().tensor_rank(first) != 0)
          continue;
        for (const comm::CommStats& step : steps)
          for (std::size_t t = 0; t < e.tiers.size(); ++t) {
            const shard::TierTraffic& priced = e.tiers[t].traffic;
            EXPECT_EQ(step.tiers[t].bytes_sent, priced.bytes_sent) << what << " " << priced.tier;
            EXPECT_EQ(step.tiers[t].bytes_received, priced.bytes_received) << what << " " << priced.tier;
            EXPECT_EQ(step.tiers[t].messages, priced.messages) << what << " " << priced.tier;
          }
      }
}

// --pp 2 --tp 2 --sequence-parallel on 8 ranks, zero3 stages: every tier (the stage sends of the
// TP rank's half of the rows, the stages' reduce-scatters and all-gathers) equals the run's as
// above, and each stage's activations (its micro-batches in flight) are what its engine holds.
TEST(PlanVsRun, PipelineWithSequenceParallelBytesPerTierAndActivationsEqualTheRuns) {
  for (const char* model : {"tiny", "llama-tiny"})
    for (bool recompute : {false, true}) {
      const std::string what =
          fmt::format("{} zero3+tp2+pp2 --sequence-parallel{}", model, recompute ? " recompute" : "");
      const plan::ModelParallelPlan plan =
          plan_of(plan::ModelShape::preset(model), {kTp, 2, "", ""}, recompute, true);
      parallel::ShardOptions options;
      options.strategy = "zero3";
      options.topology = topology_path();
      options.tp = kTp;
      options.pp = 2;
      options.sequence_parallel = true;
      shard::PipelineEngine engine(options, model::ModelConfig::preset(model), kBatch, kSeq, kAccum, 7, recompute);
      const shard::ShardSpec spec = plan::strategy_spec("zero3", plan.data_parallel_topology());
      ASSERT_TRUE(plan.runs_pipeline()) << what;
      const plan::Estimate e = plan.estimate("zero3", spec);
      const std::vector<comm::CommStats> steps = step_traffic(engine);
      expect_every_tier_as_run(plan, e, spec, steps, what);
      // A stage send: the TP rank's half of the micro-batch's rows.
      const std::uint64_t half = sizeof(float) * kBatch * kSeq * model::ModelConfig::preset(model).n_embd / kTp;
      for (const shard::PipelineOp& op : engine.schedule().ops()) {
        if (op.kind) continue;  // the tied sum
        EXPECT_EQ(op.bytes, half) << what;
      }
      for (int step = 0; step < kSteps; ++step) engine.step_report();
      const nlohmann::json summary = engine.summary_report();
      ASSERT_EQ(e.stages.size(), 2u) << what;
      for (int s = 0; s < 2; ++s)
        EXPECT_EQ(e.stages[s].activation_bytes, summary["stages"][s]["memory_bytes"]["activations"].get<std::uint64_t>())
            << what << " stage " << s;
    }
}

// --pp 2 --pp-layers 1,3 of tiny grown to 4 blocks, ddp replicas a stage: each stage holds
// the parameters the plan prices for it, and the plan's weights, gradients and optimizer state
// are what the stage's engine allocated.
TEST(PlanVsRun, UnevenStagesHoldTheParametersAndWeightsThePlanPricesForEachStage) {
  model::ModelConfig config = model::ModelConfig::preset("tiny");
  config.n_layer = 4;
  const plan::ModelParallelPlan plan =
      plan_of(plan::ModelShape::from_name_and_fields("tiny", {"layers=4"}), {1, 2, "", "", {1, 3}});
  parallel::ShardOptions options;
  options.strategy = "ddp";
  options.topology = topology_path();
  options.pp = 2;
  options.pp_layers = {1, 3};
  const shard::PipelineEngine engine(options, config, kBatch, kSeq, kAccum, 7);
  const plan::Estimate e = plan.estimate("ddp", plan::strategy_spec("ddp", plan.data_parallel_topology()));
  ASSERT_EQ(e.stages.size(), 2u);
  const plan::Estimate::PipelineStage& stage = e.stages.at(engine.stage());
  const std::string what = "ddp+pp2 --pp-layers 1,3 stage " + std::to_string(engine.stage());
  EXPECT_EQ(stage.blocks, engine.stage() == 0 ? 1 : 3) << what;
  // What the stage's engine allocated is what the plan prices from the stage's schedule, and
  // its optimizer state four fp32 arrays (master, two moments, the gradient it reads) of them.
  const shard::StateMemory held = engine.state_memory();
  EXPECT_EQ(held.optimizer, 4 * sizeof(float) * stage.params) << what;
  EXPECT_EQ(held.weights, stage.memory.weights) << what;
  EXPECT_EQ(held.grads, stage.memory.grads) << what;
  EXPECT_EQ(held.optimizer, stage.memory.optimizer) << what;
}
