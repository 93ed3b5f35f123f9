// AVX2 + FMA build of the kernels (8 floats a vector).
#include <cblas.h>
#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "model/kernels.hpp"

// Everything below, and only it, may use AVX2 and FMA; pick_for_isa() picks it only on CPUs
// that have them. Standard headers stay above, compiled for the baseline.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace strata::model::isa_avx2 {
namespace {

#include "base/simd_avx2.inc"

#include "model/kernels_impl.inc"

}  // namespace

#pragma GCC pop_options

const Kernels& table() {
  static const Kernels k = make_table(Isa::Avx2);
  return k;
}

}  // namespace strata::model::isa_avx2
