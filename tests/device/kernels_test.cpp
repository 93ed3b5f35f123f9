// Every CUDA kernel (src/device/cuda/kernels.hpp) on random, non-zero inputs against a float64
// reference or the CPU kernel, with every output poisoned (all bits set: NaN for floats)
// before the run, so an element a kernel forgets fails. Without a GPU every test reports
// itself skipped, with the reason.
//
// Bounds, relative to the largest |reference| of the tensor compared (fp32 kernels):
//   kElementwise 1e-5: one row's or element's fp32 arithmetic (norms, GELU, SwiGLU, RoPE,
//                      cross-entropy, column sums over <= 300 rows);
//   kAttention   2e-5 forward, kAttentionGrad 1e-4 backward: fp32 sums over hd and T terms;
//   exact (bit for bit): embeddings, AdamW, casts, quantization (the CPU's bits, by design).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "base/half.hpp"
#include "base/rng.hpp"
#include "device/cuda/kernels.hpp"
#include "device/cuda/model_ops.hpp"
#include "model/kernels.hpp"
#include "model/reference.hpp"
#include "optim/adamw.hpp"
#include "quant/quant.hpp"

namespace strata::device::cuda {
namespace {

using model::ref::random_floats;
using model::ref::to_double;
using model::ref::Vec;

constexpr double kElementwise = 1e-5;
constexpr double kAttention = 2e-5;
constexpr double kAttentionGrad = 1e-4;

// Why this machine cannot run the tests, or empty when it can.
std::string missing_gpu() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device: cudaGetDeviceCount found 0";
  return {};
}

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = missing_gpu();
    if (!why.empty()) GTEST_SKIP() << why;
  }
  void TearDown() override {
    if (!IsSkipped()) {
      const cudaError_t status = cudaDeviceSynchronize();
      ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status);
    }
  }
};

// n elements of T in device memory, poisoned (all bits set) at birth.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : n_(n) {
    if (cudaMalloc(&data_, std::max<std::size_t>(n, 1) * sizeof(T)) != cudaSuccess) throw Error("cudaMalloc failed");
    poison();
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(data_); }

  void poison() { cudaMemset(data_, 0xff, n_ * sizeof(T)); }
  void upload(const std::vector<T>& host) {
    cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    cudaDeviceSynchronize();
    cudaMemcpy(host.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
  T* get() { return data_; }

 private:
  T* data_ = nullptr;
  std::size_t n_;
};

// Every element within tol * max |want| of want (NaN fails).
void expect_rel(const std::vector<float>& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  model::ref::expect_close(got.data(), want.data(), got.size(), 0.0, tol * scale, what);
}

template <class T>
void expect_bits(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " differs from the CPU's (n = " << got.size() << ")";
      return;
    }
}

std::vector<std::int32_t> random_tokens(std::size_t n, int V, Rng& rng) {
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(V)));
  return t;
}

// ---------------------------------------------------------------------------------------
// Embeddings

TEST_F(Gpu, EmbedForwardAddsTokenAndPositionRows) {
  Rng rng(1);
  const int B = 3, T = 37, C = 72, V = 50, N = B * T;
  const auto tokens = random_tokens(N, V, rng);
  const auto wte = random_floats(V * C, rng), wpe = random_floats(T * C, rng);
  DeviceArray<std::int32_t> d_tokens(tokens);
  DeviceArray<float> d_wte(wte), d_wpe(wpe), d_out(N * C);
  for (const bool positions : {true, false}) {
    d_out.poison();
    embed_forward(d_out.get(), d_tokens.get(), d_wte.get(), positions ? d_wpe.get() : nullptr, N, T, C, V, nullptr);
    std::vector<float> want(N * C);
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < C; ++c)
        want[i * C + c] = wte[tokens[i] * C + c] + (positions ? wpe[(i % T) * C + c] : 0.f);
    expect_bits(d_out.download(), want, positions ? "GPT embedding" : "Llama embedding");
  }
}

TEST_F(Gpu, EmbedBackwardGivesTheCpuBits) {
  Rng rng(2);
  // Few tokens, so rows repeat; N not a power of two, and past one sort tile (1024 keys).
  const int B = 5, T = 300, C = 40, V = 23, N = B * T;
  const auto tokens = random_tokens(N, V, rng);
  const auto dout = random_floats(N * C, rng);
  auto dwte = random_floats(V * C, rng), dwpe = random_floats(T * C, rng);  // gradients accumulate
  DeviceArray<std::int32_t> d_tokens(tokens);
  DeviceArray<float> d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
  DeviceArray<std::uint8_t> scratch(embed_backward_scratch_bytes(N, V));
  embed_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), N, T, C, V, scratch.get(), nullptr);
  const auto& cpu = model::kernels_for(detected_isa());
  cpu.embed_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, model::Range{0, C});
  expect_bits(d_dwte.download(), dwte, "dwte");
  expect_bits(d_dwpe.download(), dwpe, "dwpe");
}

