// The update's coefficients, the split of work over threads and the learning-rate schedule;
// the kernels themselves are adamw_impl.inc, compiled per instruction set. No FMA here either:
// the learning rate must not depend on the -march a build is given.
#pragma GCC optimize("fp-contract=off")

#include "optim/adamw.hpp"

#include <cmath>
#include <numbers>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"
#include "optim/adamw_kernels.hpp"

namespace strata::optim {

using detail::AdamWKernels;
using detail::Coefficients;

namespace {

// Work is cut into pieces of at most this many floats (32 KiB per array) for the threads.
constexpr std::size_t kPieceFloats = 8192;
// sum_squares reduces blocks of this many floats, then adds the block sums in order: the
// order depends on n only, not on threads or instruction set.
constexpr std::size_t kSumBlock = 8192;

}  // namespace

AdamWCoefficients adamw_coefficients(const AdamWConfig& hp, float lr, float weight_decay, std::int64_t step,
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

namespace {

const AdamWKernels& kernels_for(Isa isa) {
  return pick_for_isa("optim", isa, detail::isa_scalar::table, detail::isa_avx2::table,
                      detail::isa_avx512::table);
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
  const auto update = kernels_for(isa).update;
  const auto count = static_cast<std::ptrdiff_t>(pieces.size());
#pragma omp parallel for schedule(static) if (count > 1)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    const Piece& pc = pieces[static_cast<std::size_t>(i)];
    update(p + pc.offset, g + pc.offset, m + pc.offset, v + pc.offset, pc.n, pc.decay ? decay : no_decay);
  }
}

void check_hyperparameter(bool ok, const char* field, double value, const char* rule) {
  if (!ok) throw Error(fmt::format("{} = {}: {}", field, value, rule));
}

}  // namespace

namespace detail {

void adamw_update_isa(Isa isa, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                      std::size_t n, const AdamWConfig& hp, float lr, float weight_decay, std::int64_t step,
                      float grad_scale) {
  const Coefficients c = adamw_coefficients(hp, lr, weight_decay, step, grad_scale);
  std::vector<Piece> pieces;
  append_pieces(pieces, 0, n, true);
  run_pieces(isa, pieces, params, grads, exp_avg, exp_avg_sq, c, c);
}

double sum_squares_isa(Isa isa, const float* x, std::size_t n) {
  const auto block_sum_squares = kernels_for(isa).block_sum_squares;
  const std::size_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(blocks);
  const auto count = static_cast<std::ptrdiff_t>(blocks);
#pragma omp parallel for schedule(static) if (count > 1)
  for (std::ptrdiff_t b = 0; b < count; ++b) {
    const std::size_t begin = static_cast<std::size_t>(b) * kSumBlock;
    partial[static_cast<std::size_t>(b)] = block_sum_squares(x + begin, std::min(kSumBlock, n - begin));
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
  const Coefficients decay = adamw_coefficients(hp, lr, hp.weight_decay, step, grad_scale);
  const Coefficients no_decay = adamw_coefficients(hp, lr, 0.0f, step, grad_scale);
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
