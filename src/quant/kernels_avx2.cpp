// AVX2 build of the block kernels: vector parts of 8 values a vector (16 for the absmax of
// 16-bit sources); a block's last few values go through the scalar reference in the .inc.
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include "quant/kernels.hpp"

// Everything below, and only it, may use AVX2; pick_for_isa() picks it only on CPUs that
// have it. Standard headers stay above, compiled for the baseline.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace strata::quant::detail::isa_avx2 {
namespace {

template <Source S>
inline __m256 load8(const void* src, std::size_t i) {
  if constexpr (S == Source::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(src) + i);
  } else {
    const __m128i halves =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(src) + i));
    if constexpr (S == Source::BF16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
    else
      return _mm256_cvtph_ps(halves);  // exact, subnormals included
  }
}

inline std::uint32_t reduce_max_epu32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
}

template <Source S>
std::size_t absmax_head(const void* src, std::size_t begin, std::size_t len, std::uint32_t& absmax) {
  std::size_t i = 0;
  if constexpr (S == Source::F32) {
    const __m256i abs_mask = _mm256_set1_epi32(static_cast<int>(kAbsMask));
    __m256i m = _mm256_setzero_si256();
    for (; i + 8 <= len; i += 8)
      m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(load8<S>(src, begin + i)), abs_mask));
    absmax = reduce_max_epu32(m);
  } else {
    // On the 16-bit patterns, 16 at a time; only the winner is widened.
    const std::uint16_t* p = static_cast<const std::uint16_t*>(src) + begin;
    const __m256i abs_mask = _mm256_set1_epi16(0x7fff);
    __m256i m = _mm256_setzero_si256();
    for (; i + 16 <= len; i += 16)
      m = _mm256_max_epu16(
          m, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), abs_mask));
    const __m256i folded =
        _mm256_max_epu32(_mm256_and_si256(m, _mm256_set1_epi32(0xffff)), _mm256_srli_epi32(m, 16));
    absmax = widen_abs_bits(S, static_cast<std::uint16_t>(reduce_max_epu32(folded)));
  }
  return i;
}

inline __m256i quantize8(__m256 x, __m256 inverse) {
  const __m256 rounded = _mm256_round_ps(_mm256_mul_ps(x, inverse), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_cvttps_epi32(rounded);  // exact: already an integer
}

// 32 quantized values (4 x 8 int32 in [-127, 127]) -> 32 int8 in order. The in-lane packs
// leave 4-value groups in lane-major order; one dword permute restores value order.
inline __m256i narrow32(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Whole vectors of 8 values: 32 at a time, then 8 at a time.
template <Source S, DType B>
std::size_t quantize_head(const void* src, std::size_t begin, std::size_t len, float inverse, std::uint8_t* out) {
  const __m256 inverse_v = _mm256_set1_ps(inverse);
  auto quantize_at = [&](std::size_t i) { return quantize8(load8<S>(src, begin + i), inverse_v); };
  std::size_t i = 0;
  for (; i + 32 <= len; i += 32) {
    const __m256i bytes =
        narrow32(quantize_at(i), quantize_at(i + 8), quantize_at(i + 16), quantize_at(i + 24));
    if constexpr (B == DType::I8) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bytes);
    } else {
      // Each 16-bit lane holds an (even, odd) pair: odd nibble up next to the even one.
      const __m256i pairs =
          _mm256_or_si256(_mm256_and_si256(bytes, _mm256_set1_epi16(0x000f)),
                          _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi16(0x00f0)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i / 2),
                       _mm_packus_epi16(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1)));
    }
  }
  for (; i + 8 <= len; i += 8) {
    const __m256i q = quantize_at(i);
    const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    const __m128i bytes = _mm_packs_epi16(words, words);  // 8 int8 in the low 64 bits
    if constexpr (B == DType::I8) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), bytes);
    } else {
      const __m128i pairs = _mm_or_si128(_mm_and_si128(bytes, _mm_set1_epi16(0x000f)),
                                         _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi16(0x00f0)));
      const auto four = static_cast<std::uint32_t>(_mm_cvtsi128_si32(_mm_packus_epi16(pairs, pairs)));
      std::memcpy(out + i / 2, &four, sizeof four);
    }
  }
  return i;
}

// 16 quantized values from value index i of a block, as int8 in order.
template <DType B>
inline __m128i load_q16(const std::uint8_t* in, std::size_t i) {
  if constexpr (B == DType::I8) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
  } else {
    // Low and high nibbles of 8 bytes, interleaved back into value order, then sign-extended
    // from 4 bits: (v ^ 8) - 8.
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i / 2));
    const __m128i nibble = _mm_set1_epi8(0x0f);
    const __m128i values = _mm_unpacklo_epi8(_mm_and_si128(bytes, nibble),
                                             _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble));
    const __m128i eight = _mm_set1_epi8(8);
    return _mm_sub_epi8(_mm_xor_si128(values, eight), eight);
  }
}

// fp32 -> bf16 bit patterns in 32-bit lanes, as float_to_bf16 does it. Its NaN case is left
// out: a dequantized value is an integer times a finite scale (scales are checked).
inline __m256i to_bf16(__m256 value) {
  const __m256i bits = _mm256_castps_si256(value);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), odd), 16);
}

// Whole groups of 16 values.
template <Sink K, DType B>
std::size_t dequantize_head(const std::uint8_t* in, float scale, std::size_t len, void* dst, std::size_t begin) {
  const std::size_t full = len & ~std::size_t{15};
  const __m256 scale_v = _mm256_set1_ps(scale);
  for (std::size_t i = 0; i < full; i += 16) {
    const __m128i q = load_q16<B>(in, i);
    const __m256 low = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), scale_v);
    const __m256 high = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), scale_v);
    if constexpr (K == Sink::F32) {
      float* p = static_cast<float*>(dst) + begin + i;
      _mm256_storeu_ps(p, low);
      _mm256_storeu_ps(p + 8, high);
    } else if constexpr (K == Sink::AddF32) {
      float* p = static_cast<float*>(dst) + begin + i;
      _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), low));
      _mm256_storeu_ps(p + 8, _mm256_add_ps(_mm256_loadu_ps(p + 8), high));
    } else {
      // The in-lane pack interleaves 4-value groups of the halves; a qword permute restores order.
      const __m256i packed = _mm256_packus_epi32(to_bf16(low), to_bf16(high));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<std::uint16_t*>(dst) + begin + i),
                          _mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0)));
    }
  }
  return full;
}

#include "quant/kernels_impl.inc"

}  // namespace

#pragma GCC pop_options

const BlockKernels& table() {
  static const BlockKernels k{quantize_blocks, dequantize_blocks};
  return k;
}

}  // namespace strata::quant::detail::isa_avx2
