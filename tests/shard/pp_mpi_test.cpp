// Pipeline parallelism in the runtime, 4 ranks: --pp 2 over the outer tier with two ddp
// (and zero1) replicas per stage, llama-tiny so, an explicit uneven split (--pp-layers 1,3), and
// --pp 4 (one replica) of a 4-block model, train to the losses and
// weights of the same global batch in one process (the reduction order changes, so within
// fp32 rounding, not bit for bit); the bytes measured per tier are the schedule's, stage
// sends included; a rank holds its stage's arrays only; recomputation changes no bit;
// refusals name the flag. Under it, the sharding runtime's micro-batch cut into a forward and a
// backward half, run in a stage's 1F1B order, gives micro_step's bits; and on those halves,
// zero2, zero3 (4 ranks) and hsdp (8 ranks) inside the stages train to the one-process losses
// (and --pp 4 of 2 zero1, zero3 and hsdp replicas a stage on 8 ranks),
// and zeropp and topo (8 ranks) stay close to their unquantized twins.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "comm/backends/tier_comms.hpp"
#include "shard/sharded_engine.hpp"
#include "topo/groups.hpp"
#include "pipeline_runs.hpp"

using namespace strata;
using namespace strata::test;

namespace {

// Without TP the reduction order is the only difference from one process: the weights stay
// within 1e-4.
constexpr double kWeightTolerance = 1e-4;

// One tier of 4: room for --pp 4.
const std::string& one_tier() {
  static const std::string path =
      topology_file("one_tier", "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n");
  return path;
}

model::ModelConfig config_of(int layers, const std::string& preset = "tiny") {
  model::ModelConfig c = model::ModelConfig::preset(preset);
  c.n_layer = layers;
  return c;
}

// --pp 2 over "cluster" (4 ranks) or "node" (8 ranks, a stage's 4 replicas spanning "gpu" and
// "cluster": hsdp sharded over "gpu", replicated over "cluster"); --pp 4 over one tier (4
// ranks) or over "cluster" with a stage's 2 replicas over "gpu" (8 ranks).
parallel::ShardOptions options_at(int pp, const std::string& strategy = "ddp", const std::vector<int>& layers = {}) {
  parallel::ShardOptions o;
  o.strategy = strategy;
  const bool eight = world_size() == 8;
  if (pp == 2) o.topology = eight ? three_tiers() : two_tiers();
  else o.topology = eight ? two_tiers() : one_tier();
  if (eight) o.pp_tier = pp == 2 ? "node" : "cluster";
  o.pp = pp;
  o.pp_layers = layers;
  return o;
}

PipeRun train_pipelined(int pp, int layers, const std::string& strategy, std::vector<comm::CommStats>* traffic,
                        comm::CommStats* scheduled, bool recompute = false, const std::string& preset = "tiny",
                        const std::vector<int>& stage_layers = {}) {
  return strata::test::train_pipelined(options_at(pp, strategy, stage_layers), config_of(layers, preset), traffic,
                                       scheduled, recompute);
}

// The losses and weights of the same global batch, `replicas` replicas' micro-batches, in one process.
void expect_trains_as_one_process(const PipeRun& pp, const model::ModelConfig& config, int replicas,
                                  const std::string& name) {
  expect_same_training(pp, train_alone(config, replicas), config, name, kWeightTolerance);
}

// A ShardedEngine's losses, gradient norms and final weights over kSteps steps of kMicro
// micro-batches: by micro_step, or in halves in the 1F1B order of the first of two stages
// (two forwards in flight).
struct HalvesRun {
  std::vector<float> losses;
  std::vector<double> norms;
  std::vector<float> params;
  std::vector<std::vector<int>> traces;  // each micro-batch's ops (the schedule's ids), sorted
};

HalvesRun train_sharded(const std::string& strategy, const std::string& preset, bool halves) {
  topo::Topology topology = topo::Topology::from_toml_file(two_tiers());
  topology.resolve(4);
  comm::Context ctx(topology);
  topo::ProcessGroups groups(topology);
  comm::TierComms comms(ctx, groups);
  const shard::ShardSpec spec = shard::ShardSpec::preset_for(strategy, topology);
  shard::ShardedEngine engine(config_of(2, preset), kBatch, kSeq, ctx, comms, spec, kMicro, 1234, device::host(), false,
                              std::nullopt, Precision::F32, parallel::micro_batches_in_flight(2, 0, kMicro));
  HalvesRun run;
  auto trace = [&] {
    std::vector<int> ops;
    for (const shard::ScheduledOp* op : engine.last_micro_batch_trace()) ops.push_back(engine.schedule().op_id(op));
    std::sort(ops.begin(), ops.end());
    run.traces.push_back(ops);
  };
  for (int step = 1; step <= kSteps; ++step) {
    std::vector<std::vector<std::int32_t>> tok(kMicro), tgt(kMicro);
    for (int i = 0; i < kMicro; ++i) append_test_batch(step, i, engine.rank(), kBatch, kSeq, tok[i], tgt[i]);
    if (!halves) {
      for (int i = 0; i < kMicro; ++i) {
        run.losses.push_back(engine.micro_step(tok[i].data(), tgt[i].data(), 1.0f / kMicro));
        trace();
      }
    } else {
      const int slots = parallel::micro_batches_in_flight(2, 0, kMicro);
      for (const parallel::PipelineAction& a : parallel::one_f_one_b(2, 0, kMicro)) {
        const int i = a.micro_batch;
        if (a.kind == parallel::PipelineAction::Forward)
          run.losses.push_back(engine.forward_half(i % slots, tok[i].data(), tgt[i].data(), 1.0f / kMicro));
        if (a.kind == parallel::PipelineAction::Backward) {
          engine.backward_half(i % slots);
          trace();
        }
      }
    }
    run.norms.push_back(engine.optimizer_step({}, train::StepArgs{1e-3f, step}).grad_norm);
  }
  run.params.resize(engine.layout().total_floats());
  engine.gather_params(run.params.data());
  return run;
}

}  // namespace

