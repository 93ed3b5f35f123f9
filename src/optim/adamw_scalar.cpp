// Scalar build of the AdamW kernels: the path for x86-64 CPUs without AVX2 (and the
// reference the vector paths are compared with in tests).
#pragma GCC optimize("fp-contract=off")
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "optim/adamw_kernels.hpp"

namespace strata::optim::detail::isa_scalar {
namespace {

#include "base/simd_scalar.inc"

#include "optim/adamw_impl.inc"

}  // namespace

const AdamWKernels& table() {
  static const AdamWKernels k{update_elements, block_sum_squares};
  return k;
}

}  // namespace strata::optim::detail::isa_scalar
