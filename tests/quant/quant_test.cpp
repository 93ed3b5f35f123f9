// Block quantization against float64 references, the documented byte layout decoded by
// hand, edge cases, and bit-identity of the scalar, AVX2 and AVX-512 kernels.
#include "quant/quant.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/cpu.hpp"
#include "base/error.hpp"
#include "base/half.hpp"

using namespace strata;
using namespace strata::quant;

namespace {

constexpr DType kDTypes[] = {DType::F32, DType::BF16, DType::F16};
constexpr DType kBits[] = {DType::I8, DType::I4};

// An input buffer in one dtype and the exact value of each element.
struct Input {
  DType dtype;
  std::vector<float> f32;
  std::vector<std::uint16_t> half;
  std::vector<double> exact;
  std::size_t size() const { return exact.size(); }
};

// Rounds wanted values into the dtype; the exact values are taken from the stored bits.
Input make_input(DType dtype, const std::vector<float>& wanted) {
  Input in{dtype, {}, {}, {}};
  for (float w : wanted) {
    if (dtype == DType::F32) {
      in.f32.push_back(w);
      in.exact.push_back(w);
    } else if (dtype == DType::BF16) {
      in.half.push_back(float_to_bf16(w));
      in.exact.push_back(bf16_to_float(in.half.back()));
    } else {
      in.half.push_back(float_to_fp16(w));
      in.exact.push_back(fp16_to_float(in.half.back()));
    }
  }
  return in;
}

struct Quantized {
  std::vector<std::uint8_t> data;
  std::vector<float> scales;
};

Quantized run_quantize(const Input& in, const QuantSpec& spec, Isa isa) {
  // Poisoned so that bytes the kernels fail to write show up.
  Quantized q{std::vector<std::uint8_t>(quantized_bytes(in.size(), spec), 0xa5),
              std::vector<float>(num_blocks(in.size(), spec), -1.0f)};
  if (in.dtype == DType::F32) quantize(in.f32.data(), in.size(), spec, q.data.data(), q.scales.data(), isa);
  if (in.dtype == DType::BF16)
    quantize_bf16(in.half.data(), in.size(), spec, q.data.data(), q.scales.data(), isa);
  if (in.dtype == DType::F16)
    quantize_fp16(in.half.data(), in.size(), spec, q.data.data(), q.scales.data(), isa);
  return q;
}

std::vector<float> run_dequantize(const Quantized& q, std::size_t n, const QuantSpec& spec, Isa isa) {
  std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());
  dequantize(q.data.data(), q.scales.data(), n, spec, out.data(), isa);
  return out;
}

// The quantized integer of element i, decoded from the documented layout.
int stored_value(const Quantized& q, const QuantSpec& spec, std::size_t i) {
  const auto bs = static_cast<std::size_t>(spec.block_size);
  const std::size_t b = i / bs, j = i % bs;
  if (spec.dtype == DType::I8) return static_cast<std::int8_t>(q.data[b * bs + j]);
  const std::uint8_t byte = q.data[b * ((bs + 1) / 2) + j / 2];
  const int nibble = (j % 2) ? byte >> 4 : byte & 0x0f;
  return nibble >= 8 ? nibble - 16 : nibble;
}

std::vector<Isa> usable_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (isa_available(isa)) isas.push_back(isa);
  return isas;
}

// Normal values whose magnitude changes every 37 elements, over 2^-60..2^60 (2^-16..2^10 for
// fp16, whose range is narrow), so blocks see very different scales and some straddle two.
std::vector<float> random_values(std::size_t n, std::uint64_t seed, DType dtype = DType::F32) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> exponent(dtype == DType::F16 ? -16.0 : -60.0,
                                                  dtype == DType::F16 ? 10.0 : 60.0);
  std::vector<float> v(n);
  double magnitude = 1.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 37 == 0) magnitude = std::exp2(exponent(rng));
    v[i] = static_cast<float>(normal(rng) * magnitude);
  }
  return v;
}

double block_absmax(const Input& in, std::size_t bs, std::size_t b) {
  double m = 0;
  for (std::size_t i = b * bs; i < std::min(in.size(), (b + 1) * bs); ++i)
    m = std::max(m, std::fabs(in.exact[i]));
  return m;
}

