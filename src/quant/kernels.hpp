#pragma once
// Internal to src/quant: the per-instruction-set block kernels and the arithmetic they share.
// The scalar functions here are the reference; the vector primitives perform the same IEEE
// operations lane by lane (absmax on bit patterns; scale and its inverse computed once per
// block by these functions; one fp32 multiply and RNE; on the way back one fp32 multiply,
// one fp32 add), so every path gives identical bits.
// Files that include this compile with fp-contract off: a fused multiply-add would round
// once where the reference rounds twice.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "base/cpu.hpp"
#include "base/half.hpp"
#include "quant/quant.hpp"

namespace strata::quant::detail {

enum class Source { F32, BF16, F16 };
enum class Sink { F32, BF16, AddF32 };

inline constexpr std::size_t kAllFinite = std::numeric_limits<std::size_t>::max();
inline constexpr std::uint32_t kAbsMask = 0x7fffffffu;
inline constexpr std::uint32_t kInfBits = 0x7f800000u;

// Quantizes blocks [first, last) of the n values at src; returns the first of them holding a
// NaN or infinity (its data and scale are left unwritten), or kAllFinite.
using QuantizeBlocks = std::size_t (*)(Source source, const void* src, std::size_t n, const QuantSpec& spec,
                                       std::size_t first, std::size_t last, std::uint8_t* data,
                                       float* scales);
// Dequantizes blocks [first, last) into dst (float* or uint16_t* bf16, by sink).
using DequantizeBlocks = void (*)(Sink sink, const std::uint8_t* data, const float* scales, std::size_t n,
                                  const QuantSpec& spec, std::size_t first, std::size_t last, void* dst);

// One instruction set's kernels: quant/kernels_impl.inc compiled by kernels_<isa>.cpp.
struct BlockKernels {
  QuantizeBlocks quantize;
  DequantizeBlocks dequantize;
};
STRATA_ISA_TABLES(BlockKernels)

// Values in block b: block_size, or fewer for the last block.
inline std::size_t block_length(std::size_t n, std::size_t block_size, std::size_t b) {
  return std::min(block_size, n - b * block_size);
}

// Element i of a source buffer, widened exactly to fp32.
inline float load_value(Source source, const void* src, std::size_t i) {
  switch (source) {
    case Source::F32:
      return static_cast<const float*>(src)[i];
    case Source::BF16:
      return bf16_to_float(static_cast<const std::uint16_t*>(src)[i]);
    case Source::F16:
      return fp16_to_float(static_cast<const std::uint16_t*>(src)[i]);
  }
  return 0.0f;
}

// |x| as a bit pattern: for non-negative floats integer order is value order, and every NaN
// and infinity lies above every finite value, so one unsigned max finds the absmax and flags
// non-finite input at once, in any order of evaluation.
inline std::uint32_t abs_bits(float x) { return std::bit_cast<std::uint32_t>(x) & kAbsMask; }

// scale = absmax / qmax, correctly rounded, with two repairs at the ends of fp32's range: it is
// at least FLT_MIN (2^-126), so it is never subnormal and 1 / scale is finite; and a scale that
// rounded up so far that qmax * scale overflows (absmax near FLT_MAX) is stepped down one ulp,
// so dequantized values stay finite. An all-zero block gets 0.
inline float block_scale(std::uint32_t absmax_bits, int qmax) {
  if (absmax_bits == 0) return 0.0f;
  const auto q = static_cast<float>(qmax);
  const float scale = std::max(std::bit_cast<float>(absmax_bits) / q, std::numeric_limits<float>::min());
  return std::isinf(scale * q) ? std::nextafter(scale, 0.0f) : scale;
}

// What values are multiplied by: 1 / scale, correctly rounded, for a scale > 0.
inline float block_inverse(float scale) { return 1.0f / scale; }

// The fp32 bit pattern of |x| for the largest of 16-bit magnitudes (sign cleared): the
// kernels find a bf16/fp16 block's absmax on the narrow patterns, whose integer order is
// their value order, and widen only the winner.
inline std::uint32_t widen_abs_bits(Source source, std::uint16_t abs16) {
  return source == Source::BF16 ? std::uint32_t{abs16} << 16 : abs_bits(fp16_to_float(abs16));
}

// q = rne(x * inverse). No clamp is needed: |x * inverse| < qmax * (1 + 2^-21) for every
// x of the block (docs/quantization.md), which rounds to at most qmax.
inline int quantize_value(float x, float inverse) { return static_cast<int>(std::nearbyint(x * inverse)); }

// Sign-extends a 4-bit two's complement nibble.
inline int int4_value(std::uint8_t byte, std::size_t index) {
  const int nibble = (index & 1) ? (byte >> 4) : (byte & 0x0f);
  return nibble >= 8 ? nibble - 16 : nibble;
}

// Zeroes the bytes of a short last block after its `used` bytes.
inline void zero_block_padding(std::uint8_t* block, std::size_t used, std::size_t block_bytes) {
  if (used < block_bytes) std::memset(block + used, 0, block_bytes - used);
}

}  // namespace strata::quant::detail
