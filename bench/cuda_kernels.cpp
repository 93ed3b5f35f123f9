// The CUDA kernels' speed on one GPU, against a baseline measured in the same run:
//   quantization: each kernel's time on a buffer of fp32 values against a device-to-device
//   cudaMemcpy of the same fp32 bytes (ratio < 1: faster than copying the fp32 buffer);
//   attention: forward and backward time of gpt2-124m's and a Llama-style grouped-query shape.
// Prints a table (and nothing else on stdout); scripts/gpu-check.sh runs it.
//   cuda_kernels_bench [--mib N]   fp32 MiB of the quantization buffer (default 256)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <utility>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "device/cuda/kernels.hpp"

using namespace strata;
using namespace strata::device::cuda;

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "cuda_kernels_bench: %s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

// Median milliseconds of `runs` timed calls, after 3 untimed ones.
double time_ms(const std::function<void()>& call, int runs = 10) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 3; ++i) call();
  std::vector<float> ms(runs);
  for (float& m : ms) {
    check(cudaEventRecord(start), "cudaEventRecord");
    call();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    check(cudaEventElapsedTime(&m, start, stop), "cudaEventElapsedTime");
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void fill_random(float* device, std::size_t n, std::uint64_t seed) {
  std::vector<float> host(n);
  Rng rng(seed);
  for (float& x : host) x = static_cast<float>(rng.normal());
  check(cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
}

void quant_table(std::size_t mib) {
  const std::size_t n = mib * (1u << 20) / sizeof(float);
  const std::size_t fp32_bytes = n * sizeof(float);
  auto* src = static_cast<float*>(device_alloc(fp32_bytes));
  auto* copy = static_cast<float*>(device_alloc(fp32_bytes));
  auto* src_bf16 = static_cast<std::uint16_t*>(device_alloc(n * 2));
  fill_random(src, n, 1);
  cast_f32_to_bf16(src_bf16, src, n, nullptr);
  const double memcpy_ms =
      time_ms([&] { check(cudaMemcpyAsync(copy, src, fp32_bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync"); });
  const double memcpy_gbs = 2.0 * fp32_bytes / (memcpy_ms * 1e6);  // read + write

  std::printf("quantization: %zu MiB of fp32 (%zu values), block 256\n", mib, n);
  std::printf("%-26s %10s %12s %14s\n", "kernel", "ms", "fp32 GB/s", "time / copy");
  std::printf("%-26s %10.3f %12.1f %14s\n", "cudaMemcpy D2D (baseline)", memcpy_ms, fp32_bytes / (memcpy_ms * 1e6),
              "1.00");
  constexpr int kSummed = 4;
  for (const DType dtype : {DType::I8, DType::I4}) {
    const quant::QuantSpec format{dtype, 256};
    const std::size_t bytes = quant::quantized_bytes(n, format), blocks = quant::num_blocks(n, format);
    auto* data = static_cast<std::uint8_t*>(device_alloc(bytes * kSummed));
    auto* scales = static_cast<float*>(device_alloc(blocks * kSummed * sizeof(float)));
    for (int j = 0; j < kSummed; ++j)
      quantize(data + j * bytes, scales + j * blocks, src, n, format, nullptr, nullptr);
    const std::string tag = std::string(dtype_name(dtype)) + " ";
    const std::vector<std::pair<std::string, std::function<void()>>> kernels{
        {tag + "quantize fp32", [&] { quantize(data, scales, src, n, format, nullptr, nullptr); }},
        {tag + "quantize bf16", [&] { quantize_bf16(data, scales, src_bf16, n, format, nullptr, nullptr); }},
        {tag + "dequantize fp32", [&] { dequantize(copy, data, scales, n, format, nullptr); }},
        {tag + "dequantize bf16", [&] { dequantize_bf16(src_bf16, data, scales, n, format, nullptr); }},
        {tag + "dequantize_sum x" + std::to_string(kSummed),
         [&] { dequantize_sum(copy, data, bytes, scales, blocks, kSummed, n, format, nullptr); }},
    };
    for (const auto& [name, call] : kernels) {
      const double ms = time_ms(call);
      std::printf("%-26s %10.3f %12.1f %14.2f\n", name.c_str(), ms, fp32_bytes / (ms * 1e6), ms / memcpy_ms);
    }
    check(cudaFree(data), "cudaFree");
    check(cudaFree(scales), "cudaFree");
  }
  std::printf("(fp32 GB/s: fp32 bytes of the buffer per second; the copy moves %.1f GB/s read + write)\n\n",
              memcpy_gbs);
  cudaFree(src);
  cudaFree(copy);
  cudaFree(src_bf16);
}

void attention_table() {
  struct Case {
    const char* name;
    AttentionShape shape;
  };
  // gpt2-124m: 12 heads of 64, packed qkv; a Llama-style shape: 32 query heads over 8 K/V heads of 128.
  const std::vector<Case> cases{{"gpt2-124m B=8 T=1024", {8, 1024, 12, 12, 64, 3 * 768, 3 * 768, 768}},
                                {"gqa B=2 T=2048 32/8x128", {2, 2048, 32, 8, 128, 4096, 1024, 4096}}};
  std::printf("attention (fp32, causal)\n");
  std::printf("%-26s %10s %10s %12s %12s\n", "shape", "fwd ms", "bwd ms", "fwd TFLOP/s", "bwd TFLOP/s");
  for (const Case& c : cases) {
    const AttentionShape& s = c.shape;
    const std::size_t rows = static_cast<std::size_t>(s.B) * s.T;
    const bool packed = s.q_stride == s.kv_stride;
    const std::size_t q_n = rows * s.q_stride, kv_n = packed ? 0 : rows * s.kv_stride;
    auto* q = static_cast<float*>(device_alloc((q_n + 2 * kv_n) * sizeof(float)));
    fill_random(q, q_n + 2 * kv_n, 2);
    const float* k = packed ? q + s.NH * s.hd : q + q_n;
    const float* v = packed ? q + 2 * s.NH * s.hd : q + q_n + kv_n;
    auto* grads = static_cast<float*>(device_alloc((q_n + 2 * kv_n) * sizeof(float)));
    float* dq = grads;
    float* dk = packed ? grads + s.NH * s.hd : grads + q_n;
    float* dv = packed ? grads + 2 * s.NH * s.hd : grads + q_n + kv_n;
    const std::size_t out_n = rows * s.out_stride;
    auto* out = static_cast<float*>(device_alloc(out_n * sizeof(float)));
    auto* dout = static_cast<float*>(device_alloc(out_n * sizeof(float)));
    fill_random(dout, out_n, 3);
    auto* lse = static_cast<float*>(device_alloc(static_cast<std::size_t>(s.B) * s.NH * s.T * sizeof(float)));
    void* scratch = device_alloc(attention_backward_scratch_bytes(s));
    const double fwd = time_ms([&] { attention_forward(out, lse, q, k, v, s, nullptr); });
    const double bwd =
        time_ms([&] { attention_backward(dq, dk, dv, dout, out, lse, q, k, v, s, scratch, nullptr); });
    // Causal: half of the 2 GEMMs (q k^T, p v) of 2 T^2 hd flops each; backward does 2.5 times that
    // (5 GEMMs' worth, the probabilities recomputed once per kernel not counted).
    const double fwd_flops = 2.0 * 2.0 * s.B * s.NH * static_cast<double>(s.T) * s.T * s.hd / 2.0;
    std::printf("%-26s %10.3f %10.3f %12.2f %12.2f\n", c.name, fwd, bwd, fwd_flops / (fwd * 1e9),
                2.5 * fwd_flops / (bwd * 1e9));
    for (void* p : {static_cast<void*>(q), static_cast<void*>(grads), static_cast<void*>(out),
                    static_cast<void*>(dout), static_cast<void*>(lse), scratch})
      cudaFree(p);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = 256;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mib" && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: cuda_kernels_bench [--mib N]   (unknown argument: %s)\n", arg.c_str());
      return 2;
    }
  }
  if (mib == 0) {
    std::fprintf(stderr, "cuda_kernels_bench: --mib must be a positive number of MiB\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "cuda_kernels_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s\n\n", prop.name);
  try {
    quant_table(mib);
    attention_table();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_kernels_bench: %s\n", e.what());
    return 1;
  }
  check(cudaDeviceSynchronize(), "kernels");
  return 0;
}