// Forward of micro-batch i, other micro-batches' halves, then backward of i: the same
// losses, gradient norms and weights, bit for bit, as micro_step, and each micro-batch runs
// the same ops (zero3 gathers the weights for both halves; hsdp also reduces over the
// replicas in the step's last backward, ddp in buckets there), for both families.
TEST(PipelineHalves, ForwardAndBackwardHalvesIn1F1BOrderGiveMicroStepsBits) {
  AT_WORLD(4);
  for (const auto& [strategy, preset] : std::vector<std::pair<std::string, std::string>>{
           {"zero3", "tiny"}, {"hsdp", "tiny"}, {"ddp", "tiny"}, {"zero3", "llama-tiny"}}) {
    const HalvesRun whole = train_sharded(strategy, preset, false), halves = train_sharded(strategy, preset, true);
    const std::string name = strategy + " " + preset;
    // 1F1B's forwards run ahead of the backwards: the losses in forward order, micro_step's.
    EXPECT_EQ(halves.losses, whole.losses) << name;
    EXPECT_EQ(halves.norms, whole.norms) << name;
    EXPECT_EQ(halves.params, whole.params) << name;
    EXPECT_EQ(halves.traces, whole.traces) << name;
  }
}

TEST(Pipeline, TwoStagesOfTwoReplicasTrainToTheOneProcessLossesAndMeasureTheSchedulesBytes) {
  AT_WORLD(4);
  for (const std::string strategy : {"ddp", "zero1"}) {
    std::vector<comm::CommStats> traffic;
    comm::CommStats scheduled;
    const PipeRun pp = train_pipelined(2, 2, strategy, &traffic, &scheduled);
    const std::string name = "--pp 2, 2 " + strategy + " replicas a stage";
    expect_trains_as_one_process(pp, config_of(2), 2, name);
    // The stage sends cross the outer tier; the replicas' gradient reductions the inner one.
    EXPECT_GT(scheduled.tier("cluster").bytes_sent, 0u);
    EXPECT_GT(scheduled.tier("gpu").bytes_sent, 0u);
    expect_measured_bytes_equal_the_schedule(traffic, scheduled, name);
    expect_summary_as_the_flat_engines(pp, 2, "cluster", name);
    // Replicas of a ddp stage hold the same: the stage's first rank's memory is this rank's.
    if (strategy == "ddp") {
      EXPECT_EQ(pp.summary["stages"][pp.stage]["memory_bytes"], pp.summary["memory_bytes"]);
    }
    // Recomputation restores each stage's activations bit for bit, its first block's input
    // (the received activation) included.
    const PipeRun recomputed = train_pipelined(2, 2, strategy, nullptr, nullptr, true);
    EXPECT_EQ(recomputed.losses, pp.losses) << strategy;
    EXPECT_EQ(recomputed.params, pp.params) << strategy;
  }
}

