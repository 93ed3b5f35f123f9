// Micro-benchmarks of the block quantization kernels on cache-resident and large buffers,
// with memcpy of the same fp32 bytes as the baseline. Bytes processed = fp32 bytes.
// `strata bench quant` is the full table (every dtype, ratios); this is the quick loop for
// kernel work: ./build/bench/quant_bench --benchmark_filter=Int8
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>

#include "base/aligned.hpp"
#include "quant/quant.hpp"

using namespace strata;
using namespace strata::quant;

namespace {

AlignedBuffer<float> random_buffer(std::size_t n) {
  AlignedBuffer<float> v(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& x : v) x = normal(rng);
  return v;
}

void BM_Memcpy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const AlignedBuffer<float> src = random_buffer(n);
  AlignedBuffer<float> dst(n);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(float)));
}

template <DType Bits>
void BM_Quantize(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const QuantSpec spec{Bits, 256};
  const AlignedBuffer<float> src = random_buffer(n);
  AlignedBuffer<std::uint8_t> data(quantized_bytes(n, spec));
  AlignedBuffer<float> scales(num_blocks(n, spec));
  for (auto _ : state) {
    quantize(src.data(), n, spec, data.data(), scales.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(float)));
}

template <DType Bits, bool Add>
void BM_Dequantize(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const QuantSpec spec{Bits, 256};
  const AlignedBuffer<float> src = random_buffer(n);
  AlignedBuffer<std::uint8_t> data(quantized_bytes(n, spec));
  AlignedBuffer<float> scales(num_blocks(n, spec)), dst(n);
  quantize(src.data(), n, spec, data.data(), scales.data());
  for (auto _ : state) {
    if constexpr (Add)
      dequantize_add(data.data(), scales.data(), n, spec, dst.data());
    else
      dequantize(data.data(), scales.data(), n, spec, dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(float)));
}

// 64 KiB (L2-resident) and 64 MiB of fp32.
constexpr std::int64_t kSmall = 1 << 14, kLarge = 1 << 24;

}  // namespace

BENCHMARK(BM_Memcpy)->Arg(kSmall)->Arg(kLarge);
BENCHMARK(BM_Quantize<DType::I8>)->Arg(kSmall)->Arg(kLarge);
BENCHMARK(BM_Quantize<DType::I4>)->Arg(kSmall)->Arg(kLarge);
BENCHMARK(BM_Dequantize<DType::I8, false>)->Arg(kSmall)->Arg(kLarge);
BENCHMARK(BM_Dequantize<DType::I4, false>)->Arg(kSmall)->Arg(kLarge);
BENCHMARK(BM_Dequantize<DType::I8, true>)->Arg(kSmall)->Arg(kLarge);
