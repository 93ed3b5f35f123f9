// C++ lets the compiler fuse a*b+c into one FMA (GCC's default -ffp-contract=fast), and it
// would do so in the vector paths but not in the baseline scalar path, breaking the
// bit-for-bit agreement between instruction sets. Every operation here is rounded on its own.
#pragma GCC optimize("fp-contract=off")

#include "optim/adamw.hpp"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::optim {

namespace {

// Work is cut into pieces of at most this many floats (32 KiB per array) for the threads.
constexpr std::size_t kPieceFloats = 8192;
// sum_squares reduces blocks of this many floats, then adds the block sums in order: the
// order depends on n only, not on threads or instruction set.
constexpr std::size_t kSumBlock = 8192;

// Per-update constants, computed once in double and rounded to float once.
struct Coefficients {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float inv_bias_correction1, inv_bias_correction2;
  float eps, lr, weight_decay, grad_scale;
};

Coefficients make_coefficients(const AdamWConfig& hp, float lr, float weight_decay, std::int64_t step,
                               float grad_scale) {
  if (step < 1) throw Error(fmt::format("adamw: step = {}: updates are counted from 1", step));
  const double bc1 = 1.0 - std::pow(static_cast<double>(hp.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(hp.beta2), static_cast<double>(step));
  return {hp.beta1,
          static_cast<float>(1.0 - static_cast<double>(hp.beta1)),
          hp.beta2,
          static_cast<float>(1.0 - static_cast<double>(hp.beta2)),
          static_cast<float>(1.0 / bc1),
          static_cast<float>(1.0 / bc2),
          hp.eps,
          lr,
          weight_decay,
          grad_scale};
}

// The reference sequence of operations; the vector paths below repeat it lane by lane.
void adamw_scalar(float* p, const float* g, float* m, float* v, std::size_t n, const Coefficients& c) {
  for (std::size_t i = 0; i < n; ++i) {
    const float grad = g[i] * c.grad_scale;
    const float mi = c.beta1 * m[i] + c.one_minus_beta1 * grad;
    const float vi = c.beta2 * v[i] + c.one_minus_beta2 * (grad * grad);
    const float m_hat = mi * c.inv_bias_correction1;
    const float v_hat = vi * c.inv_bias_correction2;
    const float update = m_hat / (std::sqrt(v_hat) + c.eps) + c.weight_decay * p[i];
    p[i] = p[i] - c.lr * update;
    m[i] = mi;
    v[i] = vi;
  }
}

#define STRATA_AVX512 __attribute__((target("avx512f")))
#define STRATA_AVX2 __attribute__((target("avx2")))

struct Avx512Coefficients {
  __m512 beta1, one_minus_beta1, beta2, one_minus_beta2, inv_bc1, inv_bc2, eps, lr, weight_decay, grad_scale;
};

STRATA_AVX512 __attribute__((always_inline)) inline void adamw_lanes16(__m512& p, __m512 g, __m512& m, __m512& v,
                                                                       const Avx512Coefficients& k) {
  const __m512 grad = _mm512_mul_ps(g, k.grad_scale);
  m = _mm512_add_ps(_mm512_mul_ps(k.beta1, m), _mm512_mul_ps(k.one_minus_beta1, grad));
  v = _mm512_add_ps(_mm512_mul_ps(k.beta2, v), _mm512_mul_ps(k.one_minus_beta2, _mm512_mul_ps(grad, grad)));
  const __m512 m_hat = _mm512_mul_ps(m, k.inv_bc1);
  const __m512 v_hat = _mm512_mul_ps(v, k.inv_bc2);
  // The zero-masked sqrt with a full mask is plain sqrt; the unmasked intrinsic trips GCC 12's
  // false -Wmaybe-uninitialized on _mm512_undefined_ps.
  const __m512 root = _mm512_maskz_sqrt_ps(0xFFFF, v_hat);
  const __m512 update = _mm512_add_ps(_mm512_div_ps(m_hat, _mm512_add_ps(root, k.eps)),
                                      _mm512_mul_ps(k.weight_decay, p));
  p = _mm512_sub_ps(p, _mm512_mul_ps(k.lr, update));
}

STRATA_AVX512 void adamw_avx512(float* p, const float* g, float* m, float* v, std::size_t n,
                                const Coefficients& c) {
  const Avx512Coefficients k{_mm512_set1_ps(c.beta1),        _mm512_set1_ps(c.one_minus_beta1),
                             _mm512_set1_ps(c.beta2),        _mm512_set1_ps(c.one_minus_beta2),
                             _mm512_set1_ps(c.inv_bias_correction1), _mm512_set1_ps(c.inv_bias_correction2),
                             _mm512_set1_ps(c.eps),          _mm512_set1_ps(c.lr),
                             _mm512_set1_ps(c.weight_decay), _mm512_set1_ps(c.grad_scale)};
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 P = _mm512_loadu_ps(p + i), M = _mm512_loadu_ps(m + i), V = _mm512_loadu_ps(v + i);
    adamw_lanes16(P, _mm512_loadu_ps(g + i), M, V, k);
    _mm512_storeu_ps(p + i, P);
    _mm512_storeu_ps(m + i, M);
    _mm512_storeu_ps(v + i, V);
  }
  if (i < n) {  // the tail runs the same arithmetic on masked lanes
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    __m512 P = _mm512_maskz_loadu_ps(mask, p + i), M = _mm512_maskz_loadu_ps(mask, m + i),
           V = _mm512_maskz_loadu_ps(mask, v + i);
    adamw_lanes16(P, _mm512_maskz_loadu_ps(mask, g + i), M, V, k);
    _mm512_mask_storeu_ps(p + i, mask, P);
    _mm512_mask_storeu_ps(m + i, mask, M);
    _mm512_mask_storeu_ps(v + i, mask, V);
  }
}

struct Avx2Coefficients {
  __m256 beta1, one_minus_beta1, beta2, one_minus_beta2, inv_bc1, inv_bc2, eps, lr, weight_decay, grad_scale;
};

STRATA_AVX2 __attribute__((always_inline)) inline void adamw_lanes8(__m256& p, __m256 g, __m256& m, __m256& v,
                                                                    const Avx2Coefficients& k) {
  const __m256 grad = _mm256_mul_ps(g, k.grad_scale);
  m = _mm256_add_ps(_mm256_mul_ps(k.beta1, m), _mm256_mul_ps(k.one_minus_beta1, grad));
  v = _mm256_add_ps(_mm256_mul_ps(k.beta2, v), _mm256_mul_ps(k.one_minus_beta2, _mm256_mul_ps(grad, grad)));
  const __m256 m_hat = _mm256_mul_ps(m, k.inv_bc1);
  const __m256 v_hat = _mm256_mul_ps(v, k.inv_bc2);
  const __m256 update = _mm256_add_ps(_mm256_div_ps(m_hat, _mm256_add_ps(_mm256_sqrt_ps(v_hat), k.eps)),
                                      _mm256_mul_ps(k.weight_decay, p));
  p = _mm256_sub_ps(p, _mm256_mul_ps(k.lr, update));
}

STRATA_AVX2 void adamw_avx2(float* p, const float* g, float* m, float* v, std::size_t n, const Coefficients& c) {
  const Avx2Coefficients k{_mm256_set1_ps(c.beta1),        _mm256_set1_ps(c.one_minus_beta1),
                           _mm256_set1_ps(c.beta2),        _mm256_set1_ps(c.one_minus_beta2),
                           _mm256_set1_ps(c.inv_bias_correction1), _mm256_set1_ps(c.inv_bias_correction2),
                           _mm256_set1_ps(c.eps),          _mm256_set1_ps(c.lr),
                           _mm256_set1_ps(c.weight_decay), _mm256_set1_ps(c.grad_scale)};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 P = _mm256_loadu_ps(p + i), M = _mm256_loadu_ps(m + i), V = _mm256_loadu_ps(v + i);
    adamw_lanes8(P, _mm256_loadu_ps(g + i), M, V, k);
    _mm256_storeu_ps(p + i, P);
    _mm256_storeu_ps(m + i, M);
    _mm256_storeu_ps(v + i, V);
  }
  if (i < n) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 P = _mm256_maskload_ps(p + i, mask), M = _mm256_maskload_ps(m + i, mask),
           V = _mm256_maskload_ps(v + i, mask);
    adamw_lanes8(P, _mm256_maskload_ps(g + i, mask), M, V, k);
    _mm256_maskstore_ps(p + i, mask, P);
    _mm256_maskstore_ps(m + i, mask, M);
    _mm256_maskstore_ps(v + i, mask, V);
  }
}