TEST(Pipeline, FourStagesTrainToTheOneProcessLossesAndMeasureTheSchedulesBytes) {
  AT_WORLD(4);
  std::vector<comm::CommStats> traffic;
  comm::CommStats scheduled;
  const PipeRun pp = train_pipelined(4, 4, "ddp", &traffic, &scheduled);
  expect_trains_as_one_process(pp, config_of(4), 1, "--pp 4, one replica");
  expect_measured_bytes_equal_the_schedule(traffic, scheduled, "--pp 4, one replica");
  // A rank holds its stage's units only: its optimizer state (master, two Adam moments and the
  // gradient it reads: four fp32 arrays) is its block's, the first stage's the embeddings' too,
  // the last's the final norm's and the tied head's copy of the embeddings.
  const model::ParamLayout layout(config_of(4));
  const auto& u = layout.units();
  const int block = layout.block_unit(pp.stage), embeddings = layout.embeddings_unit();
  std::size_t floats = u[block].numel;
  if (pp.stage == 0) floats += u[embeddings].numel;
  if (pp.stage == 3) floats = u[layout.final_norm_unit()].offset + u[layout.final_norm_unit()].numel - u[block].offset +
                              u[embeddings].numel;
  EXPECT_EQ(pp.memory.optimizer, 4 * sizeof(float) * floats) << "stage " << pp.stage;
  // The summary's activations: the stage's slots in flight under 1F1B (4 - stage of 4
  // micro-batches), each its own block's buffers (the embeddings' output on the first stage,
  // the head's on the last), less than the whole model's.
  const nlohmann::json& stages = pp.summary["stages"];
  ASSERT_EQ(stages.size(), 4u);
  const std::uint64_t whole = model::activation_bytes(config_of(4), kBatch, kSeq, false);
  for (int s = 0; s < 4; ++s) {
    const std::uint64_t slot = model::stage_activation_bytes(config_of(4), {s, s + 1, s == 0, s == 3}, kBatch, kSeq, false);
    EXPECT_LT(slot, whole) << "stage " << s;
    EXPECT_EQ(stages[s]["memory_bytes"]["activations"].get<std::uint64_t>(), (4 - s) * slot) << "stage " << s;
  }
  EXPECT_EQ(stages[1]["memory_bytes"]["activations"].get<std::uint64_t>(),
            3 * stages[2]["memory_bytes"]["activations"].get<std::uint64_t>() / 2)
      << "the middle stages hold one block's buffers a slot";
}

// Llama: the untied lm_head lives on the last stage alone (no tied copy, no tied sum).
TEST(Pipeline, LlamaInTwoStagesOfTwoZero1ReplicasTrainsToTheOneProcessLossesAndMeasuresTheSchedulesBytes) {
  AT_WORLD(4);
  std::vector<comm::CommStats> traffic;
  comm::CommStats scheduled;
  const PipeRun pp = train_pipelined(2, 2, "zero1", &traffic, &scheduled, false, "llama-tiny");
  const std::string name = "llama-tiny --pp 2, 2 zero1 replicas a stage";
  expect_trains_as_one_process(pp, config_of(2, "llama-tiny"), 2, name);
  EXPECT_GT(scheduled.tier("cluster").bytes_sent, 0u);
  expect_measured_bytes_equal_the_schedule(traffic, scheduled, name);
}

// --pp-layers 1,3: one block on the first stage, three on the last (with the head).
TEST(Pipeline, AnUnevenExplicitSplitTrainsToTheOneProcessLossesAndMeasuresTheSchedulesBytes) {
  AT_WORLD(4);
  std::vector<comm::CommStats> traffic;
  comm::CommStats scheduled;
  const PipeRun pp = train_pipelined(2, 4, "zero1", &traffic, &scheduled, false, "tiny", {1, 3});
  const std::string name = "--pp 2 --pp-layers 1,3, 2 zero1 replicas a stage";
  expect_trains_as_one_process(pp, config_of(4), 2, name);
  expect_measured_bytes_equal_the_schedule(traffic, scheduled, name);
}