// ---------------------------------------------------------------------------------------
// Normalizations

// Float64 LayerNorm backward: dx (plus residual), dw and db (plus their initial values).
void layernorm_backward_ref(const Vec& x, const Vec& w, const Vec& dout, const Vec& residual, int N, int C, Vec& dx,
                            Vec& dw, Vec& db) {
  for (int i = 0; i < N; ++i) {
    double mean = 0, var = 0;
    for (int c = 0; c < C; ++c) mean += x[i * C + c];
    mean /= C;
    for (int c = 0; c < C; ++c) var += (x[i * C + c] - mean) * (x[i * C + c] - mean);
    const double rstd = 1.0 / std::sqrt(var / C + 1e-5);
    double sum_g = 0, sum_gn = 0;
    for (int c = 0; c < C; ++c) {
      const double g = dout[i * C + c] * w[c], norm = (x[i * C + c] - mean) * rstd;
      sum_g += g;
      sum_gn += g * norm;
      dw[c] += dout[i * C + c] * norm;
      db[c] += dout[i * C + c];
    }
    for (int c = 0; c < C; ++c) {
      const double norm = (x[i * C + c] - mean) * rstd;
      dx[i * C + c] = residual[i * C + c] + rstd * (dout[i * C + c] * w[c] - sum_g / C - norm * sum_gn / C);
    }
  }
}

TEST_F(Gpu, LayerNormForwardAndBackward) {
  Rng rng(3);
  const int N = 300, C = 200;  // C not a multiple of 32; N past several 64-row chunks
  const auto x = random_floats(N * C, rng, 2.0, 0.5), w = random_floats(C, rng, 1.0, 1.0), b = random_floats(C, rng);
  const auto dout = random_floats(N * C, rng), residual = random_floats(N * C, rng);
  const auto dw0 = random_floats(C, rng), db0 = random_floats(C, rng);
  DeviceArray<float> d_x(x), d_w(w), d_b(b), d_out(N * C), d_mean(N), d_rstd(N);
  layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(), N, C, nullptr);
  Vec want(N * C);
  const Vec xd = to_double(x), wd = to_double(w), bd = to_double(b);
  model::ref::layernorm(xd.data(), wd.data(), bd.data(), want.data(), N, C);
  expect_rel(d_out.download(), want, kElementwise, "layernorm out");

  DeviceArray<float> d_dout(dout), d_dx(residual), d_dw(dw0), d_db(db0);  // dx starts as the residual: aliased
  DeviceArray<std::uint8_t> scratch(norm_backward_scratch_bytes(N, C));
  layernorm_backward(d_dx.get(), d_dw.get(), d_db.get(), d_dx.get(), d_dout.get(), d_x.get(), d_w.get(),
                     d_mean.get(), d_rstd.get(), N, C, scratch.get(), nullptr);
  Vec dx(N * C), dw = to_double(dw0), db = to_double(db0);
  layernorm_backward_ref(xd, wd, to_double(dout), to_double(residual), N, C, dx, dw, db);
  expect_rel(d_dx.download(), dx, kElementwise, "layernorm dx");
  expect_rel(d_dw.download(), dw, kElementwise, "layernorm dw");
  expect_rel(d_db.download(), db, kElementwise, "layernorm db");
}

