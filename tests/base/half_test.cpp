// fp32 <-> bf16/fp16 against references built from the formats' definitions in float64:
// decode fields with ldexp, and round by picking the nearer neighbour (ties to the even one).
#include "base/half.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace strata;

namespace {

double decode_fp16(std::uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

double decode_bf16(std::uint16_t b) {
  const int exponent = (b >> 7) & 0xff, mantissa = b & 0x7f;
  const double sign = (b & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0xff) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -133);
  return sign * std::ldexp(128 + mantissa, exponent - 134);
}

// Nearest of two neighbouring patterns lo < hi (by magnitude) to |x|, ties to the even pattern.
std::uint16_t nearer(double ax, std::uint16_t lo, double lo_value, std::uint16_t hi, double hi_value) {
  const double dlo = ax - lo_value, dhi = hi_value - ax;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

// Reference fp16 rounding of a finite float: the magnitude patterns 0..0x7bff increase with
// their value, 0x7c00 (infinity) standing for 2^16 as the next step of the top binade.
std::uint16_t reference_fp16(float x) {
  const double ax = std::fabs(static_cast<double>(x));
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  std::uint16_t lo = 0, hi = 0x7c00;  // value(lo) <= ax < value(hi)
  auto value = [](std::uint16_t h) { return h == 0x7c00 ? 65536.0 : decode_fp16(h); };
  if (ax >= 65536.0) return sign | 0x7c00;
  while (hi - lo > 1) {
    const auto mid = static_cast<std::uint16_t>((lo + hi) / 2);
    (value(mid) <= ax ? lo : hi) = mid;
  }
  return sign | nearer(ax, lo, value(lo), hi, value(hi));
}

// Reference bf16 rounding of a finite float: truncation and the next pattern up (0x7f80,
// infinity, standing for 2^128) bracket it.
std::uint16_t reference_bf16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000);
  const auto lo = static_cast<std::uint16_t>((bits >> 16) & 0x7fff), hi = static_cast<std::uint16_t>(lo + 1);
  const double hi_value = hi == 0x7f80 ? std::ldexp(1.0, 128) : decode_bf16(hi);
  return sign | nearer(std::fabs(static_cast<double>(x)), lo, decode_bf16(lo), hi, hi_value);
}

// Finite floats that stress rounding: every value of the narrow format, the midpoints between
// neighbours and one fp32 ulp either side of them, plus random bit patterns.
std::vector<float> rounding_cases(double (*decode)(std::uint16_t), std::uint16_t last_finite) {
  std::vector<float> cases;
  for (std::uint32_t h = 0; h < last_finite; ++h) {
    const auto lo = static_cast<float>(decode(static_cast<std::uint16_t>(h)));
    const auto mid = static_cast<float>(
        (decode(static_cast<std::uint16_t>(h)) + decode(static_cast<std::uint16_t>(h + 1))) / 2);
    for (float v : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      cases.push_back(v);
      cases.push_back(-v);
    }
  }
  std::mt19937 rng(7);
  while (cases.size() < 2'000'000) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (std::isfinite(f)) cases.push_back(f);
  }
  cases.push_back(std::numeric_limits<float>::max());
  cases.push_back(std::numeric_limits<float>::denorm_min());
  return cases;
}

}  // namespace

TEST(Convert, Fp16ToFloatIsExactForEveryPattern) {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float f = fp16_to_float(half);
    const double want = decode_fp16(half);
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    if (std::isnan(want))
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
    else
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
  }
}

TEST(Convert, Bf16ToFloatIsExactForEveryPattern) {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const auto half = static_cast<std::uint16_t>(b);
    const float f = bf16_to_float(half);
    const double want = decode_bf16(half);
    ASSERT_EQ(std::signbit(f), (b & 0x8000) != 0) << std::hex << b;
    if (std::isnan(want))
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
    else
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << b;
  }
}

TEST(Convert, FloatToFp16RoundsToNearestEven) {
  for (float x : rounding_cases(decode_fp16, 0x7bff))
    ASSERT_EQ(float_to_fp16(x), reference_fp16(x))
        << x << " bits " << std::hex << std::bit_cast<std::uint32_t>(x);
  EXPECT_EQ(float_to_fp16(65519.996f), 0x7bff);             // just under the tie with 2^16: stays at the max
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);               // the tie rounds to the even neighbour: infinity
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: to even 0
  EXPECT_EQ(float_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
}

TEST(Convert, FloatToBf16RoundsToNearestEven) {
  for (float x : rounding_cases(decode_bf16, 0x7f7f))
    ASSERT_EQ(float_to_bf16(x), reference_bf16(x))
        << x << " bits " << std::hex << std::bit_cast<std::uint32_t>(x);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // above the last tie: infinity
}

TEST(Convert, SpecialValuesKeepTheirKind) {
  for (float inf : {INFINITY, -INFINITY}) {
    EXPECT_EQ(fp16_to_float(float_to_fp16(inf)), inf);
    EXPECT_EQ(bf16_to_float(float_to_bf16(inf)), inf);
  }
  // NaNs with payload only in bits the narrow format drops must not turn into infinity.
  for (std::uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fa00000u}) {
    const float nan = std::bit_cast<float>(nan_bits);
    EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(nan))));
    EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(nan))));
    EXPECT_EQ(std::signbit(fp16_to_float(float_to_fp16(nan))), std::signbit(nan));
    EXPECT_EQ(std::signbit(bf16_to_float(float_to_bf16(nan))), std::signbit(nan));
  }
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
}