TEST(Pipeline, RefusalsNameTheFlag) {
  AT_WORLD(4);
  const std::string uneven =
      refusal([] { shard::PipelineEngine(options_at(4), config_of(6), kBatch, kSeq, kMicro, 1234); });
  EXPECT_NE(uneven.find("--pp 4"), std::string::npos) << uneven;
  // 1F1B cuts a sharded stage's micro-batch in halves: weights kept from forward to backward cannot be.
  const std::string kept = refusal([] {
    parallel::ShardOptions o = options_at(2, "zero3");
    o.keep_weights_after_forward = true;
    shard::PipelineEngine(o, config_of(2), kBatch, kSeq, kMicro, 1234);
  });
  EXPECT_NE(kept.find("shard.free_after_forward"), std::string::npos) << kept;
  const std::string tier = refusal([] {
    parallel::ShardOptions o = options_at(3);
    shard::PipelineEngine(o, config_of(3), kBatch, kSeq, kMicro, 1234);
  });
  EXPECT_NE(tier.find("--pp 3"), std::string::npos) << tier;
  const std::string count =
      refusal([] { shard::PipelineEngine(options_at(2, "ddp", {1, 1, 2}), config_of(4), kBatch, kSeq, kMicro, 1234); });
  EXPECT_NE(count.find("--pp-layers 1,1,2"), std::string::npos) << count;
  const std::string sum =
      refusal([] { shard::PipelineEngine(options_at(2, "ddp", {1, 2}), config_of(4), kBatch, kSeq, kMicro, 1234); });
  EXPECT_NE(sum.find("--pp-layers 1,2"), std::string::npos) << sum;
  if (world_rank() == 0)
    for (const std::string* r : {&uneven, &kept, &tier, &count, &sum}) std::printf("refused: %s\n", r->c_str());
}

// zero2 and zero3 inside a stage (the stage's ShardedEngine over its units and replicas): two
// stages of two replicas, llama-tiny so, and four stages of one replica of a 4-block model train
// to the one-process losses; every byte measured per tier is the schedule's (the stage sends,
// the tied sum and the stage's own gathers and reductions).
TEST(PipelineSharded, StagesOfShardedReplicasTrainToTheOneProcessLossesAndMeasureTheSchedulesBytes) {
  AT_WORLD(4);
  struct Case {
    int pp, layers;
    std::string strategy, preset;
  };
  for (const Case& c : std::vector<Case>{
           {2, 2, "zero3", "tiny"}, {2, 2, "zero2", "tiny"}, {2, 2, "zero3", "llama-tiny"}, {4, 4, "zero3", "tiny"}}) {
    std::vector<comm::CommStats> traffic;
    comm::CommStats scheduled;
    const PipeRun pp = train_pipelined(c.pp, c.layers, c.strategy, &traffic, &scheduled, false, c.preset);
    const int replicas = 4 / c.pp;
    const std::string name = fmt::format("{} --pp {}, {} {} replicas a stage", c.preset, c.pp, replicas, c.strategy);
    expect_trains_as_one_process(pp, config_of(c.layers, c.preset), replicas, name);
    EXPECT_GT(scheduled.tier("cluster").bytes_sent, 0u);  // the stage sends
    if (c.pp == 2) {
      EXPECT_GT(scheduled.tier("gpu").bytes_sent, 0u);  // the replicas' gathers and reductions
    }
    expect_measured_bytes_equal_the_schedule(traffic, scheduled, name);
  }
}

// 8 ranks: two stages of four replicas over two tiers, hsdp (sharded over "gpu", replicated
// over "cluster") and zero3 (sharded over both).
TEST(PipelineSharded, HsdpAndZero3StagesOfFourReplicasTrainToTheOneProcessLossesAndMeasureTheSchedulesBytes) {
  AT_WORLD(8);
  for (const std::string strategy : {"hsdp", "zero3"}) {
    std::vector<comm::CommStats> traffic;
    comm::CommStats scheduled;
    const PipeRun pp = train_pipelined(2, 2, strategy, &traffic, &scheduled);
    const std::string name = "--pp 2, 4 " + strategy + " replicas a stage";
    expect_trains_as_one_process(pp, config_of(2), 4, name);
    EXPECT_GT(scheduled.tier("node").bytes_sent, 0u) << strategy;     // the stage sends
    EXPECT_GT(scheduled.tier("cluster").bytes_sent, 0u) << strategy;  // the replicas' reductions
    expect_measured_bytes_equal_the_schedule(traffic, scheduled, name);
  }
}

