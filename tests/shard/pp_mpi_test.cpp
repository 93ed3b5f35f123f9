// Pipeline parallelism in the runtime, 4 ranks: --pp 2 over the outer tier with two ddp
// (and zero1) replicas per stage, llama-tiny so, an explicit uneven split (--pp-layers 1,3), and
// --pp 4 (one replica) of a 4-block model, train to the losses and
// weights of the same global batch in one process (the reduction order changes, so within
// fp32 rounding, not bit for bit); the bytes measured per tier are the schedule's, stage
// sends included; a rank holds its stage's arrays only; recomputation changes no bit;
// refusals name the flag. Under it, the sharding runtime's micro-batch cut into a forward and a
// backward half, run in a stage's 1F1B order, gives micro_step's bits; and on those halves,
// zero2, zero3 (4 ranks) and hsdp (8 ranks) inside the stages train to the one-process losses,
// and zeropp and topo (8 ranks) stay close to their unquantized twins.
#include <gtest/gtest.h>

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"
#include "comm/backends/tier_comms.hpp"
#include "shard/pipeline_engine.hpp"
#include "shard/sharded_engine.hpp"
#include "topo/groups.hpp"
#include "key_bias.hpp"
#include "test_batches.hpp"
#include "train/local_engine.hpp"

using namespace strata;

