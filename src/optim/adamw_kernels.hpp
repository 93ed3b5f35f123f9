#pragma once
// Internal to src/optim: the AdamW and sum-of-squares kernels of one instruction set, written
// once in adamw_impl.inc and compiled by adamw_<isa>.cpp (see base/cpu.hpp). Every element
// goes through the same IEEE operations on every path (adamw.hpp says why), so these files
// compile with fp-contract off.
#include <cstddef>

#include "base/adamw_coefficients.hpp"
#include "base/cpu.hpp"

namespace strata::optim::detail {

using Coefficients = AdamWCoefficients;

// sum_squares' order, the same on every path: within a block, lane j (of kSquareLanes) sums
// the squares of elements i with i % kSquareLanes == j in order; squares of floats are exact
// in double. The lanes then fold in halves (j += j + width for width = 16, 8, ..., 1).
// Several independent lanes keep the vector adders busy instead of waiting on one chain.
inline constexpr std::size_t kSquareLanes = 32;

struct AdamWKernels {
  // One AdamW update of n elements.
  void (*update)(float* p, const float* g, float* m, float* v, std::size_t n, const Coefficients& c);
  // The sum of squares of n floats, in the order above.
  double (*block_sum_squares)(const float* x, std::size_t n);
};

STRATA_ISA_TABLES(AdamWKernels)

}  // namespace strata::optim::detail