// Half a quantization step plus fp32 slack, for each element. The slack covers three
// roundings: 1 / scale and x * (1 / scale) rounded to fp32 before rounding to an integer
// (together they move the decision by at most |x / scale| * 2^-23 steps, i.e. absmax * 2^-23
// of value), and the product q * scale rounded to fp32 (at most about absmax * 2^-24).
// 3 * 2^-24 < 2^-22. Scales are never subnormal (at least FLT_MIN), so no absolute term.
double error_bound(double scale, double absmax) { return scale / 2 + absmax * std::ldexp(1.0, -22); }

// Checks every element against its exact input: within the bound, never beyond qmax, and,
// where x / scale is not within 1e-3 of a tie, equal to the float64 round-half-even of x / scale.
void expect_within_half_step(const Input& in, const QuantSpec& spec, const Quantized& q,
                             const std::vector<float>& dq, const std::string& what) {
  const auto bs = static_cast<std::size_t>(spec.block_size);
  const int qm = qmax(spec.dtype);
  const double flt_min = std::numeric_limits<float>::min();
  for (std::size_t b = 0; b < q.scales.size(); ++b) {
    const double absmax = block_absmax(in, bs, b), scale = q.scales[b];
    ASSERT_EQ(scale == 0, absmax == 0) << what << " block " << b;
    if (scale != 0) {
      ASSERT_LE(scale, std::max(absmax / qm * (1 + std::ldexp(1.0, -23)), flt_min)) << what << " block " << b;
      ASSERT_GE(scale, std::max(absmax / qm * (1 - std::ldexp(1.0, -22)), flt_min)) << what << " block " << b;
    }
    for (std::size_t i = b * bs; i < std::min(in.size(), (b + 1) * bs); ++i) {
      ASSERT_LE(std::fabs(in.exact[i] - dq[i]), error_bound(scale, absmax))
          << what << " element " << i << " x=" << in.exact[i] << " dq=" << dq[i] << " scale=" << scale;
      ASSERT_LE(std::abs(stored_value(q, spec, i)), qm) << what << " element " << i;
      if (scale == 0) continue;
      const double t = in.exact[i] / scale;
      if (std::fabs(std::fabs(t - std::floor(t)) - 0.5) < 1e-3) continue;
      ASSERT_EQ(stored_value(q, spec, i), std::nearbyint(t)) << what << " element " << i << " x/scale=" << t;
    }
  }
}

std::string describe(DType d, const QuantSpec& spec, std::size_t n, Isa isa) {
  return std::string(dtype_name(d)) + " " + std::string(dtype_name(spec.dtype)) +
         " bs=" + std::to_string(spec.block_size) + " n=" + std::to_string(n) + " " +
         std::string(isa_name(isa));
}

}  // namespace

TEST(Quant, SizesFollowTheBlockLayout) {
  EXPECT_EQ(num_blocks(0, {DType::I8, 64}), 0u);
  EXPECT_EQ(num_blocks(129, {DType::I8, 64}), 3u);
  EXPECT_EQ(quantized_bytes(129, {DType::I8, 64}), 3u * 64);
  EXPECT_EQ(quantized_bytes(129, {DType::I4, 64}), 3u * 32);
  EXPECT_EQ(quantized_bytes(7, {DType::I4, 3}), 3u * 2);  // odd blocks end in a padding nibble
  EXPECT_EQ(block_bytes({DType::I4, 1}), 1u);
}

TEST(Quant, RefusesNonPositiveBlockSize) {
  for (int bs : {0, -4}) {
    const QuantSpec spec{DType::I8, bs};
    float x = 1, scale;
    std::uint8_t q;
    EXPECT_THROW(num_blocks(10, spec), Error);
    try {
      quantize(&x, 1, spec, &q, &scale);
      ADD_FAILURE() << "block_size " << bs << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("block_size = " + std::to_string(bs)), std::string::npos)
          << e.what();
    }
  }
}