TEST_F(Gpu, RmsNormForwardAndBackward) {
  Rng rng(4);
  const int N = 130, C = 96;
  const float eps = 1e-5f;
  const auto x = random_floats(N * C, rng, 1.5), w = random_floats(C, rng, 0.5, 1.0);
  const auto dout = random_floats(N * C, rng), dw0 = random_floats(C, rng);
  DeviceArray<float> d_x(x), d_w(w), d_out(N * C), d_rstd(N);
  rmsnorm_forward(d_out.get(), d_rstd.get(), d_x.get(), d_w.get(), N, C, eps, nullptr);
  const Vec xd = to_double(x), wd = to_double(w), dd = to_double(dout);
  Vec want(N * C);
  model::ref::rmsnorm(xd.data(), wd.data(), want.data(), N, C);
  expect_rel(d_out.download(), want, kElementwise, "rmsnorm out");

  DeviceArray<float> d_dout(dout), d_dx(N * C), d_dw(dw0);
  DeviceArray<std::uint8_t> scratch(norm_backward_scratch_bytes(N, C));
  rmsnorm_backward(d_dx.get(), d_dw.get(), nullptr, d_dout.get(), d_x.get(), d_w.get(), d_rstd.get(), N, C,
                   scratch.get(), nullptr);
  Vec dx(N * C), dw = to_double(dw0);
  for (int i = 0; i < N; ++i) {
    double ss = 0, dot = 0;
    for (int c = 0; c < C; ++c) {
      ss += xd[i * C + c] * xd[i * C + c];
      dot += dd[i * C + c] * wd[c] * xd[i * C + c];
    }
    const double r = 1.0 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) {
      dx[i * C + c] = r * dd[i * C + c] * wd[c] - r * r * r * dot / C * xd[i * C + c];
      dw[c] += dd[i * C + c] * xd[i * C + c] * r;
    }
  }
  expect_rel(d_dx.download(), dx, kElementwise, "rmsnorm dx");
  expect_rel(d_dw.download(), dw, kElementwise, "rmsnorm dw");
}

// ---------------------------------------------------------------------------------------
// Elementwise, column sums

TEST_F(Gpu, BiasGeluForwardAndBackward) {
  Rng rng(5);
  const int N = 70, C = 132;
  const auto pre = random_floats(N * C, rng, 2.0), bias = random_floats(C, rng), d = random_floats(N * C, rng);
  DeviceArray<float> d_pre(pre), d_bias(bias), d_out(N * C);
  bias_gelu_forward(d_pre.get(), d_out.get(), d_bias.get(), N, C, nullptr);
  Vec want_pre(N * C), want_out(N * C), want_d(N * C);
  for (int i = 0; i < N * C; ++i) {
    const double x = static_cast<double>(pre[i] + bias[i % C]);  // the kernel's fp32 sum, exactly
    want_pre[i] = x;
    want_out[i] = model::ref::gelu(x);
    const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x), t = std::tanh(u);
    const double du = std::sqrt(2.0 / M_PI) * (1 + 3 * 0.044715 * x * x);
    want_d[i] = d[i] * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du);
  }
  expect_rel(d_pre.download(), want_pre, 0.0, "pre-activation");
  expect_rel(d_out.download(), want_out, kElementwise, "gelu out");
  DeviceArray<float> d_d(d);
  gelu_backward(d_d.get(), d_pre.get(), N, C, nullptr);
  expect_rel(d_d.download(), want_d, kElementwise, "gelu backward");
}

TEST_F(Gpu, BroadcastRowsAndColumnSums) {
  Rng rng(6);
  const int N = 257, C = 50, ld = 64;
  const auto row = random_floats(C, rng);
  DeviceArray<float> d_row(row), d_out(N * C);
  broadcast_rows(d_out.get(), d_row.get(), N, C, nullptr);
  std::vector<float> want(N * C);
  for (int i = 0; i < N * C; ++i) want[i] = row[i % C];
  expect_bits(d_out.download(), want, "broadcast rows");

  const auto x = random_floats(static_cast<std::size_t>(N) * ld, rng), sums0 = random_floats(C, rng);
  DeviceArray<float> d_x(x), d_sums(sums0);
  DeviceArray<std::uint8_t> scratch(column_sums_scratch_bytes(N, C));
  column_sums(d_sums.get(), d_x.get(), N, C, ld, scratch.get(), nullptr);
  Vec sums = to_double(sums0);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < C; ++c) sums[c] += x[i * ld + c];
  expect_rel(d_sums.download(), sums, kElementwise, "column sums");
}

TEST_F(Gpu, ResidualStartsAsTheInputPlusAnOptionalBias) {
  Rng rng(16);
  const int N = 129, C = 48;
  const auto x = random_floats(static_cast<std::size_t>(N) * C, rng), bias = random_floats(C, rng);
  DeviceArray<float> d_x(x), d_bias(bias), d_out(x.size());
  for (const bool with_bias : {true, false}) {
    d_out.poison();
    residual_with_bias(d_out.get(), d_x.get(), with_bias ? d_bias.get() : nullptr, N, C, nullptr);
    std::vector<float> want(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) want[i] = with_bias ? x[i] + bias[i % C] : x[i];
    expect_bits(d_out.download(), want, with_bias ? "x + bias (GPT-2)" : "x (Llama)");
  }
}

