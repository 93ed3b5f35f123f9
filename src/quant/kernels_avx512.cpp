// AVX-512 kernels: 16 values a vector, the block's ragged end handled with lane masks.
// Built with target attributes, not a global -march, so the binary runs on any x86-64.
#pragma GCC optimize("fp-contract=off")
// GCC 12.2 warns falsely on the _mm512_undefined_* placeholders inside its own intrinsics
// (GCC bug 105593, fixed in 12.3); nothing of ours is uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "quant/kernels.hpp"

#define STRATA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace strata::quant::detail {

namespace {

STRATA_AVX512 inline __mmask16 lanes(std::size_t count) {
  return count >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

// 16 values from index i (only the masked lanes read; the others are 0), widened to fp32.
template <Source S>
STRATA_AVX512 inline __m512 load16(const void* src, std::size_t i, __mmask16 mask) {
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
STRATA_AVX512 inline __m512 load16(const void* src, std::size_t i) {
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

// The block's largest |x| as an fp32 bit pattern (NaN and infinity above every finite one).
template <Source S>
STRATA_AVX512 inline std::uint32_t block_absmax_bits(const void* src, std::size_t begin, std::size_t len) {
  if constexpr (S == Source::F32) {
    const __m512i abs_mask = _mm512_set1_epi32(static_cast<int>(kAbsMask));
    const std::size_t full = len & ~std::size_t{15};
    __m512i absmax = _mm512_setzero_si512();
    for (std::size_t i = 0; i < full; i += 16)
      absmax = _mm512_max_epu32(absmax,
                                _mm512_and_si512(_mm512_castps_si512(load16<S>(src, begin + i)), abs_mask));
    if (full < len)
      absmax = _mm512_max_epu32(
          absmax,
          _mm512_and_si512(_mm512_castps_si512(load16<S>(src, begin + full, lanes(len - full))), abs_mask));
    return _mm512_reduce_max_epu32(absmax);
  } else {
    // On the 16-bit patterns, 32 at a time; only the winner is widened.
    const std::uint16_t* p = static_cast<const std::uint16_t*>(src) + begin;
    const __m512i abs_mask = _mm512_set1_epi16(0x7fff);
    const std::size_t full = len & ~std::size_t{31};
    __m512i absmax = _mm512_setzero_si512();
    for (std::size_t i = 0; i < full; i += 32)
      absmax = _mm512_max_epu16(absmax, _mm512_and_si512(_mm512_loadu_si512(p + i), abs_mask));
    if (full < len) {
      const auto mask = static_cast<__mmask32>((std::uint64_t{1} << (len - full)) - 1);
      absmax = _mm512_max_epu16(absmax, _mm512_and_si512(_mm512_maskz_loadu_epi16(mask, p + full), abs_mask));
    }
    const __m512i folded =
        _mm512_max_epu32(_mm512_and_si512(absmax, _mm512_set1_epi32(0xffff)), _mm512_srli_epi32(absmax, 16));
    return widen_abs_bits(S, static_cast<std::uint16_t>(_mm512_reduce_max_epu32(folded)));
  }
}

STRATA_AVX512 inline __m512i quantize16(__m512 x, __m512 inverse) {
  return _mm512_cvt_roundps_epi32(_mm512_mul_ps(x, inverse), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// 16 int4 values -> 8 bytes (low 64 bits): within each 64-bit lane, the odd value's nibble
// is shifted down next to the even value's.
STRATA_AVX512 inline __m128i pack_int4(__m512i q) {
  const __m512i nibbles = _mm512_and_si512(q, _mm512_set1_epi32(0x0f));
  return _mm512_cvtepi64_epi8(_mm512_or_si512(nibbles, _mm512_srli_epi64(nibbles, 28)));
}

// 64 quantized values (4 x 16 int32 in [-127, 127]) -> 64 int8 in order. The in-lane packs
// leave 4-value groups in lane-major order; one dword permute restores value order.
STRATA_AVX512 inline __m512i narrow64(__m512i q0, __m512i q1, __m512i q2, __m512i q3) {
  const __m512i packed = _mm512_packs_epi16(_mm512_packs_epi32(q0, q1), _mm512_packs_epi32(q2, q3));
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                  packed);
}

// Writes the block's used bytes; a scale > 0.
template <Source S, QuantBits B>
STRATA_AVX512 inline void quantize_block(const void* src, std::size_t begin, std::size_t len, float inverse,
                                         std::uint8_t* out) {
  const __m512 inverse_v = _mm512_set1_ps(inverse);
  auto quantize_at = [&](std::size_t i) STRATA_AVX512 {
    return quantize16(load16<S>(src, begin + i), inverse_v);
  };
  std::size_t i = 0;
  for (; i + 64 <= len; i += 64) {
    const __m512i bytes =
        narrow64(quantize_at(i), quantize_at(i + 16), quantize_at(i + 32), quantize_at(i + 48));
    if constexpr (B == QuantBits::Int8) {
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
    if constexpr (B == QuantBits::Int8)
      _mm512_mask_cvtepi32_storeu_epi8(out + i, lanes(rest), q);
    else
      _mm_mask_storeu_epi8(out + i / 2, lanes((rest + 1) / 2), pack_int4(q));
  }
}

template <Source S, QuantBits B>
STRATA_AVX512 std::size_t quantize_range(const void* src, std::size_t n, std::size_t bs, std::size_t first,
                                         std::size_t last, std::uint8_t* data, float* scales) {
  const std::size_t stride = block_bytes(QuantSpec{B, static_cast<int>(bs)});
  const int qm = qmax(B);
  for (std::size_t b = first; b < last; ++b) {
    const std::size_t begin = b * bs, len = block_length(n, bs, b);
    const std::uint32_t absmax = block_absmax_bits<S>(src, begin, len);
    if (absmax >= kInfBits) return b;
    const float scale = block_scale(absmax, qm);
    scales[b] = scale;
    std::uint8_t* out = data + b * stride;
    if (scale == 0.0f) {  // all zeros: x / 0 would be NaN
      std::memset(out, 0, stride);
      continue;
    }
    quantize_block<S, B>(src, begin, len, block_inverse(scale), out);
    zero_block_padding(out, B == QuantBits::Int8 ? len : (len + 1) / 2, stride);
  }
  return kAllFinite;
}

// 16 quantized values from value index i of a block (count of them valid), as fp32 integers.
template <QuantBits B>
STRATA_AVX512 inline __m512 load_q16(const std::uint8_t* in, std::size_t i, std::size_t count) {
  __m512i q;
  if constexpr (B == QuantBits::Int8) {
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
STRATA_AVX512 inline __m512i to_bf16(__m512 value) {
  const __m512i bits = _mm512_castps_si512(value);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  return _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), odd), 16);
}

// Stores 16 results at value index i, only the first `count` of them where count < 16.
template <Sink K>
STRATA_AVX512 inline void store16(void* dst, std::size_t i, __m512 value, std::size_t count) {
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

template <Sink K, QuantBits B>
STRATA_AVX512 void dequantize_range(const std::uint8_t* data, const float* scales, std::size_t n,
                                    std::size_t bs, std::size_t first, std::size_t last, void* dst) {
  const std::size_t stride = block_bytes(QuantSpec{B, static_cast<int>(bs)});
  for (std::size_t b = first; b < last; ++b) {
    const std::size_t begin = b * bs, len = block_length(n, bs, b);
    const std::uint8_t* in = data + b * stride;
    const __m512 scale = _mm512_set1_ps(scales[b]);
    for (std::size_t i = 0; i < len; i += 16) {
      const std::size_t count = len - i;
      store16<K>(dst, begin + i, _mm512_mul_ps(load_q16<B>(in, i, count), scale), count);
    }
  }
}

template <Source S>
std::size_t quantize_bits(const void* src, std::size_t n, const QuantSpec& spec, std::size_t first,
                          std::size_t last, std::uint8_t* data, float* scales) {
  const auto bs = static_cast<std::size_t>(spec.block_size);
  return spec.bits == QuantBits::Int8
             ? quantize_range<S, QuantBits::Int8>(src, n, bs, first, last, data, scales)
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

std::size_t quantize_blocks_avx512(Source source, const void* src, std::size_t n, const QuantSpec& spec,
                                   std::size_t first, std::size_t last, std::uint8_t* data, float* scales) {
  switch (source) {
    case Source::F32:
      return quantize_bits<Source::F32>(src, n, spec, first, last, data, scales);
    case Source::BF16:
      return quantize_bits<Source::BF16>(src, n, spec, first, last, data, scales);
    case Source::F16:
      return quantize_bits<Source::F16>(src, n, spec, first, last, data, scales);
  }
  return kAllFinite;
}

void dequantize_blocks_avx512(Sink sink, const std::uint8_t* data, const float* scales, std::size_t n,
                              const QuantSpec& spec, std::size_t first, std::size_t last, void* dst) {
  switch (sink) {
    case Sink::F32:
      return dequantize_bits<Sink::F32>(data, scales, n, spec, first, last, dst);
    case Sink::BF16:
      return dequantize_bits<Sink::BF16>(data, scales, n, spec, first, last, dst);
    case Sink::AddF32:
      return dequantize_bits<Sink::AddF32>(data, scales, n, spec, first, last, dst);
  }
}

}  // namespace strata::quant::detail
