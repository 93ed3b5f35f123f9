// Padding arithmetic, bf16/fp16 conversions (against float64 nearest-even references and
// exhaustive round trips), the reduction kernels (against float64), chunk copies.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/error.hpp"
#include "comm/api/buffer.hpp"
#include "comm/api/reduce.hpp"
#include "comm/api/wire.hpp"
#include "comm/backends/tier_comms.hpp"

namespace strata::comm {
namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Nearest representable value of a format with `mant_bits` stored mantissa bits and
// minimum normal exponent `emin`, max finite `max_finite`, ties to even, in float64.
// Returns +-inf when the value rounds past max_finite.
double nearest_even(double x, int mant_bits, int emin, double max_finite) {
  if (x == 0 || std::isinf(x)) return x;
  double a = std::fabs(x);
  int e = std::max(std::ilogb(a), emin);
  double ulp = std::ldexp(1.0, e - mant_bits);
  double q = a / ulp;  // exact: a has at most 53 bits, ulp a power of two
  double fl = std::floor(q);
  double r = q - fl;
  double k = r > 0.5 ? fl + 1 : r < 0.5 ? fl : (std::fmod(fl, 2.0) == 0 ? fl : fl + 1);
  double v = k * ulp;
  // Overflow threshold: max_finite + half its ulp rounds (ties to even) to infinity.
  double top_ulp = std::ldexp(1.0, std::ilogb(max_finite) - mant_bits);
  if (a >= max_finite + top_ulp / 2) v = std::numeric_limits<double>::infinity();
  return std::copysign(v, x);
}

TEST(Padding, ChunkCountRoundsUpToGranule) {
  EXPECT_EQ(chunk_count(8, 4, 1), 2u);
  EXPECT_EQ(chunk_count(9, 4, 1), 3u);
  EXPECT_EQ(chunk_count(3, 4, 1), 1u);
  EXPECT_EQ(chunk_count(0, 4, 1), 0u);
  EXPECT_EQ(chunk_count(1000, 8, 64), 128u);  // ceil(1000/8) = 125 -> 128
  EXPECT_EQ(chunk_count(1024, 8, 128), 128u);
  EXPECT_EQ(chunk_count(1, 1, 32), 32u);
  EXPECT_THROW(chunk_count(4, 0, 1), Error);
}

TEST(Padding, ValidCountsCoverExactlyN) {
  for (std::size_t n : {0u, 1u, 5u, 37u, 64u, 1001u})
    for (int d : {1, 2, 3, 4, 8})
      for (std::size_t g : {1u, 4u, 32u}) {
        std::size_t c = chunk_count(n, d, g);
        EXPECT_GE(c * d, n);
        EXPECT_EQ(c % g, 0u);
        EXPECT_LT(c, (n + d - 1) / d + g);  // padding stays below one granule per chunk
        std::size_t total = 0;
        for (int k = 0; k < d; ++k) total += chunk_valid(n, c, k);
        EXPECT_EQ(total, n) << "n=" << n << " d=" << d << " g=" << g;
      }
  EXPECT_EQ(chunk_valid(5, 2, 2), 1u);
  EXPECT_EQ(chunk_valid(5, 2, 3), 0u);
}

TEST(DType, BytesScalesAndBlocks) {
  EXPECT_EQ(data_bytes(DType::F32, 3), 12u);
  EXPECT_EQ(data_bytes(DType::BF16, 3), 6u);
  EXPECT_EQ(data_bytes(DType::I8, 3), 3u);
  EXPECT_EQ(data_bytes(DType::I4, 3), 2u);
  EXPECT_EQ(data_bytes(DType::I4, 4), 2u);
  EXPECT_EQ(scale_count(DType::I8, 100, 32), 4u);
  EXPECT_EQ(scale_count(DType::F32, 100, 32), 0u);
  EXPECT_THROW(check_block(DType::I8, 0, "test"), Error);
  EXPECT_THROW(check_block(DType::I4, 7, "test"), Error);
  EXPECT_NO_THROW(check_block(DType::I4, 8, "test"));
  EXPECT_NO_THROW(check_block(DType::F32, 0, "test"));
  EXPECT_EQ(parse_dtype("int4", "--dtype"), DType::I4);
  EXPECT_THROW(parse_dtype("int3", "--dtype"), Error);
}

// The step's scalars travel as fp64: moved, never reduced on the wire nor taken as a wire.
TEST(DType, Fp64MovesButIsNeitherReducedNorAWire) {
  EXPECT_EQ(data_bytes(DType::F64, 3), 24u);
  EXPECT_EQ(dtype_name(DType::F64), "fp64");
  EXPECT_FALSE(is_reducible(DType::F64));
  const double a[2] = {1, 2};
  double out[2];
  EXPECT_THROW(add_elements(DType::F64, a, a, out, 2, 1.0f), Error);
  EXPECT_THROW(parse_dtype("fp64", "--grad-wire"), Error);
}

TEST(Backend, ParsesItsNamesAndRefusesOthersNamingTheField) {
  EXPECT_EQ(parse_backend("mpi", "comm.backend"), Backend::Mpi);
  EXPECT_EQ(parse_backend("nccl", "comm.backend"), Backend::Nccl);
  EXPECT_EQ(backend_name(Backend::Nccl), "nccl");
  try {
    parse_backend("gloo", "comm.backend");
    FAIL() << "gloo accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("comm.backend = 'gloo'"), std::string::npos) << e.what();
  }
}

TEST(Convert, Bf16WidenIsExactAndNarrowIsNearestEven) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {  // every bf16 survives a round trip
    float f = bf16_to_float(std::uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    EXPECT_EQ(float_to_bf16(f), h);
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    float f = from_bits(bits(rng));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    double want = nearest_even(f, 7, -126, 0x1.fep127);
    EXPECT_EQ(double(bf16_to_float(float_to_bf16(f))), want) << std::hexfloat << f;
  }
  // Ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 -> even (1); 1 + 3*2^-8 -> 1 + 2^-6.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
}

TEST(Convert, F16WidenIsExactAndNarrowIsNearestEven) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    float f = fp16_to_float(std::uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(f))));
      continue;
    }
    EXPECT_EQ(float_to_fp16(f), h) << std::hex << h;
    // Widening is exact: the value decoded from the fields in float64.
    int exp = (h >> 10) & 31, mant = h & 1023;
    double v = exp == 0 ? std::ldexp(mant, -24) : exp == 31 ? INFINITY : std::ldexp(1024 + mant, exp - 25);
    EXPECT_EQ(double(std::fabs(f)), v);
  }
  std::mt19937 rng(2);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::uniform_real_distribution<float> small(-70000.0f, 70000.0f);
  std::uniform_real_distribution<float> tiny(-1e-4f, 1e-4f);
  for (int i = 0; i < 300000; ++i) {
    float f = i % 3 == 0 ? from_bits(bits(rng)) : i % 3 == 1 ? small(rng) : tiny(rng);
    if (std::isnan(f)) continue;
    double want = nearest_even(f, 10, -14, 65504.0);
    EXPECT_EQ(double(fp16_to_float(float_to_fp16(f))), want) << std::hexfloat << f;
  }
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bffu);  // below the tie: max finite
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00u);  // the tie rounds to even = inf
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0u);       // half the smallest subnormal: tie to 0
  EXPECT_EQ(float_to_fp16(0x1.000002p-25f), 1u);
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000u);
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(NAN))));
}