TEST_F(Gpu, SumSquaresIsDeterministicAndNearTheExactSum) {
  Rng rng(7);
  const std::size_t n = 100003;
  const auto x = random_floats(n, rng);
  DeviceArray<float> d_x(x);
  DeviceArray<double> d_sum(1);
  DeviceArray<std::uint8_t> scratch(sum_squares_scratch_bytes(n));
  sum_squares(d_sum.get(), d_x.get(), n, scratch.get(), nullptr);
  const double first = d_sum.download()[0];
  d_sum.poison();
  sum_squares(d_sum.get(), d_x.get(), n, scratch.get(), nullptr);
  const double second = d_sum.download()[0];
  long double want = 0;
  for (float v : x) want += static_cast<long double>(v) * v;
  EXPECT_NEAR(first, static_cast<double>(want), 1e-10 * static_cast<double>(want));
  EXPECT_EQ(std::memcmp(&first, &second, sizeof first), 0) << "two runs gave different bits";
}

TEST_F(Gpu, SwigluForwardAndBackward) {
  Rng rng(8);
  const std::size_t n = 5000;
  const auto gate = random_floats(n, rng, 2.0), up = random_floats(n, rng), dact = random_floats(n, rng);
  DeviceArray<float> d_gate(gate), d_up(up), d_act(n), d_dact(dact), d_dgate(n), d_dup(n);
  swiglu_forward(d_act.get(), d_gate.get(), d_up.get(), n, nullptr);
  swiglu_backward(d_dgate.get(), d_dup.get(), d_dact.get(), d_gate.get(), d_up.get(), n, nullptr);
  Vec act(n), dgate(n), dup(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double g = gate[i], s = 1 / (1 + std::exp(-g));
    act[i] = g * s * up[i];
    dup[i] = dact[i] * g * s;
    dgate[i] = dact[i] * up[i] * s * (1 + g * (1 - s));
  }
  expect_rel(d_act.download(), act, kElementwise, "swiglu act");
  expect_rel(d_dgate.download(), dgate, kElementwise, "swiglu dgate");
  expect_rel(d_dup.download(), dup, kElementwise, "swiglu dup");
}

TEST_F(Gpu, RopeForwardAndItsTranspose) {
  Rng rng(9);
  const int B = 2, T = 19, heads = 3, hd = 16, N = B * T, half = hd / 2;
  const auto x = random_floats(N * heads * hd, rng);
  std::vector<float> cos(T * half), sin(T * half);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < half; ++j) {
      const double angle = t * std::pow(10000.0, -2.0 * j / hd);
      cos[t * half + j] = static_cast<float>(std::cos(angle));
      sin[t * half + j] = static_cast<float>(std::sin(angle));
    }
  DeviceArray<float> d_x(x), d_cos(cos), d_sin(sin);
  rope_forward(d_x.get(), N, heads, hd, T, d_cos.get(), d_sin.get(), nullptr);
  Vec want = to_double(x);
  model::ref::rope(want.data(), N, T, heads, hd, 10000.0);
  expect_rel(d_x.download(), want, kElementwise, "rope forward");
  // The transpose of a rotation is its inverse: backward undoes forward.
  rope_backward(d_x.get(), N, heads, hd, T, d_cos.get(), d_sin.get(), nullptr);
  expect_rel(d_x.download(), to_double(x), kElementwise, "rope backward of rope forward");
}

// ---------------------------------------------------------------------------------------
// Attention

struct AttentionCase {
  AttentionShape shape;
  bool packed;  // GPT-2's qkv [B,T,3C] instead of separate q, k, v
};

