#pragma once
// What every kernels_*.cu file shares: launch checks and argument checks that throw
// strata::Error naming the launcher and the problem, grid sizing, warp reductions.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.hpp"
#include "device/cuda/kernels.hpp"

namespace strata::device::cuda::detail {

inline constexpr int kWarp = 32;

// Throws if the launch just made (or an earlier asynchronous error) failed.
inline void check_launch(const char* launcher) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw Error(std::string("cuda: ") + launcher + ": " + cudaGetErrorName(status) + ": " +
                cudaGetErrorString(status));
}

inline void require(bool ok, const char* launcher, const std::string& problem) {
  if (!ok) throw Error(std::string("cuda: ") + launcher + ": " + problem);
}

// ceil(n / d) as a grid dimension; n > 0.
inline unsigned blocks_for(std::size_t n, std::size_t d) { return static_cast<unsigned>((n + d - 1) / d); }

// A grid-stride loop's grid: enough blocks to fill the GPU, no more than the work needs.
inline unsigned stride_blocks(std::size_t n, int threads) {
  const std::size_t needed = (n + threads - 1) / threads;
  return static_cast<unsigned>(needed < 65536 ? (needed > 0 ? needed : 1) : 65536);
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// base/half.hpp's float_to_bf16, on the device: round to nearest even on the bit pattern,
// NaN kept quiet.
__device__ __forceinline__ std::uint16_t to_bf16_bits(float f) {
  const std::uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float from_bf16_bits(std::uint16_t b) { return __uint_as_float(std::uint32_t{b} << 16); }

}  // namespace strata::device::cuda::detail
