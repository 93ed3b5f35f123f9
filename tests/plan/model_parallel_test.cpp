// Tensor and pipeline parallelism priced beside sharding (plan/model_parallel.hpp): the TP
// all-reduces by hand, the 1F1B bubble, memory that falls with TP, refusals naming the flag,
// and a (tp, pp, spec) search under the memory cap.
#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

#include "base/error.hpp"
#include "model/layout.hpp"
#include "plan/model_parallel.hpp"
#include "shard/test_topologies.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::plan;
using strata::test::error_of;

namespace {

// Two tiers with round figures: 4 ranks a node at 100 GB/s and 2 us, nodes at 10 GB/s and 5 us.
topo::Topology small_cluster(int nodes) {
  topo::Tier node{"node", 4, 100, 2, 1.0, "test", 0, 0};
  topo::Tier cluster{"cluster", 0, 10, 5, 1.0, "test", 0, 0};
  topo::Topology t({node, cluster}, "small");
  t.resolve(t.world_size_for_nodes(nodes));
  return t;
}

ModelShape small_model() {
  return ModelShape::from_name_and_fields(
      "custom", {"layers=4", "hidden=64", "heads=4", "ffn=256", "vocab=128", "seq=16", "mlp=gelu", "biases=false"});
}

DeviceFacts small_device() { return DeviceFacts{"test", 100, 80, 1000, 0.5, 400, 40, "test", nullptr, std::nullopt}; }

topo::Topology dgx_h100(int nodes) {
  topo::Topology t = topo::Topology::preset("dgx-h100");
  t.resolve(t.world_size_for_nodes(nodes));
  return t;
}

Workload llama_workload(int accum = 1) {
  Workload w;
  w.seq = 4096;
  w.accumulation_steps = accum;
  w.flash_attention = true;
  return w;
}

}  // namespace

TEST(ModelParallel, TensorParallelOpsMatchAHandComputedRing) {
  Workload w;
  w.micro_batch = 2;
  w.seq = 16;
  const topo::Topology t = small_cluster(2);
  const ModelParallelPlan plan(small_model(), t, small_device(), w, {2, 1, "", ""});
  const shard::ShardSpec spec = apply_precision(strategy_spec("ddp", plan.data_parallel_topology()), Precision::BF16);
  const Estimate e = plan.estimate("ddp", spec);
  // Activations B·T·h = 2·16·64 = 2048 bf16 elements. A ring all-reduce over 2 ranks sends 2
  // messages of 1024 elements (4096 bytes) at 100 GB/s, 2 us each. Per micro-batch: 4 blocks x 4,
  // the embedding's output, the head input's gradient: 18 such; and the loss's gather of
  // (max, sum, target) for B·T = 32 rows, 96 fp32 from each rank: 1 message of 384 bytes.
  const double activation_all_reduce = 2 * 2e-6 + 4096 / 100e9;
  const double loss_gather = 2e-6 + 384 / 100e9;
  EXPECT_NEAR(e.tp_allreduce_s, 18 * activation_all_reduce + loss_gather, 1e-15);
  EXPECT_EQ(e.tensor_parallel, 2);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.strategy, "ddp+tp2");
  // They are the stage schedule's own TP ops, whose bytes are in the node tier's account.
  const shard::Schedule schedule = plan.stage(0).schedule(spec);
  std::uint64_t tp_bytes = 0;
  for (const shard::ScheduledOp& op : schedule.tensor_parallel_ops()) tp_bytes += op.bytes_sent;
  EXPECT_EQ(tp_bytes, 18u * 4096 + 384);
  EXPECT_EQ(e.tiers[0].traffic.bytes_sent, schedule.traffic_per_step()[0].bytes_sent);
  // And the step waits for all of them: they come on top of compute, exposed data-parallel
  // communication and the step phase.
  EXPECT_NEAR(e.step_time_s,
              e.compute_s + e.overlap_slowdown_s + e.exposed_micro_s + e.tp_allreduce_s + e.step_comm_s + e.optimizer_s,
              1e-12);
  EXPECT_GE(e.tiers[0].exposed_micro_s, e.tp_allreduce_s);
}