void adamw_kernel(Isa isa, float* p, const float* g, float* m, float* v, std::size_t n, const Coefficients& c) {
  switch (isa) {
    case Isa::Avx512: return adamw_avx512(p, g, m, v, n, c);
    case Isa::Avx2: return adamw_avx2(p, g, m, v, n, c);
    case Isa::Scalar: return adamw_scalar(p, g, m, v, n, c);
  }
}

// A run of elements (relative to the pointers handed in) with its weight decay.
struct Piece {
  std::size_t offset, n;
  bool decay;
};

void append_pieces(std::vector<Piece>& pieces, std::size_t offset, std::size_t n, bool decay) {
  for (std::size_t done = 0; done < n; done += kPieceFloats)
    pieces.push_back({offset + done, std::min(kPieceFloats, n - done), decay});
}

void run_pieces(Isa isa, const std::vector<Piece>& pieces, float* p, const float* g, float* m, float* v,
                const Coefficients& decay, const Coefficients& no_decay) {
  const auto count = static_cast<std::ptrdiff_t>(pieces.size());
#pragma omp parallel for schedule(static) if (count > 1)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    const Piece& pc = pieces[static_cast<std::size_t>(i)];
    adamw_kernel(isa, p + pc.offset, g + pc.offset, m + pc.offset, v + pc.offset, pc.n,
                 pc.decay ? decay : no_decay);
  }
}

