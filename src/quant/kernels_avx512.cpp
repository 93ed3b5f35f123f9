// AVX-512 build of the block kernels: 16 values a vector, a block's ragged end handled with
// lane masks, so the vector parts cover whole blocks.
#pragma GCC optimize("fp-contract=off")
// GCC 12's own AVX-512 headers build "undefined" vectors by self-initialisation, which its
// uninitialised-value warnings then flag at every inlined use (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "quant/kernels.hpp"

// Everything below, and only it, may use AVX-512; pick_for_isa() picks it only on CPUs that
// have it. Standard headers stay above, compiled for the baseline.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

namespace strata::quant::detail::isa_avx512 {
namespace {

inline __mmask16 lanes(std::size_t count) {
  return count >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

// 16 values from index i (only the masked lanes read; the others are 0), widened to fp32.
template <Source S>
inline __m512 load16(const void* src, std::size_t i, __mmask16 mask) {
  if constexpr (S == Source::F32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(src) + i);
  } else {
    const __m256i halves = _mm256_maskz_loadu_epi16(mask, static_cast<const std::uint16_t*>(src) + i);
    if constexpr (S == Source::BF16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
    else
      return _mm512_cvtph_ps(halves);  // exact, subnormals included
  }
}

template <Source S>
inline __m512 load16(const void* src, std::size_t i) {
  if constexpr (S == Source::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(src) + i);
  } else {
    const __m256i halves =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(src) + i));
    if constexpr (S == Source::BF16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
    else
      return _mm512_cvtph_ps(halves);
  }
}

template <Source S>
std::size_t absmax_head(const void* src, std::size_t begin, std::size_t len, std::uint32_t& absmax) {
  if constexpr (S == Source::F32) {
    const __m512i abs_mask = _mm512_set1_epi32(static_cast<int>(kAbsMask));
    const std::size_t full = len & ~std::size_t{15};
    __m512i m = _mm512_setzero_si512();
    for (std::size_t i = 0; i < full; i += 16)
      m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_castps_si512(load16<S>(src, begin + i)), abs_mask));
    if (full < len)
      m = _mm512_max_epu32(
          m, _mm512_and_si512(_mm512_castps_si512(load16<S>(src, begin + full, lanes(len - full))), abs_mask));
    absmax = _mm512_reduce_max_epu32(m);
  } else {
    // On the 16-bit patterns, 32 at a time; only the winner is widened.
    const std::uint16_t* p = static_cast<const std::uint16_t*>(src) + begin;
    const __m512i abs_mask = _mm512_set1_epi16(0x7fff);
    const std::size_t full = len & ~std::size_t{31};
    __m512i m = _mm512_setzero_si512();
    for (std::size_t i = 0; i < full; i += 32)
      m = _mm512_max_epu16(m, _mm512_and_si512(_mm512_loadu_si512(p + i), abs_mask));
    if (full < len) {
      const auto mask = static_cast<__mmask32>((std::uint64_t{1} << (len - full)) - 1);
      m = _mm512_max_epu16(m, _mm512_and_si512(_mm512_maskz_loadu_epi16(mask, p + full), abs_mask));
    }
    const __m512i folded =
        _mm512_max_epu32(_mm512_and_si512(m, _mm512_set1_epi32(0xffff)), _mm512_srli_epi32(m, 16));
    absmax = widen_abs_bits(S, static_cast<std::uint16_t>(_mm512_reduce_max_epu32(folded)));
  }
  return len;
}