// Float64 forward and backward of causal grouped-query attention over dense q [B,T,NH,hd],
// k, v [B,T,NKV,hd]; out, dout [B,T,NH,hd]; lse [B,NH,T].
struct AttentionRef {
  Vec out, lse, dq, dk, dv;
};
AttentionRef attention_ref(const Vec& q, const Vec& k, const Vec& v, const Vec& dout, const AttentionShape& s) {
  const int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, hd = s.hd;
  const double scale = 1 / std::sqrt(static_cast<double>(hd));
  AttentionRef r{Vec(q.size()), Vec(static_cast<std::size_t>(B) * NH * T), Vec(q.size()), Vec(k.size()),
                 Vec(v.size())};
  auto qi = [&](int b, int t, int h) { return (static_cast<std::size_t>(b) * T + t) * NH * hd + h * hd; };
  auto ki = [&](int b, int t, int g) { return (static_cast<std::size_t>(b) * T + t) * NKV * hd + g * hd; };
  std::vector<double> p(T), dp(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const int g = h / (NH / NKV);
      for (int t = 0; t < T; ++t) {
        double mx = -1e300;
        for (int u = 0; u <= t; ++u) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += q[qi(b, t, h) + d] * k[ki(b, u, g) + d];
          p[u] = dot * scale;
          mx = std::max(mx, p[u]);
        }
        double sum = 0;
        for (int u = 0; u <= t; ++u) sum += std::exp(p[u] - mx);
        r.lse[(static_cast<std::size_t>(b) * NH + h) * T + t] = mx + std::log(sum);
        for (int u = 0; u <= t; ++u) p[u] = std::exp(p[u] - mx) / sum;
        for (int d = 0; d < hd; ++d) {
          double o = 0;
          for (int u = 0; u <= t; ++u) o += p[u] * v[ki(b, u, g) + d];
          r.out[qi(b, t, h) + d] = o;
        }
        // Backward of this row.
        double weighted = 0;
        for (int u = 0; u <= t; ++u) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += dout[qi(b, t, h) + d] * v[ki(b, u, g) + d];
          dp[u] = dot;
          weighted += p[u] * dot;
        }
        for (int u = 0; u <= t; ++u) {
          const double ds = p[u] * (dp[u] - weighted) * scale;
          for (int d = 0; d < hd; ++d) {
            r.dv[ki(b, u, g) + d] += p[u] * dout[qi(b, t, h) + d];
            r.dq[qi(b, t, h) + d] += ds * k[ki(b, u, g) + d];
            r.dk[ki(b, u, g) + d] += ds * q[qi(b, t, h) + d];
          }
        }
      }
    }
  return r;
}

// The test's name and what gtest prints for it (ctest names carry both).
std::string case_name(const AttentionCase& c) {
  std::string name = "B";
  for (const auto& [label, value] : {std::pair<const char*, int>{"", c.shape.B}, {"_T", c.shape.T},
                                     {"_NH", c.shape.NH}, {"_NKV", c.shape.NKV}, {"_hd", c.shape.hd}}) {
    name += label;
    name += std::to_string(value);
  }
  if (c.packed) name += "_packed";
  return name;
}
void PrintTo(const AttentionCase& c, std::ostream* os) { *os << case_name(c); }

class Attention : public Gpu, public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(Attention, ForwardAndBackwardMatchFloat64) {
  AttentionCase c = GetParam();
  AttentionShape& s = c.shape;
  Rng rng(10);
  const std::size_t rows = static_cast<std::size_t>(s.B) * s.T;
  const std::size_t q_n = rows * s.NH * s.hd, kv_n = rows * s.NKV * s.hd;
  const auto q = random_floats(q_n, rng), k = random_floats(kv_n, rng), v = random_floats(kv_n, rng);
  const auto dout = random_floats(q_n, rng);
  const AttentionRef want = attention_ref(to_double(q), to_double(k), to_double(v), to_double(dout), s);

  // Device layout: packed rows q | k | v of 3C (NH == NKV), or three dense arrays.
  const int width = c.packed ? 3 * s.NH * s.hd : 0;
  s.q_stride = c.packed ? width : s.NH * s.hd;
  s.kv_stride = c.packed ? width : s.NKV * s.hd;
  s.out_stride = s.NH * s.hd;
  std::vector<float> qkv;
  if (c.packed) {
    qkv.resize(rows * width);
    const int C = s.NH * s.hd;
    for (std::size_t r = 0; r < rows; ++r)
      for (int j = 0; j < C; ++j) {
        qkv[r * width + j] = q[r * C + j];
        qkv[r * width + C + j] = k[r * C + j];
        qkv[r * width + 2 * C + j] = v[r * C + j];
      }
  }
  DeviceArray<float> d_qkv(c.packed ? qkv : std::vector<float>{0.f}), d_q(q), d_k(k), d_v(v);
  const float* pq = c.packed ? d_qkv.get() : d_q.get();
  const float* pk = c.packed ? d_qkv.get() + s.NH * s.hd : d_k.get();
  const float* pv = c.packed ? d_qkv.get() + 2 * s.NH * s.hd : d_v.get();
  DeviceArray<float> d_out(q_n), d_lse(static_cast<std::size_t>(s.B) * s.NH * s.T), d_dout(dout);
  attention_forward(d_out.get(), d_lse.get(), pq, pk, pv, s, nullptr);
  expect_rel(d_out.download(), want.out, kAttention, "attention out");
  expect_rel(d_lse.download(), want.lse, kAttention, "attention lse");

