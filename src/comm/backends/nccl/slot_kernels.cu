// The element-wise work between the levels of a composition on the GPU, with the host's
// arithmetic (comm/reduce.cpp): fp32 sums in slot order, one IEEE division, one rounding
// to nearest even into the element type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "comm/backends/nccl/slot_kernels.hpp"

namespace strata::comm {

namespace {

struct F32 {
  using T = float;
  __device__ static float load(T v) { return v; }
  __device__ static T store(float f) { return f; }
};
struct BF16 {
  using T = __nv_bfloat16;
  __device__ static float load(T v) { return __bfloat162float(v); }
  __device__ static T store(float f) { return __float2bfloat16_rn(f); }
};
struct F16 {
  using T = __half;
  __device__ static float load(T v) { return __half2float(v); }
  __device__ static T store(float f) { return __float2half_rn(f); }
};

template <class E>
__global__ void sum_slots_kernel(const typename E::T* slots, int k, std::size_t n, typename E::T* out,
                                 float divisor) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    float s = E::load(slots[i]);
    for (int j = 1; j < k; ++j) s = __fadd_rn(s, E::load(slots[std::size_t(j) * n + i]));
    out[i] = E::store(divisor == 1.0f ? s : __fdiv_rn(s, divisor));
  }
}

__global__ void clear_high_nibble_kernel(std::uint8_t* byte) { *byte &= 0x0f; }

void check_launch(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}

template <class E>
void launch(const void* slots, int k, std::size_t n, void* out, float divisor, cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  const unsigned grid = unsigned(blocks < 65535 ? blocks : 65535);  // a grid-stride loop covers the rest
  sum_slots_kernel<E><<<grid, kThreads, 0, stream>>>(static_cast<const typename E::T*>(slots), k, n,
                                                     static_cast<typename E::T*>(out), divisor);
  check_launch("sum_slots");
}

}  // namespace

void launch_sum_slots(int type, const void* slots, int k, std::size_t n, void* out, float divisor,
                      cudaStream_t stream) {
  if (n == 0) return;
  switch (type) {
    case 0: return launch<F32>(slots, k, n, out, divisor, stream);
    case 1: return launch<BF16>(slots, k, n, out, divisor, stream);
    case 2: return launch<F16>(slots, k, n, out, divisor, stream);
    default: throw std::runtime_error("sum_slots: element type " + std::to_string(type) + " cannot be summed");
  }
}

void launch_clear_high_nibble(void* byte, cudaStream_t stream) {
  clear_high_nibble_kernel<<<1, 1, 0, stream>>>(static_cast<std::uint8_t*>(byte));
  check_launch("clear_high_nibble");
}

}  // namespace strata::comm