// Hand-worked layout: scale 1, ties to even, two's complement, nibble order, padding.
TEST(Quant, LayoutAndRoundingByHand) {
  for (Isa isa : usable_isas()) {
    const std::vector<float> x8 = {127, 2.5f, 3.5f, -2.5f, -127, 0.49f, -0.5f, 1.5f};
    Quantized q8 = run_quantize(make_input(DType::F32, x8), {DType::I8, 8}, isa);
    EXPECT_EQ(q8.scales, std::vector<float>{1.0f});
    EXPECT_EQ(q8.data, (std::vector<std::uint8_t>{127, 2, 4, 0xfe, 0x81, 0, 0, 2})) << isa_name(isa);

    const std::vector<float> x4 = {7, 2.5f, 3.5f, -0.5f, -7, 6.5f, 1};
    Quantized q4 = run_quantize(make_input(DType::F32, x4), {DType::I4, 4}, isa);
    EXPECT_EQ(q4.scales, (std::vector<float>{1.0f, 1.0f}));
    // {7,2} {4,0} | {-7,6} {1,pad}: low nibble first, -7 = 0x9, the last block padded with zeros.
    EXPECT_EQ(q4.data, (std::vector<std::uint8_t>{0x27, 0x04, 0x69, 0x01})) << isa_name(isa);
  }
}

TEST(Quant, EveryElementWithinHalfAStep) {
  for (DType dtype : kDTypes) {
    for (DType bits : kBits) {
      for (int bs : {1, 3, 16, 31, 64, 100, 256, 1000}) {
        const QuantSpec spec{bits, bs};
        const std::size_t n = 4099;  // divides none of the block sizes but 1
        const Input in = make_input(dtype, random_values(n, 1000 + bs, dtype));
        const Quantized q = run_quantize(in, spec, detected_isa());
        expect_within_half_step(in, spec, q, run_dequantize(q, n, spec, detected_isa()),
                                describe(dtype, spec, n, detected_isa()));
      }
    }
  }
}

TEST(Quant, AllZeroBlocksHaveScaleZeroAndDequantizeToExactZeros) {
  for (Isa isa : usable_isas()) {
    for (DType dtype : kDTypes) {
      for (DType bits : kBits) {
        const QuantSpec spec{bits, 32};
        std::vector<float> x(100, 0.0f);
        for (std::size_t i = 0; i < x.size(); i += 3) x[i] = -0.0f;
        x[70] = 1.0f;  // block 2 is not all zeros
        const Quantized q = run_quantize(make_input(dtype, x), spec, isa);
        EXPECT_EQ(q.scales[0], 0.0f);
        EXPECT_EQ(q.scales[1], 0.0f);
        EXPECT_EQ(q.scales[3], 0.0f);
        const std::vector<float> dq = run_dequantize(q, x.size(), spec, isa);
        for (std::size_t i = 0; i < x.size(); ++i)
          if (i != 70) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(dq[i]), 0u) << i << " " << isa_name(isa);
          }
        EXPECT_EQ(dq[70], 1.0f);
      }
    }
  }
}

TEST(Quant, OneHugeValueInABlock) {
  const float huge[] = {std::numeric_limits<float>::max(), -3e38f, 1e30f, 60000.0f};
  for (Isa isa : usable_isas()) {
    for (DType dtype : kDTypes) {
      for (DType bits : kBits) {
        for (float h : huge) {
          std::vector<float> x = random_values(256, 5);
          for (float& v : x) v = std::fmod(v, 1.0f);  // small values
          x[77] = h;
          const Input in = make_input(dtype, x);
          if (!std::isfinite(in.exact[77])) continue;  // beyond fp16's range
          const QuantSpec spec{bits, 64};
          const Quantized q = run_quantize(in, spec, isa);
          const std::vector<float> dq = run_dequantize(q, x.size(), spec, isa);
          expect_within_half_step(in, spec, q, dq, describe(dtype, spec, x.size(), isa));
          EXPECT_TRUE(std::isfinite(dq[77]));
          EXPECT_EQ(std::fabs(stored_value(q, spec, 77)), qmax(bits));
        }
      }
    }
  }
}