TEST(Reduce, AddAndSumSlotsMatchFloat64) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  const std::size_t n = 513;
  const int k = 5;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<std::uint8_t> slots(data_bytes(t, n * k)), out(data_bytes(t, n));
    std::vector<double> exact(n, 0.0), abs_sum(n, 0.0);
    auto put = [&](std::size_t i, float v) {
      if (t == DType::F32) {
        std::memcpy(slots.data() + 4 * i, &v, 4);
        return double(v);
      }
      std::uint16_t h = t == DType::BF16 ? float_to_bf16(v) : float_to_fp16(v);
      std::memcpy(slots.data() + 2 * i, &h, 2);
      return double(t == DType::BF16 ? bf16_to_float(h) : fp16_to_float(h));
    };
    for (int j = 0; j < k; ++j)
      for (std::size_t i = 0; i < n; ++i) {
        double v = put(std::size_t(j) * n + i, dist(rng));
        exact[i] += v;
        abs_sum[i] += std::fabs(v);
      }
    auto get = [&](const std::vector<std::uint8_t>& b, std::size_t i) {
      if (t == DType::F32) {
        float f;
        std::memcpy(&f, b.data() + 4 * i, 4);
        return double(f);
      }
      std::uint16_t h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      return double(t == DType::BF16 ? bf16_to_float(h) : fp16_to_float(h));
    };
    const double u = t == DType::F32 ? 0x1p-24 : t == DType::BF16 ? 0x1p-8 : 0x1p-11;
    sum_slots(t, slots.data(), k, n, out.data(), 2.0f);
    for (std::size_t i = 0; i < n; ++i)  // k-1 fp32 additions, one final rounding
      EXPECT_NEAR(get(out, i), exact[i] / 2, (k * 0x1p-24 * abs_sum[i] + u * std::fabs(exact[i])) / 2 + 1e-30)
          << dtype_name(t) << " i=" << i;
    add_elements(t, slots.data(), slots.data() + data_bytes(t, n), out.data(), n, 1.0f);
    for (std::size_t i = 0; i < n; ++i) {
      double want = get(slots, i) + get(slots, n + i);
      EXPECT_NEAR(get(out, i), want, (u + 0x1p-23) * std::fabs(want)) << dtype_name(t);  // fp32 sum, then one rounding
    }
    // In place (out aliases an input) gives the same bits.
    std::vector<std::uint8_t> again(slots.begin(), slots.begin() + data_bytes(t, n));
    add_elements(t, again.data(), slots.data() + data_bytes(t, n), again.data(), n, 1.0f);
    EXPECT_EQ(again, out);
  }
  std::vector<std::uint8_t> q(16);
  EXPECT_THROW(add_elements(DType::I8, q.data(), q.data(), q.data(), 4, 1.0f), Error);
}