  DeviceArray<float> d_grads(c.packed ? rows * width : 1), d_dq(q_n), d_dk(kv_n), d_dv(kv_n);
  float* dq = c.packed ? d_grads.get() : d_dq.get();
  float* dk = c.packed ? d_grads.get() + s.NH * s.hd : d_dk.get();
  float* dv = c.packed ? d_grads.get() + 2 * s.NH * s.hd : d_dv.get();
  DeviceArray<std::uint8_t> scratch(attention_backward_scratch_bytes(s));
  std::vector<float> first_run;
  for (int run = 0; run < 2; ++run) {
    d_grads.poison();
    d_dq.poison();
    d_dk.poison();
    d_dv.poison();
    attention_backward(dq, dk, dv, d_dout.get(), d_out.get(), d_lse.get(), pq, pk, pv, s, scratch.get(), nullptr);
    std::vector<float> gq(q_n), gk(kv_n), gv(kv_n);
    if (c.packed) {
      const auto g = d_grads.download();
      const int C = s.NH * s.hd;
      for (std::size_t r = 0; r < rows; ++r)
        for (int j = 0; j < C; ++j) {
          gq[r * C + j] = g[r * width + j];
          gk[r * C + j] = g[r * width + C + j];
          gv[r * C + j] = g[r * width + 2 * C + j];
        }
    } else {
      gq = d_dq.download();
      gk = d_dk.download();
      gv = d_dv.download();
    }
    if (run == 0) {
      expect_rel(gq, want.dq, kAttentionGrad, "attention dq");
      expect_rel(gk, want.dk, kAttentionGrad, "attention dk");
      expect_rel(gv, want.dv, kAttentionGrad, "attention dv");
      first_run = gq;
      first_run.insert(first_run.end(), gk.begin(), gk.end());
      first_run.insert(first_run.end(), gv.begin(), gv.end());
    } else {
      std::vector<float> again = gq;
      again.insert(again.end(), gk.begin(), gk.end());
      again.insert(again.end(), gv.begin(), gv.end());
      expect_bits(again, first_run, "attention gradients, second run");
    }
  }
}

// Sequences that do not fill their last tile, head sizes 64, 128 and one that is not a
// multiple of 32, multi-head packed (GPT-2) and grouped-query (Llama).
INSTANTIATE_TEST_SUITE_P(Shapes, Attention,
                         ::testing::Values(AttentionCase{{2, 77, 4, 4, 64, 0, 0, 0}, true},
                                           AttentionCase{{1, 130, 4, 2, 128, 0, 0, 0}, false},
                                           AttentionCase{{2, 33, 2, 1, 40, 0, 0, 0}, false},
                                           AttentionCase{{1, 5, 3, 3, 16, 0, 0, 0}, true}),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) { return case_name(info.param); });

// ---------------------------------------------------------------------------------------
// Cross-entropy

TEST_F(Gpu, CrossEntropyFusedInPlace) {
  Rng rng(11);
  const int N = 9, V = 1000, Vp = 1024;
  const float scale = 1.f / N;
  auto logits = random_floats(static_cast<std::size_t>(N) * Vp, rng, 3.0);
  const auto targets = random_tokens(N, V, rng);
  Vec lse(N), losses(N);
  const Vec ld = to_double(logits);
  model::ref::crossentropy(ld.data(), targets.data(), N, V, Vp, lse.data(), losses.data());
  Vec dlogits(static_cast<std::size_t>(N) * Vp, 0.0);
  for (int i = 0; i < N; ++i) {
    for (int c = 0; c < V; ++c) dlogits[i * Vp + c] = scale * std::exp(ld[i * Vp + c] - lse[i]);
    dlogits[i * Vp + targets[i]] -= scale;
  }
  DeviceArray<float> d_logits(logits), d_lse(N), d_losses(N);
  DeviceArray<std::int32_t> d_targets(targets);
  crossentropy_fused(d_logits.get(), d_losses.get(), d_lse.get(), d_logits.get(), d_targets.get(), N, V, Vp, scale,
                     nullptr);
  expect_rel(d_losses.download(), losses, kElementwise, "losses");
  expect_rel(d_lse.download(), lse, kElementwise, "lse");
  const auto got = d_logits.download();
  expect_rel(got, dlogits, kElementwise, "dlogits");
  for (int i = 0; i < N; ++i)
    for (int c = V; c < Vp; ++c) ASSERT_EQ(got[i * Vp + c], 0.f) << "padding column " << c << " of row " << i;
}

