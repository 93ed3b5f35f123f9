// cuBLASLt's products (device/cuda/matmul.hpp) against a float64 reference on random non-zero
// inputs, the outputs poisoned (NaN) first where they are overwritten, in both precisions.
// Bounds, per element, relative to sum_k |a_ik b_kj| (the size the rounding scales with):
//   fp32 (strict fp32, no TF32)      2e-6: k roundings of 2^-24 each, with margin
//   bf16 inputs, fp32 accumulation   1e-2: each input rounded to bf16 (2^-9) twice per product
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <vector>

#include "device/cuda/cuda_device.hpp"
#include "device/cuda/matmul.hpp"
#include "gpu_skip.hpp"

using namespace strata;
using namespace strata::device;

namespace strata::device {
void PrintTo(Precision p, std::ostream* os) { *os << precision_name(p); }  // gtest's names for the parameter
}  // namespace strata::device

namespace {

std::vector<float> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.25f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = (rng() & 1 ? 1.0f : -1.0f) * u(rng);  // non-zero, both signs
  return v;
}

struct DeviceArray {
  DeviceArray(Device& d, const std::vector<float>& host) : buffer(d, host.size()) {
    d.from_host(buffer.data(), host.data(), host.size() * sizeof(float));
  }
  Buffer<float> buffer;
};

std::vector<float> read_back(Device& d, const Buffer<float>& b) {
  std::vector<float> host(b.size());
  d.to_host(host.data(), b.data(), host.size() * sizeof(float));
  return host;
}

double tolerance(Precision p) { return p == Precision::F32 ? 2e-6 : 1e-2; }

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& scale,
                  Precision p, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (std::size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tolerance(p) * scale[i])) {  // NaN (poison left) fails too
      ADD_FAILURE() << what << " in " << precision_name(p) << ": element " << i << " = " << got[i] << ", want "
                    << want[i] << " (error " << err / scale[i] << " of sum |a||b|)";
      ++bad;
    }
  }
}

constexpr int kN = 96, kIn = 64, kOut = 112, kLdDy = 128;

class CudaMatmul : public ::testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    STRATA_REQUIRE_GPU();
    cuda::gpu().reserve(std::size_t{256} << 20);  // the products' scratch and the arrays below
  }
};

}  // namespace

TEST_P(CudaMatmul, ForwardMatchesFloat64WithAndWithoutAccumulation) {
  Device& gpu = cuda::gpu();
  const Precision p = GetParam();
  const auto x = random_values(kN * kIn, 1), w = random_values(kOut * kIn, 2), y0 = random_values(kN * kOut, 3);
  cuda::Matmul mm(gpu, p, kN * kLdDy, cuda::gpu_stream());
  DeviceArray dx(gpu, x), dw(gpu, w);
  for (bool accumulate : {false, true}) {
    std::vector<float> start(kN * kOut, std::numeric_limits<float>::quiet_NaN());
    if (accumulate) start = y0;
    DeviceArray dy(gpu, start);
    mm.forward(dy.buffer.data(), dx.buffer.data(), dw.buffer.data(), kN, kIn, kOut, accumulate);
    cuda::synchronize("matmul forward");
    std::vector<double> want(kN * kOut), scale(kN * kOut);
    for (int i = 0; i < kN; ++i)
      for (int o = 0; o < kOut; ++o) {
        double sum = accumulate ? y0[i * kOut + o] : 0.0, mag = accumulate ? std::abs(y0[i * kOut + o]) : 0.0;
        for (int k = 0; k < kIn; ++k) {
          sum += double(x[i * kIn + k]) * w[o * kIn + k];
          mag += std::abs(double(x[i * kIn + k]) * w[o * kIn + k]);
        }
        want[i * kOut + o] = sum;
        scale[i * kOut + o] = mag;
      }
    expect_close(read_back(gpu, dy.buffer), want, scale, p, accumulate ? "y += x W^T" : "y = x W^T");
  }
}

TEST_P(CudaMatmul, BackwardInputReadsAStridedGradient) {
  Device& gpu = cuda::gpu();
  const Precision p = GetParam();
  // dy has row stride kLdDy > kOut, as the LM head's padded logits do; the padding is NaN
  // and must not be read.
  auto dy = random_values(kN * kLdDy, 4);
  for (int i = 0; i < kN; ++i)
    for (int o = kOut; o < kLdDy; ++o) dy[i * kLdDy + o] = std::numeric_limits<float>::quiet_NaN();
  const auto w = random_values(kOut * kIn, 5);
  cuda::Matmul mm(gpu, p, kN * kLdDy, cuda::gpu_stream());
  DeviceArray ddy(gpu, dy), dw(gpu, w);
  DeviceArray ddx(gpu, std::vector<float>(kN * kIn, std::numeric_limits<float>::quiet_NaN()));
  mm.backward_input(ddx.buffer.data(), ddy.buffer.data(), kLdDy, dw.buffer.data(), kN, kIn, kOut);
  cuda::synchronize("matmul backward input");
  std::vector<double> want(kN * kIn), scale(kN * kIn);
  for (int i = 0; i < kN; ++i)
    for (int k = 0; k < kIn; ++k) {
      double sum = 0, mag = 0;
      for (int o = 0; o < kOut; ++o) {
        sum += double(dy[i * kLdDy + o]) * w[o * kIn + k];
        mag += std::abs(double(dy[i * kLdDy + o]) * w[o * kIn + k]);
      }
      want[i * kIn + k] = sum;
      scale[i * kIn + k] = mag;
    }
  expect_close(read_back(gpu, ddx.buffer), want, scale, p, "dx = dy W");
}

TEST_P(CudaMatmul, BackwardWeightAccumulatesOverRows) {
  Device& gpu = cuda::gpu();
  const Precision p = GetParam();
  const auto dy = random_values(kN * kLdDy, 6), x = random_values(kN * kIn, 7), g0 = random_values(kOut * kIn, 8);
  cuda::Matmul mm(gpu, p, kN * kLdDy, cuda::gpu_stream());
  DeviceArray ddy(gpu, dy), dx(gpu, x), dg(gpu, g0);
  mm.backward_weight(dg.buffer.data(), ddy.buffer.data(), kLdDy, dx.buffer.data(), kN, kIn, kOut);
  cuda::synchronize("matmul backward weight");
  std::vector<double> want(kOut * kIn), scale(kOut * kIn);
  for (int o = 0; o < kOut; ++o)
    for (int k = 0; k < kIn; ++k) {
      double sum = g0[o * kIn + k], mag = std::abs(g0[o * kIn + k]);
      for (int i = 0; i < kN; ++i) {
        sum += double(dy[i * kLdDy + o]) * x[i * kIn + k];
        mag += std::abs(double(dy[i * kLdDy + o]) * x[i * kIn + k]);
      }
      want[o * kIn + k] = sum;
      scale[o * kIn + k] = mag;
    }
  expect_close(read_back(gpu, dg.buffer), want, scale, p, "dW += dy^T x");
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaMatmul, ::testing::Values(Precision::F32, Precision::BF16),
                         [](const auto& info) { return std::string(precision_name(info.param)); });
