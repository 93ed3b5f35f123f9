// INT8/INT4 block quantization in quant/quant.hpp's format, with quant/kernels.hpp's
// arithmetic operation for operation: absmax on bit patterns, scale = max(absmax / qmax,
// FLT_MIN) stepped down one ulp if qmax * scale overflows, q = rne(x * (1 / scale)), and back
// q * scale (then + dst); every operation an explicit round-to-nearest intrinsic, which nvcc
// never fuses. One warp per quantization block.
#include <cfloat>

#include "device/cuda/launch.cuh"

namespace strata::device::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr std::uint32_t kAbsMask = 0x7fffffffu;
constexpr std::uint32_t kInfBits = 0x7f800000u;

enum class Sink { F32, BF16, AddF32 };

struct Format {
  std::size_t n, blocks, block_bytes;
  int block_size, qmax;
};

Format make_format(const char* name, std::size_t n, const quant::QuantSpec& f) {
  require(is_quantized(f.dtype), name, "dtype is not int8 or int4");
  require(f.block_size > 0, name,
          "block_size = " + std::to_string(f.block_size) + " must be a positive number of values");
  const auto bs = static_cast<std::size_t>(f.block_size);
  const bool int8 = f.dtype == DType::I8;
  return {n, (n + bs - 1) / bs, int8 ? bs : (bs + 1) / 2, f.block_size, int8 ? 127 : 7};
}

// The blocks a warp handles: warp w of the grid takes blocks w, w + warps in the grid, ...
__device__ __forceinline__ std::size_t first_block() {
  return blockIdx.x * static_cast<std::size_t>(kWarps) + threadIdx.x / kWarp;
}
__device__ __forceinline__ std::size_t block_stride() { return static_cast<std::size_t>(gridDim.x) * kWarps; }
// Values in block b: block_size, or fewer for the last block.
__device__ __forceinline__ int block_length(const Format& f, std::size_t b) {
  const std::size_t rest = f.n - b * f.block_size;
  return static_cast<int>(rest < static_cast<std::size_t>(f.block_size) ? rest : f.block_size);
}

template <bool kBf16>
__device__ __forceinline__ float load(const void* src, std::size_t i) {
  if constexpr (kBf16)
    return from_bf16_bits(static_cast<const std::uint16_t*>(src)[i]);
  else
    return static_cast<const float*>(src)[i];
}

__device__ __forceinline__ float block_scale(std::uint32_t absmax_bits, int qmax) {
  const float q = static_cast<float>(qmax);
  const float scale = fmaxf(__fdiv_rn(__uint_as_float(absmax_bits), q), FLT_MIN);
  return isinf(__fmul_rn(scale, q)) ? nextafterf(scale, 0.f) : scale;
}

__device__ __forceinline__ int quantize_value(float x, float inverse) { return __float2int_rn(__fmul_rn(x, inverse)); }

template <bool kBf16, int kBits>
__global__ void quantize_kernel(std::uint8_t* data, float* scales, const void* src, Format f,
                                unsigned long long* first_bad) {
  const int lane = threadIdx.x % kWarp;
  for (std::size_t b = first_block(); b < f.blocks; b += block_stride()) {
    const std::size_t begin = b * f.block_size;
    const int len = block_length(f, b);
    std::uint32_t absmax = 0;
    for (int i = lane; i < len; i += kWarp) absmax = max(absmax, __float_as_uint(load<kBf16>(src, begin + i)) & kAbsMask);
    absmax = __reduce_max_sync(0xffffffffu, absmax);
    if (absmax >= kInfBits) {  // NaN or infinity: the block stays unwritten, the caller is told
      if (lane == 0 && first_bad) atomicMin(first_bad, static_cast<unsigned long long>(b));
      continue;
    }
    std::uint8_t* out = data + b * f.block_bytes;
    const int block_bytes = static_cast<int>(f.block_bytes);
    if (absmax == 0) {
      for (int i = lane; i < block_bytes; i += kWarp) out[i] = 0;
      if (lane == 0) scales[b] = 0.f;
      continue;
    }
    const float scale = block_scale(absmax, f.qmax);
    const float inverse = __fdiv_rn(1.f, scale);
    int used;
    if constexpr (kBits == 8) {
      used = len;
      for (int i = lane; i < len; i += kWarp)
        out[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(quantize_value(load<kBf16>(src, begin + i), inverse)));
    } else {
      used = (len + 1) / 2;
      for (int j = lane; j < used; j += kWarp) {
        const int lo = quantize_value(load<kBf16>(src, begin + 2 * j), inverse);
        const int hi = 2 * j + 1 < len ? quantize_value(load<kBf16>(src, begin + 2 * j + 1), inverse) : 0;
        out[j] = static_cast<std::uint8_t>((lo & 0x0f) | (hi & 0x0f) << 4);
      }
    }
    for (int i = used + lane; i < block_bytes; i += kWarp) out[i] = 0;  // a short last block's padding
    if (lane == 0) scales[b] = scale;
  }
}

