// --search as a recommendation (ranking by time a token at one global batch, why a plan lost,
// what to change when nothing fits), the frameworks' names for the presets, and each
// framework's nearest plan (plan/recommend.hpp, plan/emit.hpp, shard/spec.hpp).
#include <string>

#include <gtest/gtest.h>

#include "base/error.hpp"
#include "plan/emit.hpp"
#include "plan/recommend.hpp"
#include "plan/search.hpp"
#include "shard/spec.hpp"

namespace strata::plan {
namespace {

topo::Topology dgx_h100(int nodes) {
  topo::Topology t = topo::Topology::preset("dgx-h100");
  t.resolve(t.world_size_for_nodes(nodes));
  return t;
}

Estimate timed(double step_s, double tokens, bool fits) {
  Estimate e;
  e.step_time_s = step_s;
  e.tokens_per_step = tokens;
  e.fits = fits;
  e.total_memory_bytes = fits ? 60'000'000'000 : 90'000'000'000;
  e.device_memory_bytes = 80'000'000'000;
  e.tiers.resize(1);
  return e;
}

TEST(Search, AnUnfittingPlanIsCalledFasterOnlyWhenItMovesMoreTokensASecond) {
  const Estimate best = timed(1.0, 1000, true);
  // 0.8 s for the same tokens: 1.25x the tokens a second.
  EXPECT_NE(why_lost(timed(0.8, 1000, false), best).find("would be 25.0% faster"), std::string::npos)
      << why_lost(timed(0.8, 1000, false), best);
  // 1.25 s: 0.8x the tokens a second.
  EXPECT_NE(why_lost(timed(1.25, 1000, false), best).find("would be 20.0% slower anyway"), std::string::npos)
      << why_lost(timed(1.25, 1000, false), best);
  // A longer step over twice the tokens is faster a token.
  EXPECT_NE(why_lost(timed(1.5, 2000, false), best).find("would be 33.3% faster"), std::string::npos);
  EXPECT_TRUE(ranks_before(timed(1.5, 2000, true), best));
  EXPECT_FALSE(ranks_before(best, timed(1.5, 2000, true)));
  // A fitting loser: its extra time a token, in seconds at the best's global batch.
  EXPECT_EQ(why_lost(timed(1.5, 1000, true), best).rfind("+50.0% time a token (+0.5 s a step)", 0), 0u)
      << why_lost(timed(1.5, 1000, true), best);
}

TEST(Search, EverySplitTrainsTheSameGlobalBatchAndRanksByTimeAToken) {
  const topo::Topology t = dgx_h100(2);
  Workload w;
  w.seq = 4096;
  w.flash_attention = true;
  w.accumulation_steps = 2;
  const SearchResult r =
      search_model_parallel(ModelShape::preset("llama2-7b"), t, *device_for_topology("dgx-h100"), w, {}, std::nullopt,
                            {}, {ModelParallel{1, 1, "", ""}, ModelParallel{8, 1, "", ""}, ModelParallel{2, 2, "", ""}});
  ASSERT_GT(r.fitting.size(), 2u);
  bool tp8 = false;
  for (std::size_t i = 0; i < r.fitting.size(); ++i) {
    EXPECT_EQ(r.fitting[i].tokens_per_step, 4096.0 * 2 * 16);  // one device's micro-batch x accum x 16 devices
    tp8 = tp8 || r.fitting[i].tensor_parallel == 8;
    if (i > 0) {
      EXPECT_LE(seconds_per_token(r.fitting[i - 1]), seconds_per_token(r.fitting[i]));
    }
  }
  EXPECT_TRUE(tp8);
}

TEST(Recommend, WhenNothingFitsTheSmallestChangeIsFoundAndPriced) {
  SearchRequest request{ModelShape::preset("llama2-7b"), dgx_h100(1), *device_for_topology("dgx-h100"), {}, {},
                        std::nullopt, {}, {}, {}, "", ""};
  request.workload.seq = 4096;
  request.workload.micro_batch = 4;
  const SearchResult none = run_search(request);
  ASSERT_TRUE(none.fitting.empty());  // dense attention: 32 heads x 4096^2 probabilities a layer
  EXPECT_NE(flash_attention_hint(request.model, request.workload).find("add --flash-attention"), std::string::npos);
  const std::vector<FitChange> changes = changes_until_it_fits(request);
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.front().flags, std::vector<std::string>{"--flash-attention"});
  ASSERT_TRUE(changes.back().fits);
  ASSERT_TRUE(changes.back().best);
  EXPECT_TRUE(changes.back().best->fits);
  // The least-memory list is sorted and names the plans' memory.
  const std::vector<Estimate> least = least_memory(none, 3);
  ASSERT_EQ(least.size(), 3u);
  EXPECT_LE(least[0].total_memory_bytes, least[1].total_memory_bytes);
  const std::string text = recommendation_text(request, none, changes);
  EXPECT_NE(text.find("nothing fits in 80 GB"), std::string::npos) << text;
  EXPECT_NE(text.find("the smallest change that fits: --flash-attention"), std::string::npos) << text;
  // strata's own models run dense attention as the runtime does: no hint.
  EXPECT_TRUE(flash_attention_hint(ModelShape::preset("gpt2-124m"), request.workload).empty());
}

TEST(Recommend, AStrategyThatDoesNotFitIsToldItsSmallestChange) {
  const SearchRequest request{ModelShape::preset("llama2-7b"), dgx_h100(1), *device_for_topology("dgx-h100"),
                              {1, 4096, 1, Recompute::None, false}, {}, std::nullopt, {}, {}, {}, "", ""};
  const shard::ShardSpec ddp = apply_precision(strategy_spec("ddp", request.topology), Precision::BF16);
  const std::vector<FitChange> changes = changes_until_strategy_fits(request, {"ddp", ddp, {}});
  ASSERT_FALSE(changes.empty());
  ASSERT_TRUE(changes.back().fits);
  // ddp keeps 16 bytes a parameter whole: recomputation alone is not enough, TP 2 halves them.
  EXPECT_EQ(changes.back().flags, (std::vector<std::string>{"--flash-attention", "--recompute full", "--tp 2"}));
  EXPECT_EQ(changes.back().best->tensor_parallel, 2);
  EXPECT_NE(smallest_change_line(changes).find("the smallest change that fits: --flash-attention --recompute full --tp 2"),
            std::string::npos)
      << smallest_change_line(changes);
}

TEST(Recommend, HeadroomCountsWhatTheRuntimeReserves) {
  Estimate e = timed(1.0, 1000, true);
  e.tiers.resize(2);
  e.tiers[1].traffic.bytes_sent = 1;  // one communicator in use
  const Reserved r = runtime_reserved(e);
  EXPECT_EQ(r.communicators, 1);
  EXPECT_GT(r.cuda_context_bytes, 5e8);
  EXPECT_GT(r.nccl_bytes, 0);
  EXPECT_DOUBLE_EQ(r.fragmentation_bytes, 0.05 * 80e9);
  const std::string line = headroom_line(e);
  EXPECT_NE(line.find("80.0 GB - 60.0 GB planned"), std::string::npos) << line;
  EXPECT_NE(line.find("headroom"), std::string::npos) << line;
  e.total_memory_bytes = 79'000'000'000;
  EXPECT_NE(headroom_line(e).find("short"), std::string::npos) << headroom_line(e);
}

TEST(Presets, TheFrameworksNamesResolveToOnePreset) {
  const topo::Topology t = dgx_h100(2);
  for (auto [alias, preset] : {std::pair{"fsdp", "zero3"}, {"FULL_SHARD", "zero3"}, {"hybrid_shard", "hsdp"},
                               {"zero-1", "zero1"}, {"shard_grad_op", "zero2"}, {"zero++", "zeropp"}, {"no_shard", "ddp"}}) {
    const shard::ShardSpec s = shard::ShardSpec::preset_for(alias, t);
    EXPECT_EQ(s.preset, preset) << alias;
    const shard::ShardSpec p = shard::ShardSpec::preset_for(preset, t);
    EXPECT_EQ(s.weights, p.weights) << alias;
    EXPECT_EQ(s.secondary, p.secondary) << alias;
    EXPECT_EQ(s.grad_wire, p.grad_wire) << alias;
  }
  try {
    shard::ShardSpec::preset_for("fdsp", t);
    FAIL() << "an unknown name must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("full_shard = zero3"), std::string::npos) << e.what();
  }
  const std::string words = apply_precision(shard::ShardSpec::preset_for("zeropp", t), Precision::BF16).describe(t);
  EXPECT_NE(words.find("W=cluster: weights sharded over all 16 ranks"), std::string::npos) << words;
  EXPECT_NE(words.find("S=node: a second copy of the weights sharded over the 8 ranks of a 'node'"), std::string::npos)
      << words;
  EXPECT_NE(words.find("s:bf16: the once-a-step gradient reduction"), std::string::npos) << words;
}

TEST(Emit, EachFrameworksNearestPlanIsOneItRuns) {
  topo::Topology frontier = topo::Topology::preset("frontier");
  frontier.resolve(frontier.world_size_for_nodes(2));
  Workload w;
  w.seq = 2048;
  const shard::ShardSpec topo_spec = apply_precision(strategy_spec("topo", frontier), Precision::BF16);
  // DeepSpeed: ZeRO-3 over all, the die pair's weights as its hpZ copy; int8 gradients as int4.
  FrameworkPlan ds = nearest_plan(Framework::DeepSpeed, topo_spec, w, {}, frontier);
  EXPECT_EQ(ds.spec.weights, "cluster");
  EXPECT_EQ(ds.spec.secondary, "gpu");
  EXPECT_EQ(ds.spec.grad_wire, DType::I4);
  EXPECT_FALSE(ds.gaps.empty());
  // torchtitan: everything over the optimizer's tier, float32 reductions, flash attention.
  FrameworkPlan tt = nearest_plan(Framework::Torchtitan, topo_spec, w, {}, frontier);
  EXPECT_EQ(tt.spec.weights, "cluster");
  EXPECT_EQ(tt.spec.grads, "cluster");
  EXPECT_EQ(tt.spec.weight_wire, DType::BF16);
  EXPECT_EQ(tt.spec.grad_wire, DType::F32);
  EXPECT_TRUE(tt.workload.flash_attention);
  // Megatron-LM with a pipeline: the distributed optimizer, weights and gradients whole.
  FrameworkPlan mg = nearest_plan(Framework::Megatron, topo_spec, w, {1, 2, "", ""}, frontier);
  EXPECT_EQ(mg.spec.weights, "none");
  EXPECT_EQ(mg.spec.optimizer, "cluster");
  // A plan the framework runs as it is has no gaps.
  const shard::ShardSpec hsdp = apply_precision(strategy_spec("hsdp", frontier), Precision::BF16);
  w.flash_attention = true;
  EXPECT_TRUE(nearest_plan(Framework::Fsdp2, hsdp, w, {}, frontier).gaps.empty());
  EXPECT_TRUE(nearest_plan(Framework::DeepSpeed, hsdp, w, {}, frontier).gaps.empty());  // MiCS
  EXPECT_THROW(parse_framework("colossalai"), Error);
}

}  // namespace
}  // namespace strata::plan
