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
  // The trainer's presets of the same models (model::GPTConfig) count the same.
  EXPECT_EQ(ModelShape::preset("tinyllama-1.1b").num_params(), model::GPTConfig::preset("tinyllama-1.1b").num_params());
  EXPECT_EQ(ModelShape::preset("llama2-7b").num_params(), model::GPTConfig::preset("llama2-7b").num_params());
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

TEST(ModelShapes, StrataModelsUseTheRuntimesOwnUnitPlan) {
  for (const char* name : {"tiny", "small", "gpt2-124m"}) {
    ModelShape m = ModelShape::preset(name);
    ASSERT_TRUE(m.gpt.has_value());
    shard::UnitPlan mine = m.unit_plan();
    shard::UnitPlan runtime = shard::unit_plan(model::ParamLayout(model::GPTConfig::preset(name)));
    EXPECT_EQ(mine.names, runtime.names) << name;
    EXPECT_EQ(mine.numel, runtime.numel) << name;
    EXPECT_EQ(mine.events, runtime.events) << name;
    // The shape's own formula agrees with the config's count, and its FLOPs with the config's.
    ModelShape as_shape = m;
    as_shape.gpt.reset();
    EXPECT_EQ(as_shape.num_params(), m.gpt->num_params()) << name;
    EXPECT_DOUBLE_EQ(m.model_flops_per_token(m.seq), m.gpt->flops_per_token(m.seq)) << name;
  }
}

TEST(ModelShapes, FlopsAreSixPsiPlusAttentionAndRecomputationAddsOneForward) {
  ModelShape m = ModelShape::preset("llama2-70b");
  const int seq = 4096;
  const double psi = static_cast<double>(m.matmul_params());
  const double attention = 12.0 * m.layers * m.hidden * seq;
  EXPECT_DOUBLE_EQ(m.model_flops_per_token(seq), 6 * psi + attention);
  EXPECT_DOUBLE_EQ(m.hardware_flops_per_token(seq, false), m.model_flops_per_token(seq));
  // Recomputation runs every block's forward once more: 2 x block matmul params + 4·h·seq a layer.
  const double block_psi = psi - static_cast<double>(m.vocab) * m.hidden;
  EXPECT_NEAR(m.hardware_flops_per_token(seq, true), 8 * block_psi + 6.0 * m.vocab * m.hidden + 16.0 * m.layers * m.hidden * seq,
              1e-9 * m.hardware_flops_per_token(seq, true));
  // Matmul params leave out the input embedding (a lookup) and the norms.
  EXPECT_LT(m.matmul_params(), m.num_params());
  EXPECT_GT(static_cast<double>(m.matmul_params()), 0.99 * static_cast<double>(m.num_params()));
}

TEST(ModelShapes, ActivationBytesFollowTheDocumentedFormula) {
  ModelShape m = ModelShape::from_name_and_fields(
      "custom", {"layers=2", "hidden=8", "heads=2", "kv_heads=1", "ffn=16", "vocab=10", "seq=4", "mlp=swiglu"});
  const int b = 3, s = 4, e = 2;
  // per block and token: 6h + 2kv + 3f (+ heads·seq) = 48 + 8 + 48 (+ 8)
  const std::uint64_t block_dense = 48 + 8 + 48 + 8, block_flash = 48 + 8 + 48;
  const std::uint64_t head = 2 * 8 * e + 4 * 10;
  EXPECT_EQ(m.activation_bytes(b, s, e, false, false), b * s * (2 * block_dense * e + head));
  EXPECT_EQ(m.activation_bytes(b, s, e, false, true), b * s * (2 * block_flash * e + head));
  EXPECT_EQ(m.activation_bytes(b, s, e, true, false), b * s * ((2 * 8 + block_dense) * e + head));
}

// One source of truth: for strata's own models in fp32 with dense attention the planner's
// activation bytes are what a constructed model::GPT allocates, with and without recomputation.
TEST(ModelShapes, StrataModelsPriceTheActivationsTheModelAllocates) {
  for (const char* name : {"tiny", "small", "gpt2-124m", "llama-tiny", "llama-small"})
    for (bool recompute : {false, true}) {
      SCOPED_TRACE(std::string(name) + (recompute ? " recomputed" : " kept"));
      const ModelShape m = ModelShape::preset(name);
      const int b = 2, s = 48;
      EXPECT_EQ(m.activation_bytes(b, s, 4, recompute, false),
                model::make_model(*m.gpt, b, s, recompute)->activation_bytes());
    }
  // strata's Llama presets are priced from the runtime's layout, with its shape.
  const ModelShape llama = ModelShape::preset("llama-small");
  const model::GPTConfig config = model::GPTConfig::preset("llama-small");
  EXPECT_EQ(llama.num_params(), config.num_params());
  EXPECT_FALSE(llama.tied_head);
  EXPECT_EQ(llama.mlp, Mlp::SwiGlu);
  EXPECT_EQ(llama.kv_heads, config.kv_heads());
  const ModelShape small = ModelShape::preset("small");
  EXPECT_LT(small.activation_bytes(2, 48, 4, true, false), small.activation_bytes(2, 48, 4, false, false));
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
