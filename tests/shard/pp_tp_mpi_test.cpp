// Tensor parallelism inside a pipeline stage (--pp 2 --tp 2): each stage's replica a TP group
// of 2 running its TP slice, the stage sends whole activations TP rank to TP rank. On 4 ranks
// (one zero3 replica a stage) and on 8 (two zero3 or ddp replicas a stage), gpt2's tiny and
// llama-tiny train to the losses and weights of the same global batch in one process (within
// fp32 reduction order), and every byte measured per tier is the schedule's: the stage sends,
// the TP collectives (ops of the stage's schedule) and the replicas' gathers and reductions.
// Refusals name the flags of what does not run together yet.
#include <gtest/gtest.h>

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "shard/pipeline_engine.hpp"
#include "key_bias.hpp"
#include "test_batches.hpp"
#include "train/local_engine.hpp"

using namespace strata;

namespace {

constexpr int kBatch = 2, kSeq = 32, kSteps = 4, kMicro = 4;
// A quarter of one step's learning rate (1e-3). Adam turns the rounding of a gradient near its
// epsilon (1e-8) into a visible part of a step: llama-tiny's embedding row of a token that one
// step's batch barely touches (gradient 1.1e-8) moves 1.4e-4 apart over 4 steps; the rest stay
// within 1e-5. A skipped or doubled TP sum moves the losses and weights by whole steps.
constexpr double kWeightTolerance = 2.5e-4;

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

#define AT_WORLD(n)                                                          \
  if (world_size() != (n)) GTEST_SKIP() << "runs on " << (n) << " ranks"

std::string topology_file(const std::string& name, const std::string& toml) {
  long long pid = ::getpid();
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  const std::string p =
      (std::filesystem::temp_directory_path() / fmt::format("strata_pp_tp_test_{}_{}.toml", pid, name)).string();
  if (world_rank() == 0) std::ofstream(p) << toml;
  MPI_Barrier(MPI_COMM_WORLD);
  return p;
}

// 4 ranks: 2 a node (the TP group), the two nodes the two stages over "cluster".
// 8 ranks: 2 a node (TP), 2 nodes a rack (the stages, over "node"), 2 racks (the replicas, "cluster").
const std::string& topology() {
  static const std::string path =
      world_size() == 8
          ? topology_file("three_tiers",
                          "[[tiers]]\nname = \"gpu\"\nsize = 2\nbandwidth_GBps = 200\nlatency_us = 2\n"
                          "[[tiers]]\nname = \"node\"\nsize = 2\nbandwidth_GBps = 50\nlatency_us = 3\n"
                          "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n")
          : topology_file("two_tiers", "[[tiers]]\nname = \"gpu\"\nsize = 2\nbandwidth_GBps = 200\nlatency_us = 2\n"
                                       "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n");
  return path;
}

parallel::ShardOptions options_of(const std::string& strategy) {
  parallel::ShardOptions o;
  o.strategy = strategy;
  o.topology = topology();
  o.tp = 2;
  o.tp_tier = "gpu";
  o.pp = 2;
  if (world_size() == 8) o.pp_tier = "node";
  return o;
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<float> params;  // the whole model's
};

// Replica d's micro-batch i reads stream d of micro-batch i (both TP ranks of a replica the same).
TrainedRun train_pipelined(const parallel::ShardOptions& options, const model::ModelConfig& config,
                    std::vector<comm::CommStats>* traffic, comm::CommStats* scheduled, bool recompute = false) {
  shard::PipelineEngine engine(options, config, kBatch, kSeq, kMicro, 1234, recompute);
  const int replica = engine.parallel_dims().data_parallel_rank(engine.rank());
  if (scheduled) *scheduled = engine.traffic_per_step();
  TrainedRun run;
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
  run.params.resize(model::ParamLayout(config).total_floats());
  engine.gather_params(run.params.data());
  return run;
}

TrainedRun train_alone(const model::ModelConfig& config, int replicas) {
  train::LocalEngine engine(config, kBatch, kSeq, 1234);
  TrainedRun run;
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

void expect_same_training(const TrainedRun& pp, const TrainedRun& ref, const model::ModelConfig& config,
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
  EXPECT_LT(weight_diff, kWeightTolerance) << name;
  if (world_rank() == 0)
    std::printf("%s vs one process, %d steps of %d micro-batches: largest loss difference %.3g, largest weight "
                "difference %.3g\n",
                name.c_str(), kSteps, kMicro, loss_diff, weight_diff);
}

void expect_measured_bytes_equal_the_schedule(const std::vector<comm::CommStats>& traffic,
                                               const comm::CommStats& scheduled, const std::string& name) {
  for (std::size_t s = 0; s < traffic.size(); ++s)
    for (std::size_t t = 0; t < scheduled.tiers.size(); ++t)
      EXPECT_EQ(traffic[s].tiers[t], scheduled.tiers[t])
          << name << " step " << s + 1 << " tier " << scheduled.tier_names[t];
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

}  // namespace

// 4 ranks, one zero3 replica a stage: the only traffic inside a node is the TP group's, the
// only traffic across nodes the stage sends (and gpt2's tied sum).
TEST(PipelineTensorParallel, TwoStagesOfTensorParallelTwoTrainToTheOneProcessLossesAndMeasureTheSchedulesBytes) {
  AT_WORLD(4);
  for (const std::string preset : {"tiny", "llama-tiny"}) {
    const model::ModelConfig config = model::ModelConfig::preset(preset);
    std::vector<comm::CommStats> traffic;
    comm::CommStats scheduled;
    const TrainedRun pp = train_pipelined(options_of("zero3"), config, &traffic, &scheduled);
    const std::string name = preset + " --pp 2 --tp 2, one zero3 replica a stage";
    expect_same_training(pp, train_alone(config, 1), config, name);
    EXPECT_GT(scheduled.tier("gpu").bytes_sent, 0u) << name;      // the TP collectives
    EXPECT_GT(scheduled.tier("cluster").bytes_sent, 0u) << name;  // the stage sends
    expect_measured_bytes_equal_the_schedule(traffic, scheduled, name);
    // Recomputation runs each block's forward TP collectives again in backward: its own
    // schedule, the same bits.
    std::vector<comm::CommStats> recomputed_traffic;
    comm::CommStats recomputed_scheduled;
    const TrainedRun recomputed =
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
    const TrainedRun pp = train_pipelined(options_of(strategy), config, &traffic, &scheduled);
    const std::string name = preset + " --pp 2 --tp 2, two " + strategy + " replicas a stage";
    expect_same_training(pp, train_alone(config, 2), config, name);
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