TEST(Wire, CopyAndZeroMoveDataAndScales) {
  // int4, block 4: 12 elements = 6 bytes, 3 scales.
  std::vector<std::uint8_t> a{0x21, 0x43, 0x65, 0x87, 0xa9, 0xcb};
  std::vector<float> as{1, 2, 3};
  std::vector<std::uint8_t> b(6, 0xff);
  std::vector<float> bs(3, -1);
  CBuf src = quantized(DType::I4, a.data(), 12, as.data(), 4);
  Buf dst = quantized(DType::I4, b.data(), 12, bs.data(), 4);
  copy_elements(src, 4, dst, 8, 4);  // block 1 -> block 2
  EXPECT_EQ(b[4], 0x65);
  EXPECT_EQ(b[5], 0x87);
  EXPECT_EQ(bs[2], 2.0f);
  EXPECT_EQ(b[0], 0xff);
  zero_elements(dst, 3, 9);  // element 3 is the high nibble of byte 1; scales of blocks 1, 2
  EXPECT_EQ(b[0], 0xff);
  EXPECT_EQ(b[1], 0x0f);
  EXPECT_EQ(b[2], 0);
  EXPECT_EQ(bs[0], -1.0f);
  EXPECT_EQ(bs[1], 0.0f);
  EXPECT_EQ(bs[2], 0.0f);
  WireChunk w = wire_chunk(src, 8, 4);
  EXPECT_EQ(w.bytes, 2u);
  EXPECT_EQ(w.n_scales, 1u);
  EXPECT_EQ(w.total_bytes(), 6u);
  EXPECT_EQ(*w.scales, 3.0f);

  Scratch s;
  std::vector<float> x{1, 2, 3};
  Buf p = s.padded_copy(0, f32(x.data(), 3), 8);
  auto* pf = static_cast<float*>(p.data);
  EXPECT_EQ(std::vector<float>(pf, pf + 8), (std::vector<float>{1, 2, 3, 0, 0, 0, 0, 0}));
}

}  // namespace
}  // namespace strata::comm
