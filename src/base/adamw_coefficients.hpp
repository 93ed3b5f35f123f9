#pragma once
// The constants of one AdamW update, computed once on the host in double and rounded to float
// once (optim::adamw_coefficients). Here in base because both the CPU kernels (optim) and the
// CUDA kernels (device/cuda) take them, and neither may include the other.
namespace strata {

struct AdamWCoefficients {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float inv_bias_correction1, inv_bias_correction2;
  float eps, lr, weight_decay, grad_scale;
};

}  // namespace strata
