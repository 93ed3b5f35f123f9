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
#include <string>
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

// out[i, j] = start[i, j] + sum over k of a(i, k) b(k, j), in float64, for rows x cols; and
// the sum of the terms' magnitudes, which the products' rounding scales with.
struct Reference {
  std::vector<double> want, scale;
};
template <class A, class B>
Reference reference(int rows, int cols, int depth, A&& a, B&& b, const std::vector<float>* start) {
  Reference r{std::vector<double>(static_cast<std::size_t>(rows) * cols), {}};
  r.scale = r.want;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      const std::size_t at = static_cast<std::size_t>(i) * cols + j;
      double sum = start ? (*start)[at] : 0.0, mag = std::abs(sum);
      for (int k = 0; k < depth; ++k) {
        const double term = static_cast<double>(a(i, k)) * b(k, j);
        sum += term;
        mag += std::abs(term);
      }
      r.want[at] = sum;
      r.scale[at] = mag;
    }
  return r;
}

void expect_close(const std::vector<float>& got, const Reference& ref, Precision p, const std::string& what) {
  ASSERT_EQ(got.size(), ref.want.size());
  int bad = 0;
  for (std::size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref.want[i]);
    if (!(err <= tolerance(p) * ref.scale[i])) {  // NaN (poison left) fails too
      ADD_FAILURE() << what << " in " << precision_name(p) << ": element " << i << " = " << got[i] << ", want "
                    << ref.want[i] << " (error " << err / ref.scale[i] << " of sum |a||b|)";
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
  // Where an output is overwritten it starts as NaN (poison); where it accumulates, as `start`.
  static std::vector<float> start_or_poison(bool accumulate, const std::vector<float>& start) {
    return accumulate ? start : std::vector<float>(start.size(), std::numeric_limits<float>::quiet_NaN());
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
    DeviceArray dy(gpu, start_or_poison(accumulate, y0));
    mm.forward(dy.buffer.data(), dx.buffer.data(), dw.buffer.data(), kN, kIn, kOut, accumulate);
    cuda::synchronize("matmul forward");
    const Reference ref = reference(
        kN, kOut, kIn, [&](int i, int k) { return x[i * kIn + k]; }, [&](int k, int o) { return w[o * kIn + k]; },
        accumulate ? &y0 : nullptr);
    expect_close(read_back(gpu, dy.buffer), ref, p, accumulate ? "y += x W^T" : "y = x W^T");
  }
}

TEST_P(CudaMatmul, BackwardInputReadsAStridedGradientWithAndWithoutAccumulation) {
  Device& gpu = cuda::gpu();
  const Precision p = GetParam();
  // dy has row stride kLdDy > kOut, as the LM head's padded logits do; the padding is NaN
  // and must not be read.
  auto dy = random_values(kN * kLdDy, 4);
  for (int i = 0; i < kN; ++i)
    for (int o = kOut; o < kLdDy; ++o) dy[i * kLdDy + o] = std::numeric_limits<float>::quiet_NaN();
  const auto w = random_values(kOut * kIn, 5), dx0 = random_values(kN * kIn, 9);
  cuda::Matmul mm(gpu, p, kN * kLdDy, cuda::gpu_stream());
  DeviceArray ddy(gpu, dy), dw(gpu, w);
  for (bool accumulate : {false, true}) {
    DeviceArray ddx(gpu, start_or_poison(accumulate, dx0));
    mm.backward_input(ddx.buffer.data(), ddy.buffer.data(), kLdDy, dw.buffer.data(), kN, kIn, kOut, accumulate);
    cuda::synchronize("matmul backward input");
    const Reference ref = reference(
        kN, kIn, kOut, [&](int i, int o) { return dy[i * kLdDy + o]; }, [&](int o, int k) { return w[o * kIn + k]; },
        accumulate ? &dx0 : nullptr);
    expect_close(read_back(gpu, ddx.buffer), ref, p, accumulate ? "dx += dy W" : "dx = dy W");
  }
}

TEST_P(CudaMatmul, BackwardWeightAccumulatesOverRows) {
  Device& gpu = cuda::gpu();
  const Precision p = GetParam();
  const auto dy = random_values(kN * kLdDy, 6), x = random_values(kN * kIn, 7), g0 = random_values(kOut * kIn, 8);
  cuda::Matmul mm(gpu, p, kN * kLdDy, cuda::gpu_stream());
  DeviceArray ddy(gpu, dy), dx(gpu, x), dg(gpu, g0);
  mm.backward_weight(dg.buffer.data(), ddy.buffer.data(), kLdDy, dx.buffer.data(), kN, kIn, kOut);
  cuda::synchronize("matmul backward weight");
  const Reference ref = reference(
      kOut, kIn, kN, [&](int o, int i) { return dy[i * kLdDy + o]; }, [&](int i, int k) { return x[i * kIn + k]; },
      &g0);
  expect_close(read_back(gpu, dg.buffer), ref, p, "dW += dy^T x");
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaMatmul, ::testing::Values(Precision::F32, Precision::BF16),
                         [](const auto& info) { return std::string(precision_name(info.param)); });
