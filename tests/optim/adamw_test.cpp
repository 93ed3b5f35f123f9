#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/cpu.hpp"
#include "base/error.hpp"
#include "model/layout.hpp"
#include "optim/adamw.hpp"

using namespace strata;
using namespace strata::optim;

namespace {

std::vector<Isa> supported_isas() {
  std::vector<Isa> out{Isa::Scalar};
  if (static_cast<int>(detected_isa()) >= static_cast<int>(Isa::Avx2)) out.push_back(Isa::Avx2);
  if (detected_isa() == Isa::Avx512) out.push_back(Isa::Avx512);
  return out;
}

std::vector<float> random_vector(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct State {
  std::vector<float> p, m, v;
  explicit State(std::size_t n, unsigned seed) : p(random_vector(n, seed)), m(n), v(n) {
    auto mm = random_vector(n, seed + 1, 0.01f);
    auto vv = random_vector(n, seed + 2, 0.01f);
    for (std::size_t i = 0; i < n; ++i) {
      m[i] = mm[i];
      v[i] = vv[i] * vv[i];
    }
  }
  bool operator==(const State& o) const {
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    return same(p, o.p) && same(m, o.m) && same(v, o.v);
  }
};

// The textbook AdamW step in float64.
void reference_step(double& p, double g, double& m, double& v, const AdamWConfig& hp, double lr, double wd,
                    std::int64_t step, double grad_scale) {
  g *= grad_scale;
  m = hp.beta1 * m + (1.0 - hp.beta1) * g;
  v = hp.beta2 * v + (1.0 - hp.beta2) * g * g;
  const double m_hat = m / (1.0 - std::pow(double(hp.beta1), double(step)));
  const double v_hat = v / (1.0 - std::pow(double(hp.beta2), double(step)));
  p -= lr * (m_hat / (std::sqrt(v_hat) + hp.eps) + wd * p);
}

}  // namespace

TEST(AdamW, EveryInstructionSetMatchesAFloat64ReferenceStepByStep) {
  const std::size_t n = 1037;  // not a multiple of any vector width
  AdamWConfig hp;
  const float lr = 3e-3f, wd = 0.1f, grad_scale = 0.7f;
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(std::string(isa_name(isa)));
    State s(n, 11);
    for (std::int64_t step = 1; step <= 8; ++step) {
      auto g = random_vector(n, 100 + static_cast<unsigned>(step), 0.5f);
      std::vector<double> p(s.p.begin(), s.p.end()), m(s.m.begin(), s.m.end()), v(s.v.begin(), s.v.end());
      std::vector<float> p_before = s.p;
      detail::adamw_update_isa(isa, s.p.data(), g.data(), s.m.data(), s.v.data(), n, hp, lr, wd, step, grad_scale);
      const double bc1 = 1.0 - std::pow(double(hp.beta1), double(step));
      const double bc2 = 1.0 - std::pow(double(hp.beta2), double(step));
      for (std::size_t i = 0; i < n; ++i) {
        const double m_terms = std::abs(hp.beta1 * m[i]) + std::abs((1.0 - hp.beta1) * g[i] * grad_scale);
        reference_step(p[i], g[i], m[i], v[i], hp, lr, wd, step, grad_scale);
        // Bounds from a few float roundings of each operation: m may cancel, so its error is
        // relative to its terms; p's error adds the propagated m error and a few roundings of p.
        const double m_tol = 1e-6 * m_terms + 1e-30;
        const double denom = std::sqrt(v[i] / bc2) + hp.eps;
        const double u = (m[i] / bc1) / denom;
        const double p_tol = 4.0 * std::ldexp(1.0, std::ilogb(std::abs(p_before[i])) - 23) +
                             lr * (m_tol / bc1 / denom + 1e-5 * std::abs(u) + 1e-6 * wd * std::abs(p[i]));
        ASSERT_NEAR(s.m[i], m[i], m_tol) << "element " << i << " step " << step;
        ASSERT_NEAR(s.v[i], v[i], 1e-6 * std::abs(v[i]) + 1e-30) << "element " << i << " step " << step;
        ASSERT_NEAR(s.p[i], p[i], p_tol) << "element " << i << " step " << step;
      }
    }
  }
}

