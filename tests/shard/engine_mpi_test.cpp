// Multi-rank tests of the sharding runtime on the test topology (2 nodes x 2 GPUs x 2 dies):
// unquantized strategies train to ddp's losses and weights (GPT-2 and Llama), every strategy's measured bytes
// per tier equal its schedule's, and each state's memory follows the spec's formula.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "base/aligned.hpp"
#include "comm/backends/tier_comms.hpp"
#include "comm/runtime/context.hpp"
#include "model/init.hpp"
#include "shard/sharded_engine.hpp"
#include "test_batches.hpp"
#include "test_topologies.hpp"
#include "topo/groups.hpp"
#include "train/local_engine.hpp"

using namespace strata;

namespace {

struct TrainRun {
  std::vector<double> losses;
  std::vector<float> params;
  std::vector<comm::CommStats> step_traffic;  // per step, this rank
  shard::StateMemory memory;
  shard::StateMemory scheduled_memory;
  std::vector<shard::TierTraffic> scheduled;
};

constexpr int kBatch = 2, kSeq = 32;

// The tokens of (step, micro, rank), the same under every strategy.
void make_batch(int step, int micro, int rank, std::vector<std::int32_t>& tok, std::vector<std::int32_t>& tgt) {
  tok.clear();
  tgt.clear();
  append_test_batch(step, micro, rank, kBatch, kSeq, tok, tgt);
}

TrainRun train_run(const shard::ShardSpec& spec, int steps, int accum = 1, optim::AdamWConfig hp = {},
                   const char* model_preset = "tiny", const topo::Topology& topology = two_node_topology(8)) {
  comm::Context ctx(topology);
  topo::ProcessGroups groups(topology);
  comm::TierComms comms(ctx, groups);
  model::ModelConfig config = model::ModelConfig::preset(model_preset);
  shard::ShardedEngine engine(config, kBatch, kSeq, ctx, comms, spec, accum, 1234, device::host());
  TrainRun run;
  run.scheduled = engine.schedule().traffic_per_step();
  run.scheduled_memory = engine.schedule().memory_per_rank();
  std::vector<std::int32_t> tok, tgt;
  for (int step = 1; step <= steps; ++step) {
    comm::CommStats before = ctx.accounting().snapshot();
    double loss = 0;
    for (int m = 0; m < accum; ++m) {
      make_batch(step, m, engine.rank(), tok, tgt);
      loss += engine.micro_step(tok.data(), tgt.data(), 1.0f / accum);
    }
    engine.optimizer_step(hp, train::StepArgs{1e-3f, step});
    run.losses.push_back(engine.all_mean(loss / accum));
    run.step_traffic.push_back(ctx.accounting().snapshot() - before);
  }
  run.params.resize(engine.layout().total_floats());
  engine.gather_params(run.params.data());
  run.memory = engine.memory_bytes();
  return run;
}

shard::ShardSpec preset(const char* name) { return shard::ShardSpec::preset_for(name, two_node_topology(8)); }

shard::ShardSpec unquantized(shard::ShardSpec s) {
  s.weight_wire = s.grad_wire = s.step_grad_wire = DType::F32;
  return s;
}

const TrainRun& ddp_run() {
  static TrainRun run = train_run(preset("ddp"), 30);
  return run;
}

// The key biases: their gradient is zero in exact arithmetic (adding a constant to every
// score of a softmax row changes nothing), so what Adam does with them is amplified
// rounding noise, different for any other summation order. Compared to a differently
// reduced baseline, they are left out.
std::vector<bool> key_bias_mask() {
  model::ParamLayout layout(model::ModelConfig::preset("tiny"));
  std::vector<bool> mask(layout.total_floats(), false);
  const std::size_t C = layout.config().n_embd;
  for (int l = 0; l < layout.config().n_layer; ++l) {
    const auto& t = layout.find("h." + std::to_string(l) + ".attn.c_attn.bias");
    for (std::size_t i = C; i < 2 * C; ++i) mask[t.offset + i] = true;
  }
  return mask;
}

void expect_same_training(const TrainRun& a, const TrainRun& b, const std::string& name, bool skip_key_bias = false,
                          double weight_tolerance = 1e-5) {
  static const std::vector<bool> key_bias = key_bias_mask();
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_NEAR(a.losses[i], b.losses[i], 1e-5 * std::abs(a.losses[i])) << name << " step " << i + 1;
  double max_rel = 0;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    if (skip_key_bias && key_bias[i]) continue;
    double d = std::abs(double(a.params[i]) - b.params[i]);
    double rel = d / std::max(1e-2, std::abs(double(a.params[i])));
    if (rel > max_rel) max_rel = rel, worst = i;
  }
  EXPECT_LT(max_rel, weight_tolerance) << name << ": largest relative weight difference at arena index " << worst << ": "
                           << a.params[worst] << " vs " << b.params[worst];
}