// sum_squares' order, the same on every path: within a block, lane j (of kLanes) sums the
// squares of elements i with i % kLanes == j in order; squares of floats are exact in double.
// The lanes then fold in halves (j += j + width for width = 16, 8, ..., 1). Several
// independent lanes keep the vector adders busy instead of waiting on one chain.
constexpr std::size_t kLanes = 32;

double fold_lanes(double lane[kLanes]) {
  for (std::size_t width = kLanes / 2; width > 0; width /= 2)
    for (std::size_t j = 0; j < width; ++j) lane[j] += lane[j + width];
  return lane[0];
}

double block_sum_squares_scalar(const float* x, std::size_t n) {
  double lane[kLanes] = {};
  for (std::size_t i = 0; i < n; ++i) {
    const double d = x[i];
    lane[i % kLanes] += d * d;
  }
  return fold_lanes(lane);
}

// Zero-masked conversions with full masks: the unmasked intrinsic trips GCC 12's false
// -Wmaybe-uninitialized on _mm512_undefined_pd.
STRATA_AVX512 __attribute__((always_inline)) inline void accumulate_squares8(__m512d& acc, const float* x) {
  const __m512d d = _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(x));
  acc = _mm512_add_pd(acc, _mm512_mul_pd(d, d));
}

STRATA_AVX512 double block_sum_squares_avx512(const float* x, std::size_t n) {
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < 4; ++k) accumulate_squares8(acc[k], x + i + 8 * k);
  if (i < n) {  // zero lanes add +0.0, which leaves a non-negative sum unchanged
    alignas(64) float tail[kLanes] = {};
    std::memcpy(tail, x + i, (n - i) * sizeof(float));
    for (int k = 0; k < 4; ++k) accumulate_squares8(acc[k], tail + 8 * k);
  }
  alignas(64) double lane[kLanes];
  for (int k = 0; k < 4; ++k) _mm512_store_pd(lane + 8 * k, acc[k]);
  return fold_lanes(lane);
}

STRATA_AVX2 __attribute__((always_inline)) inline void accumulate_squares4(__m256d& acc, const float* x) {
  const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(x));
  acc = _mm256_add_pd(acc, _mm256_mul_pd(d, d));
}

STRATA_AVX2 double block_sum_squares_avx2(const float* x, std::size_t n) {
  __m256d acc[8];
  for (auto& a : acc) a = _mm256_setzero_pd();
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < 8; ++k) accumulate_squares4(acc[k], x + i + 4 * k);
  if (i < n) {
    alignas(32) float tail[kLanes] = {};
    std::memcpy(tail, x + i, (n - i) * sizeof(float));
    for (int k = 0; k < 8; ++k) accumulate_squares4(acc[k], tail + 4 * k);
  }
  alignas(32) double lane[kLanes];
  for (int k = 0; k < 8; ++k) _mm256_store_pd(lane + 4 * k, acc[k]);
  return fold_lanes(lane);
}

double block_sum_squares(Isa isa, const float* x, std::size_t n) {
  switch (isa) {
    case Isa::Avx512: return block_sum_squares_avx512(x, n);
    case Isa::Avx2: return block_sum_squares_avx2(x, n);
    case Isa::Scalar: return block_sum_squares_scalar(x, n);
  }
  return 0.0;
}

void check_hyperparameter(bool ok, const char* field, double value, const char* rule) {
  if (!ok) throw Error(fmt::format("{} = {}: {}", field, value, rule));
}

}  // namespace