TEST(AdamW, AllInstructionSetsGiveIdenticalBits) {
  const std::size_t n = 100003;
  AdamWConfig hp;
  State expected(n, 5);
  auto g = random_vector(n, 6);
  detail::adamw_update_isa(Isa::Scalar, expected.p.data(), g.data(), expected.m.data(), expected.v.data(), n, hp,
                           1e-3f, 0.1f, 3, 0.25f);
  for (Isa isa : supported_isas()) {
    State s(n, 5);
    detail::adamw_update_isa(isa, s.p.data(), g.data(), s.m.data(), s.v.data(), n, hp, 1e-3f, 0.1f, 3, 0.25f);
    EXPECT_TRUE(s == expected) << isa_name(isa);
  }
}

TEST(AdamW, GradScaleEqualsPrescaledGradients) {
  const std::size_t n = 777;
  AdamWConfig hp;
  auto g = random_vector(n, 9);
  std::vector<float> g_scaled(n);
  for (std::size_t i = 0; i < n; ++i) g_scaled[i] = g[i] * 0.3f;
  State a(n, 1), b(n, 1);
  adamw_update(a.p.data(), g.data(), a.m.data(), a.v.data(), n, hp, 1e-3f, 0.1f, 2, 0.3f);
  adamw_update(b.p.data(), g_scaled.data(), b.m.data(), b.v.data(), n, hp, 1e-3f, 0.1f, 2, 1.0f);
  EXPECT_TRUE(a == b);
}

// The sharding engine updates each rank's slice on its own; any split must give the bits of
// one whole-arena update, whatever the thread count.
TEST(AdamW, AnySplitOfTheArenaGivesTheWholeArenaBits) {
  model::ParamLayout layout(model::ModelConfig::preset("tiny"));
  const std::size_t n = layout.total_floats();
  AdamWConfig hp;
  auto g = random_vector(n, 21);
  State whole(n, 20);
  adamw_update_range(layout, 0, n, whole.p.data(), g.data(), whole.m.data(), whole.v.data(), hp, 2e-3f, 4, 0.9f);

  std::mt19937 rng(7);
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<std::size_t> cuts{0, n};
    const int pieces = 1 + trial * 3;
    for (int k = 1; k < pieces; ++k) cuts.push_back(std::uniform_int_distribution<std::size_t>(0, n)(rng));
    std::sort(cuts.begin(), cuts.end());
    omp_set_num_threads(1 + trial % 2);
    State split(n, 20);
    for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
      const std::size_t b = cuts[k], e = cuts[k + 1];
      adamw_update_range(layout, b, e, split.p.data() + b, g.data() + b, split.m.data() + b, split.v.data() + b, hp,
                         2e-3f, 4, 0.9f);
    }
    EXPECT_TRUE(split == whole) << "trial " << trial;
  }
  omp_set_num_threads(2);
}