TEST(ModelParallel, ThePlannerPricesTheRuntimesTensorParallelScheduleByteForByte) {
  // strata's own GPT on the 8-rank test topology with TP 2 in its GPU tier, in fp32: the
  // stage schedule the planner prices is the one `strata train --tp 2` runs, built as the
  // runtime builds it (its split layout, its data-parallel topology, its TP calls).
  const topo::Topology physical = two_node_topology(8);
  const model::ModelConfig config = model::ModelConfig::preset("tiny");
  for (bool recompute : {false, true})
    for (const char* name : {"zero3", "hsdp", "ddp"}) {
      Workload w;
      w.micro_batch = 2;
      w.seq = 32;
      w.accumulation_steps = 2;
      w.recompute = recompute ? plan::Recompute::Full : plan::Recompute::None;
      w.precision = Precision::F32;
      const ModelParallelPlan plan(ModelShape::preset("tiny"), physical, DeviceFacts{"test", 1, 1, 10, 1, 0, 0, "test", nullptr, std::nullopt},
                                   w, {2, 1, "", ""});
      const parallel::ParallelDims dims = parallel::ParallelDims::model_parallel(physical, 2, 0, 1, 2);
      const topo::Topology dp = dims.data_parallel_topology(physical);
      const shard::ShardSpec spec = shard::ShardSpec::preset_for(name, dp);
      const shard::Schedule runtime(model::ParamLayout(config, {2, 0}), dp, spec, w.accumulation_steps,
                                    shard::tensor_parallel_plan(dims, config, w.micro_batch, w.seq, recompute));
      const shard::Schedule planned = plan.stage(0).schedule(apply_precision(spec, Precision::F32));
      const std::string what = std::string(name) + (recompute ? " recompute" : "");
      ASSERT_EQ(planned.tensor_parallel_ops().size(), runtime.tensor_parallel_ops().size()) << what;
      for (std::size_t i = 0; i < runtime.tensor_parallel_ops().size(); ++i) {
        const shard::ScheduledOp &a = planned.tensor_parallel_ops()[i], &b = runtime.tensor_parallel_ops()[i];
        EXPECT_EQ(std::tie(a.kind, a.when, a.level, a.group_size, a.elements_in, a.bytes_sent, a.messages),
                  std::tie(b.kind, b.when, b.level, b.group_size, b.elements_in, b.bytes_sent, b.messages))
            << what << " op " << i;
      }
      const Estimate e = plan.estimate(name, apply_precision(spec, Precision::F32));
      const std::vector<shard::TierTraffic> want = runtime.traffic_per_step();
      ASSERT_EQ(e.tiers.size(), want.size());
      for (std::size_t t = 0; t < want.size(); ++t) {
        EXPECT_EQ(e.tiers[t].traffic.tier, want[t].tier);
        EXPECT_EQ(e.tiers[t].traffic.bytes_sent, want[t].bytes_sent) << what << " " << want[t].tier;
        EXPECT_EQ(e.tiers[t].traffic.bytes_received, want[t].bytes_received) << what << " " << want[t].tier;
        EXPECT_EQ(e.tiers[t].traffic.messages, want[t].messages) << what << " " << want[t].tier;
      }
      EXPECT_GT(want[0].bytes_sent, 0u) << what;  // the TP ops' tier carries their bytes
    }
}

TEST(ModelParallel, OnePipelineStageAndNoTensorSplitPricesExactlyWhatPlanContextPrices) {
  const topo::Topology t = dgx_h100(4);
  const DeviceFacts d = *device_for_topology("dgx-h100");
  const ModelShape m = ModelShape::preset("llama2-7b");
  const ModelParallelPlan plan(m, t, d, llama_workload(), {});
  const PlanContext c(m, t, d, llama_workload());
  for (const char* name : {"zero3", "hsdp"}) {
    const shard::ShardSpec spec = apply_precision(strategy_spec(name, t), Precision::BF16);
    const Estimate a = plan.estimate(name, spec), b = c.estimate(name, spec);
    EXPECT_EQ(a.step_time_s, b.step_time_s) << name;
    EXPECT_EQ(a.total_memory_bytes, b.total_memory_bytes) << name;
    EXPECT_EQ(a.tiers[1].traffic.bytes_sent, b.tiers[1].traffic.bytes_sent) << name;
    EXPECT_EQ(a.tp_allreduce_s + a.pp_bubble_s + a.pp_p2p_s, 0.0) << name;
  }
}