TEST(Quant, SubnormalInputs) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (Isa isa : usable_isas()) {
    for (DType bits : kBits) {
      // Blocks whose absmax is a few subnormal ulps, or near FLT_MIN (2^23 ulps) and near
      // qmax * FLT_MIN, where the scale floor of FLT_MIN stops acting; and a mixed block.
      std::vector<float> x;
      for (float top : {1.0f, 3.0f, 200.0f, 0x1p23f, 0x1p23f * 6.9f, 0x1p23f * 7.0f, 0x1p23f * 126.9f,
                        0x1p23f * 127.0f, 0x1p23f * 300.0f})
        for (int i = 0; i < 16; ++i)
          x.push_back(tiny * std::round(top * static_cast<float>(i) / 15.0f) * (i % 2 ? -1 : 1));
      for (int i = 0; i < 16; ++i) x.push_back(i == 3 ? 1e-30f : tiny * static_cast<float>(i));
      const QuantSpec spec{bits, 16};
      const Input in = make_input(DType::F32, x);
      const Quantized q = run_quantize(in, spec, isa);
      for (float s : q.scales) EXPECT_GE(s, std::numeric_limits<float>::min()) << "subnormal or zero scale";
      expect_within_half_step(in, spec, q, run_dequantize(q, x.size(), spec, isa),
                              describe(DType::F32, spec, x.size(), isa));
    }
    // fp16 subnormals (normal numbers once in fp32) and bf16 subnormals (fp32 subnormals).
    for (DType dtype : {DType::F16, DType::BF16}) {
      Input in{dtype, {}, {}, {}};
      for (std::uint16_t h = 1; h < 200; ++h) {
        in.half.push_back(h % 5 ? h : static_cast<std::uint16_t>(h | 0x8000));
        in.exact.push_back(dtype == DType::F16 ? fp16_to_float(in.half.back())
                                               : bf16_to_float(in.half.back()));
      }
      for (DType bits : kBits) {
        const QuantSpec spec{bits, 10};
        const Quantized q = run_quantize(in, spec, isa);
        expect_within_half_step(in, spec, q, run_dequantize(q, in.size(), spec, isa),
                                describe(dtype, spec, in.size(), isa));
      }
    }
  }
}

TEST(Quant, NanAndInfinityAreRefusedNamingTheBlock) {
  struct Case {
    DType dtype;
    float f32;
    std::uint16_t half;
    const char* kind;
  };
  const Case cases[] = {{DType::F32, NAN, 0, "a NaN"},     {DType::F32, -INFINITY, 0, "an infinity"},
                        {DType::BF16, 0, 0x7fc1, "a NaN"}, {DType::BF16, 0, 0x7f80, "an infinity"},
                        {DType::F16, 0, 0xfe01, "a NaN"},  {DType::F16, 0, 0x7c00, "an infinity"}};
  for (Isa isa : usable_isas()) {
    for (DType bits : kBits) {
      for (const Case& c : cases) {
        // Large enough for the threaded path; bad values in blocks 3 and 900: block 3 is named.
        const QuantSpec spec{bits, 64};
        Input in = make_input(c.dtype, random_values(std::size_t{1} << 19, 11, c.dtype));
        for (std::size_t i : {std::size_t{3 * 64 + 5}, std::size_t{900 * 64}}) {
          if (c.dtype == DType::F32)
            in.f32[i] = c.f32;
          else
            in.half[i] = c.half;
        }
        try {
          run_quantize(in, spec, isa);
          ADD_FAILURE() << "non-finite input accepted: " << dtype_name(c.dtype) << " " << isa_name(isa);
        } catch (const Error& e) {
          const std::string msg = e.what();
          EXPECT_NE(msg.find("block 3 (values 192..255) holds " + std::string(c.kind)), std::string::npos)
              << msg;
        }
      }
    }
  }
}

TEST(Quant, DequantizeRefusesBadScalesWithoutWriting) {
  const QuantSpec spec{DType::I8, 4};
  const std::vector<std::uint8_t> data(16, 3);
  for (float bad : {NAN, INFINITY, -1.0f, -0.0f}) {
    const std::vector<float> scales = {1.0f, 1.0f, bad, 1.0f};
    std::vector<float> dst(16, 5.0f);
    try {
      dequantize_add(data.data(), scales.data(), 16, spec, dst.data());
      ADD_FAILURE() << "scale " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("scale of block 2"), std::string::npos) << e.what();
    }
    EXPECT_EQ(dst, std::vector<float>(16, 5.0f)) << "dst changed before the refusal";
  }
}

