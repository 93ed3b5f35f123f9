// AVX2 kernels: 8 values a step; the block's last len % 8 values go through the scalar
// reference functions, which compute the same IEEE operations.
// Built with target attributes, not a global -march, so the binary runs on any x86-64.
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include "quant/kernels.hpp"

#define STRATA_AVX2 __attribute__((target("avx2,f16c")))

namespace strata::quant::detail {

namespace {

template <Source S>
STRATA_AVX2 inline __m256 load8(const void* src, std::size_t i) {
  if constexpr (S == Source::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(src) + i);
  } else {
    const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(src) + i));
    if constexpr (S == Source::BF16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
    else
      return _mm256_cvtph_ps(halves);  // exact, subnormals included
  }
}

STRATA_AVX2 inline std::uint32_t reduce_max_epu32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
}

STRATA_AVX2 inline __m256i quantize8(__m256 x, __m256 scale, __m256i qmax) {
  const __m256 rounded = _mm256_round_ps(_mm256_div_ps(x, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256i q = _mm256_cvttps_epi32(rounded);  // exact: already an integer
  return _mm256_min_epi32(_mm256_max_epi32(q, _mm256_sub_epi32(_mm256_setzero_si256(), qmax)), qmax);
}

// 8 int32 in [-127, 127] -> 8 int8 in the low 64 bits.
STRATA_AVX2 inline __m128i narrow_to_int8(__m256i q) {
  const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  return _mm_packs_epi16(words, words);
}

// 8 int4 values (as int8 in the low 64 bits) -> 4 bytes, even value in the low nibble.
STRATA_AVX2 inline std::uint32_t pack_int4(__m128i bytes) {
  const __m128i low = _mm_and_si128(bytes, _mm_set1_epi16(0x000f));
  const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi16(0x00f0));
  const __m128i packed = _mm_packus_epi16(_mm_or_si128(low, high), _mm_setzero_si128());
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(packed));
}

template <Source S, QuantBits B>
STRATA_AVX2 std::size_t quantize_range(const void* src, std::size_t n, std::size_t bs, std::size_t first,
                                       std::size_t last, std::uint8_t* data, float* scales) {
  const QuantSpec spec{B, static_cast<int>(bs)};
  const std::size_t stride = block_bytes(spec);
  const int qm = qmax(B);
  const __m256i qmax_v = _mm256_set1_epi32(qm);
  const __m256i abs_mask = _mm256_set1_epi32(static_cast<int>(kAbsMask));
  for (std::size_t b = first; b < last; ++b) {
    const std::size_t begin = b * bs, len = block_length(n, bs, b), full = len & ~std::size_t{7};
    __m256i absmax_v = _mm256_setzero_si256();
    for (std::size_t i = 0; i < full; i += 8)
      absmax_v = _mm256_max_epu32(absmax_v, _mm256_and_si256(_mm256_castps_si256(load8<S>(src, begin + i)), abs_mask));
    std::uint32_t absmax = reduce_max_epu32(absmax_v);
    for (std::size_t i = full; i < len; ++i) absmax = std::max(absmax, abs_bits(load_value(S, src, begin + i)));
    if (absmax >= kInfBits) return b;
    const float scale = block_scale(absmax, qm);
    scales[b] = scale;
    std::uint8_t* out = data + b * stride;
    if (scale == 0.0f) {  // all zeros: x / 0 would be NaN
      std::memset(out, 0, stride);
      continue;
    }
    const __m256 scale_v = _mm256_set1_ps(scale);
    if constexpr (B == QuantBits::Int8) {
      for (std::size_t i = 0; i < full; i += 8)
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i),
                         narrow_to_int8(quantize8(load8<S>(src, begin + i), scale_v, qmax_v)));
      for (std::size_t i = full; i < len; ++i)
        out[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(quantize_value(load_value(S, src, begin + i), scale, qm)));
      zero_block_padding(out, len, stride);
    } else {
      for (std::size_t i = 0; i < full; i += 8) {
        const std::uint32_t packed = pack_int4(narrow_to_int8(quantize8(load8<S>(src, begin + i), scale_v, qmax_v)));
        std::memcpy(out + i / 2, &packed, sizeof packed);
      }
      for (std::size_t i = full; i < len; i += 2) {
        std::uint8_t byte = static_cast<std::uint8_t>(quantize_value(load_value(S, src, begin + i), scale, qm) & 0x0f);
        if (i + 1 < len)
          byte |= static_cast<std::uint8_t>((quantize_value(load_value(S, src, begin + i + 1), scale, qm) & 0x0f) << 4);
        out[i / 2] = byte;
      }
      zero_block_padding(out, (len + 1) / 2, stride);
    }
  }
  return kAllFinite;
}