TEST(AdamW, WeightDecayOnlyWhereTheLayoutSays) {
  model::ParamLayout layout(model::ModelConfig::preset("tiny"));
  const std::size_t n = layout.total_floats();
  AdamWConfig hp;
  hp.weight_decay = 0.5f;
  const float lr = 0.1f;
  // Zero gradients and moments: the only change left is the decay term.
  std::vector<float> p(n, 2.0f), g(n, 0.0f), m(n, 0.0f), v(n, 0.0f);
  adamw_update_range(layout, 0, n, p.data(), g.data(), m.data(), v.data(), hp, lr, 1, 1.0f);
  std::vector<int> seen(n, 0);
  for (const auto& t : layout.tensors()) {
    const float expected = t.decay ? 2.0f - lr * (hp.weight_decay * 2.0f) : 2.0f;
    for (std::size_t i = t.offset; i < t.offset + t.numel; ++i) {
      ASSERT_EQ(p[i], expected) << t.name;
      seen[i] = 1;
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    if (!seen[i]) {
      ASSERT_EQ(p[i], 2.0f) << "padding at " << i;
    }
  EXPECT_TRUE(layout.find("wte.weight").decay);
  EXPECT_TRUE(layout.find("h.0.mlp.c_fc.weight").decay);
  EXPECT_FALSE(layout.find("h.1.ln_2.weight").decay);
  EXPECT_FALSE(layout.find("h.1.attn.c_proj.bias").decay);
}

TEST(AdamW, RefusesStepZeroAndBadHyperparameters) {
  float x = 0.0f, m = 0.0f, v = 0.0f;
  EXPECT_THROW(adamw_update(&x, &x, &m, &v, 1, AdamWConfig{}, 1e-3f, 0.0f, 0, 1.0f), Error);
  AdamWConfig hp;
  hp.beta2 = 1.0f;
  try {
    hp.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adamw.beta2"), std::string::npos) << e.what();
  }
  hp = {};
  hp.eps = 0.0f;
  EXPECT_THROW(hp.validate(), Error);
  hp = {};
  hp.grad_clip = -1.0f;
  EXPECT_THROW(hp.validate(), Error);
  EXPECT_NO_THROW(AdamWConfig{}.validate());
}

TEST(SumSquares, MatchesFloat64AndIsIdenticalAcrossIsasAndThreadCounts) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8193}, std::size_t{250001}}) {
    auto x = random_vector(n, static_cast<unsigned>(n) + 3, 3.0f);
    long double ref = 0.0L;
    for (float f : x) ref += static_cast<long double>(f) * f;
    const double got = sum_squares(x.data(), n);
    EXPECT_NEAR(got, static_cast<double>(ref), 1e-13 * static_cast<double>(ref)) << n;
    for (Isa isa : supported_isas()) {
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        EXPECT_EQ(detail::sum_squares_isa(isa, x.data(), n), got) << isa_name(isa) << " threads " << threads;
      }
    }
  }
  omp_set_num_threads(2);
}

TEST(LrSchedule, WarmupThenCosineToMinimum) {
  LrSchedule s{1e-3f, 1e-4f, 10, 110};
  EXPECT_FLOAT_EQ(s.at(1), 1e-4f);
  EXPECT_FLOAT_EQ(s.at(5), 5e-4f);
  EXPECT_FLOAT_EQ(s.at(10), 1e-3f);
  EXPECT_FLOAT_EQ(s.at(60), 0.5f * (1e-3f + 1e-4f));  // half-way through the cosine
  // A quarter of the way: min + (max - min) * (1 + cos(pi/4)) / 2.
  EXPECT_FLOAT_EQ(s.at(35), static_cast<float>(1e-4 + 9e-4 * 0.5 * (1.0 + std::sqrt(0.5))));
  EXPECT_FLOAT_EQ(s.at(110), 1e-4f);
  EXPECT_FLOAT_EQ(s.at(500), 1e-4f);
  for (std::int64_t t = 11; t <= 110; ++t) EXPECT_LE(s.at(t), s.at(t - 1)) << t;
  EXPECT_THROW(s.at(0), Error);

  LrSchedule no_warmup{1e-3f, 0.0f, 0, 100};
  EXPECT_LT(no_warmup.at(1), 1e-3f);
  EXPECT_GT(no_warmup.at(1), 0.999e-3f);
}

TEST(LrSchedule, ValidateNamesTheField) {
  LrSchedule s{1e-4f, 1e-3f, 0, 10};
  try {
    s.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lr_schedule.min_lr"), std::string::npos) << e.what();
  }
  EXPECT_THROW((LrSchedule{1e-3f, 0.0f, -1, 10}.validate()), Error);
  EXPECT_THROW((LrSchedule{1e-3f, 0.0f, 0, 0}.validate()), Error);
  EXPECT_NO_THROW((LrSchedule{1e-3f, 0.0f, 5, 10}.validate()));
}
