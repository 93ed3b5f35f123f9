// AVX-512 build of the AdamW kernels (16 floats a vector, masked tails; sums of squares 8
// doubles a vector).
#pragma GCC optimize("fp-contract=off")
// GCC 12's own AVX-512 headers build "undefined" vectors by self-initialisation, which its
// uninitialised-value warnings then flag at every inlined use (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "optim/adamw_kernels.hpp"

// Everything below, and only it, may use AVX-512; pick_for_isa() picks it only on CPUs that
// have it. Standard headers stay above, compiled for the baseline.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

namespace strata::optim::detail::isa_avx512 {
namespace {

#include "base/simd_avx512.inc"

#include "optim/adamw_impl.inc"

}  // namespace

#pragma GCC pop_options

const AdamWKernels& table() {
  static const AdamWKernels k{update_elements, block_sum_squares};
  return k;
}

}  // namespace strata::optim::detail::isa_avx512
