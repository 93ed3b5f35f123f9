// The cuda device's operations for the sharding engine (device-to-device copy, add, scale and
// the wire codec: bf16 casts and int8/int4 block quantization) against the host's defaults on
// random non-zero inputs, outputs poisoned first: the same bits, so GPU and CPU ranks exchange
// the same bytes and a sharded run's losses do not depend on which device computes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gpu_skip.hpp"
#include "support.hpp"

using namespace strata;

namespace {

constexpr std::size_t kN = 100003;  // not a whole number of any block size below

template <class T>
void expect_same_bits(const std::vector<T>& want, const std::vector<T>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(T) * want.size()), 0) << what;
}

// A device buffer holding `values`, padded with NaN-poison past them.
template <class T>
device::Buffer<T> on_gpu(device::Device& gpu, const std::vector<T>& values, std::size_t n) {
  device::Buffer<T> b(gpu, n);
  std::vector<T> poisoned(n);
  std::memset(poisoned.data(), 0xff, sizeof(T) * n);
  std::copy(values.begin(), values.end(), poisoned.begin());
  gpu.from_host(b.data(), poisoned.data(), sizeof(T) * n);
  return b;
}

template <class T>
std::vector<T> from_gpu(device::Device& gpu, const device::Buffer<T>& b, std::size_t n) {
  std::vector<T> out(n);
  gpu.to_host(out.data(), b.data(), sizeof(T) * n);
  return out;
}

}  // namespace

TEST(CudaShardingOps, GiveTheHostsBitsAndRefuseWhatTheHostRefuses) {
  STRATA_REQUIRE_GPU();
  device::Device& gpu = device::device_named("cuda", "test");
  device::Device& cpu = device::host();
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(kN), y(kN);
  for (std::size_t i = 0; i < kN; ++i) x[i] = normal(rng), y[i] = normal(rng);
  const std::vector<float> empty;
  gpu.reserve(std::size_t{64} << 20);

  {  // copy, add, scale
    device::Buffer<float> gx = on_gpu(gpu, x, kN), gy = on_gpu(gpu, y, kN), out = on_gpu(gpu, empty, kN);
    gpu.copy(out.data(), gx.data(), sizeof(float) * kN);
    expect_same_bits(x, from_gpu(gpu, out, kN), "copy");
    std::vector<float> want = x;
    cpu.add(want.data(), y.data(), kN);
    gpu.add(gx.data(), gy.data(), kN);
    expect_same_bits(want, from_gpu(gpu, gx, kN), "add");
    cpu.scale(want.data(), kN, 0.3f);
    gpu.scale(gx.data(), kN, 0.3f);
    expect_same_bits(want, from_gpu(gpu, gx, kN), "scale");
  }
  {  // a bf16 wire: encode, decode, decode-add
    device::Buffer<float> gx = on_gpu(gpu, x, kN), gy = on_gpu(gpu, y, kN), out = on_gpu(gpu, empty, kN);
    device::Buffer<std::uint16_t> wire = on_gpu(gpu, std::vector<std::uint16_t>{}, kN);
    std::vector<std::uint16_t> want_wire(kN);
    cpu.to_half(DType::BF16, x.data(), kN, want_wire.data());
    gpu.to_half(DType::BF16, gx.data(), kN, wire.data());
    expect_same_bits(want_wire, from_gpu(gpu, wire, kN), "bf16 encode");
    std::vector<float> want(kN);
    cpu.from_half(DType::BF16, want_wire.data(), kN, want.data());
    gpu.from_half(DType::BF16, wire.data(), kN, out.data());
    expect_same_bits(want, from_gpu(gpu, out, kN), "bf16 decode");
    want = y;
    cpu.from_half_add(DType::BF16, want_wire.data(), kN, want.data());
    gpu.from_half_add(DType::BF16, wire.data(), kN, gy.data());
    expect_same_bits(want, from_gpu(gpu, gy, kN), "bf16 decode-add");
    // No fp16 kernel on the GPU: refused naming the wire flags, never a wrong answer.
    const std::string what = test::error_of([&] { gpu.to_half(DType::F16, gx.data(), kN, wire.data()); });
    EXPECT_NE(what.find("an fp16 wire has no GPU kernel"), std::string::npos) << what;
  }
  for (const quant::QuantSpec spec : {quant::QuantSpec{DType::I8, 256},
                                      quant::QuantSpec{DType::I4, 64},
                                      quant::QuantSpec{DType::I8, 33}}) {
    const std::size_t bytes = quant::quantized_bytes(kN, spec), blocks = quant::num_blocks(kN, spec);
    device::Buffer<float> gx = on_gpu(gpu, x, kN), gy = on_gpu(gpu, y, kN), out = on_gpu(gpu, empty, kN);
    device::Buffer<std::uint8_t> data = on_gpu(gpu, std::vector<std::uint8_t>{}, bytes);
    device::Buffer<float> scales = on_gpu(gpu, empty, blocks);
    std::vector<std::uint8_t> want_data(bytes);
    std::vector<float> want_scales(blocks);
    cpu.quantize(x.data(), kN, spec, want_data.data(), want_scales.data());
    gpu.quantize(gx.data(), kN, spec, data.data(), scales.data());
    expect_same_bits(want_data, from_gpu(gpu, data, bytes), "quantized bytes");
    expect_same_bits(want_scales, from_gpu(gpu, scales, blocks), "quantized scales");
    std::vector<float> want(kN);
    cpu.dequantize(want_data.data(), want_scales.data(), kN, spec, want.data());
    gpu.dequantize(data.data(), scales.data(), kN, spec, out.data());
    expect_same_bits(want, from_gpu(gpu, out, kN), "dequantize");
    want = y;
    cpu.dequantize_add(want_data.data(), want_scales.data(), kN, spec, want.data());
    gpu.dequantize_add(data.data(), scales.data(), kN, spec, gy.data());
    expect_same_bits(want, from_gpu(gpu, gy, kN), "dequantize-add");
    // A block holding NaN is an error naming the block, as on the CPU.
    std::vector<float> bad = x;
    bad[3 * static_cast<std::size_t>(spec.block_size) + 1] = std::numeric_limits<float>::quiet_NaN();
    device::Buffer<float> gbad = on_gpu(gpu, bad, kN);
    const std::string what = test::error_of([&] { gpu.quantize(gbad.data(), kN, spec, data.data(), scales.data()); });
    EXPECT_NE(what.find("block 3"), std::string::npos) << what;
  }
}
