// Token choice: greedy, temperature, top-k and top-p on small hand-made logits, over a fine
// grid of uniform numbers (so every frequency is a probability to within the grid's step).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "model/sampling.hpp"

namespace strata::model {
namespace {

constexpr int kGrid = 100000;

// How often each token comes out as u sweeps [0, 1) in kGrid even steps.
std::map<std::int32_t, double> frequencies(const std::vector<float>& logits, int vocab, const SamplingOptions& o) {
  std::map<std::int32_t, double> f;
  for (int i = 0; i < kGrid; ++i) f[sample_token(logits.data(), vocab, o, (i + 0.5) / kGrid)] += 1.0 / kGrid;
  return f;
}

// softmax(logits / temperature) over `ids`, renormalized over them.
std::map<std::int32_t, double> softmax_over(const std::vector<float>& logits, const std::vector<std::int32_t>& ids,
                                            double temperature) {
  std::map<std::int32_t, double> p;
  double total = 0;
  for (std::int32_t i : ids) total += p[i] = std::exp(logits[i] / temperature);
  for (auto& [id, q] : p) q /= total;
  return p;
}

void expect_distribution(const std::map<std::int32_t, double>& got, const std::map<std::int32_t, double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (auto& [id, p] : want) {
    ASSERT_TRUE(got.count(id)) << "token " << id << " never drawn";
    EXPECT_NEAR(got.at(id), p, 2.0 / kGrid) << "token " << id;
  }
}

// Id 1 is largest; 2 and 4 tie; 5 is past the vocabulary (padding) and would win if it counted.
const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.5f, 2.0f, 9.0f};
constexpr int kVocab = 5;

TEST(Sampling, GreedyIsTheArgmaxOfTheVocabulary) {
  for (double u : {0.0, 0.3, 0.999}) {
    EXPECT_EQ(sample_token(kLogits.data(), kVocab, {0.f, 0, 1.f}, u), 1);
    EXPECT_EQ(sample_token(kLogits.data(), kVocab, {0.7f, 1, 1.f}, u), 1);     // top-k 1
    EXPECT_EQ(sample_token(kLogits.data(), kVocab, {1.0f, 0, 1e-6f}, u), 1);   // top-p tiny
  }
  const std::vector<float> tie = {0.f, 2.f, 2.f};
  EXPECT_EQ(sample_token(tie.data(), 3, {0.f, 0, 1.f}, 0.5), 1);  // ties: the lower id
}

TEST(Sampling, TemperatureScalesTheSoftmax) {
  expect_distribution(frequencies(kLogits, kVocab, {1.f, 0, 1.f}), softmax_over(kLogits, {0, 1, 2, 3, 4}, 1.0));
  expect_distribution(frequencies(kLogits, kVocab, {2.5f, 0, 1.f}), softmax_over(kLogits, {0, 1, 2, 3, 4}, 2.5));
}

TEST(Sampling, TopKKeepsTheKLargestTiesByLowerId) {
  expect_distribution(frequencies(kLogits, kVocab, {1.f, 3, 1.f}), softmax_over(kLogits, {1, 2, 4}, 1.0));
  expect_distribution(frequencies(kLogits, kVocab, {1.f, 2, 1.f}), softmax_over(kLogits, {1, 2}, 1.0));
  expect_distribution(frequencies(kLogits, kVocab, {1.f, 50, 1.f}), softmax_over(kLogits, {0, 1, 2, 3, 4}, 1.0));
}

TEST(Sampling, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1.
  const std::vector<float> logits = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  expect_distribution(frequencies(logits, 4, {1.f, 0, 0.45f}), {{1, 1.0}});
  expect_distribution(frequencies(logits, 4, {1.f, 0, 0.75f}), softmax_over(logits, {1, 3}, 1.0));
  expect_distribution(frequencies(logits, 4, {1.f, 0, 0.9f}), softmax_over(logits, {1, 3, 0}, 1.0));
  // After top-k 2 the nucleus is taken over the renormalized pair: 0.625, 0.375.
  expect_distribution(frequencies(logits, 4, {1.f, 2, 0.6f}), {{1, 1.0}});
  expect_distribution(frequencies(logits, 4, {1.f, 2, 0.7f}), softmax_over(logits, {1, 3}, 1.0));
}

TEST(Sampling, UniformsDependOnSeedAndIndexAlone) {
  EXPECT_EQ(sampling_uniform(7, 3), sampling_uniform(7, 3));
  EXPECT_NE(sampling_uniform(7, 3), sampling_uniform(8, 3));
  EXPECT_NE(sampling_uniform(7, 3), sampling_uniform(7, 4));
  for (std::uint64_t i = 0; i < 1000; ++i) {
    const double u = sampling_uniform(1, i);
    EXPECT_TRUE(u >= 0 && u < 1) << u;
  }
}

TEST(Sampling, RefusesBadOptionsNamingThem) {
  auto message = [](SamplingOptions o) {
    try {
      o.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message({-0.5f, 0, 1.f}), "--temperature = -0.5: must be finite and >= 0");
  EXPECT_EQ(message({1.f, -1, 1.f}), "--top-k = -1: must be >= 0 (0: off)");
  EXPECT_EQ(message({1.f, 0, 0.f}), "--top-p = 0: must be in (0, 1]");
  EXPECT_EQ(message({1.f, 0, 1.5f}), "--top-p = 1.5: must be in (0, 1]");
  EXPECT_EQ(message({0.f, 0, 1.f}), "accepted");
}

}  // namespace
}  // namespace strata::model
