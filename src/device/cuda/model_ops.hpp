#pragma once
// Kernels the GPU model needs beside kernels.hpp's, with host launchers (plain C++).
#include "kernels.hpp"  // relative: strata_cuda compiles against base/ alone

namespace strata::device::cuda {

// out [N,C] = x + bias broadcast over rows (bias null: out = x): the start of a residual sum
// that a GEMM then accumulates onto (the CPU's layernorm_forward and Llama's rmsnorm_forward
// write it as residual_out).
void residual_with_bias(float* out, const float* x, const float* bias, int N, int C, Stream stream);

}  // namespace strata::device::cuda
