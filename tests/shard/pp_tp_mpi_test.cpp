// Tensor parallelism inside a pipeline stage (--pp 2 --tp 2): each stage's replica a TP group
// of 2 running its TP slice, the stage sends whole activations TP rank to TP rank. On 4 ranks
// (one zero3 replica a stage) and on 8 (two zero3 or ddp replicas a stage), gpt2's tiny and
// llama-tiny train to the losses and weights of the same global batch in one process (within
// fp32 reduction order), and every byte measured per tier is the schedule's: the stage sends,
// the TP collectives (ops of the stage's schedule) and the replicas' gathers and reductions.
// Refusals name the flags of what does not run together yet.
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
parallel::ShardOptions options_of(const std::string& strategy) {
  parallel::ShardOptions o;
  o.strategy = strategy;
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
  }
}

TEST(PipelineTensorParallel, RefusalsNameTheFlags) {
  AT_WORLD(4);
  const model::ModelConfig tiny = model::ModelConfig::preset("tiny");
  const std::string sequence = refusal([&] {
    parallel::ShardOptions o = options_of("zero3");
    o.sequence_parallel = true;
    shard::PipelineEngine(o, tiny, kBatch, kSeq, kMicro, 1234);
  });
  EXPECT_NE(sequence.find("--sequence-parallel"), std::string::npos) << sequence;
  if (world_rank() == 0)
    std::printf("refused: %s\n", sequence.c_str());
}
