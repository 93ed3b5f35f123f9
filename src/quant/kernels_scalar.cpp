// Scalar build of the block kernels: no vector part, every value goes through the reference
// arithmetic of kernels.hpp (the path the vector builds are compared with in tests).
#pragma GCC optimize("fp-contract=off")
#include "quant/kernels.hpp"

namespace strata::quant::detail::isa_scalar {
namespace {

template <Source S>
std::size_t absmax_head(const void*, std::size_t, std::size_t, std::uint32_t&) {
  return 0;
}
template <Source S, DType B>
std::size_t quantize_head(const void*, std::size_t, std::size_t, float, std::uint8_t*) {
  return 0;
}
template <Sink K, DType B>
std::size_t dequantize_head(const std::uint8_t*, float, std::size_t, void*, std::size_t) {
  return 0;
}

#include "quant/kernels_impl.inc"

}  // namespace

const BlockKernels& table() {
  static const BlockKernels k{quantize_blocks, dequantize_blocks};
  return k;
}

}  // namespace strata::quant::detail::isa_scalar