// 8 ranks: four stages of two replicas (over "gpu"), zero1, zero3 and hsdp, tiny and llama-tiny.
// A stage's replicas span one tier, where hsdp shards as zero3 does.
TEST(PipelineSharded, FourStagesOfTwoReplicasTrainToTheOneProcessLossesAndMeasureTheSchedulesBytes) {
  AT_WORLD(8);
  struct Case {
    std::string strategy, preset;
  };
  for (const Case& c : std::vector<Case>{{"zero1", "tiny"}, {"zero3", "llama-tiny"}, {"hsdp", "tiny"}}) {
    std::vector<comm::CommStats> traffic;
    comm::CommStats scheduled;
    const PipeRun pp = train_pipelined(4, 4, c.strategy, &traffic, &scheduled, false, c.preset);
    const std::string name = fmt::format("{} --pp 4, 2 {} replicas a stage", c.preset, c.strategy);
    expect_trains_as_one_process(pp, config_of(4, c.preset), 2, name);
    EXPECT_GT(scheduled.tier("cluster").bytes_sent, 0u) << name;  // the stage sends
    EXPECT_GT(scheduled.tier("gpu").bytes_sent, 0u) << name;      // the replicas' gathers and reductions
    expect_measured_bytes_equal_the_schedule(traffic, scheduled, name);
  }
}

// 8 ranks: zeropp (int8 weight gathers, the backward's from its hpZ copy over "gpu", int4
// gradients) and topo (weights over "gpu", int8 gathers, int4 gradients) inside two stages of
// four replicas over two tiers. Their unquantized twins (the same spec, fp32 wires) train to
// the one-process losses; the quantized runs stay within 5% of their twin's last loss, the
// tolerance without a pipeline (ShardedEngine.QuantizedPresetsStayCloseToTheirUnquantizedTwins),
// and differ from it; every byte measured per tier is the schedule's.
TEST(PipelineSharded, ZeroppAndTopoStagesStayCloseToTheirUnquantizedTwinsAndMeasureTheSchedulesBytes) {
  AT_WORLD(8);
  for (const std::string strategy : {"zeropp", "topo"}) {
    parallel::ShardOptions fp32 = options_at(2, strategy);
    fp32.weight_wire = fp32.grad_wire = fp32.step_grad_wire = "fp32";
    std::vector<comm::CommStats> traffic, twin_traffic;
    comm::CommStats scheduled, twin_scheduled;
    const PipeRun twin = train_pipelined(fp32, config_of(2), &twin_traffic, &twin_scheduled);
    const std::string twin_name = "--pp 2, 4 fp32-wire " + strategy + " replicas a stage";
    expect_trains_as_one_process(twin, config_of(2), 4, twin_name);
    expect_measured_bytes_equal_the_schedule(twin_traffic, twin_scheduled, twin_name);
    const PipeRun q = train_pipelined(2, 2, strategy, &traffic, &scheduled);
    expect_measured_bytes_equal_the_schedule(traffic, scheduled, "--pp 2, 4 " + strategy + " replicas a stage");
    EXPECT_NEAR(q.losses.back(), twin.losses.back(), 0.05 * twin.losses.back()) << strategy;
    EXPECT_NE(q.losses.back(), twin.losses.back()) << strategy << ": quantization changed nothing?";
    // The quantized wires inside a stage carry fewer bytes than fp32 ones; the stage sends are alike.
    EXPECT_LT(scheduled.tier("gpu").bytes_sent, twin_scheduled.tier("gpu").bytes_sent) << strategy;
    EXPECT_EQ(scheduled.tier("node").bytes_sent, twin_scheduled.tier("node").bytes_sent) << strategy;
    if (strategy == "zeropp") {
      EXPECT_GT(q.memory.secondary, 0u) << "zeropp holds no hpZ copy";
    }
    if (world_rank() == 0)
      std::printf("--pp 2, 4 %s replicas a stage vs its fp32-wire twin: last loss %.6f vs %.6f\n", strategy.c_str(),
                  q.losses.back(), twin.losses.back());
  }
}
