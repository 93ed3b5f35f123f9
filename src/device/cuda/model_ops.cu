#include "model_ops.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "base/error.hpp"

namespace strata::device::cuda {

namespace {

__global__ void residual_with_bias_kernel(float* out, const float* x, const float* bias, long long n, int C) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    out[i] = bias ? x[i] + bias[i % C] : x[i];
}

}  // namespace

void residual_with_bias(float* out, const float* x, const float* bias, int N, int C, Stream stream) {
  if (N <= 0 || C <= 0)
    throw Error("residual_with_bias: N = " + std::to_string(N) + ", C = " + std::to_string(C) + ": must be positive");
  const long long n = static_cast<long long>(N) * C;
  const int threads = 256;
  const long long blocks = std::min<long long>((n + threads - 1) / threads, 65535LL * 8);
  residual_with_bias_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(out, x, bias, n, C);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw Error(std::string("residual_with_bias: launch: ") + cudaGetErrorString(e));
}

}  // namespace strata::device::cuda
