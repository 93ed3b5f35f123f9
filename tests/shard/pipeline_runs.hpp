#pragma once
// What the pipeline tests (pp_mpi_test.cpp, pp_tp_mpi_test.cpp) share: their topologies, a
// pipelined run and its one-process reference over the same global batch, and the checks
// that compare the two and the measured bytes with the schedule's.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "key_bias.hpp"
#include "mpi_world.hpp"
#include "shard/pipeline_engine.hpp"
#include "test_batches.hpp"
#include "train/local_engine.hpp"

namespace strata::test {

inline constexpr int kBatch = 2, kSeq = 32, kSteps = 4, kMicro = 4;

// A topology file every rank names, written by rank 0.
inline std::string topology_file(const std::string& name, const std::string& toml) {
  long long pid = ::getpid();
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  const std::string p =
      (std::filesystem::temp_directory_path() / fmt::format("strata_pp_test_{}_{}.toml", pid, name)).string();
  if (world_rank() == 0) std::ofstream(p) << toml;
  MPI_Barrier(MPI_COMM_WORLD);
  return p;
}

// 2 ranks a node, nodes in the outer tier (4 ranks): --pp 2's stages cross "cluster", what a
// stage runs inside (replicas or a TP group) "gpu".
inline const std::string& two_tiers() {
  static const std::string path =
      topology_file("two_tiers", "[[tiers]]\nname = \"gpu\"\nsize = 2\nbandwidth_GBps = 200\nlatency_us = 2\n"
                                 "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n");
  return path;
}

// 2 ranks a node, 2 nodes a rack, racks in the outer tier (8 ranks), --pp 2 over "node": a
// rack's two nodes are the two stages, a stage's ranks span "gpu" and "cluster".
inline const std::string& three_tiers() {
  static const std::string path = topology_file(
      "three_tiers", "[[tiers]]\nname = \"gpu\"\nsize = 2\nbandwidth_GBps = 200\nlatency_us = 2\n"
                     "[[tiers]]\nname = \"node\"\nsize = 2\nbandwidth_GBps = 50\nlatency_us = 3\n"
                     "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n");
  return path;
}

struct PipeRun {
  std::vector<double> losses;
  std::vector<float> params;  // the whole model's
  int stage = 0;
  shard::StateMemory memory;  // what the rank holds
  nlohmann::json summary;     // the engine's summary_report after the steps, each step reported
};

// Replica d's micro-batch i of a step reads stream d of micro-batch i (every TP rank of a
// replica the same): the one-process reference reads every replica's, the same global batch.
inline PipeRun train_pipelined(const parallel::ShardOptions& options, const model::ModelConfig& config,
                               std::vector<comm::CommStats>* traffic, comm::CommStats* scheduled,
                               bool recompute = false) {
  shard::PipelineEngine engine(options, config, kBatch, kSeq, kMicro, 1234, recompute);
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
    engine.step_report();
  }
  run.summary = engine.summary_report();
  run.params.resize(model::ParamLayout(config).total_floats());
  engine.gather_params(run.params.data());
  return run;
}

inline PipeRun train_alone(const model::ModelConfig& config, int replicas) {
  train::LocalEngine engine(config, kBatch, kSeq, 1234);
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

// The losses within 1e-5 relative, the weights (key biases left out) within `weight_tolerance`;
// `reference` names `ref` in the printed differences.
inline void expect_same_training(const PipeRun& pp, const PipeRun& ref, const model::ModelConfig& config,
                                 const std::string& name, double weight_tolerance,
                                 const std::string& reference = "one process") {
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
  EXPECT_LT(weight_diff, weight_tolerance) << name;
  if (world_rank() == 0)
    std::printf("%s vs %s, %d steps of %d micro-batches: largest loss difference %.3g, largest weight "
                "difference %.3g\n",
                name.c_str(), reference.c_str(), kSteps, kMicro, loss_diff, weight_diff);
}

inline void expect_measured_bytes_equal_the_schedule(const std::vector<comm::CommStats>& traffic,
                                                      const comm::CommStats& scheduled, const std::string& name) {
  for (std::size_t s = 0; s < traffic.size(); ++s)
    for (std::size_t t = 0; t < scheduled.tiers.size(); ++t)
      EXPECT_EQ(traffic[s].tiers[t], scheduled.tiers[t])
          << name << " step " << s + 1 << " tier " << scheduled.tier_names[t];
}

// summary.json's fields as the flat engine's summary has them: per tier the bytes, the busy
// time (the world's mean and the least rank's; the stage sends, over `send_tier`, busy on every
// rank), each step's slowest compute, and memory_bytes the rank's own stage's state
// (PipelineEngine::state_memory); every step counted but the first (no evaluation here).
inline void expect_summary_as_the_flat_engines(const PipeRun& pp, int stages, const std::string& send_tier,
                                               const std::string& name) {
  const nlohmann::json& s = pp.summary;
  EXPECT_EQ(s["comm"]["steps_measured"], kSteps - 1) << name;
  for (const auto& tier : s["comm"]["per_step"].items()) {
    const nlohmann::json& t = tier.value();
    for (const char* field : {"bytes_sent", "bytes_received", "messages", "busy_s", "busy_min_s"})
      EXPECT_TRUE(t.contains(field)) << name << " tier " << tier.key() << " has no " << field;
    EXPECT_LE(t["busy_min_s"].get<double>(), t["busy_s"].get<double>() * (1 + 1e-12)) << name << " tier " << tier.key();
  }
  EXPECT_GT(s["comm"]["per_step"][send_tier]["busy_min_s"].get<double>(), 0.0) << name;
  EXPECT_GT(s["compute_s"].get<double>(), 0.0) << name;
  EXPECT_GE(s["compute_max_s"].get<double>(), s["compute_s"].get<double>()) << name;
  const nlohmann::json& m = s["memory_bytes"];
  EXPECT_EQ(m["weights"], pp.memory.weights) << name;
  EXPECT_EQ(m["secondary"], pp.memory.secondary) << name;
  EXPECT_EQ(m["grads"], pp.memory.grads) << name;
  EXPECT_EQ(m["optimizer"], pp.memory.optimizer) << name;
  EXPECT_EQ(m["gathered"], pp.memory.gathered) << name;
  EXPECT_EQ(m["communication"], pp.memory.communication) << name;
  EXPECT_GT(m["activations"].get<double>(), 0.0) << name;
  ASSERT_EQ(s["stages"].size(), static_cast<std::size_t>(stages)) << name;
  EXPECT_EQ(s["stages"][pp.stage]["stage"], pp.stage) << name;
}

// The message of what `f` throws; empty when it throws nothing.
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace strata::test
