// Llama: gradients against float64 finite differences of a float64 reference model, the
// logits against that reference, the unit walk, thread counts, initialisation and the
// configuration's refusals.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/rng.hpp"
#include "model/init.hpp"
#include "model/llama.hpp"
#include "model/model.hpp"
#include "model/recompute_check.hpp"
#include "model/recording_access.hpp"
#include "model/reference.hpp"

namespace strata::model {
namespace {

using ref::Vec;

// `llama-tiny` (two query heads per K/V head) with an odd vocabulary inside its padding, a
// non-default rotary base and an MLP width of no power of two.
ModelConfig test_config() {
  ModelConfig c = ModelConfig::preset("llama-tiny");
  c.n_layer = 2;
  c.vocab_size = 250;
  c.ffn_hidden = 72;
  c.rope_theta = 500;
  return c;
}

struct Problem {
  static constexpr int B = 2;
  int T;
  ModelConfig config;
  ParamLayout layout{config};
  std::vector<float> params;
  std::vector<std::int32_t> tokens, targets;

  explicit Problem(int seq = 12, ModelConfig cfg = test_config(), std::uint64_t seed = 11)
      : T(seq), config(cfg), params(layout.total_floats()), tokens(B * T), targets(B * T) {
    init_params(layout, params.data(), seed);
    // Norm gains away from one and larger weights, so each term of every gradient matters.
    Rng rng(seed, 1);
    for (auto& t : layout.tensors())
      for (std::size_t i = 0; i < t.numel; ++i)
        params[t.offset + i] += static_cast<float>((t.shape.size() == 1 ? 0.1 : 0.05) * rng.normal());
    for (int i = 0; i < B * T; ++i) {
      tokens[i] = static_cast<std::int32_t>(rng.below(config.vocab_size));
      targets[i] = static_cast<std::int32_t>(rng.below(config.vocab_size));
    }
  }

  float run(Llama& model, std::vector<float>& grads, float grad_scale = 1.f) {
    ArenaAccess access(layout, params.data(), grads.data());
    return model.forward_backward(access, tokens.data(), targets.data(), grad_scale);
  }
  std::vector<float> zero_grads() const { return std::vector<float>(layout.total_floats(), 0.f); }
};

TEST(Llama, MatchesFloat64ReferenceAndFiniteDifferences) {
  Problem pb;
  Llama model(pb.config, Problem::B, pb.T);
  auto grads = pb.zero_grads();
  const float loss = pb.run(model, grads);

  Vec pd(pb.params.begin(), pb.params.end()), ref_logits;
  const double ref_loss = ref::llama_loss(pb.layout, pd.data(), pb.tokens.data(), pb.targets.data(), Problem::B,
                                          pb.T, &ref_logits);
  EXPECT_NEAR(loss, ref_loss, 2e-6 * ref_loss);
  ref::expect_close(model.logits(), ref_logits.data(), ref_logits.size(), 1e-4, 2e-5, "logits");

  auto f = [&] {
    return ref::llama_loss(pb.layout, pd.data(), pb.tokens.data(), pb.targets.data(), Problem::B, pb.T);
  };
  Rng rng(5);
  for (auto& t : pb.layout.tensors()) {
    SCOPED_TRACE(t.name);
    const float* g = grads.data() + t.offset;
    double* p = pd.data() + t.offset;
    double g_max = 0;
    for (std::size_t i = 0; i < t.numel; ++i) g_max = std::max(g_max, std::abs(static_cast<double>(g[i])));
    ASSERT_GT(g_max, 0) << "no gradient reached " << t.name;

    // The whole tensor at once: the derivative along a random direction.
    Vec dir(t.numel);
    double analytic = 0, dir_norm = 0;
    for (std::size_t i = 0; i < t.numel; ++i) {
      dir[i] = rng.normal();
      analytic += g[i] * dir[i];
      dir_norm += dir[i] * dir[i];
    }
    const double h = 1e-4;
    for (std::size_t i = 0; i < t.numel; ++i) p[i] += h * dir[i];
    const double up = f();
    for (std::size_t i = 0; i < t.numel; ++i) p[i] -= 2 * h * dir[i];
    const double down = f();
    for (std::size_t i = 0; i < t.numel; ++i) p[i] += h * dir[i];
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic, numeric, 1e-3 * std::abs(numeric) + 1e-5 * g_max * std::sqrt(dir_norm))
        << "directional derivative";

    // And a few single elements.
    for (int s = 0; s < 3; ++s) {
      const std::size_t i = rng.below(t.numel);
      const double fd = ref::central_diff(f, p[i], 1e-4);
      EXPECT_NEAR(g[i], fd, 1e-3 * std::abs(fd) + 1e-4 * g_max) << "element " << i;
    }
  }
  // Rows past the vocabulary take no part in the loss, in the embedding as in the head.
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    const TensorInfo& t = pb.layout.find(name);
    for (std::size_t i = static_cast<std::size_t>(pb.config.vocab_size) * pb.config.n_embd; i < t.numel; ++i)
      ASSERT_EQ(grads[t.offset + i], 0.f) << "padded row of " << name;
  }
}

