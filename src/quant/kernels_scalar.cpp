// The scalar reference kernels: one value at a time, straight from the format's definition.
#pragma GCC optimize("fp-contract=off")
#include "quant/kernels.hpp"

namespace strata::quant::detail {

std::size_t quantize_blocks_scalar(Source source, const void* src, std::size_t n, const QuantSpec& spec,
                                   std::size_t first, std::size_t last, std::uint8_t* data, float* scales) {
  const auto bs = static_cast<std::size_t>(spec.block_size);
  const std::size_t stride = block_bytes(spec);
  const int qm = qmax(spec.bits);
  for (std::size_t b = first; b < last; ++b) {
    const std::size_t begin = b * bs, len = block_length(n, bs, b);
    std::uint32_t absmax = 0;
    for (std::size_t i = 0; i < len; ++i)
      absmax = std::max(absmax, abs_bits(load_value(source, src, begin + i)));
    if (absmax >= kInfBits) return b;
    const float scale = block_scale(absmax, qm);
    scales[b] = scale;
    const float inverse = scale > 0.0f ? block_inverse(scale) : 0.0f;  // all zeros: every q is 0
    std::uint8_t* out = data + b * stride;
    if (spec.bits == QuantBits::Int8) {
      for (std::size_t i = 0; i < len; ++i) {
        const int q = quantize_value(load_value(source, src, begin + i), inverse);
        out[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
      }
      zero_block_padding(out, len, stride);
    } else {
      for (std::size_t i = 0; i < len; i += 2) {
        std::uint8_t byte = 0;
        for (std::size_t k = i; k < std::min(i + 2, len); ++k) {
          const int q = quantize_value(load_value(source, src, begin + k), inverse);
          byte |= static_cast<std::uint8_t>((q & 0x0f) << (4 * (k - i)));
        }
        out[i / 2] = byte;
      }
      zero_block_padding(out, (len + 1) / 2, stride);
    }
  }
  return kAllFinite;
}

void dequantize_blocks_scalar(Sink sink, const std::uint8_t* data, const float* scales, std::size_t n,
                              const QuantSpec& spec, std::size_t first, std::size_t last, void* dst) {
  const auto bs = static_cast<std::size_t>(spec.block_size);
  const std::size_t stride = block_bytes(spec);
  for (std::size_t b = first; b < last; ++b) {
    const std::size_t begin = b * bs, len = block_length(n, bs, b);
    const std::uint8_t* in = data + b * stride;
    const float scale = scales[b];
    for (std::size_t i = 0; i < len; ++i) {
      const int q = spec.bits == QuantBits::Int8 ? static_cast<std::int8_t>(in[i]) : int4_value(in[i / 2], i);
      const float value = static_cast<float>(q) * scale;
      switch (sink) {
        case Sink::F32:
          static_cast<float*>(dst)[begin + i] = value;
          break;
        case Sink::BF16:
          static_cast<std::uint16_t*>(dst)[begin + i] = float_to_bf16(value);
          break;
        case Sink::AddF32:
          static_cast<float*>(dst)[begin + i] += value;
          break;
      }
    }
  }
}

}  // namespace strata::quant::detail