// Eight "ranks" each quantize their buffer; dequantize_add sums them in fp32. The sum stays
// within the sum of the per-rank bounds plus the fp32 rounding of the running sum.
TEST(Quant, DequantizeSumMatchesFloat64Reference) {
  constexpr int kRanks = 8;
  const std::size_t n = 10007;
  for (DType dtype : kDTypes) {
    for (DType bits : kBits) {
      const QuantSpec spec{bits, 64};
      std::vector<float> sum(n, 0.0f), sum_by_hand(n, 0.0f);
      std::vector<double> exact_sum(n, 0.0), bound(n, 0.0), magnitude(n, 0.0);
      for (int r = 0; r < kRanks; ++r) {
        std::vector<float> x = random_values(n, 300 + r, dtype);
        for (float& v : x) v = std::ldexp(std::fmod(v, 1.0f) + 0.25f * static_cast<float>(r % 3), -r);
        const Input in = make_input(dtype, x);
        const Quantized q = run_quantize(in, spec, detected_isa());
        dequantize_add(q.data.data(), q.scales.data(), n, spec, sum.data());
        const std::vector<float> dq = run_dequantize(q, n, spec, detected_isa());
        for (std::size_t i = 0; i < n; ++i) {
          sum_by_hand[i] += dq[i];
          exact_sum[i] += in.exact[i];
          const std::size_t b = i / static_cast<std::size_t>(spec.block_size);
          bound[i] += error_bound(q.scales[b], block_absmax(in, spec.block_size, b));
          magnitude[i] += std::fabs(dq[i]);
        }
      }
      for (std::size_t i = 0; i < n; ++i) {
        // Each fp32 add rounds by at most half an ulp of a partial sum <= sum of |terms|.
        const double rounding = kRanks * magnitude[i] * std::ldexp(1.0, -24);
        ASSERT_LE(std::fabs(sum[i] - exact_sum[i]), bound[i] + rounding)
            << dtype_name(dtype) << " element " << i;
        ASSERT_EQ(std::bit_cast<std::uint32_t>(sum[i]), std::bit_cast<std::uint32_t>(sum_by_hand[i])) << i;
      }
    }
  }
}

TEST(Quant, Bf16OutputIsTheFp32ResultRoundedToNearestEven) {
  for (Isa isa : usable_isas()) {
    for (DType bits : kBits) {
      const QuantSpec spec{bits, 48};
      const std::size_t n = 1001;
      const Quantized q = run_quantize(make_input(DType::F32, random_values(n, 21)), spec, isa);
      const std::vector<float> dq = run_dequantize(q, n, spec, isa);
      std::vector<std::uint16_t> out(n);
      dequantize_bf16(q.data.data(), q.scales.data(), n, spec, out.data(), isa);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[i], float_to_bf16(dq[i])) << i << " " << isa_name(isa);
    }
  }
}

// Values on the quantization grid survive a round trip exactly, at any odd length and block.
TEST(Quant, RoundTripOfGridValuesAtOddLengths) {
  std::mt19937 rng(3);
  for (Isa isa : usable_isas()) {
    for (DType bits : kBits) {
      const int qm = qmax(bits);
      for (int bs : {1, 3, 5, 7, 16, 33}) {
        for (std::size_t n : {1, 3, 5, 17, 33, 101}) {
          const QuantSpec spec{bits, bs};
          std::vector<float> x(n);
          for (std::size_t i = 0; i < n; ++i) {
            const int q =
                (i % static_cast<std::size_t>(bs) == 0) ? qm : static_cast<int>(rng() % (2 * qm + 1)) - qm;
            x[i] = static_cast<float>(q) * 0.375f;  // each block holds qmax, so its scale is 0.375
          }
          const Quantized q = run_quantize(make_input(DType::F32, x), spec, isa);
          EXPECT_EQ(run_dequantize(q, n, spec, isa), x) << describe(DType::F32, spec, n, isa);
          // Padding after the last value of the last block is zero.
          for (std::size_t byte = 0; byte < q.data.size(); ++byte) {
            const std::size_t in_block = byte % block_bytes(spec), b = byte / block_bytes(spec);
            const std::size_t values_here = std::min<std::size_t>(bs, n - b * bs);
            const std::size_t used = bits == DType::I8 ? values_here : (values_here + 1) / 2;
            if (in_block >= used) {
              EXPECT_EQ(q.data[byte], 0) << "padding byte " << byte;
            } else if (bits == DType::I4 && in_block == used - 1 && values_here % 2) {
              EXPECT_EQ(q.data[byte] >> 4, 0) << "padding nibble of byte " << byte;
            }
          }
        }
      }
    }
  }
}