TEST(ModelParallel, BubbleIsTheFillAndDrainThroughTheOtherStages) {
  // In an estimate: the step outside its optimizer phase and the stage messages is m
  // micro-batches of the slowest stage plus one of every other stage (the fill and drain);
  // llama2-7b's stages differ by the embedding and the head only (the last, with the head, the
  // slowest), so the bubble is a little under (p-1)/(m+p-1) of it.
  const topo::Topology t = dgx_h100(4);
  const DeviceFacts d = *device_for_topology("dgx-h100");
  for (auto [p, m] : {std::pair{2, 6}, std::pair{4, 8}}) {
    const ModelParallelPlan plan(ModelShape::preset("llama2-7b"), t, d, llama_workload(m), {1, p, "", ""});
    const Estimate e =
        plan.estimate("zero3", apply_precision(strategy_spec("zero3", plan.data_parallel_topology()), Precision::BF16));
    EXPECT_LT(e.pp_bubble_fraction, static_cast<double>(p - 1) / (m + p - 1));
    EXPECT_GT(e.pp_bubble_fraction, static_cast<double>(p - 1) / (m + p - 1) - 0.02);
    EXPECT_NEAR(e.pp_bubble_s / (e.step_time_s - e.step_comm_s - e.optimizer_s - e.pp_p2p_s), e.pp_bubble_fraction,
                1e-12);
    ASSERT_EQ(e.stages.size(), static_cast<std::size_t>(p));
    double others = 0, slowest = 0;
    for (const Estimate::PipelineStage& s : e.stages) others += s.micro_batch_s, slowest = std::max(slowest, s.micro_batch_s);
    EXPECT_NEAR(e.pp_bubble_s, others - slowest, 1e-12);
    EXPECT_GT(e.pp_p2p_s, 0);
    EXPECT_EQ(e.pipeline_stages, p);
    EXPECT_EQ(e.tokens_per_step, 4096.0 * m * 32 / p);  // B·T·m per data-parallel replica
  }
}

