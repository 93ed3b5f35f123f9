// A pipeline stage's model (make_stage_model) holds activations for its part of the walk only:
// two stages driven by hand, the residual stream and its gradient copied between them, give
// the whole model's loss and gradients bit for bit, with and without recomputation, for GPT-2
// and Llama; a stage refuses the residual stream outside its layers and allocates less.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/rng.hpp"
#include "model/init.hpp"
#include "model/model.hpp"

namespace strata::model {
namespace {

constexpr int kB = 2, kT = 16;

struct Run {
  float loss = 0;
  std::vector<float> grads;
};

// Blocks [0, 1) and the embeddings on the first stage, [1, 3), the final norm and the head on
// the last, each stage's model holding its own part's activations.
Run run_two_stages(const ModelConfig& c, const std::vector<float>& params, const std::vector<std::int32_t>& tokens,
                   const std::vector<std::int32_t>& targets, bool recompute) {
  const ParamLayout layout(c);
  const auto p = [&](int unit) { return params.data() + layout.units()[unit].offset; };
  Run r{0, std::vector<float>(layout.total_floats(), 0.f)};
  const auto g = [&](int unit) { return r.grads.data() + layout.units()[unit].offset; };
  const auto a = make_stage_model(c, {0, 1, true, false}, kB, kT, recompute);
  const auto b = make_stage_model(c, {1, 3, false, true}, kB, kT, recompute);
  const std::size_t stream = static_cast<std::size_t>(kB) * kT * c.n_embd;
  a->embed_forward(p(layout.embeddings_unit()), tokens.data());
  a->block_forward(0, p(layout.block_unit(0)));
  std::copy_n(a->residual(1), stream, b->residual(1));
  for (int l = 1; l < 3; ++l) b->block_forward(l, p(layout.block_unit(l)));
  r.loss = b->head_forward(p(layout.final_norm_unit()), p(layout.head_unit()), targets.data());
  b->head_backward(p(layout.final_norm_unit()), p(layout.head_unit()), g(layout.final_norm_unit()),
                   g(layout.head_unit()), 1.f);
  for (int l = 2; l >= 1; --l) b->block_backward(l, p(layout.block_unit(l)), g(layout.block_unit(l)));
  std::copy_n(b->residual_grad(), stream, a->residual_grad());
  a->block_backward(0, p(layout.block_unit(0)), g(layout.block_unit(0)));
  a->embed_backward(g(layout.embeddings_unit()));
  // Outside its layers a stage holds no residual stream.
  EXPECT_THROW(a->residual(2), Error);
  EXPECT_THROW(b->residual(0), Error);
  return r;
}

void expect_stages_compute_the_whole_model(ModelConfig c) {
  c.n_layer = 3;
  const ParamLayout layout(c);
  std::vector<float> params(layout.total_floats());
  init_params(layout, params.data(), 5);
  Rng rng(5, 1);
  std::vector<std::int32_t> tokens(kB * kT), targets(kB * kT);
  for (int i = 0; i < kB * kT; ++i) {
    tokens[i] = static_cast<std::int32_t>(rng.below(c.vocab_size));
    targets[i] = static_cast<std::int32_t>(rng.below(c.vocab_size));
  }
  const auto whole = make_model(c, kB, kT);
  std::vector<float> grads(layout.total_floats(), 0.f);
  ArenaAccess access(layout, params.data(), grads.data());
  const float loss = whole->forward_backward(access, tokens.data(), targets.data(), 1.f);
  for (bool recompute : {false, true}) {
    const Run staged = run_two_stages(c, params, tokens, targets, recompute);
    EXPECT_EQ(staged.loss, loss) << "recompute " << recompute;
    EXPECT_EQ(0, std::memcmp(staged.grads.data(), grads.data(), grads.size() * sizeof(float)))
        << "recompute " << recompute;
    // Each stage allocates less than the whole model, the two together more (each its own
    // input or gradient buffers).
    const std::uint64_t all = activation_bytes(c, kB, kT, recompute);
    const std::uint64_t first = stage_activation_bytes(c, {0, 1, true, false}, kB, kT, recompute);
    const std::uint64_t last = stage_activation_bytes(c, {1, 3, false, true}, kB, kT, recompute);
    EXPECT_LT(first, all);
    EXPECT_LT(last, all);
    EXPECT_GT(first + last, all);
    EXPECT_EQ(stage_activation_bytes(c, whole_model(c), kB, kT, recompute), all);
  }
  // A stage model refuses a range that is not a part of the model's blocks.
  EXPECT_THROW(make_stage_model(c, {1, 4, false, true}, kB, kT), Error);
  EXPECT_THROW(make_stage_model(c, {0, 1, false, false}, kB, kT), Error);
}

TEST(StageModel, TwoStagesOfGpt2ComputeTheWholeModelsLossAndGradientsBitForBit) {
  expect_stages_compute_the_whole_model(ModelConfig::preset("tiny"));
}

TEST(StageModel, TwoStagesOfLlamaComputeTheWholeModelsLossAndGradientsBitForBit) {
  expect_stages_compute_the_whole_model(ModelConfig::preset("llama-tiny"));
}

}  // namespace
}  // namespace strata::model
