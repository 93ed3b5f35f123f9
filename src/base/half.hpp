#pragma once
// Conversions between fp32 and the two 16-bit float formats, on bit patterns held in uint16_t.
// Each format has its own functions: a bf16 is never read as an fp16 or the other way round.
// Narrowing rounds to nearest, ties to even, whatever the FPU rounding mode: it is done on
// integers. NaN stays NaN (quiet, sign and top payload bits kept); overflow gives infinity.
// The one implementation: comm's reductions, quant's kernels (whose vector paths repeat it
// lane by lane) and the engine's wire buffers all call these.
#include <bit>
#include <cstdint>

namespace strata {

// bf16 is the top half of an fp32: widening is exact.
inline float bf16_to_float(std::uint16_t b) { return std::bit_cast<float>(std::uint32_t{b} << 16); }

inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  // A NaN whose payload sits only in the low 16 bits would round to infinity: force the quiet bit.
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  // Adding 0x7fff (+1 when the kept part is odd) carries into bit 16 exactly when the dropped
  // half is above one half ulp, or equal to it with an odd kept part. A carry into the
  // exponent is correct rounding too, up to infinity.
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Exact for every input: normals, subnormals (normalised into fp32), signed zeros, infinities;
// NaN payloads are kept and the quiet bit set, as the F16C instruction does.
inline float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x00400000u : 0u);
  } else if (exponent != 0) {
    bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // value = mantissa * 2^-24; with top bit p, that is 1.f * 2^(p - 24), a normal fp32.
    const int top = std::bit_width(mantissa) - 1;
    bits = sign | (std::uint32_t(top - 24 + 127) << 23) | ((mantissa << (23 - top)) & 0x7fffffu);
  }
  return std::bit_cast<float>(bits);
}

inline std::uint16_t float_to_fp16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u)  // NaN: keep the top payload bits, force quiet
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 2^16 or inf
  if (ax >= 0x38800000u) {
    // fp16 normal range (>= 2^-14): drop 13 mantissa bits with RNE, then rebias 127 -> 15. A
    // carry out of the mantissa bumps the exponent, correctly, up to infinity at 65520.
    const std::uint32_t rounded = ax + 0x0fffu + ((ax >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | ((rounded - ((127u - 15u) << 23)) >> 13));
  }
  if (ax <= 0x33000000u) return sign;  // |f| <= 2^-25: half the smallest subnormal or less, ties to 0
  // fp16 subnormal: the result is RNE(|f| * 2^24) in units of 2^-24 (1024 is the smallest
  // normal, whose bit pattern is exactly 1024: no special case).
  const std::uint32_t mantissa = (ax & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - (ax >> 23);  // 14..24 here
  std::uint32_t q = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return static_cast<std::uint16_t>(sign | q);
}

}  // namespace strata