// The single-process trainer on the whole global batch (every rank's micro-batch, in rank
// order): the independent baseline that ddp itself must match.
TrainRun train_local(int steps, int world, optim::AdamWConfig hp = {}) {
  train::LocalEngine engine(model::ModelConfig::preset("tiny"), kBatch * world, kSeq, 1234);
  TrainRun run;
  std::vector<std::int32_t> tok, tgt, all_tok, all_tgt;
  for (int step = 1; step <= steps; ++step) {
    all_tok.clear();
    all_tgt.clear();
    for (int r = 0; r < world; ++r) {
      make_batch(step, 0, r, tok, tgt);
      all_tok.insert(all_tok.end(), tok.begin(), tok.end());
      all_tgt.insert(all_tgt.end(), tgt.begin(), tgt.end());
    }
    double loss = engine.micro_step(all_tok.data(), all_tgt.data(), 1.0f);
    engine.optimizer_step(hp, train::StepArgs{1e-3f, step});
    run.losses.push_back(loss);
  }
  run.params.resize(engine.layout().total_floats());
  engine.gather_params(run.params.data());
  return run;
}

}  // namespace

TEST(ShardedEngine, DdpMatchesTheSingleProcessTrainerOnTheGlobalBatch) {
  // The reduced gradient itself: with eps = 1 one Adam step moves each weight by about
  // lr x gradient, so the weight changes of the two runs must agree to fp32 rounding.
  optim::AdamWConfig linear;
  linear.eps = 1.0f;
  linear.weight_decay = 0;
  linear.grad_clip = 0;
  TrainRun a = train_local(1, 8, linear), b = train_run(preset("ddp"), 1, 1, linear);
  std::vector<float> init(a.params.size());
  model::init_params(model::ParamLayout(model::ModelConfig::preset("tiny")), init.data(), 1234);
  double largest = 0, worst = 0;
  for (std::size_t i = 0; i < init.size(); ++i) {
    largest = std::max(largest, std::abs(double(a.params[i]) - init[i]));
    worst = std::max(worst, std::abs((double(a.params[i]) - init[i]) - (double(b.params[i]) - init[i])));
  }
  EXPECT_GT(largest, 0);
  EXPECT_LT(worst, 1e-4 * largest) << "gradient of ddp differs from the single-process one";
  // Thirty steps of the real optimizer: the same losses, and weights close; Adam divides each
  // weight's tiny, differently rounded gradient by its own magnitude, so weights of rarely
  // seen tokens drift apart by more than fp32 rounding.
  expect_same_training(train_local(30, 8), ddp_run(), "ddp vs single process, 30 steps", true, 2e-3);
}

TEST(ShardedEngine, DdpLearns) {
  const TrainRun& ddp = ddp_run();
  EXPECT_LT(ddp.losses.back(), ddp.losses.front() - 0.5);
}

TEST(ShardedEngine, UnquantizedPresetsTrainToDdpLosses) {
  for (const char* name : {"zero1", "zero2", "zero3", "hsdp", "topo"}) {
    TrainRun run = train_run(unquantized(preset(name)), 30);
    expect_same_training(ddp_run(), run, name);
  }
}

TEST(ShardedEngine, HandMadeCombinationsTrainToDdpLosses) {
  shard::ShardSpec a;  // weights in the GPU, gradients in the node, optimizer everywhere, no prefetch
  a.apply_shard_string("W=gpu,G=node,OS=cluster");
  a.prefetch = 0;
  expect_same_training(ddp_run(), train_run(a, 30), "W=gpu,G=node,OS=cluster");
  shard::ShardSpec b;  // gradients replicated, optimizer over the node; weights kept after forward
  b.apply_shard_string("W=none,G=none,OS=node");
  expect_same_training(ddp_run(), train_run(b, 30), "OS=node");
  shard::ShardSpec c;  // zero3 with an fp32 secondary copy in the GPU
  c.apply_shard_string("W=cluster,G=cluster,OS=cluster,S=gpu");
  c.free_after_forward = true;
  expect_same_training(ddp_run(), train_run(c, 30), "zero3+hpZ(gpu)");
}