TEST(Llama, ForwardBackwardFollowsTheUnitOrderAndReadsOnlyAcquiredUnits) {
  Problem pb;
  Llama model(pb.config, Problem::B, pb.T);
  auto grads = pb.zero_grads();
  const float loss = pb.run(model, grads);

  RecordingAccess rec(pb.layout, pb.params.data());
  const float rec_loss = model.forward_backward(rec, pb.tokens.data(), pb.targets.data(), 1.f);
  EXPECT_EQ(rec.events, unit_event_order(pb.config));
  EXPECT_EQ(rec.events, model.unit_event_order());
  rec.expect_no_writes_after_ready();
  EXPECT_EQ(loss, rec_loss);
  EXPECT_EQ(0, std::memcmp(grads.data(), rec.all_grads().data(), grads.size() * sizeof(float)));

  // The embedding is released before the first block and never acquired in backward; the
  // head is a unit of its own after the final norm.
  const int L = pb.config.n_layer;
  using K = UnitEvent;
  EXPECT_EQ(rec.events[1], (UnitEvent{K::Release, 0, Phase::Forward}));
  EXPECT_EQ(pb.layout.head_unit(), L + 2);
  EXPECT_EQ(pb.layout.units().size(), static_cast<std::size_t>(L + 3));
  EXPECT_EQ(rec.events.size(), 2 * static_cast<std::size_t>(L) + 6 + 3 * L + 7);

  RecordingAccess fwd(pb.layout, pb.params.data());
  EXPECT_EQ(model.forward(fwd, pb.tokens.data(), pb.targets.data()), loss);
  auto order = unit_event_order(pb.config);
  order.resize(2 * L + 6);  // up to release(N, Forward)
  EXPECT_EQ(fwd.events, order);
}

// 1 and 2 threads split the batch of 2 into whole sequences; 3 threads take uneven row
// shares and synchronise around attention. All agree to rounding.
TEST(Llama, ThreadCountsAgree) {
  Problem pb(20);
  std::vector<std::vector<float>> grads;
  std::vector<float> losses;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    Llama model(pb.config, Problem::B, pb.T);
    grads.push_back(pb.zero_grads());
    losses.push_back(pb.run(model, grads.back()));
  }
  omp_set_num_threads(saved);
  for (int i : {1, 2}) {
    EXPECT_NEAR(losses[i], losses[0], 1e-6 * losses[0]);
    for (auto& t : pb.layout.tensors()) {
      double scale = 0;
      for (std::size_t j = 0; j < t.numel; ++j) scale = std::max(scale, std::abs(double(grads[0][t.offset + j])));
      const Vec want(grads[0].begin() + t.offset, grads[0].begin() + t.offset + t.numel);
      ref::expect_close(grads[i].data() + t.offset, want.data(), t.numel, 1e-5, 1e-6 * scale,
                        std::to_string(i + 1) + " threads " + t.name);
    }
  }
}

// Full activation recomputation: the same loss, logits and gradients bit for bit (grouped
// K/V heads and the untied head included), holding only each block's input besides one block's set.
TEST(Llama, RecomputationGivesTheSameLossAndGradientsBitForBit) {
  Problem pb(16);
  Problem other(16, test_config(), 12);  // a second micro-batch
  test::expect_recomputation_changes_no_bit<Llama>(pb, other);
  // Only the layers after the first drop their sets: L - 1 blocks' worth less.
  const ModelConfig& c = pb.config;
  const std::uint64_t BT = Problem::B * pb.T, C = c.n_embd, T = pb.T, NH = c.n_head;
  const std::uint64_t KV = static_cast<std::uint64_t>(c.kv_heads()) * c.head_dim(), F = c.ffn_size();
  const std::uint64_t block_set = 4 * (BT * (5 * C + 2 * KV + 3 * F + 2) + Problem::B * NH * T * T);  // res3 excepted
  EXPECT_EQ(activation_bytes(c, Problem::B, pb.T, false) - activation_bytes(c, Problem::B, pb.T, true),
            (c.n_layer - 1) * block_set);
}

