#include <gtest/gtest.h>

#include "base/error.hpp"
#include "model/gpt.hpp"
#include "model/layout.hpp"
#include "model/model.hpp"
#include "plan/model_shapes.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::plan;
using strata::test::error_of;

TEST(ModelShapes, ParameterCountsMatchThePublishedModels) {
  // systems.md: ~20.6B, ~10B, ~6.7B, ~13B, ~69B, 124M; the exact figures are the models' own
  // (Llama 2's 6,738,415,616 / 13,015,864,320 / 68,976,648,192; NeoX-20B's 20,554,567,680).
  EXPECT_EQ(ModelShape::preset("gpt-neox-20b").num_params(), 20'554'567'680);
  EXPECT_EQ(ModelShape::preset("llama2-7b").num_params(), 6'738'415'616);
  EXPECT_EQ(ModelShape::preset("llama2-13b").num_params(), 13'015'864'320);
  EXPECT_EQ(ModelShape::preset("llama2-70b").num_params(), 68'976'648'192);
  // The trainer's presets of the same models (model::ModelConfig) count the same.
  EXPECT_EQ(ModelShape::preset("tinyllama-1.1b").num_params(), model::ModelConfig::preset("tinyllama-1.1b").num_params());
  EXPECT_EQ(ModelShape::preset("llama2-7b").num_params(), model::ModelConfig::preset("llama2-7b").num_params());
  EXPECT_NEAR(ModelShape::preset("gpt-neox-10b").num_params() / 1e9, 10.0, 0.6);
  EXPECT_NEAR(ModelShape::preset("gpt2-124m").num_params() / 1e6, 124.0, 0.5);
}

TEST(ModelShapes, UnitsCoverEveryParameterOnce) {
  for (const char* name : {"gpt-neox-20b", "gpt-neox-10b", "llama2-7b", "llama2-13b", "llama2-70b"}) {
    ModelShape m = ModelShape::preset(name);
    shard::UnitPlan p = m.unit_plan();
    std::size_t total = 0;
    for (std::size_t n : p.numel) total += n;
    EXPECT_EQ(total, static_cast<std::size_t>(m.num_params())) << name;
    EXPECT_EQ(p.names.size(), static_cast<std::size_t>(m.layers + 3)) << name;  // untied: + lm_head
    EXPECT_EQ(p.names.back(), "lm_head") << name;
  }
  // Llama-2 70B's grouped-query attention: K and V are 8 heads of 128 wide.
  ModelShape l70 = ModelShape::preset("llama2-70b");
  EXPECT_EQ(l70.kv_dim(), 1024);
  EXPECT_EQ(l70.unit_plan().numel[1], 2u * 8192 * 8192 + 2u * 8192 * 1024 + 3u * 8192 * 28672 + 2u * 8192);
}

// Two ways to a strata model's units: the shape's own formula (the shape with its runtime
// config dropped) and the runtime's parameter layout; and for tiny, a count by hand.
TEST(ModelShapes, StrataModelsUnitsFromTheShapesFormulaAreTheRuntimesLayout) {
  for (const char* name : {"tiny", "small", "gpt2-124m"}) {
    ModelShape m = ModelShape::preset(name);
    ASSERT_TRUE(m.gpt.has_value());
    ModelShape as_shape = m;
    as_shape.gpt.reset();
    shard::UnitPlan formula = as_shape.unit_plan();
    shard::UnitPlan runtime = shard::unit_plan(model::ParamLayout(model::ModelConfig::preset(name)));
    EXPECT_EQ(formula.names, runtime.names) << name;
    EXPECT_EQ(formula.numel, runtime.numel) << name;
    EXPECT_EQ(formula.events, runtime.events) << name;
    // The shape's own formula agrees with the config's count, and its FLOPs with the config's.
    EXPECT_EQ(as_shape.num_params(), m.gpt->num_params()) << name;
    EXPECT_DOUBLE_EQ(m.model_flops_per_token(m.seq), m.gpt->flops_per_token(m.seq)) << name;
  }
  // tiny (2 layers, C = 64, 64 positions, vocab 256), what the plan prices, by hand:
  //   embeddings: wte 256 x 64 = 16384, wpe 64 x 64 = 4096                        -> 20480
  //   a block: ln_1 64 + 64, c_attn 64 x 192 + 192 = 12480, c_proj 64 x 64 + 64 = 4160,
  //            ln_2 64 + 64, c_fc 64 x 256 + 256 = 16640, mlp c_proj 256 x 64 + 64 = 16448 -> 49984
  //   ln_f: 64 + 64                                                                 -> 128
  // every one a multiple of the layout's 64-float unit alignment, so none padded; 120576 in all.
  const shard::UnitPlan tiny = ModelShape::preset("tiny").unit_plan();
  EXPECT_EQ(tiny.names, (std::vector<std::string>{"embeddings", "h.0", "h.1", "ln_f"}));
  EXPECT_EQ(tiny.numel, (std::vector<std::size_t>{20480, 49984, 49984, 128}));
  EXPECT_EQ(ModelShape::preset("tiny").num_params(), 20480 + 2 * 49984 + 128);
  // GPT-2's walk (model/gpt.hpp): the head reuses the embedding's wte, so E is acquired
  // around ln_f in both directions; E's gradients are ready last.
  using K = model::UnitEvent;
  const auto F = model::Phase::Forward, B = model::Phase::Backward;
  const std::vector<K> walk{
      {K::Acquire, 0, F}, {K::Acquire, 1, F}, {K::Release, 1, F}, {K::Acquire, 2, F}, {K::Release, 2, F},
      {K::Acquire, 3, F}, {K::Release, 3, F}, {K::Release, 0, F},  // forward
      {K::Acquire, 3, B}, {K::Acquire, 0, B}, {K::Release, 0, B}, {K::Release, 3, B}, {K::GradsReady, 3, B},
      {K::Acquire, 2, B}, {K::Release, 2, B}, {K::GradsReady, 2, B},  // block 1
      {K::Acquire, 1, B}, {K::Release, 1, B}, {K::GradsReady, 1, B},  // block 0
      {K::GradsReady, 0, B}};
  EXPECT_EQ(tiny.events, walk);
}

TEST(ModelShapes, FlopsAreSixPsiPlusAttentionAndRecomputationAddsOneForward) {
  ModelShape m = ModelShape::preset("llama2-70b");
  const int seq = 4096;
  const double psi = static_cast<double>(m.matmul_params());
  const double attention = 12.0 * m.layers * m.hidden * seq;
  EXPECT_DOUBLE_EQ(m.model_flops_per_token(seq), 6 * psi + attention);
  EXPECT_DOUBLE_EQ(m.hardware_flops_per_token(seq, Recompute::None), m.model_flops_per_token(seq));
  // Recomputation runs every block's forward once more: 2 x block matmul params + 4·h·seq a layer.
  const double block_psi = psi - static_cast<double>(m.vocab) * m.hidden;
  EXPECT_NEAR(m.hardware_flops_per_token(seq, Recompute::Full), 8 * block_psi + 6.0 * m.vocab * m.hidden + 16.0 * m.layers * m.hidden * seq,
              1e-9 * m.hardware_flops_per_token(seq, Recompute::Full));
  // Matmul params leave out the input embedding (a lookup) and the norms.
  EXPECT_LT(m.matmul_params(), m.num_params());
  EXPECT_GT(static_cast<double>(m.matmul_params()), 0.99 * static_cast<double>(m.num_params()));
}

// torchtitan's per-op policy counts a block's aten.mm calls and recomputes the even ones:
// in Llama's order (wq, wk, wv, wo, w1, w3, w2) wk, wo and w3; in a GPT block's (qkv, proj,
// fc, mlp_proj) the two output projections; never the attention products.
TEST(ModelShapes, SelectiveOpRerunsEverySecondMatmulOfEachBlock) {
  auto names = [](const std::vector<BlockLinear>& ls) {
    std::vector<std::string> out;
    for (const BlockLinear& l : ls) out.push_back(l.name);
    return out;
  };
  const int seq = 4096;
  const ModelShape llama = ModelShape::preset("llama2-7b");
  EXPECT_EQ(names(llama.selective_op_recomputed()), (std::vector<std::string>{"wk", "wo", "w3"}));
  // Hand count, a token: wk 4096 x 4096 (32 K/V heads), wo 4096 x 4096, w3 4096 x 11008.
  const std::vector<Rerun> l = llama.rerun_per_token(seq, Recompute::SelectiveOp, 2);
  ASSERT_EQ(l.size(), 35u);
  EXPECT_DOUBLE_EQ(l[1].matmul_flops, 2.0 * (4096.0 * 4096 + 4096.0 * 4096 + 4096.0 * 11008));
  EXPECT_EQ(l[1].matmuls, 3);
  // The memory-bound rerun: norms 4h, residual 3h, rotary 2(h + kv), SwiGLU 3f, bf16.
  EXPECT_DOUBLE_EQ(l[1].memory_bound_bytes, 2.0 * (7 * 4096 + 2 * (4096 + 4096) + 3 * 11008));
  for (std::size_t u : {std::size_t{0}, std::size_t{33}, std::size_t{34}}) {  // embeddings, final norm, head
    EXPECT_EQ(l[u].matmul_flops, 0) << u;
    EXPECT_EQ(l[u].memory_bound_bytes, 0) << u;
  }
  const double none = llama.hardware_flops_per_token(seq, Recompute::None);
  EXPECT_DOUBLE_EQ(llama.hardware_flops_per_token(seq, Recompute::SelectiveOp), none + 32 * l[1].matmul_flops);
  EXPECT_LT(llama.hardware_flops_per_token(seq, Recompute::SelectiveOp),
            llama.hardware_flops_per_token(seq, Recompute::Full));
  EXPECT_EQ(llama.rerun_per_token(seq, Recompute::None, 2)[1].matmul_flops, 0);

  // MPT-7B (GELU, no biases): proj 4096 x 4096 and mlp_proj 16384 x 4096.
  const ModelShape mpt = ModelShape::from_name_and_fields(
      "custom", {"layers=32", "hidden=4096", "heads=32", "ffn=16384", "vocab=50368", "seq=2048", "biases=false",
                 "tied_head=true"});
  EXPECT_EQ(names(mpt.selective_op_recomputed()), (std::vector<std::string>{"proj", "mlp_proj"}));
  EXPECT_DOUBLE_EQ(mpt.rerun_per_token(2048, Recompute::SelectiveOp, 2)[1].matmul_flops,
                   2.0 * (4096.0 * 4096 + 16384.0 * 4096));
  // With biases every projection is an aten.addmm, which the policy does not save.
  const ModelShape neox = ModelShape::preset("gpt-neox-20b");
  EXPECT_EQ(names(neox.selective_op_recomputed()), (std::vector<std::string>{"qkv", "proj", "fc", "mlp_proj"}));
  EXPECT_DOUBLE_EQ(neox.rerun_per_token(2048, Recompute::SelectiveOp, 2)[1].matmul_flops,
                   2.0 * static_cast<double>(neox.matmul_params() - static_cast<std::int64_t>(neox.vocab) * neox.hidden) /
                       neox.layers);
  // Under tensor parallelism a rank reruns its slice.
  const ModelShape tp2 = llama.slice(2, 0, 1);
  EXPECT_DOUBLE_EQ(tp2.rerun_per_token(seq, Recompute::SelectiveOp, 2)[1].matmul_flops, l[1].matmul_flops / 2);
  // ... and its share of the rotary and MLP tensors; the norms and residual stay whole.
  EXPECT_DOUBLE_EQ(tp2.rerun_per_token(seq, Recompute::SelectiveOp, 2)[1].memory_bound_bytes,
                   2.0 * (7 * 4096 + (2 * (4096 + 4096) + 3 * 11008) / 2.0));
}

TEST(ModelShapes, RecomputeModesAreParsedAndBadOnesNamed) {
  EXPECT_EQ(parse_recompute("none"), Recompute::None);
  EXPECT_EQ(parse_recompute("full"), Recompute::Full);
  EXPECT_EQ(parse_recompute("selective-op"), Recompute::SelectiveOp);
  EXPECT_EQ(recompute_name(Recompute::SelectiveOp), "selective-op");
  EXPECT_FALSE(static_cast<bool>(Recompute(Recompute::None)));
  EXPECT_TRUE(static_cast<bool>(Recompute(Recompute::SelectiveOp)));
  EXPECT_NE(error_of([] { parse_recompute("selective"); }).find("--recompute 'selective'"), std::string::npos);
}

TEST(ModelShapes, ActivationBytesFollowTheDocumentedFormula) {
  ModelShape m = ModelShape::from_name_and_fields(
      "custom", {"layers=2", "hidden=8", "heads=2", "kv_heads=1", "ffn=16", "vocab=10", "seq=4", "mlp=swiglu"});
  const int b = 3, s = 4, e = 2;
  // per block and token: 6h + 2kv + 3f (+ heads·seq) = 48 + 8 + 48 (+ 8)
  const std::uint64_t block_dense = 48 + 8 + 48 + 8, block_flash = 48 + 8 + 48;
  const std::uint64_t head = 2 * 8 * e + 4 * 10;
  EXPECT_EQ(m.activation_bytes(b, s, e, Recompute::None, false), b * s * (2 * block_dense * e + head));
  EXPECT_EQ(m.activation_bytes(b, s, e, Recompute::None, true), b * s * (2 * block_flash * e + head));
  EXPECT_EQ(m.activation_bytes(b, s, e, Recompute::Full, false), b * s * ((2 * 8 + block_dense) * e + head));
  // selective-op (flash attention): each block keeps its input and w2's output whole (h each),
  // wq's (h), wv's (kv), w1's (f) and the attention output (h) (all 20 when tp = 1: 8 + 8 + 4
  // + 8 + 8 + 16 = 52 elements), and the fp32 log-sum-exp of 2 heads; one block's full set.
  const ModelShape llama = ModelShape::from_name_and_fields(
      "custom", {"layers=2", "hidden=8", "heads=2", "kv_heads=1", "ffn=16", "vocab=10", "seq=4", "mlp=swiglu",
                 "biases=false"});
  EXPECT_EQ(llama.activation_bytes(b, s, e, Recompute::SelectiveOp, true),
            b * s * (2 * (52 * e + 4 * 2) + block_flash * e + head));
}

TEST(ModelShapes, SelectiveOpKeepsLessThanNoRecomputationAndMoreThanFull) {
  const ModelShape m = ModelShape::from_name_and_fields("llama2-7b", {"vocab=128256", "kv_heads=8", "ffn=14336"});
  for (int tp : {1, 8}) {
    SCOPED_TRACE(tp);
    const ModelShape slice = m.slice(tp, 0, 1);
    const std::uint64_t none = slice.activation_bytes(2, 8192, 2, Recompute::None, true);
    const std::uint64_t selective = slice.activation_bytes(2, 8192, 2, Recompute::SelectiveOp, true);
    const std::uint64_t full = slice.activation_bytes(2, 8192, 2, Recompute::Full, true);
    EXPECT_LT(full, selective);
    EXPECT_LT(selective, none);
  }
}

// One source of truth: for strata's own models in fp32 with dense attention the planner's
// activation bytes are what a constructed model::GPT allocates, with and without recomputation.
TEST(ModelShapes, StrataModelsPriceTheActivationsTheModelAllocates) {
  for (const char* name : {"tiny", "mini", "small", "gpt2-124m", "llama-tiny", "llama-small"})
    for (bool recompute : {false, true}) {
      SCOPED_TRACE(std::string(name) + (recompute ? " recomputed" : " kept"));
      const ModelShape m = ModelShape::preset(name);
      const int b = 2, s = 48;
      EXPECT_EQ(m.activation_bytes(b, s, 4, recompute ? Recompute::Full : Recompute::None, false),
                model::make_model(*m.gpt, b, s, recompute)->activation_bytes());
    }
  // strata's Llama presets are priced from the runtime's layout, with its shape.
  const ModelShape llama = ModelShape::preset("llama-small");
  const model::ModelConfig config = model::ModelConfig::preset("llama-small");
  EXPECT_EQ(llama.num_params(), config.num_params());
  EXPECT_FALSE(llama.tied_head);
  EXPECT_EQ(llama.mlp, Mlp::SwiGlu);
  EXPECT_EQ(llama.kv_heads, config.kv_heads());
  const ModelShape small = ModelShape::preset("small");
  EXPECT_LT(small.activation_bytes(2, 48, 4, Recompute::Full, false),
            small.activation_bytes(2, 48, 4, Recompute::None, false));
}

TEST(ModelShapes, FieldsOverridePresetsAndBadFieldsAreNamed) {
  ModelShape m = ModelShape::from_name_and_fields("gpt2-124m", {"layers=24"});
  EXPECT_FALSE(m.gpt.has_value());  // a changed strata model is priced as a shape
  EXPECT_EQ(m.layers, 24);
  EXPECT_EQ(m.name, "gpt2-124m*");
  EXPECT_TRUE(ModelShape::from_name_and_fields("gpt2-124m", {"seq=512"}).gpt.has_value());

  EXPECT_NE(error_of([] { ModelShape::preset("gpt5"); }).find("--model 'gpt5'"), std::string::npos);
  EXPECT_NE(error_of([] { ModelShape::from_name_and_fields("llama2-7b", {"depth=3"}); }).find("--shape depth"),
            std::string::npos);
  EXPECT_NE(error_of([] { ModelShape::from_name_and_fields("llama2-7b", {"layers=x"}); }).find("not an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { ModelShape::from_name_and_fields("llama2-7b", {"kv_heads=5"}); })
                .find("model.kv_heads = 5 does not divide model.heads = 32"),
            std::string::npos);
  // custom has no preset to start from: the message lists the --shape fields it still needs.
  EXPECT_EQ(error_of([] { ModelShape::from_name_and_fields("custom", {}); }),
            "--model custom: its shape needs --shape layers=N, --shape hidden=N, --shape heads=N, --shape vocab=N, "
            "--shape seq=N (optional: kv_heads, default heads; ffn, default 4 x hidden; learned_positions, default 0 "
            "= rotary; mlp, norm, biases, tied_head)");
  EXPECT_NE(error_of([] { ModelShape::from_name_and_fields("custom", {"layers=2", "seq=8", "vocab=10"}); })
                .find("its shape needs --shape hidden=N, --shape heads=N ("),
            std::string::npos);
  EXPECT_NE(error_of([] { ModelShape::from_name_and_fields("custom", {"layers=2", "hidden=8", "heads=2", "vocab=10",
                                                                      "seq=0"}); })
                .find("model.seq = 0: must be positive"),
            std::string::npos);
  EXPECT_NE(error_of([] { ModelShape::from_name_and_fields("llama2-7b", {"layer=3"}); })
                .find("--shape layer: unknown field (did you mean 'layers'?)"),
            std::string::npos);
}
