// Tensor parallelism inside a pipeline stage (--pp 2 --tp 2): each stage's replica a TP group
// of 2 running its TP slice, the stage sends whole activations TP rank to TP rank. On 4 ranks
// (one zero3 replica a stage) and on 8 (two zero3 or ddp replicas a stage), gpt2's tiny and
// llama-tiny train to the losses and weights of the same global batch in one process (within
// fp32 reduction order), and every byte measured per tier is the schedule's: the stage sends,
// the TP collectives (ops of the stage's schedule) and the replicas' gathers and reductions.
// With --sequence-parallel (8 ranks, zero3) a stage runs Megatron's sequence parallelism and
// sends its TP rank's half of the token rows: the same training as without it, half the stage
// sends' bytes, every byte the schedule's. Refusals name the flags.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipeline_runs.hpp"

using namespace strata;
using namespace strata::test;

namespace {

// A quarter of one step's learning rate (1e-3). Adam turns the rounding of a gradient near its
// epsilon (1e-8) into a visible part of a step: llama-tiny's embedding row of a token that one
// step's batch barely touches (gradient 1.1e-8) moves 1.4e-4 apart over 4 steps; the rest stay
// within 1e-5. A skipped or doubled TP sum moves the losses and weights by whole steps.
constexpr double kWeightTolerance = 2.5e-4;

// 4 ranks: 2 a node (the TP group), the two nodes the two stages over "cluster".
// 8 ranks: 2 a node (TP), 2 nodes a rack (the stages, over "node"), 2 racks (the replicas, "cluster").
parallel::ShardOptions options_of(const std::string& strategy, bool sequence_parallel = false) {
  parallel::ShardOptions o;
  o.strategy = strategy;
  o.sequence_parallel = sequence_parallel;
  o.topology = world_size() == 8 ? three_tiers() : two_tiers();
  o.tp = 2;
  o.tp_tier = "gpu";
  o.pp = 2;
  if (world_size() == 8) o.pp_tier = "node";
  return o;
}

}  // namespace

// 4 ranks, one zero3 replica a stage: the only traffic inside a node is the TP group's, the
// only traffic across nodes the stage sends (and gpt2's tied sum).
TEST(PipelineTensorParallel, TwoStagesOfTensorParallelTwoTrainToTheOneProcessLossesAndMeasureTheSchedulesBytes) {
  AT_WORLD(4);
  for (const std::string preset : {"tiny", "llama-tiny"}) {
    const model::ModelConfig config = model::ModelConfig::preset(preset);
    std::vector<comm::CommStats> traffic;
    comm::CommStats scheduled;
    const PipeRun pp = train_pipelined(options_of("zero3"), config, &traffic, &scheduled);
    const std::string name = preset + " --pp 2 --tp 2, one zero3 replica a stage";
    expect_same_training(pp, train_alone(config, 1), config, name, kWeightTolerance);
    EXPECT_GT(scheduled.tier("gpu").bytes_sent, 0u) << name;      // the TP collectives
    EXPECT_GT(scheduled.tier("cluster").bytes_sent, 0u) << name;  // the stage sends
    expect_measured_bytes_equal_the_schedule(traffic, scheduled, name);
    // Recomputation runs each block's forward TP collectives again in backward: its own
    // schedule, the same bits.
    std::vector<comm::CommStats> recomputed_traffic;
    comm::CommStats recomputed_scheduled;
    const PipeRun recomputed =
        train_pipelined(options_of("zero3"), config, &recomputed_traffic, &recomputed_scheduled, true);
    EXPECT_EQ(recomputed.losses, pp.losses) << name;
    EXPECT_EQ(recomputed.params, pp.params) << name;
    EXPECT_GT(recomputed_scheduled.tier("gpu").bytes_sent, scheduled.tier("gpu").bytes_sent) << name;
    expect_measured_bytes_equal_the_schedule(recomputed_traffic, recomputed_scheduled, name + " recomputed");
  }
}

// The 8-rank run of `config` under --sequence-parallel against `tp`, the same run without it:
// the losses within fp32 reduction order (1e-5 relative) and the weights within
// kWeightTolerance, every byte measured the schedule's, and each rank's stage sends (over
// "node", the stages' tier) half the bytes: its TP rank's rows of each activation and gradient.
void expect_sequence_parallel_trains_as(const PipeRun& tp, const std::vector<comm::CommStats>& tp_traffic,
                                        const model::ModelConfig& config, const std::string& name) {
  std::vector<comm::CommStats> traffic;
  comm::CommStats scheduled;
  const PipeRun sp = train_pipelined(options_of("zero3", true), config, &traffic, &scheduled);
  const std::string sp_name = name + " --sequence-parallel";
  expect_same_training(sp, tp, config, sp_name, kWeightTolerance, "without it");
  expect_measured_bytes_equal_the_schedule(traffic, scheduled, sp_name);
  // Every rank sends one message a micro-batch (an activation up or its gradient down).
  const std::uint64_t half_the_sends = std::uint64_t{kMicro} * kBatch * kSeq * config.n_embd * sizeof(float) / 2;
  for (std::size_t s = 0; s < traffic.size(); ++s)
    EXPECT_EQ(tp_traffic[s].tier("node").bytes_sent - traffic[s].tier("node").bytes_sent, half_the_sends)
        << sp_name << " step " << s + 1;
}

// 8 ranks: each stage two replicas (over "cluster") of a TP group of 2 (over "gpu"), zero3
// sharding the TP slices over the replicas, or ddp replicating them.
TEST(PipelineTensorParallel, TwoStagesOfTwoReplicasOfTensorParallelTwoTrainToTheOneProcessLosses) {
  AT_WORLD(8);
  for (const std::string strategy : {"zero3", "ddp"})
  for (const std::string preset : {"tiny", "llama-tiny"}) {
    const model::ModelConfig config = model::ModelConfig::preset(preset);
    std::vector<comm::CommStats> traffic;
    comm::CommStats scheduled;
    const PipeRun pp = train_pipelined(options_of(strategy), config, &traffic, &scheduled);
    const std::string name = preset + " --pp 2 --tp 2, two " + strategy + " replicas a stage";
    expect_same_training(pp, train_alone(config, 2), config, name, kWeightTolerance);
    for (const char* tier : {"gpu", "node", "cluster"}) EXPECT_GT(scheduled.tier(tier).bytes_sent, 0u) << name << tier;
    expect_measured_bytes_equal_the_schedule(traffic, scheduled, name);
    if (strategy == "zero3") expect_sequence_parallel_trains_as(pp, traffic, config, name);
  }
}

TEST(PipelineTensorParallel, RefusalsNameTheFlags) {
  AT_WORLD(4);
  const model::ModelConfig tiny = model::ModelConfig::preset("tiny");
  // Sequence parallelism shards the rows over a TP group: none without --tp.
  const std::string sequence = refusal([&] {
    parallel::ShardOptions o = options_of("zero3", true);
    o.tp = 1;
    o.tp_tier.clear();
    shard::PipelineEngine(o, tiny, kBatch, kSeq, kMicro, 1234);
  });
  EXPECT_NE(sequence.find("--sequence-parallel"), std::string::npos) << sequence;
  EXPECT_NE(sequence.find("--tp"), std::string::npos) << sequence;
  if (world_rank() == 0)
    std::printf("refused: %s\n", sequence.c_str());
}
