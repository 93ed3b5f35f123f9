#include "optim/loss_scaler.hpp"

#include <cmath>

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::optim {

bool LossScaler::valid_scale(double scale) {
  int exp = 0;
  return scale >= kMinScale && std::isfinite(scale) && std::frexp(scale, &exp) == 0.5;
}

void LossScaler::validate(double initial_scale, std::int64_t window) {
  if (!valid_scale(initial_scale))
    throw Error(fmt::format("train.initial_loss_scale = {}: must be a power of two >= 1", initial_scale));
  if (window <= 0) throw Error(fmt::format("train.loss_scale_window = {}: must be positive", window));
}

LossScaler::LossScaler(double initial_scale, std::int64_t window)
    : dynamic_(true), scale_(initial_scale), window_(window) {
  validate(initial_scale, window);
}

void LossScaler::update(bool finite) {
  if (!dynamic_) return;
  if (!finite) {
    scale_ = std::max(kMinScale, scale_ / 2);
    good_steps_ = 0;
    return;
  }
  if (++good_steps_ >= window_) {
    scale_ *= 2;
    good_steps_ = 0;
  }
}

void LossScaler::restore(double scale, std::int64_t good_steps) {
  if (!dynamic_) return;
  if (!valid_scale(scale) || good_steps < 0)
    throw Error(fmt::format("loss scaler state (scale {}, good steps {}) is not valid", scale, good_steps));
  scale_ = scale;
  good_steps_ = good_steps;
}

}  // namespace strata::optim