// 8 quantized values from value index i of a block, as fp32 integers.
template <QuantBits B>
STRATA_AVX2 inline __m256 load_q8(const std::uint8_t* in, std::size_t i) {
  __m256i q;
  if constexpr (B == QuantBits::Int8) {
    q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i)));
  } else {
    std::int32_t four;
    std::memcpy(&four, in + i / 2, sizeof four);
    // Byte k in 64-bit lane k; shifted copies put its low nibble at the top of the lane's low
    // 32 bits and its high nibble at the top of the high 32 bits; an arithmetic shift
    // sign-extends both.
    const __m256i wide = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(four));
    q = _mm256_srai_epi32(_mm256_or_si256(_mm256_slli_epi64(wide, 28), _mm256_slli_epi64(wide, 56)), 28);
  }
  return _mm256_cvtepi32_ps(q);
}

// fp32 -> bf16 bit patterns, as float_to_bf16 does it, 8 lanes into 16 bytes.
STRATA_AVX2 inline __m128i to_bf16(__m256 value) {
  const __m256i bits = _mm256_castps_si256(value);
  const __m256i high = _mm256_srli_epi32(bits, 16);
  const __m256i odd = _mm256_and_si256(high, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
  // |bits| fits in 31 bits, so the signed compare is an unsigned one.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int>(kAbsMask))),
                                         _mm256_set1_epi32(static_cast<int>(kInfBits)));
  const __m256i quiet_nan = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  const __m256i result = _mm256_blendv_epi8(rounded, quiet_nan, nan);
  return _mm_packus_epi32(_mm256_castsi256_si128(result), _mm256_extracti128_si256(result, 1));
}

template <Sink K, QuantBits B>
STRATA_AVX2 void dequantize_range(const std::uint8_t* data, const float* scales, std::size_t n, std::size_t bs,
                                  std::size_t first, std::size_t last, void* dst) {
  const std::size_t stride = block_bytes(QuantSpec{B, static_cast<int>(bs)});
  for (std::size_t b = first; b < last; ++b) {
    const std::size_t begin = b * bs, len = block_length(n, bs, b), full = len & ~std::size_t{7};
    const std::uint8_t* in = data + b * stride;
    const float scale = scales[b];
    const __m256 scale_v = _mm256_set1_ps(scale);
    for (std::size_t i = 0; i < full; i += 8) {
      const __m256 value = _mm256_mul_ps(load_q8<B>(in, i), scale_v);
      if constexpr (K == Sink::F32) {
        _mm256_storeu_ps(static_cast<float*>(dst) + begin + i, value);
      } else if constexpr (K == Sink::AddF32) {
        float* p = static_cast<float*>(dst) + begin + i;
        _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), value));
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<std::uint16_t*>(dst) + begin + i), to_bf16(value));
      }
    }
    for (std::size_t i = full; i < len; ++i) {
      const int q = B == QuantBits::Int8 ? static_cast<std::int8_t>(in[i]) : int4_value(in[i / 2], i);
      const float value = static_cast<float>(q) * scale;
      if constexpr (K == Sink::F32) static_cast<float*>(dst)[begin + i] = value;
      else if constexpr (K == Sink::AddF32) static_cast<float*>(dst)[begin + i] += value;
      else static_cast<std::uint16_t*>(dst)[begin + i] = float_to_bf16(value);
    }
  }
}

template <Source S>
std::size_t quantize_bits(const void* src, std::size_t n, const QuantSpec& spec, std::size_t first, std::size_t last,
                          std::uint8_t* data, float* scales) {
  const auto bs = static_cast<std::size_t>(spec.block_size);
  return spec.bits == QuantBits::Int8 ? quantize_range<S, QuantBits::Int8>(src, n, bs, first, last, data, scales)
                                      : quantize_range<S, QuantBits::Int4>(src, n, bs, first, last, data, scales);
}

template <Sink K>
void dequantize_bits(const std::uint8_t* data, const float* scales, std::size_t n, const QuantSpec& spec,
                     std::size_t first, std::size_t last, void* dst) {
  const auto bs = static_cast<std::size_t>(spec.block_size);
  if (spec.bits == QuantBits::Int8)
    dequantize_range<K, QuantBits::Int8>(data, scales, n, bs, first, last, dst);
  else
    dequantize_range<K, QuantBits::Int4>(data, scales, n, bs, first, last, dst);
}

}  // namespace

std::size_t quantize_blocks_avx2(Source source, const void* src, std::size_t n, const QuantSpec& spec,
                                 std::size_t first, std::size_t last, std::uint8_t* data, float* scales) {
  switch (source) {
    case Source::F32: return quantize_bits<Source::F32>(src, n, spec, first, last, data, scales);
    case Source::BF16: return quantize_bits<Source::BF16>(src, n, spec, first, last, data, scales);
    case Source::F16: return quantize_bits<Source::F16>(src, n, spec, first, last, data, scales);
  }
  return kAllFinite;
}

void dequantize_blocks_avx2(Sink sink, const std::uint8_t* data, const float* scales, std::size_t n,
                            const QuantSpec& spec, std::size_t first, std::size_t last, void* dst) {
  switch (sink) {
    case Sink::F32: return dequantize_bits<Sink::F32>(data, scales, n, spec, first, last, dst);
    case Sink::BF16: return dequantize_bits<Sink::BF16>(data, scales, n, spec, first, last, dst);
    case Sink::AddF32: return dequantize_bits<Sink::AddF32>(data, scales, n, spec, first, last, dst);
  }
}

}  // namespace strata::quant::detail