template <int kBits>
__device__ __forceinline__ int quantized(const std::uint8_t* block, int i) {
  if constexpr (kBits == 8) {
    return static_cast<std::int8_t>(block[i]);
  } else {
    const int nibble = (i & 1) ? (block[i / 2] >> 4) : (block[i / 2] & 0x0f);
    return nibble >= 8 ? nibble - 16 : nibble;
  }
}

// dst[i] (op)= q * scale for `count` buffers in order; count is 1 except for AddF32.
template <Sink kSink, int kBits>
__global__ void dequantize_kernel(void* dst, const std::uint8_t* data, std::size_t data_stride, const float* scales,
                                  std::size_t scales_stride, int count, Format f) {
  const int lane = threadIdx.x % kWarp;
  for (std::size_t b = first_block(); b < f.blocks; b += block_stride()) {
    const std::size_t begin = b * f.block_size;
    const int len = block_length(f, b);
    for (int i = lane; i < len; i += kWarp) {
      if constexpr (kSink == Sink::AddF32) {
        float* d = static_cast<float*>(dst) + begin + i;
        float acc = *d;
        for (int j = 0; j < count; ++j) {
          const std::uint8_t* block = data + j * data_stride + b * f.block_bytes;
          acc = __fadd_rn(acc, __fmul_rn(static_cast<float>(quantized<kBits>(block, i)), scales[j * scales_stride + b]));
        }
        *d = acc;
      } else {
        const float value = __fmul_rn(static_cast<float>(quantized<kBits>(data + b * f.block_bytes, i)), scales[b]);
        if constexpr (kSink == Sink::F32)
          static_cast<float*>(dst)[begin + i] = value;
        else
          static_cast<std::uint16_t*>(dst)[begin + i] = to_bf16_bits(value);
      }
    }
  }
}

unsigned grid_for(const Format& f) {
  const std::size_t needed = (f.blocks + kWarps - 1) / kWarps;
  return static_cast<unsigned>(needed < 65536 ? needed : 65536);
}

template <bool kBf16>
void run_quantize(const char* name, std::uint8_t* data, float* scales, const void* src, std::size_t n,
                  const quant::QuantSpec& format, std::uint64_t* first_bad, Stream stream) {
  const Format f = make_format(name, n, format);
  if (n == 0) return;
  auto* bad = reinterpret_cast<unsigned long long*>(first_bad);
  if (format.dtype == DType::I8)
    quantize_kernel<kBf16, 8><<<grid_for(f), kThreads, 0, stream>>>(data, scales, src, f, bad);
  else
    quantize_kernel<kBf16, 4><<<grid_for(f), kThreads, 0, stream>>>(data, scales, src, f, bad);
  check_launch(name);
}

template <Sink kSink>
void run_dequantize(const char* name, void* dst, const std::uint8_t* data, std::size_t data_stride,
                    const float* scales, std::size_t scales_stride, int count, std::size_t n,
                    const quant::QuantSpec& format, Stream stream) {
  const Format f = make_format(name, n, format);
  require(count >= 1, name, "count = " + std::to_string(count) + " buffers: must be at least 1");
  if (n == 0) return;
  if (format.dtype == DType::I8)
    dequantize_kernel<kSink, 8><<<grid_for(f), kThreads, 0, stream>>>(dst, data, data_stride, scales,
                                                                       scales_stride, count, f);
  else
    dequantize_kernel<kSink, 4><<<grid_for(f), kThreads, 0, stream>>>(dst, data, data_stride, scales,
                                                                       scales_stride, count, f);
  check_launch(name);
}

}  // namespace

void quantize(std::uint8_t* data, float* scales, const float* src, std::size_t n, const quant::QuantSpec& format,
              std::uint64_t* first_nonfinite_block, Stream stream) {
  run_quantize<false>("quantize", data, scales, src, n, format, first_nonfinite_block, stream);
}

void quantize_bf16(std::uint8_t* data, float* scales, const std::uint16_t* src, std::size_t n,
                   const quant::QuantSpec& format, std::uint64_t* first_nonfinite_block, Stream stream) {
  run_quantize<true>("quantize_bf16", data, scales, src, n, format, first_nonfinite_block, stream);
}

void dequantize(float* dst, const std::uint8_t* data, const float* scales, std::size_t n, const quant::QuantSpec& format,
                Stream stream) {
  run_dequantize<Sink::F32>("dequantize", dst, data, 0, scales, 0, 1, n, format, stream);
}

void dequantize_bf16(std::uint16_t* dst, const std::uint8_t* data, const float* scales, std::size_t n,
                     const quant::QuantSpec& format, Stream stream) {
  run_dequantize<Sink::BF16>("dequantize_bf16", dst, data, 0, scales, 0, 1, n, format, stream);
}

void dequantize_sum(float* dst, const std::uint8_t* data, std::size_t data_stride, const float* scales,
                    std::size_t scales_stride, int count, std::size_t n, const quant::QuantSpec& format, Stream stream) {
  run_dequantize<Sink::AddF32>("dequantize_sum", dst, data, data_stride, scales, scales_stride, count, n, format,
                               stream);
}

}  // namespace strata::device::cuda