TEST(Llama, RunsAreBitIdentical) {
  Problem pb;
  Llama a(pb.config, Problem::B, pb.T), b(pb.config, Problem::B, pb.T);
  auto ga = pb.zero_grads(), gb = pb.zero_grads();
  EXPECT_EQ(pb.run(a, ga), pb.run(b, gb));
  EXPECT_EQ(0, std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)));
}

TEST(Llama, InitParamsFollowsTheGpt2Scheme) {
  const ModelConfig cfg = test_config();
  ParamLayout layout(cfg);
  std::vector<float> a(layout.total_floats(), 7.f);
  init_params(layout, a.data(), 1);
  for (auto& t : layout.tensors()) {
    SCOPED_TRACE(t.name);
    std::size_t n = t.numel;
    if (t.vocab_rows) {
      n = static_cast<std::size_t>(cfg.vocab_size) * cfg.n_embd;
      for (std::size_t i = n; i < t.numel; ++i) ASSERT_EQ(a[t.offset + i], 0.f) << "padded row";
    }
    if (t.shape.size() == 1) {
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(a[t.offset + i], 1.f) << "RMSNorm gain";
      continue;
    }
    double sq = 0;
    for (std::size_t i = 0; i < n; ++i) sq += static_cast<double>(a[t.offset + i]) * a[t.offset + i];
    const bool residual = t.name.ends_with("o_proj.weight") || t.name.ends_with("down_proj.weight");
    const double want = residual ? 0.02 / std::sqrt(2.0 * cfg.n_layer) : 0.02;
    EXPECT_NEAR(std::sqrt(sq / n), want, 0.1 * want);
  }
}

TEST(Llama, ConfigRefusesWhatItCannotRun) {
  auto refusal = [](ModelConfig c) {
    try {
      ParamLayout layout(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  ModelConfig c = ModelConfig::preset("llama-tiny");
  c.n_kv_head = 3;
  EXPECT_EQ(refusal(c), "model.n_kv_head = 3 does not divide model.n_head = 4");
  c = ModelConfig::preset("llama-tiny");
  c.n_head = 64;  // head size 1: no pair to rotate
  c.n_kv_head = 64;
  EXPECT_NE(refusal(c).find("even head size"), std::string::npos) << refusal(c);
  ModelConfig gpt = ModelConfig::preset("tiny");
  gpt.n_kv_head = 1;
  EXPECT_NE(refusal(gpt).find("model.n_kv_head = 1: family gpt2"), std::string::npos) << refusal(gpt);
  EXPECT_THROW(Llama(ModelConfig::preset("tiny"), 1, 8), Error);
  // Both families take recomputation through the registry.
  EXPECT_TRUE(make_model(ModelConfig::preset("llama-tiny"), 1, 8, /*recompute=*/true)->recompute());
  EXPECT_TRUE(make_model(ModelConfig::preset("tiny"), 1, 8, /*recompute=*/true)->recompute());
}

TEST(Llama, PresetsHaveTheirPublishedSizes) {
  // Parameter counts of the Hugging Face models (untied head, no biases).
  EXPECT_EQ(ModelConfig::preset("llama2-7b").num_params(), 6738415616);
  EXPECT_EQ(ModelConfig::preset("tinyllama-1.1b").num_params(), 1100048384);
  EXPECT_EQ(ModelConfig::preset("llama2-7b").ffn_size(), 11008);
  ModelConfig derived = ModelConfig::preset("llama2-7b");
  derived.ffn_hidden = 0;  // Llama's rule gives the published width
  EXPECT_EQ(derived.ffn_size(), 11008);
  EXPECT_EQ(ParamLayout(ModelConfig::preset("llama-small")).num_params(), ModelConfig::preset("llama-small").num_params());
}

}  // namespace
}  // namespace strata::model
