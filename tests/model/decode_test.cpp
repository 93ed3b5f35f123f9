// The KV-cache decoder against the full forward over the prefix (both families, grouped-query
// attention included), its resets and refusals; text generation's determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/rng.hpp"
#include "model/decoder.hpp"
#include "model/init.hpp"
#include "model/model.hpp"
#include "model/sampling.hpp"

namespace strata::model {
namespace {

ModelConfig gpt_config() {
  ModelConfig c = ModelConfig::preset("tiny");
  c.seq_len = 16;
  c.vocab_size = 250;  // inside the padding of 256
  return c;
}

ModelConfig llama_config(int n_kv_head) {
  ModelConfig c = ModelConfig::preset("llama-tiny");  // 4 query heads
  c.seq_len = 16;
  c.vocab_size = 250;
  c.n_kv_head = n_kv_head;
  c.ffn_hidden = 72;
  c.rope_theta = 500;
  return c;
}

// Initialized parameters made larger and less uniform, so attention weighs positions unevenly.
std::vector<float> test_params(const ModelConfig& config, std::uint64_t seed = 5) {
  const ParamLayout layout(config);
  std::vector<float> params(layout.total_floats());
  init_params(layout, params.data(), seed);
  Rng rng(seed, 1);
  for (auto& t : layout.tensors())
    for (std::size_t i = 0; i < t.numel; ++i)
      params[t.offset + i] += static_cast<float>((t.shape.size() == 1 ? 0.1 : 0.05) * rng.normal());
  return params;
}

std::vector<std::int32_t> test_tokens(const ModelConfig& config, int n) {
  Rng rng(77);
  std::vector<std::int32_t> tokens(n);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.below(config.vocab_size));
  return tokens;
}

// Step by step, the decoder's logits at every position equal those of one full forward over the
// whole prefix (whose row t sees positions 0..t only). They differ by fp32 rounding alone: the
// decoder's one-row products and its attention sum in another order than the prefix's GEMMs:
// at most 7e-7 here (about 6 ulp of these logits of up to 1.7); the bound, 1e-5 absolute +
// 1e-5 relative, leaves room for other instruction sets and thread counts and is still far
// below an error of substance (rotating at the previous position moved them by 4e-3).
void expect_cache_matches_prefix(const ModelConfig& config) {
  const int T = config.seq_len;
  const std::vector<float> params = test_params(config);
  const std::vector<std::int32_t> tokens = test_tokens(config, T);
  auto full = make_model(config, 1, T);
  ArenaAccess access(full->layout(), params.data(), nullptr);
  full->forward(access, tokens.data(), tokens.data());

  auto decoder = make_decoder(config, T);
  const int V = config.vocab_size, Vp = config.padded_vocab_size;
  for (int t = 0; t < T; ++t) {
    ASSERT_EQ(decoder->position(), t);
    const float* got = decoder->step(params.data(), tokens[t]);
    const float* want = full->logits() + static_cast<std::size_t>(t) * Vp;
    for (int v = 0; v < V; ++v) {
      const double excess = std::abs(got[v] - want[v]) - (1e-5 + 1e-5 * std::abs(want[v]));
      ASSERT_LE(excess, 0) << "position " << t << ", logit " << v << ": " << got[v] << " vs " << want[v];
    }
  }
  EXPECT_EQ(decoder->position(), T);
}

TEST(Decoder, GptCacheLogitsEqualFullPrefixLogits) { expect_cache_matches_prefix(gpt_config()); }
TEST(Decoder, LlamaGroupedQueryCacheLogitsEqualFullPrefixLogits) { expect_cache_matches_prefix(llama_config(2)); }
TEST(Decoder, LlamaMultiHeadCacheLogitsEqualFullPrefixLogits) { expect_cache_matches_prefix(llama_config(0)); }

TEST(Decoder, ResetStartsANewSequenceBitForBit) {
  for (const ModelConfig& config : {gpt_config(), llama_config(2)}) {
    const std::vector<float> params = test_params(config);
    const std::vector<std::int32_t> tokens = test_tokens(config, 5);
    auto decoder = make_decoder(config, 8);
    std::vector<float> first;
    for (std::int32_t t : tokens) {
      const float* logits = decoder->step(params.data(), t);
      first.assign(logits, logits + config.padded_vocab_size);
    }
    decoder->reset();
    EXPECT_EQ(decoder->position(), 0);
    const float* again = nullptr;
    for (std::int32_t t : tokens) again = decoder->step(params.data(), t);
    EXPECT_TRUE(std::equal(first.begin(), first.end(), again)) << family_name(config.family);
  }
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Decoder, RefusesPositionsPastMaxLenAndBadTokens) {
  for (const ModelConfig& config : {gpt_config(), llama_config(2)}) {
    const std::vector<float> params = test_params(config);
    expect_error([&] { make_decoder(config, config.seq_len + 1); }, "max_len = 17: must be in [1, model.seq_len = 16]");
    expect_error([&] { make_decoder(config, 0); }, "max_len = 0");
    auto decoder = make_decoder(config, 2);
    expect_error([&] { decoder->step(params.data(), config.vocab_size); }, "token id 250");
    decoder->step(params.data(), 1);
    decoder->step(params.data(), 2);
    expect_error([&] { decoder->step(params.data(), 3); }, "position 2 is past max_len = 2");
  }
}

TEST(Generate, IsDeterministicForASeedAndDiffersForAnother) {
  for (const ModelConfig& config : {gpt_config(), llama_config(2)}) {
    const std::vector<float> params = test_params(config);
    const std::vector<std::int32_t> prompt = test_tokens(config, 3);
    auto decoder = make_decoder(config, config.seq_len);
    const SamplingOptions options{1.f, 0, 1.f};
    const auto a = generate(*decoder, params.data(), prompt, 14, config.vocab_size, options, 1);
    const auto b = generate(*decoder, params.data(), prompt, 14, config.vocab_size, options, 1);
    const auto c = generate(*decoder, params.data(), prompt, 14, config.vocab_size, options, 2);
    EXPECT_EQ(a.size(), 14u);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    // Greedy follows the argmax of the full forward at every position.
    const auto greedy = generate(*decoder, params.data(), prompt, 14, config.vocab_size, {0.f, 0, 1.f}, 1);
    std::vector<std::int32_t> sequence(prompt.begin(), prompt.end());
    sequence.insert(sequence.end(), greedy.begin(), greedy.end() - 1);
    auto full = make_model(config, 1, config.seq_len);
    ArenaAccess access(full->layout(), params.data(), nullptr);
    full->forward(access, sequence.data(), sequence.data());
    for (std::size_t i = 0; i < greedy.size(); ++i) {
      const float* row = full->logits() + (prompt.size() - 1 + i) * config.padded_vocab_size;
      EXPECT_EQ(greedy[i], std::max_element(row, row + config.vocab_size) - row) << "token " << i;
    }
  }
}

TEST(Generate, RefusesWhatDoesNotFit) {
  const ModelConfig config = gpt_config();
  const std::vector<float> params = test_params(config);
  auto decoder = make_decoder(config, 8);
  const std::vector<std::int32_t> prompt = test_tokens(config, 4);
  // 4 prompt positions + 4 fed back: fits exactly; one more does not.
  EXPECT_EQ(generate(*decoder, params.data(), prompt, 5, config.vocab_size, {}, 1).size(), 5u);
  expect_error([&] { generate(*decoder, params.data(), prompt, 6, config.vocab_size, {}, 1); },
               "max_new_tokens = 6 need 9 positions; the decoder has max_len = 8");
  expect_error([&] { generate(*decoder, params.data(), {}, 1, config.vocab_size, {}, 1); }, "prompt has no tokens");
  expect_error([&] { generate(*decoder, params.data(), prompt, 1, 251, {}, 1); }, "vocab = 251");
}

}  // namespace
}  // namespace strata::model