// ---------------------------------------------------------------------------------------
// AdamW, casts

TEST_F(Gpu, AdamWGivesTheCpuBits) {
  Rng rng(12);
  const std::size_t n = 10007;
  auto p = random_floats(n, rng), m = random_floats(n, rng, 0.01);
  const auto g = random_floats(n, rng);
  auto v = random_floats(n, rng, 0.001);
  for (auto& x : v) x = std::abs(x);
  const optim::AdamWConfig hp;
  const float lr = 3e-4f, wd = 0.1f, grad_scale = 0.7f;
  const std::int64_t step = 3;
  DeviceArray<float> d_p(p), d_g(g), d_m(m), d_v(v);
  DeviceArray<std::uint16_t> d_bf16(n);
  adamw_update(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, optim::adamw_coefficients(hp, lr, wd, step, grad_scale),
               d_bf16.get(), nullptr);
  optim::adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp, lr, wd, step, grad_scale);
  expect_bits(d_p.download(), p, "params");
  expect_bits(d_m.download(), m, "exp_avg");
  expect_bits(d_v.download(), v, "exp_avg_sq");
  std::vector<std::uint16_t> bf16(n);
  for (std::size_t i = 0; i < n; ++i) bf16[i] = float_to_bf16(p[i]);
  expect_bits(d_bf16.download(), bf16, "bf16 params");
}

TEST_F(Gpu, CastsRoundLikeTheCpu) {
  Rng rng(13);
  auto x = random_floats(4096, rng, 100.0);
  // Ties, overflow to infinity, infinities, NaN with a low payload, signed zero, subnormals.
  for (std::uint32_t bits : {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u,
                             0x80000000u, 0x00000001u, 0x807fffffu})
    x.push_back(std::bit_cast<float>(bits));
  std::vector<std::uint16_t> want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = float_to_bf16(x[i]);
  DeviceArray<float> d_x(x), d_back(x.size());
  DeviceArray<std::uint16_t> d_bf16(x.size());
  cast_f32_to_bf16(d_bf16.get(), d_x.get(), x.size(), nullptr);
  const auto got = d_bf16.download();
  expect_bits(got, want, "fp32 -> bf16");
  cast_bf16_to_f32(d_back.get(), d_bf16.get(), x.size(), nullptr);
  std::vector<float> widened(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) widened[i] = bf16_to_float(want[i]);
  expect_bits(d_back.download(), widened, "bf16 -> fp32");
}

// ---------------------------------------------------------------------------------------
// Quantization: the CPU's bytes

std::string case_name(const quant::QuantSpec& c) {
  return std::string(dtype_name(c.dtype)) + "_block" + std::to_string(c.block_size);
}

class Quant : public Gpu, public ::testing::WithParamInterface<quant::QuantSpec> {};