// --pp-layers 1,3 of a 4-block model over m = 4 micro-batches: the last stage (3 blocks and
// the head) sets the pace, t1; the first (1 block and the embedding), t0, is idle for 4 t1 - t0
// of it, and the step outside the optimizer phase and the messages is the fill and drain
// through the first stage and the last stage's four: t0 + 4 t1, by hand from each stage's own
// PlanContext. Each stage holds its own units' parameters.
TEST(ModelParallel, UnevenStagesArePacedByTheSlowestAndEachHoldsItsOwnBlocks) {
  Workload w;
  w.micro_batch = 2;
  w.seq = 16;
  w.accumulation_steps = 4;
  w.precision = Precision::F32;
  const topo::Topology t = small_cluster(2);
  const ModelParallelPlan uneven(small_model(), t, small_device(), w, {1, 2, "", "", {1, 3}});
  const shard::ShardSpec spec = strategy_spec("ddp", uneven.data_parallel_topology());
  const Estimate e = uneven.estimate("ddp", spec);
  auto micro_s = [&](const ModelParallelPlan& plan, int s) {
    const Estimate stage = plan.stage(s).estimate("ddp", spec);
    return (stage.step_time_s - stage.step_comm_s - stage.optimizer_s) / 4;
  };
  const double t0 = micro_s(uneven, 0), t1 = micro_s(uneven, 1);
  ASSERT_GT(t1, t0);  // three blocks and the head against one block
  ASSERT_EQ(e.stages.size(), 2u);
  EXPECT_EQ(e.stages[0].blocks, 1);
  EXPECT_EQ(e.stages[1].blocks, 3);
  EXPECT_DOUBLE_EQ(e.stages[0].micro_batch_s, t0);
  EXPECT_DOUBLE_EQ(e.stages[1].micro_batch_s, t1);
  EXPECT_DOUBLE_EQ(e.pp_bubble_s, t0);
  EXPECT_DOUBLE_EQ(e.pp_bubble_fraction, t0 / (4 * t1 + t0));
  EXPECT_NEAR(e.step_time_s - e.step_comm_s - e.optimizer_s - e.pp_p2p_s, 4 * t1 + t0, 1e-15);
  // The whole model's units: the embeddings, 4 blocks, the final norm, the (untied) head.
  const std::vector<std::size_t> units = small_model().unit_plan().numel;
  ASSERT_EQ(units.size(), 7u);
  EXPECT_EQ(e.stages[0].params, units[0] + units[1]);
  EXPECT_EQ(e.stages[1].params, units[2] + units[3] + units[4] + units[5] + units[6]);
  EXPECT_EQ(e.stages[0].memory.weights, 4 * e.stages[0].params);
  EXPECT_EQ(e.total_memory_bytes, std::max(e.stages[0].total_memory_bytes, e.stages[1].total_memory_bytes));
  // Against the even split of the same model, the slowest stage is slower and the step longer.
  const ModelParallelPlan even(small_model(), t, small_device(), w, {1, 2, "", ""});
  EXPECT_GT(e.step_time_s, even.estimate("ddp", spec).step_time_s);
  EXPECT_GT(t1, micro_s(even, 1));
  // A split of another length or sum is refused naming --pp-layers.
  EXPECT_NE(error_of([&] { ModelParallelPlan(small_model(), t, small_device(), w, {1, 2, "", "", {1, 2}}); })
                .find("--pp-layers 1,2: 3 blocks in all, but the model has 4"),
            std::string::npos);
}

TEST(ModelParallel, MemoryPerRankFallsWithTensorParallelismForSplitWeights) {
  const topo::Topology t = dgx_h100(2);
  const DeviceFacts d = *device_for_topology("dgx-h100");
  const ModelShape m = ModelShape::preset("llama2-7b");
  auto states = [](const Estimate& e) { return e.memory.weights + e.memory.grads + e.memory.optimizer; };
  std::vector<Estimate> ddp;
  for (int tp : {1, 2, 4, 8}) {
    const ModelParallelPlan plan(m, t, d, llama_workload(), {tp, 1, "", ""});
    ddp.push_back(plan.estimate("ddp", apply_precision(strategy_spec("ddp", plan.data_parallel_topology()),
                                                       Precision::BF16)));
  }
  for (std::size_t i = 1; i < ddp.size(); ++i) {
    // Replicated states halve with each doubling, but for the norms every rank keeps whole.
    const double ratio = static_cast<double>(states(ddp[i])) / static_cast<double>(states(ddp[i - 1]));
    EXPECT_GT(ratio, 0.5);
    EXPECT_LT(ratio, 0.501);
    // Activations fall too, though less: the norms' inputs and outputs stay whole.
    EXPECT_LT(ddp[i].activation_bytes, ddp[i - 1].activation_bytes);
    EXPECT_GT(2 * ddp[i].activation_bytes, ddp[i - 1].activation_bytes);
  }
  // A stage's split units add up to the model with its norms counted once per TP rank.
  const std::int64_t h = 4096, L = 32, V = 32000;
  const std::int64_t norms = L * 2 * h + h, split = m.num_params() - norms;
  std::size_t held = 0;
  for (int s = 0; s < 4; ++s)
    for (std::size_t n : m.slice(2, s, 4).unit_plan().numel) held += n;
  EXPECT_EQ(static_cast<std::int64_t>(held), split / 2 + norms);
  EXPECT_EQ(m.slice(2, 0, 4).unit_plan().names.front(), "embeddings");
  EXPECT_EQ(m.slice(2, 3, 4).unit_plan().names.back(), "lm_head");
  EXPECT_EQ(m.slice(2, 1, 4).unit_plan().numel.size(), 8u);
  EXPECT_EQ(static_cast<std::int64_t>(m.slice(4, 3, 4).unit_plan().numel.back()), V * h / 4);
}