namespace detail {

void adamw_update_isa(Isa isa, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                      std::size_t n, const AdamWConfig& hp, float lr, float weight_decay, std::int64_t step,
                      float grad_scale) {
  const Coefficients c = make_coefficients(hp, lr, weight_decay, step, grad_scale);
  std::vector<Piece> pieces;
  append_pieces(pieces, 0, n, true);
  run_pieces(isa, pieces, params, grads, exp_avg, exp_avg_sq, c, c);
}

double sum_squares_isa(Isa isa, const float* x, std::size_t n) {
  const std::size_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(blocks);
  const auto count = static_cast<std::ptrdiff_t>(blocks);
#pragma omp parallel for schedule(static) if (count > 1)
  for (std::ptrdiff_t b = 0; b < count; ++b) {
    const std::size_t begin = static_cast<std::size_t>(b) * kSumBlock;
    partial[static_cast<std::size_t>(b)] = block_sum_squares(isa, x + begin, std::min(kSumBlock, n - begin));
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace detail

void adamw_update(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t n,
                  const AdamWConfig& hp, float lr, float weight_decay, std::int64_t step, float grad_scale) {
  detail::adamw_update_isa(detected_isa(), params, grads, exp_avg, exp_avg_sq, n, hp, lr, weight_decay, step,
                           grad_scale);
}

void adamw_update_range(const model::ParamLayout& layout, std::size_t begin, std::size_t end, float* params,
                        const float* grads, float* exp_avg, float* exp_avg_sq, const AdamWConfig& hp, float lr,
                        std::int64_t step, float grad_scale) {
  if (begin > end) throw Error(fmt::format("adamw: range [{}, {}) ends before it begins", begin, end));
  const Coefficients decay = make_coefficients(hp, lr, hp.weight_decay, step, grad_scale);
  const Coefficients no_decay = make_coefficients(hp, lr, 0.0f, step, grad_scale);
  std::vector<Piece> pieces;
  for (const auto& seg : layout.decay_segments(begin, end))
    append_pieces(pieces, seg.begin - begin, seg.end - seg.begin, seg.decay);
  run_pieces(detected_isa(), pieces, params, grads, exp_avg, exp_avg_sq, decay, no_decay);
}

float gradient_multiplier(const AdamWConfig& hp, double grad_norm, double loss_scale) {
  double m = 1.0 / loss_scale;
  if (hp.grad_clip > 0 && grad_norm > hp.grad_clip) m *= hp.grad_clip / grad_norm;
  return static_cast<float>(m);
}

double sum_squares(const float* x, std::size_t n) { return detail::sum_squares_isa(detected_isa(), x, n); }

void AdamWConfig::validate() const {
  check_hyperparameter(beta1 >= 0.0f && beta1 < 1.0f, "adamw.beta1", beta1, "must be in [0, 1)");
  check_hyperparameter(beta2 >= 0.0f && beta2 < 1.0f, "adamw.beta2", beta2, "must be in [0, 1)");
  check_hyperparameter(eps > 0.0f && std::isfinite(eps), "adamw.eps", eps, "must be positive");
  check_hyperparameter(weight_decay >= 0.0f && std::isfinite(weight_decay), "adamw.weight_decay", weight_decay,
                       "must be zero or positive");
  check_hyperparameter(grad_clip >= 0.0f && std::isfinite(grad_clip), "adamw.grad_clip", grad_clip,
                       "must be zero (off) or positive");
}

float LrSchedule::at(std::int64_t step) const {
  if (step < 1) throw Error(fmt::format("lr_schedule: step = {}: steps are counted from 1", step));
  if (step <= warmup_steps)
    return static_cast<float>(static_cast<double>(max_lr) * static_cast<double>(step) /
                              static_cast<double>(warmup_steps));
  if (step >= total_steps) return min_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return static_cast<float>(static_cast<double>(min_lr) +
                            cosine * (static_cast<double>(max_lr) - static_cast<double>(min_lr)));
}

void LrSchedule::validate() const {
  check_hyperparameter(max_lr > 0.0f && std::isfinite(max_lr), "lr_schedule.max_lr", max_lr, "must be positive");
  check_hyperparameter(min_lr >= 0.0f && min_lr <= max_lr, "lr_schedule.min_lr", min_lr,
                       fmt::format("must be in [0, max_lr = {}]", max_lr).c_str());
  check_hyperparameter(warmup_steps >= 0, "lr_schedule.warmup_steps", static_cast<double>(warmup_steps),
                       "must be zero or positive");
  check_hyperparameter(total_steps >= 1, "lr_schedule.total_steps", static_cast<double>(total_steps),
                       "must be positive");
}

}  // namespace strata::optim
