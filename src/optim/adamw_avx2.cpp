// AVX2 build of the AdamW kernels (8 floats a vector; sums of squares 4 doubles a vector).
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "optim/adamw_kernels.hpp"

// Everything below, and only it, may use AVX2; pick_for_isa() picks it only on CPUs that
// have it. Standard headers stay above, compiled for the baseline.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace strata::optim::detail::isa_avx2 {
namespace {

#include "base/simd_avx2.inc"

#include "optim/adamw_impl.inc"

}  // namespace

#pragma GCC pop_options

const AdamWKernels& table() {
  static const AdamWKernels k{update_elements, block_sum_squares};
  return k;
}

}  // namespace strata::optim::detail::isa_avx2