TEST_P(Quant, BytesScalesAndDequantizedValuesAreTheCpus) {
  const quant::QuantSpec spec = GetParam();
  Rng rng(14);
  const std::size_t n = 10 * spec.block_size + spec.block_size / 2 + 1;  // a short last block
  auto x = random_floats(n, rng, 5.0);
  std::fill(x.begin() + spec.block_size, x.begin() + 2 * spec.block_size, 0.f);  // an all-zero block
  x[2 * spec.block_size] = 3e38f;                                             // absmax near FLT_MAX
  std::vector<std::uint16_t> x_bf16(n);
  for (std::size_t i = 0; i < n; ++i) x_bf16[i] = float_to_bf16(x[i]);
  const std::size_t blocks = quant::num_blocks(n, spec), bytes = quant::quantized_bytes(n, spec);

  DeviceArray<float> d_x(x);
  DeviceArray<std::uint16_t> d_x_bf16(x_bf16);
  DeviceArray<std::uint8_t> d_data(bytes);
  DeviceArray<float> d_scales(blocks);
  DeviceArray<std::uint64_t> d_bad(std::vector<std::uint64_t>{std::numeric_limits<std::uint64_t>::max()});
  for (const bool from_bf16 : {false, true}) {
    d_data.poison();
    d_scales.poison();
    std::vector<std::uint8_t> data(bytes);
    std::vector<float> scales(blocks);
    if (from_bf16) {
      quantize_bf16(d_data.get(), d_scales.get(), d_x_bf16.get(), n, spec, d_bad.get(), nullptr);
      quant::quantize_bf16(x_bf16.data(), n, spec, data.data(), scales.data());
    } else {
      quantize(d_data.get(), d_scales.get(), d_x.get(), n, spec, d_bad.get(), nullptr);
      quant::quantize(x.data(), n, spec, data.data(), scales.data());
    }
    const std::string from = from_bf16 ? " (from bf16)" : " (from fp32)";
    expect_bits(d_data.download(), data, "quantized bytes" + from);
    expect_bits(d_scales.download(), scales, "scales" + from);
    EXPECT_EQ(d_bad.download()[0], std::numeric_limits<std::uint64_t>::max()) << "a finite input was flagged";
  }

  // Back from the CPU's bytes: fp32, bf16, and the sum of three buffers onto an accumulator.
  std::vector<std::uint8_t> data(3 * bytes);
  std::vector<float> scales(3 * blocks);
  for (int j = 0; j < 3; ++j) {
    const auto src = random_floats(n, rng, 1.0 + j);
    quant::quantize(src.data(), n, spec, data.data() + j * bytes, scales.data() + j * blocks);
  }
  DeviceArray<std::uint8_t> d_all(data);
  DeviceArray<float> d_all_scales(scales), d_f32(n);
  DeviceArray<std::uint16_t> d_b16(n);
  dequantize(d_f32.get(), d_all.get(), d_all_scales.get(), n, spec, nullptr);
  dequantize_bf16(d_b16.get(), d_all.get(), d_all_scales.get(), n, spec, nullptr);
  std::vector<float> f32(n);
  std::vector<std::uint16_t> b16(n);
  quant::dequantize(data.data(), scales.data(), n, spec, f32.data());
  quant::dequantize_bf16(data.data(), scales.data(), n, spec, b16.data());
  expect_bits(d_f32.download(), f32, "dequantized fp32");
  expect_bits(d_b16.download(), b16, "dequantized bf16");

  auto sum = random_floats(n, rng);
  DeviceArray<float> d_sum(sum);
  dequantize_sum(d_sum.get(), d_all.get(), bytes, d_all_scales.get(), blocks, 3, n, spec, nullptr);
  for (int j = 0; j < 3; ++j)
    quant::dequantize_add(data.data() + j * bytes, scales.data() + j * blocks, n, spec, sum.data());
  expect_bits(d_sum.download(), sum, "dequantize_sum of 3 buffers");
}

INSTANTIATE_TEST_SUITE_P(Formats, Quant,
                         ::testing::Values(quant::QuantSpec{DType::I8, 256}, quant::QuantSpec{DType::I4, 256},
                                           quant::QuantSpec{DType::I8, 33}, quant::QuantSpec{DType::I4, 7},
                                           quant::QuantSpec{DType::I4, 1}, quant::QuantSpec{DType::I8, 2048}),
                         [](const ::testing::TestParamInfo<quant::QuantSpec>& info) { return case_name(info.param); });

TEST_F(Gpu, QuantizeFlagsTheFirstNonFiniteBlock) {
  const quant::QuantSpec format{DType::I8, 64};
  std::vector<float> x(64 * 8, 1.5f);
  x[64 * 5 + 3] = std::numeric_limits<float>::infinity();
  x[64 * 2 + 10] = std::numeric_limits<float>::quiet_NaN();
  DeviceArray<float> d_x(x), d_scales(8);
  DeviceArray<std::uint8_t> d_data(quant::quantized_bytes(x.size(), format));
  DeviceArray<std::uint64_t> d_bad(std::vector<std::uint64_t>{std::numeric_limits<std::uint64_t>::max()});
  quantize(d_data.get(), d_scales.get(), d_x.get(), x.size(), format, d_bad.get(), nullptr);
  EXPECT_EQ(d_bad.download()[0], 2u);
  const auto scales = d_scales.download();
  EXPECT_EQ(scales[0], 1.5f / 127);
  EXPECT_TRUE(std::isnan(scales[2])) << "a refused block's scale was written";  // still the poison
}

TEST_F(Gpu, LaunchersRefuseBadArguments) {
  const quant::QuantSpec bad_dtype{DType::F32, 256};
  try {
    quantize(nullptr, nullptr, nullptr, 100, bad_dtype, nullptr, nullptr);
    ADD_FAILURE() << "fp32 was accepted as a quantized format";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dtype is not int8 or int4"), std::string::npos) << e.what();
  }
  const AttentionShape s{1, 8, 3, 2, 64, 192, 128, 192};
  try {
    attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, s, nullptr);
    ADD_FAILURE() << "NKV = 2 with NH = 3 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NKV = 2 must divide NH = 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::device::cuda