// Replicated gradients reduced in buckets during the last backward (each unit alone, a few
// units a bucket, the whole model in one) against the reduction after backward: the same
// losses and weights bit for bit, with gradient accumulation, and the same bytes measured.
// On the test topology every group has 2 members, where a ring's summation order cannot
// matter (a + b == b + a); on one flat tier of 8 it does, so a bucket whose elements changed
// chunks would change the bits there.
TEST(ShardedEngine, BucketedGradientReductionTrainsBitForBitAsUnbucketed) {
  topo::Topology flat_tier =
      topo::Topology::from_toml_string("[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n");
  flat_tier.resolve(8);
  const topo::Topology& flat = flat_tier;
  const topo::Topology two_node = two_node_topology(8);
  for (const topo::Topology* topology : {&flat, &two_node}) {
    const topo::Topology& t = *topology;
    for (const char* name : {"ddp", "zero1"}) {
      shard::ShardSpec spec = shard::ShardSpec::preset_for(name, t);
      spec.bucket_bytes = 0;
      const TrainRun off = train_run(spec, 2, 2, {}, "tiny", t);
      for (std::uint64_t cap : {std::uint64_t{1}, std::uint64_t{250'000}, std::uint64_t{1} << 30}) {
        const std::string what = std::string(name) + " on " + std::to_string(t.num_tiers()) + " tiers, buckets of " +
                                 std::to_string(cap) + " B";
        spec.bucket_bytes = cap;
        const TrainRun on = train_run(spec, 2, 2, {}, "tiny", t);
        EXPECT_EQ(on.losses, off.losses) << what;
        EXPECT_EQ(on.params, off.params) << what;
        for (std::size_t k = 0; k < off.scheduled.size(); ++k) {
          EXPECT_EQ(on.step_traffic.back().tiers[k].bytes_sent, off.step_traffic.back().tiers[k].bytes_sent) << what;
          EXPECT_EQ(on.step_traffic.back().tiers[k].messages, on.scheduled[k].messages) << what;
        }
      }
    }
  }
}

TEST(ShardedEngine, MeasuredBytesEqualTheScheduleForEveryPreset) {
  for (const char* name : {"ddp", "zero1", "zero2", "zero3", "hsdp", "zeropp", "topo"}) {
    for (int accum : {1, 2}) {
      TrainRun run = train_run(preset(name), 3, accum);
      // Step 1 also carries nothing extra: initial weights are placed before it starts.
      for (std::size_t s = 0; s < run.step_traffic.size(); ++s) {
        const comm::CommStats& got = run.step_traffic[s];
        for (std::size_t t = 0; t < run.scheduled.size(); ++t) {
          EXPECT_EQ(got.tiers[t].bytes_sent, run.scheduled[t].bytes_sent)
              << name << " accum " << accum << " step " << s + 1 << " tier " << run.scheduled[t].tier;
          EXPECT_EQ(got.tiers[t].bytes_received, run.scheduled[t].bytes_received) << name;
          EXPECT_EQ(got.tiers[t].messages, run.scheduled[t].messages) << name;
        }
      }
    }
  }
}

TEST(ShardedEngine, StateMemoryFollowsTheSpecFormula) {
  for (const char* name : {"ddp", "zero1", "zero2", "zero3", "hsdp", "zeropp", "topo"}) {
    TrainRun run = train_run(preset(name), 1);
    EXPECT_EQ(run.memory.weights, run.scheduled_memory.weights) << name;
    EXPECT_EQ(run.memory.secondary, run.scheduled_memory.secondary) << name;
    EXPECT_EQ(run.memory.grads, run.scheduled_memory.grads) << name;
    EXPECT_EQ(run.memory.optimizer, run.scheduled_memory.optimizer) << name;
  }
}

TEST(ShardedEngine, QuantizedPresetsStayCloseToTheirUnquantizedTwins) {
  for (const char* name : {"zeropp", "topo"}) {
    TrainRun q = train_run(preset(name), 30);
    TrainRun twin = train_run(unquantized(preset(name)), 30);
    EXPECT_NEAR(q.losses.back(), twin.losses.back(), 0.05 * twin.losses.back()) << name;
    EXPECT_NE(q.losses.back(), twin.losses.back()) << name << ": quantization changed nothing?";
  }
}

// Llama through the same engine: its own walk (the embedding released before the blocks, an
// untied head unit) under every preset. Unquantized presets reach ddp's losses and weights;
// the quantized ones (int8 weights, int4 gradients) stay close to them and measure the
// bytes their schedule says.
TEST(ShardedEngine, LlamaTrainsToDdpLossesUnderEveryPreset) {
  constexpr int kSteps = 8;
  const TrainRun ddp = train_run(preset("ddp"), kSteps, 1, {}, "llama-tiny");
  EXPECT_LT(ddp.losses.back(), ddp.losses.front() - 0.2) << "llama-tiny does not learn under ddp";
  for (const char* name : {"zero1", "zero2", "zero3", "hsdp", "zeropp", "topo"}) {
    const TrainRun exact = train_run(unquantized(preset(name)), kSteps, 1, {}, "llama-tiny");
    expect_same_training(ddp, exact, std::string("llama ") + name);
    const TrainRun run = train_run(preset(name), kSteps, 1, {}, "llama-tiny");
    EXPECT_NEAR(run.losses.back(), ddp.losses.back(), 0.05 * ddp.losses.back()) << "llama " << name;
    for (std::size_t t = 0; t < run.scheduled.size(); ++t)
      EXPECT_EQ(run.step_traffic.back().tiers[t].bytes_sent, run.scheduled[t].bytes_sent) << "llama " << name;
  }
}
