// Scalar build of the kernels: the path for x86-64 CPUs without AVX2 (and the reference the
// vector paths are compared with in tests).
#include <cblas.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "model/kernels.hpp"

namespace strata::model::isa_scalar {
namespace {

#include "base/simd_scalar.inc"

#include "model/kernels_impl.inc"

}  // namespace

const Kernels& table() {
  static const Kernels k = make_table(Isa::Scalar);
  return k;
}

}  // namespace strata::model::isa_scalar
