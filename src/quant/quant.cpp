// Sizes, argument checks, kernel choice and the split of blocks over threads.
// fp-contract off like the kernels: kernels.hpp's shared arithmetic is inlined here too.
#pragma GCC optimize("fp-contract=off")
#include "quant/quant.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.hpp"
#include "quant/kernels.hpp"

namespace strata::quant {

using namespace detail;

namespace {

// Below this many values a buffer is handled by the calling thread: waking the team costs
// more than the work. Chunks of about this many values keep each thread's share streaming.
constexpr std::size_t kParallelMinValues = std::size_t{1} << 18;
constexpr std::size_t kChunkValues = std::size_t{1} << 15;

// Calls work(first, last) on consecutive ranges of whole blocks, in parallel for large
// buffers; returns the smallest block index any call returned (kAllFinite if none did).
template <class Work>
std::size_t for_block_ranges(std::size_t n, const QuantSpec& spec, Work work) {
  const std::size_t blocks = num_blocks(n, spec);
  const std::size_t per_chunk =
      std::max<std::size_t>(1, kChunkValues / static_cast<std::size_t>(spec.block_size));
  const auto chunks = static_cast<std::ptrdiff_t>((blocks + per_chunk - 1) / per_chunk);
  std::size_t first_bad = kAllFinite;
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (n >= kParallelMinValues)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const std::size_t first = static_cast<std::size_t>(c) * per_chunk;
    first_bad = std::min(first_bad, work(first, std::min(blocks, first + per_chunk)));
  }
  return first_bad;
}

void check_spec(const QuantSpec& spec) {
  if (spec.block_size <= 0)
    throw Error(fmt::format("quant: block_size = {} must be a positive number of values", spec.block_size));
  if (!is_quantized(spec.dtype))
    throw Error(fmt::format("quant: {} is not a quantized format (int8 or int4)", dtype_name(spec.dtype)));
}

const BlockKernels& kernels_for(Isa isa) {
  return pick_for_isa("quant", isa, isa_scalar::table, isa_avx2::table, isa_avx512::table);
}

void run_quantize(Source source, const void* src, std::size_t n, const QuantSpec& spec, std::uint8_t* data,
                  float* scales, Isa isa) {
  check_spec(spec);
  const QuantizeBlocks kernel = kernels_for(isa).quantize;
  const std::size_t bad = for_block_ranges(n, spec, [&](std::size_t first, std::size_t last) {
    return kernel(source, src, n, spec, first, last, data, scales);
  });
  if (bad == kAllFinite) return;
  const auto bs = static_cast<std::size_t>(spec.block_size);
  const std::size_t begin = bad * bs, len = block_length(n, bs, bad);
  std::uint32_t absmax = 0;
  for (std::size_t i = 0; i < len; ++i)
    absmax = std::max(absmax, abs_bits(load_value(source, src, begin + i)));
  throw Error(
      fmt::format("quantize: block {} (values {}..{}) holds {}; non-finite values cannot be quantized", bad,
                  begin, begin + len - 1, absmax > kInfBits ? "a NaN" : "an infinity"));
}

void run_dequantize(Sink sink, const std::uint8_t* data, const float* scales, std::size_t n,
                    const QuantSpec& spec, void* dst, Isa isa) {
  check_spec(spec);
  const DequantizeBlocks kernel = kernels_for(isa).dequantize;
  // Checked up front so a bad scale leaves dst untouched (dequantize_add must not half-add).
  const std::size_t blocks = num_blocks(n, spec);
  for (std::size_t b = 0; b < blocks; ++b) {
    if (std::bit_cast<std::uint32_t>(scales[b]) >= kInfBits)  // sign set, infinity or NaN
      throw Error(fmt::format("dequantize: scale of block {} is {}; scales must be finite and not negative",
                              b, scales[b]));
  }
  for_block_ranges(n, spec, [&](std::size_t first, std::size_t last) {
    kernel(sink, data, scales, n, spec, first, last, dst);
    return kAllFinite;
  });
}

}  // namespace

int qmax(DType dtype) { return dtype == DType::I8 ? 127 : 7; }

std::size_t block_bytes(const QuantSpec& spec) {
  check_spec(spec);
  const auto bs = static_cast<std::size_t>(spec.block_size);
  return spec.dtype == DType::I8 ? bs : (bs + 1) / 2;
}

std::size_t num_blocks(std::size_t n, const QuantSpec& spec) {
  check_spec(spec);
  const auto bs = static_cast<std::size_t>(spec.block_size);
  return (n + bs - 1) / bs;
}

std::size_t quantized_bytes(std::size_t n, const QuantSpec& spec) {
  return num_blocks(n, spec) * block_bytes(spec);
}

void quantize(const float* src, std::size_t n, const QuantSpec& spec, std::uint8_t* data, float* scales,
              Isa isa) {
  run_quantize(Source::F32, src, n, spec, data, scales, isa);
}

void quantize_bf16(const std::uint16_t* src, std::size_t n, const QuantSpec& spec, std::uint8_t* data,
                   float* scales, Isa isa) {
  run_quantize(Source::BF16, src, n, spec, data, scales, isa);
}

void quantize_fp16(const std::uint16_t* src, std::size_t n, const QuantSpec& spec, std::uint8_t* data,
                   float* scales, Isa isa) {
  run_quantize(Source::F16, src, n, spec, data, scales, isa);
}

void dequantize(const std::uint8_t* data, const float* scales, std::size_t n, const QuantSpec& spec,
                float* dst, Isa isa) {
  run_dequantize(Sink::F32, data, scales, n, spec, dst, isa);
}

void dequantize_bf16(const std::uint8_t* data, const float* scales, std::size_t n, const QuantSpec& spec,
                     std::uint16_t* dst, Isa isa) {
  run_dequantize(Sink::BF16, data, scales, n, spec, dst, isa);
}

void dequantize_add(const std::uint8_t* data, const float* scales, std::size_t n, const QuantSpec& spec,
                    float* dst, Isa isa) {
  run_dequantize(Sink::AddF32, data, scales, n, spec, dst, isa);
}

}  // namespace strata::quant