inline __m512i quantize16(__m512 x, __m512 inverse) {
  return _mm512_cvt_roundps_epi32(_mm512_mul_ps(x, inverse), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// 16 int4 values -> 8 bytes (low 64 bits): within each 64-bit lane, the odd value's nibble
// is shifted down next to the even value's.
inline __m128i pack_int4(__m512i q) {
  const __m512i nibbles = _mm512_and_si512(q, _mm512_set1_epi32(0x0f));
  return _mm512_cvtepi64_epi8(_mm512_or_si512(nibbles, _mm512_srli_epi64(nibbles, 28)));
}

// 64 quantized values (4 x 16 int32 in [-127, 127]) -> 64 int8 in order. The in-lane packs
// leave 4-value groups in lane-major order; one dword permute restores value order.
inline __m512i narrow64(__m512i q0, __m512i q1, __m512i q2, __m512i q3) {
  const __m512i packed = _mm512_packs_epi16(_mm512_packs_epi32(q0, q1), _mm512_packs_epi32(q2, q3));
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                  packed);
}

// The whole block: 64 values at a time, then 16 at a time, the last vector masked.
template <Source S, DType B>
std::size_t quantize_head(const void* src, std::size_t begin, std::size_t len, float inverse, std::uint8_t* out) {
  const __m512 inverse_v = _mm512_set1_ps(inverse);
  auto quantize_at = [&](std::size_t i) { return quantize16(load16<S>(src, begin + i), inverse_v); };
  std::size_t i = 0;
  for (; i + 64 <= len; i += 64) {
    const __m512i bytes =
        narrow64(quantize_at(i), quantize_at(i + 16), quantize_at(i + 32), quantize_at(i + 48));
    if constexpr (B == DType::I8) {
      _mm512_storeu_si512(out + i, bytes);
    } else {
      // Each 16-bit lane holds an (even, odd) pair. Bit select (0xd8: mask ? b : a) takes the
      // low nibble from the pair and bits 4..7 from the pair shifted right by 4, i.e. the odd
      // value's nibble; the high byte is dropped by the narrowing.
      const __m512i pairs = _mm512_ternarylogic_epi32(bytes, _mm512_srli_epi16(bytes, 4),
                                                      _mm512_set1_epi16(0x00f0), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i / 2), _mm512_cvtepi16_epi8(pairs));
    }
  }
  for (; i < len; i += 16) {
    const std::size_t rest = len - i;  // lanes past the end load 0 and quantize to 0
    const __m512i q = quantize16(load16<S>(src, begin + i, lanes(rest)), inverse_v);
    if constexpr (B == DType::I8)
      _mm512_mask_cvtepi32_storeu_epi8(out + i, lanes(rest), q);
    else
      _mm_mask_storeu_epi8(out + i / 2, lanes((rest + 1) / 2), pack_int4(q));
  }
  return len;
}

// 16 quantized values from value index i of a block (count of them valid), as fp32 integers.
template <DType B>
inline __m512 load_q16(const std::uint8_t* in, std::size_t i, std::size_t count) {
  __m512i q;
  if constexpr (B == DType::I8) {
    const __m128i bytes = count >= 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))
                                      : _mm_maskz_loadu_epi8(lanes(count), in + i);
    q = _mm512_cvtepi8_epi32(bytes);
  } else {
    const __m128i bytes = count >= 16 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i / 2))
                                      : _mm_maskz_loadu_epi8(lanes((count + 1) / 2), in + i / 2);
    // Byte k in 64-bit lane k; shifted copies put its low nibble at the top of the lane's low
    // 32 bits and its high nibble at the top of the high 32 bits; an arithmetic shift
    // sign-extends both.
    const __m512i wide = _mm512_cvtepu8_epi64(bytes);
    q = _mm512_srai_epi32(_mm512_or_si512(_mm512_slli_epi64(wide, 28), _mm512_slli_epi64(wide, 56)), 28);
  }
  return _mm512_cvtepi32_ps(q);
}

// fp32 -> bf16 bit patterns, as float_to_bf16 does it, in 32-bit lanes. Its NaN case is left
// out: a dequantized value is an integer times a finite scale (scales are checked), never NaN.
inline __m512i to_bf16(__m512 value) {
  const __m512i bits = _mm512_castps_si512(value);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  return _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), odd), 16);
}

// Stores 16 results at value index i, only the first `count` of them where count < 16.
template <Sink K>
inline void store16(void* dst, std::size_t i, __m512 value, std::size_t count) {
  if constexpr (K == Sink::F32) {
    float* p = static_cast<float*>(dst) + i;
    if (count >= 16)
      _mm512_storeu_ps(p, value);
    else
      _mm512_mask_storeu_ps(p, lanes(count), value);
  } else if constexpr (K == Sink::AddF32) {
    float* p = static_cast<float*>(dst) + i;
    if (count >= 16)
      _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), value));
    else
      _mm512_mask_storeu_ps(p, lanes(count), _mm512_add_ps(_mm512_maskz_loadu_ps(lanes(count), p), value));
  } else {
    std::uint16_t* p = static_cast<std::uint16_t*>(dst) + i;
    if (count >= 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(to_bf16(value)));
    else
      _mm512_mask_cvtepi32_storeu_epi16(p, lanes(count), to_bf16(value));
  }
}

// The whole block, the last vector masked.
template <Sink K, DType B>
std::size_t dequantize_head(const std::uint8_t* in, float scale, std::size_t len, void* dst, std::size_t begin) {
  const __m512 scale_v = _mm512_set1_ps(scale);
  for (std::size_t i = 0; i < len; i += 16) {
    const std::size_t count = len - i;
    store16<K>(dst, begin + i, _mm512_mul_ps(load_q16<B>(in, i, count), scale_v), count);
  }
  return len;
}

#include "quant/kernels_impl.inc"

}  // namespace

#pragma GCC pop_options

const BlockKernels& table() {
  static const BlockKernels k{quantize_blocks, dequantize_blocks};
  return k;
}

}  // namespace strata::quant::detail::isa_avx512