TEST(ModelParallel, SplitsThatDoNotDivideAreRefusedNamingTheFlag) {
  const topo::Topology t = dgx_h100(2);
  const ModelShape m = ModelShape::preset("llama2-7b");
  EXPECT_NE(error_of([&] { model_parallel_dims(t, {3, 1, "", ""}); })
                .find("--tp 3: does not divide what tier 'node' has left (8)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model_parallel_dims(t, {1, 4, "", ""}); }).find("--pp 4"), std::string::npos);
  EXPECT_NE(error_of([&] { model_parallel_dims(t, {2, 1, "rack", ""}); }).find("unknown tier 'rack'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m.slice(1, 0, 3); }).find("--pp 3: the model's 32 blocks do not split into 3 equal stages"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ModelShape::preset("llama2-70b").slice(16, 0, 1); })
                .find("--tp 16: does not divide model.kv_heads = 8"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_strategy_variant("zero3+tq2", {}); }).find("--strategy 'zero3+tq2'"),
            std::string::npos);
  const auto [name, mp] = parse_strategy_variant("hsdp+tp2+pp4", {1, 1, "node", ""});
  EXPECT_EQ(name, "hsdp");
  EXPECT_EQ(mp, (ModelParallel{2, 4, "node", ""}));
  EXPECT_EQ(variant_name(name, mp), "hsdp+tp2+pp4");
}

TEST(ModelParallel, ShardingRunsOverTheDataParallelRanksLeftWithTheirShareOfThePorts) {
  const topo::Topology t = dgx_h100(4);
  const parallel::ParallelDims dims = model_parallel_dims(t, {2, 2, "", ""});
  EXPECT_EQ(dims.data_levels, (std::vector<int>{4, 2}));
  EXPECT_EQ(dims.world_size(), 32);
  const topo::Topology dp = dims.data_parallel_topology(t);
  EXPECT_EQ(dp.world_size(), 8);
  EXPECT_EQ(dp.tier(0).size, 4);
  // 8 GPUs of a node still cross InfiniBand at once over their 8 ports: 50 GB/s each.
  EXPECT_DOUBLE_EQ(dp.rank_bandwidth_GBps(1), t.rank_bandwidth_GBps(1));
}

TEST(ModelParallel, EnergyIsIdlePlusUtilisationTimesTheRestOfTdp) {
  const topo::Topology t = dgx_h100(2);
  const DeviceFacts d = *device_for_topology("dgx-h100");
  EXPECT_EQ(d.tdp_watts, 700);
  const ModelParallelPlan plan(ModelShape::preset("llama2-7b"), t, d, llama_workload(), {});
  const Estimate e = plan.estimate("zero3", apply_precision(strategy_spec("zero3", t), Precision::BF16));
  EXPECT_DOUBLE_EQ(e.utilization, e.compute_s / e.step_time_s);
  EXPECT_DOUBLE_EQ(e.power_watts, 70 + 630 * e.utilization);
  EXPECT_DOUBLE_EQ(e.joules_per_token, e.power_watts * 16 / e.tokens_per_s);
  EXPECT_DOUBLE_EQ(e.tokens_per_kwh * e.joules_per_token, 3.6e6);
  DeviceOverrides unknown_idle;
  unknown_idle.idle_watts = 900;
  EXPECT_NE(error_of([&] { resolve_device(device_for_topology("dgx-h100"), "dgx-h100", unknown_idle); }).find("--idle-watts = 900"),
            std::string::npos);
}

TEST(ModelParallel, SearchRanksTensorPipelineAndSpecTogetherUnderTheMemoryCap) {
  const topo::Topology t = dgx_h100(4);
  DeviceFacts d = *device_for_topology("dgx-h100");
  d.memory_gb = 40;  // tight enough that the split matters (every split at the same global batch)
  const ModelShape m = ModelShape::preset("llama2-13b");
  const std::vector<ModelParallel> splits = candidate_splits(m, t);
  // tp in {1, 2, 4, 8} (divisors of 8 that divide 40 heads and 13824), pp in {1, 2, 4} (4 nodes; 40 layers).
  std::set<std::pair<int, int>> tried;
  for (const ModelParallel& mp : splits) tried.insert({mp.tp, mp.pp});
  EXPECT_EQ(tried.size(), 12u);
  EXPECT_FALSE(tried.count({1, 8}));
  const SearchResult r = search_model_parallel(m, t, d, llama_workload(4), {}, std::nullopt, {}, splits);
  ASSERT_FALSE(r.fitting.empty());
  ASSERT_FALSE(r.not_fitting.empty());
  std::set<std::pair<int, int>> ranked;
  for (std::size_t i = 0; i < r.fitting.size(); ++i) {
    EXPECT_LE(r.fitting[i].total_memory_bytes, r.fitting[i].device_memory_bytes);
    if (i > 0) {
      EXPECT_LE(r.fitting[i - 1].step_time_s, r.fitting[i].step_time_s);
    }
    ranked.insert({r.fitting[i].tensor_parallel, r.fitting[i].pipeline_stages});
  }
  for (const Estimate& e : r.not_fitting) EXPECT_GT(e.total_memory_bytes, e.device_memory_bytes);
  EXPECT_GT(ranked.size(), 1u);  // several splits fit and are ranked against each other
  const nlohmann::json j = search_json(r, 3);
  EXPECT_TRUE(j["best"][0].contains("tensor_parallel"));
  EXPECT_TRUE(j["best"][0].contains("pp_bubble_s"));
}

TEST(ModelParallel, BatchPerDeviceTrainsTheSameGlobalBatchAtEverySplit) {
  const topo::Topology t = dgx_h100(4);
  const DeviceFacts d = *device_for_topology("dgx-h100");
  Workload w = llama_workload(4);
  w.batch_per_device = true;
  for (ModelParallel mp : {ModelParallel{1, 1, "", ""}, ModelParallel{2, 1, "", ""}, ModelParallel{4, 2, "", ""}}) {
    const ModelParallelPlan plan(ModelShape::preset("llama2-7b"), t, d, w, mp);
    const Estimate e =
        plan.estimate("zero3", apply_precision(strategy_spec("zero3", plan.data_parallel_topology()), Precision::BF16));
    EXPECT_EQ(e.tokens_per_step, 4096.0 * 4 * 32) << mp.tp << " " << mp.pp;
  }
}

TEST(ModelParallel, PipelineMessagesAreTheStagesProgramsPricedOneTransferEach) {
  Workload w;
  w.micro_batch = 2;
  w.seq = 16;
  w.accumulation_steps = 3;
  const topo::Topology t = small_cluster(2);
  const ModelParallelPlan plan(small_model(), t, small_device(), w, {1, 2, "", ""});
  // Each stage sends 3 messages and receives 3 across the cluster tier (10 GB/s after 5 us):
  // the first its B·T·h = 2048 bf16 activations forward, the last their gradients back; each
  // one transfer both ends wait for.
  for (int s = 0; s < 2; ++s) {
    ASSERT_EQ(plan.messages(s).size(), 6u);
    int sent = 0;
    for (const PipelineMessage& m : plan.messages(s)) {
      EXPECT_EQ(m.purpose, m.sent == (s == 0) ? "activation-send" : "activation-grad-send");
      EXPECT_EQ(m.level, 1);
      EXPECT_EQ(m.op().bytes_sent, 4096u);
      sent += m.sent;
    }
    EXPECT_EQ(sent, 3);
  }
  const Estimate e =
      plan.estimate("zero3", apply_precision(strategy_spec("zero3", plan.data_parallel_topology()), Precision::BF16));
  EXPECT_NEAR(e.pp_p2p_s, 6 * (5e-6 + 4096 / 10e9), 1e-15);
  EXPECT_EQ(e.tp_allreduce_s, 0);
  // Two stages: the bubble is the faster stage's micro-batch, filling and draining.
  ASSERT_EQ(e.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(e.pp_bubble_s, std::min(e.stages[0].micro_batch_s, e.stages[1].micro_batch_s));
}

// A tied head (GPT-2) across stages: the last stage holds a copy of the embeddings and sums
// their gradient with the first stage's once a step, each rank its optimizer-state shard.
TEST(ModelParallel, TiedHeadsLastStageHoldsTheEmbeddingsAndSumsTheirGradientWithTheFirst) {
  const ModelShape gpt2 = ModelShape::preset("gpt2-124m");
  const std::size_t embeddings = gpt2.unit_plan().numel.front();
  EXPECT_EQ(gpt2.slice(1, 1, 2).unit_plan().numel.front(), embeddings);
  EXPECT_EQ(gpt2.slice(1, 1, 4).unit_plan().numel.size(), 3u);  // 3 blocks, no embeddings between
  EXPECT_EQ(gpt2.slice(1, 3, 4).unit_plan().numel.size(), 5u);  // the copy, 3 blocks, ln_f
  Workload w;
  w.micro_batch = 2;
  w.seq = 16;
  w.accumulation_steps = 3;
  const topo::Topology t = small_cluster(2);
  const ModelParallelPlan plan(gpt2, t, small_device(), w, {1, 2, "", ""});
  for (const char* strategy : {"ddp", "zero1"}) {
    const shard::ShardSpec spec = strategy_spec(strategy, plan.data_parallel_topology());
    const int shards = std::string(strategy) == "ddp" ? 1 : plan.dims().data_parallel_size();
    const std::uint64_t activations = 2 * 16 * 768 * 2, tied = 2 * (embeddings / shards / 2) * 4;
    for (int s = 0; s < 2; ++s) {
      const shard::TierTraffic on_cluster = plan.pipeline_tier_traffic(s, spec);
      EXPECT_EQ(on_cluster.bytes_sent, 3 * activations + tied) << strategy << s;
      EXPECT_EQ(on_cluster.bytes_received, 3 * activations + tied) << strategy << s;
      EXPECT_EQ(on_cluster.messages, 3u + 2u) << strategy << s;
    }
  }
}

TEST(ModelParallel, ChosenStrategiesTakeTheirSplitPrecisionAndOverrides) {
  const topo::Topology t = small_cluster(2);  // 4 ranks a node, 2 nodes
  Workload w;                                 // bf16
  parallel::ShardOptions options;
  const std::vector<NamedSpec> plain = chosen_strategies("fsdp+tp2,ddp,", options, t, w);
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(plain[0].name, "zero3");  // canonical, its split apart from the name
  EXPECT_EQ(plain[0].mp.tp, 2);
  EXPECT_EQ(plain[0].spec.grad_wire, DType::BF16);  // --precision bf16's element on an fp32 wire
  EXPECT_EQ(plain[1].name, "ddp");
  EXPECT_EQ(plain[1].mp.tp, 1);
  // An override stars every name and changes the spec; --tp applies where no suffix says otherwise.
  options.grad_wire = "int8";
  options.tp = 2;
  const std::vector<NamedSpec> changed = chosen_strategies("zero2,zero3+tp4", options, t, w);
  ASSERT_EQ(changed.size(), 2u);
  EXPECT_EQ(changed[0].name, "zero2*");
  EXPECT_EQ(changed[0].mp.tp, 2);
  EXPECT_EQ(changed[0].spec.grad_wire, DType::I8);
  EXPECT_EQ(changed[1].mp.tp, 4);
  EXPECT_EQ(chosen_strategies("all", {}, t, w).size(), strategy_names().size());
  EXPECT_NE(error_of([&] { chosen_strategies(",", {}, t, w); }).find("--strategy: empty"), std::string::npos);
}
