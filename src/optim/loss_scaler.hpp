#pragma once
// Dynamic loss scaling for gradients that cross an fp16 wire (fp16's range is 6e-8 to 65504):
// the loss, and so every gradient, is multiplied by `scale` so small gradients survive the
// wire; a step whose gradient norm overflows is skipped and the scale halved; after
// `window` good steps in a row the scale doubles. Powers of two, so scaling and unscaling are
// exact. The same rules as PyTorch's GradScaler and DeepSpeed's fp16 optimizer.
#include <cstdint>

namespace strata::optim {

class LossScaler {
 public:
  LossScaler() = default;  // disabled: scale 1 forever
  LossScaler(double initial_scale, std::int64_t window);  // dynamic; validated as below
  // Throws Error naming train.initial_loss_scale (not a power of two >= 1) or
  // train.loss_scale_window (not positive).
  static void validate(double initial_scale, std::int64_t window);
  // A scale this scaler can hold: a power of two >= kMinScale.
  static bool valid_scale(double scale);

  bool dynamic() const { return dynamic_; }
  double scale() const { return scale_; }
  std::int64_t good_steps() const { return good_steps_; }
  // The step's verdict: a finite gradient norm (applied) or not (skipped).
  void update(bool finite);
  // Restores a saved state (a checkpoint's trainer.loss_scale and trainer.good_steps).
  void restore(double scale, std::int64_t good_steps);

  static constexpr double kMinScale = 1.0;

 private:
  bool dynamic_ = false;
  double scale_ = 1.0;
  std::int64_t window_ = 0;
  std::int64_t good_steps_ = 0;
};

}  // namespace strata::optim