// Every kernel must give the scalar reference's bits: data, scales and all three outputs.
TEST(Quant, KernelsAreBitIdenticalToScalar) {
  std::vector<float> special = random_values(5000, 99);
  for (std::size_t i = 0; i < special.size(); i += 13) special[i] = 0.0f;
  for (std::size_t i = 0; i < 64; ++i)
    special[1000 + i] = (static_cast<float>(i % 17) - 8.5f) * (i == 0 ? 0 : 1);
  special[1000] = 127.0f;  // a block of exact ties at scale 1
  for (std::size_t i = 2000; i < 2100; ++i)
    special[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(i % 300);
  for (std::size_t i = 3000; i < 3064; ++i) special[i] = 0.0f;  // zero blocks

  for (Isa isa : usable_isas()) {
    if (isa == Isa::Scalar) continue;
    for (DType dtype : kDTypes) {
      // The largest finite value of each dtype, and values far beyond fp16's range scaled down.
      special[4000] = dtype == DType::F32    ? std::numeric_limits<float>::max()
                      : dtype == DType::BF16 ? bf16_to_float(0x7f7f)
                                             : 65504.0f;
      std::vector<float> values = special;
      if (dtype == DType::F16)
        for (std::size_t i = 0; i < values.size(); ++i)
          if (i != 4000 && std::fabs(values[i]) > 1024.0f) values[i] = std::ldexp(values[i], -60);
      const Input in = make_input(dtype, values);
      for (DType bits : kBits) {
        for (int bs : {1, 5, 8, 16, 17, 32, 33, 64, 256, 4096}) {
          for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{15}, std::size_t{16},
                                std::size_t{17}, std::size_t{33}, std::size_t{1000}, std::size_t{5000}}) {
            const QuantSpec spec{bits, bs};
            Input part = in;
            part.exact.resize(n);
            if (dtype == DType::F32)
              part.f32.resize(n);
            else
              part.half.resize(n);
            const std::string what = describe(dtype, spec, n, isa);
            const Quantized ref = run_quantize(part, spec, Isa::Scalar), got = run_quantize(part, spec, isa);
            ASSERT_EQ(got.data, ref.data) << what;
            ASSERT_EQ(0, std::memcmp(got.scales.data(), ref.scales.data(), ref.scales.size() * sizeof(float)))
                << what;

            const std::vector<float> dq_ref = run_dequantize(ref, n, spec, Isa::Scalar);
            const std::vector<float> dq = run_dequantize(ref, n, spec, isa);
            ASSERT_EQ(0, std::memcmp(dq.data(), dq_ref.data(), n * sizeof(float))) << what;
            std::vector<std::uint16_t> bf_ref(n), bf(n);
            dequantize_bf16(ref.data.data(), ref.scales.data(), n, spec, bf_ref.data(), Isa::Scalar);
            dequantize_bf16(ref.data.data(), ref.scales.data(), n, spec, bf.data(), isa);
            ASSERT_EQ(bf, bf_ref) << what;
            std::vector<float> acc_ref(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n));
            std::vector<float> acc = acc_ref;
            dequantize_add(ref.data.data(), ref.scales.data(), n, spec, acc_ref.data(), Isa::Scalar);
            dequantize_add(ref.data.data(), ref.scales.data(), n, spec, acc.data(), isa);
            ASSERT_EQ(0, std::memcmp(acc.data(), acc_ref.data(), n * sizeof(float))) << what;
          }
        }
      }
    }
  }
}

TEST(Quant, ThreadCountDoesNotChangeTheBits) {
  const std::size_t n = (std::size_t{1} << 20) + 77;
  const Input in = make_input(DType::F32, random_values(n, 8));
  for (DType bits : kBits) {
    const QuantSpec spec{bits, 100};
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const Quantized one = run_quantize(in, spec, detected_isa());
    const std::vector<float> dq_one = run_dequantize(one, n, spec, detected_isa());
    omp_set_num_threads(std::max(2, threads));
    const Quantized many = run_quantize(in, spec, detected_isa());
    const std::vector<float> dq_many = run_dequantize(many, n, spec, detected_isa());
    omp_set_num_threads(threads);
    EXPECT_EQ(one.data, many.data);
    EXPECT_EQ(one.scales, many.scales);
    EXPECT_EQ(0, std::memcmp(dq_one.data(), dq_many.data(), n * sizeof(float)));
  }
}