namespace {

constexpr int kBatch = 2, kSeq = 32, kSteps = 4, kMicro = 4;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// The binary runs at 4 ranks and at 8; each test at the world it is written for.
#define AT_WORLD(n)                                                          \
  if (world_size() != (n)) GTEST_SKIP() << "runs on " << (n) << " ranks"

// A topology file every rank names, written by rank 0.
std::string topology_file(const std::string& name, const std::string& toml) {
  long long pid = ::getpid();
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  const std::string p =
      (std::filesystem::temp_directory_path() / fmt::format("strata_pp_test_{}_{}.toml", pid, name)).string();
  if (world_rank() == 0) std::ofstream(p) << toml;
  MPI_Barrier(MPI_COMM_WORLD);
  return p;
}

// 2 ranks a node, nodes in the outer tier: --pp 2's stages cross "cluster", the replicas "gpu".
const std::string& two_tiers() {
  static const std::string path =
      topology_file("two_tiers", "[[tiers]]\nname = \"gpu\"\nsize = 2\nbandwidth_GBps = 200\nlatency_us = 2\n"
                                 "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n");
  return path;
}

// 2 ranks a node, 2 nodes a rack, racks in the outer tier (8 ranks), --pp 2 over "node": a
// rack's two nodes are the two stages, a stage's 4 replicas span "gpu" and "cluster" (hsdp:
// sharded over "gpu", replicated over "cluster").
const std::string& three_tiers() {
  static const std::string path = topology_file(
      "three_tiers", "[[tiers]]\nname = \"gpu\"\nsize = 2\nbandwidth_GBps = 200\nlatency_us = 2\n"
                     "[[tiers]]\nname = \"node\"\nsize = 2\nbandwidth_GBps = 50\nlatency_us = 3\n"
                     "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n");
  return path;
}

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

parallel::ShardOptions options_at(int pp, const std::string& strategy = "ddp", const std::vector<int>& layers = {}) {
  parallel::ShardOptions o;
  o.strategy = strategy;
  o.topology = pp == 2 ? (world_size() == 8 ? three_tiers() : two_tiers()) : one_tier();
  if (world_size() == 8) o.pp_tier = "node";
  o.pp = pp;
  o.pp_layers = layers;
  return o;
}

struct PipeRun {
  std::vector<double> losses;
  std::vector<float> params;
  int stage = 0;
  shard::StateMemory memory;  // what the rank holds
};

// Replica d's micro-batch i of a step reads stream d of micro-batch i: the one-process
// reference reads every replica's, the same global batch.
PipeRun train_pipelined(const parallel::ShardOptions& options, int layers, std::vector<comm::CommStats>* traffic,
                        comm::CommStats* scheduled, bool recompute = false, const std::string& preset = "tiny") {
  shard::PipelineEngine engine(options, config_of(layers, preset), kBatch, kSeq, kMicro, 1234, recompute);
  const int replica = engine.parallel_dims().data_parallel_rank(engine.rank());
  if (scheduled) *scheduled = engine.traffic_per_step();
  PipeRun run;
  run.stage = engine.stage();
  run.memory = engine.state_memory();
  for (int step = 1; step <= kSteps; ++step) {
    const comm::CommStats before = engine.context().accounting().snapshot();
    double sum = 0;
    for (int i = 0; i < kMicro; ++i) {
      std::vector<std::int32_t> tok, tgt;
      append_test_batch(step, i, replica, kBatch, kSeq, tok, tgt);
      sum += engine.micro_step(tok.data(), tgt.data(), 1.0f / kMicro);
    }
    run.losses.push_back(engine.all_mean(sum / kMicro));
    engine.optimizer_step({}, train::StepArgs{1e-3f, step});
    if (traffic) traffic->push_back(engine.context().accounting().snapshot() - before);
  }
  run.params.resize(engine.layout().total_floats());
  engine.gather_params(run.params.data());
  return run;
}

PipeRun train_pipelined(int pp, int layers, const std::string& strategy, std::vector<comm::CommStats>* traffic,
                        comm::CommStats* scheduled, bool recompute = false, const std::string& preset = "tiny",
                        const std::vector<int>& stage_layers = {}) {
  return train_pipelined(options_at(pp, strategy, stage_layers), layers, traffic, scheduled, recompute, preset);
}

PipeRun train_alone(int layers, int replicas, const std::string& preset = "tiny") {
  train::LocalEngine engine(config_of(layers, preset), kBatch, kSeq, 1234);
  PipeRun run;
  const int n = replicas * kMicro;
  for (int step = 1; step <= kSteps; ++step) {
    double sum = 0;
    for (int d = 0; d < replicas; ++d)
      for (int i = 0; i < kMicro; ++i) {
        std::vector<std::int32_t> tok, tgt;
        append_test_batch(step, i, d, kBatch, kSeq, tok, tgt);
        sum += engine.micro_step(tok.data(), tgt.data(), 1.0f / n);
      }
    run.losses.push_back(sum / n);
    engine.optimizer_step({}, train::StepArgs{1e-3f, step});
  }
  run.params.assign(engine.params(), engine.params() + engine.layout().total_floats());
  return run;
}

void expect_same_training(const PipeRun& pp, const PipeRun& ref, const model::ModelConfig& config,
                          const std::string& name) {
  ASSERT_EQ(pp.losses.size(), ref.losses.size());
  double loss_diff = 0, weight_diff = 0;
  for (std::size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(pp.losses[i], ref.losses[i], 1e-5 * std::abs(ref.losses[i])) << name << " step " << i + 1;
    loss_diff = std::max(loss_diff, std::abs(pp.losses[i] - ref.losses[i]));
  }
  const model::ParamLayout layout(config);
  ASSERT_EQ(pp.params.size(), ref.params.size());
  for (std::size_t i = 0; i < ref.params.size(); ++i)
    if (!key_bias(layout, i)) weight_diff = std::max(weight_diff, double(std::abs(pp.params[i] - ref.params[i])));
  EXPECT_LT(weight_diff, 1e-4) << name;
  if (world_rank() == 0)
    std::printf("%s vs one process, %d steps of %d micro-batches: largest loss difference %.3g, largest weight "
                "difference %.3g\n",
                name.c_str(), kSteps, kMicro, loss_diff, weight_diff);
}

template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
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

void expect_measured_bytes_equal_the_schedule(const std::vector<comm::CommStats>& traffic,
                                               const comm::CommStats& scheduled) {
  for (std::size_t s = 0; s < traffic.size(); ++s)
    for (std::size_t t = 0; t < scheduled.tiers.size(); ++t)
      EXPECT_EQ(traffic[s].tiers[t], scheduled.tiers[t]) << "step " << s + 1 << " tier " << scheduled.tier_names[t];
}

TEST(Pipeline, TwoStagesOfTwoReplicasTrainToTheOneProcessLossesAndMeasureTheSchedulesBytes) {
  AT_WORLD(4);
  for (const std::string strategy : {"ddp", "zero1"}) {
    std::vector<comm::CommStats> traffic;
    comm::CommStats scheduled;
    const PipeRun pp = train_pipelined(2, 2, strategy, &traffic, &scheduled);
    expect_same_training(pp, train_alone(2, 2), config_of(2), "--pp 2, 2 " + strategy + " replicas a stage");
    // The stage sends cross the outer tier; the replicas' gradient reductions the inner one.
    EXPECT_GT(scheduled.tier("cluster").bytes_sent, 0u);
    EXPECT_GT(scheduled.tier("gpu").bytes_sent, 0u);
    expect_measured_bytes_equal_the_schedule(traffic, scheduled);
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
  expect_same_training(pp, train_alone(4, 1), config_of(4), "--pp 4, one replica");
  expect_measured_bytes_equal_the_schedule(traffic, scheduled);
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
}

// Llama: the untied lm_head lives on the last stage alone (no tied copy, no tied sum).
TEST(Pipeline, LlamaInTwoStagesOfTwoZero1ReplicasTrainsToTheOneProcessLossesAndMeasuresTheSchedulesBytes) {
  AT_WORLD(4);
  std::vector<comm::CommStats> traffic;
  comm::CommStats scheduled;
  const PipeRun pp = train_pipelined(2, 2, "zero1", &traffic, &scheduled, false, "llama-tiny");
  expect_same_training(pp, train_alone(2, 2, "llama-tiny"), config_of(2, "llama-tiny"),
                       "llama-tiny --pp 2, 2 zero1 replicas a stage");
  EXPECT_GT(scheduled.tier("cluster").bytes_sent, 0u);
  expect_measured_bytes_equal_the_schedule(traffic, scheduled);
}

// --pp-layers 1,3: one block on the first stage, three on the last (with the head).
TEST(Pipeline, AnUnevenExplicitSplitTrainsToTheOneProcessLossesAndMeasuresTheSchedulesBytes) {
  AT_WORLD(4);
  std::vector<comm::CommStats> traffic;
  comm::CommStats scheduled;
  const PipeRun pp = train_pipelined(2, 4, "zero1", &traffic, &scheduled, false, "tiny", {1, 3});
  expect_same_training(pp, train_alone(4, 2), config_of(4), "--pp 2 --pp-layers 1,3, 2 zero1 replicas a stage");
  expect_measured_bytes_equal_the_schedule(traffic, scheduled);
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
    expect_same_training(pp, train_alone(c.layers, replicas, c.preset), config_of(c.layers, c.preset),
                         fmt::format("{} --pp {}, {} {} replicas a stage", c.preset, c.pp, replicas, c.strategy));
    EXPECT_GT(scheduled.tier("cluster").bytes_sent, 0u);  // the stage sends
    if (c.pp == 2) {
      EXPECT_GT(scheduled.tier("gpu").bytes_sent, 0u);  // the replicas' gathers and reductions
    }
    expect_measured_bytes_equal_the_schedule(traffic, scheduled);
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
    expect_same_training(pp, train_alone(2, 4), config_of(2), "--pp 2, 4 " + strategy + " replicas a stage");
    EXPECT_GT(scheduled.tier("node").bytes_sent, 0u) << strategy;     // the stage sends
    EXPECT_GT(scheduled.tier("cluster").bytes_sent, 0u) << strategy;  // the replicas' reductions
    expect_measured_bytes_equal_the_schedule(traffic, scheduled);
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
    const PipeRun twin = train_pipelined(fp32, 2, &twin_traffic, &twin_scheduled);
    expect_same_training(twin, train_alone(2, 4), config_of(2), "--pp 2, 4 fp32-wire " + strategy + " replicas a stage");
    expect_measured_bytes_equal_the_schedule(twin_traffic, twin_scheduled);
    const PipeRun q = train_pipelined(2, 2, strategy, &traffic, &scheduled);
    expect_measured_bytes_equal_the_schedule(traffic, scheduled);
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
