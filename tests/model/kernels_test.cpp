// Every layer kernel, on every instruction set this CPU has: forward against a float64
// reference, backward against central differences of that reference. Then the paths
// against each other, and the thread-count independence of the non-GEMM kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/cpu.hpp"
#include "base/error.hpp"
#include "base/rng.hpp"
#include "model/kernels.hpp"
#include "model/reference.hpp"

namespace strata::model {
namespace {

using ref::expect_close;
using ref::random_floats;
using ref::to_double;
using ref::Vec;

std::vector<Isa> available_isas() {
  std::vector<Isa> isas;
  for (int i = 0; i <= static_cast<int>(detected_isa()); ++i) isas.push_back(static_cast<Isa>(i));
  return isas;
}

double dot(const Vec& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// The expected value of an accumulating gradient: initial value + central differences.
Vec accumulated_fd(const std::vector<float>& initial, Vec& x, const std::function<double()>& f) {
  Vec out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = initial[i] + ref::central_diff(f, x[i], 1e-6);
  return out;
}

// Runs f on each of `parts` shares of [0, n), as that many threads would.
template <class F>
void in_shares(int n, int parts, int align, F&& f) {
  for (int p = 0; p < parts; ++p) f(share(n, parts, p, align));
}
constexpr int kParts = 3;  // uneven shares, and column shares with a vector tail

constexpr double kFwdTol = 2e-6;   // fp32 kernel vs float64 reference, values of order 1
constexpr double kGradRtol = 1e-4; // fp32 analytic gradients vs float64 central differences
constexpr double kGradAtol = 1e-5;

TEST(Share, SplitsEvenlyOnAlignedBoundaries) {
  EXPECT_EQ(share(10, 3, 0).begin, 0);
  EXPECT_EQ(share(10, 3, 0).end, 4);
  EXPECT_EQ(share(10, 3, 1).end, 7);
  EXPECT_EQ(share(10, 3, 2).end, 10);
  // 37 columns in cache lines of 16: 16 + 16 + 5.
  EXPECT_EQ(share(37, 3, 0, 16).end, 16);
  EXPECT_EQ(share(37, 3, 1, 16).end, 32);
  EXPECT_EQ(share(37, 3, 2, 16).end, 37);
  // More parts than work: the extra parts are empty.
  EXPECT_EQ(share(2, 4, 3).size(), 0);
  EXPECT_EQ(share(20, 4, 3, 16).size(), 0);
}

class KernelTest : public ::testing::TestWithParam<Isa> {
 protected:
  const Kernels& k() { return kernels_for(GetParam()); }
};

TEST_P(KernelTest, Embedding) {
  const int B = 2, T = 5, C = 37, vocab = 11;
  Rng rng(1);
  const std::vector<std::int32_t> tokens = {3, 7, 3, 0, 10, 7, 7, 1, 3, 2};  // repeats on purpose
  auto wte = random_floats(vocab * C, rng), wpe = random_floats(T * C, rng);
  std::vector<float> out(B * T * C);
  in_shares(B * T, kParts, 1, [&](Range r) { k().embed_forward(out.data(), tokens.data(), wte.data(), wpe.data(), T, C, r); });
  Vec wte_d = to_double(wte), wpe_d = to_double(wpe), want(out.size());
  ref::embed(tokens.data(), wte_d.data(), wpe_d.data(), want.data(), B, T, C);
  expect_close(out.data(), want.data(), out.size(), kFwdTol, 0, "embedding forward");

  auto dout = random_floats(out.size(), rng);
  auto dwte = random_floats(wte.size(), rng), dwpe = random_floats(wpe.size(), rng);
  const auto dwte0 = dwte, dwpe0 = dwpe;
  in_shares(C, kParts, kColumnAlign, [&](Range r) {
    k().embed_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, r);
  });
  auto f = [&] {
    Vec o(out.size());
    ref::embed(tokens.data(), wte_d.data(), wpe_d.data(), o.data(), B, T, C);
    return dot(o, dout);
  };
  Vec want_dwte = accumulated_fd(dwte0, wte_d, f), want_dwpe = accumulated_fd(dwpe0, wpe_d, f);
  expect_close(dwte.data(), want_dwte.data(), dwte.size(), kGradRtol, kGradAtol, "dwte");
  expect_close(dwpe.data(), want_dwpe.data(), dwpe.size(), kGradRtol, kGradAtol, "dwpe");
}

TEST_P(KernelTest, LayerNorm) {
  const int N = 5, C = 37;  // 37 columns: full vectors plus a tail on every path
  Rng rng(2);
  auto x = random_floats(N * C, rng, 1.5, 0.7), w = random_floats(C, rng, 0.3, 1.0), b = random_floats(C, rng, 0.3);
  auto residual_bias = random_floats(C, rng);
  std::vector<float> out(N * C), mean(N), rstd(N), residual(N * C);
  in_shares(N, kParts, 1, [&](Range r) {
    k().layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), C, r, residual.data(),
                          residual_bias.data());
  });
  Vec xd = to_double(x), wd = to_double(w), bd = to_double(b), want(N * C), want_residual(N * C);
  ref::layernorm(xd.data(), wd.data(), bd.data(), want.data(), N, C);
  expect_close(out.data(), want.data(), out.size(), kFwdTol, kFwdTol, "layernorm forward");
  for (int i = 0; i < N * C; ++i) want_residual[i] = xd[i] + residual_bias[i % C];
  expect_close(residual.data(), want_residual.data(), residual.size(), 1e-7, 0, "fused residual copy");
  Vec want_mean(N), want_rstd(N);
  for (int i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += xd[i * C + c] / C;
    for (int c = 0; c < C; ++c) v += (xd[i * C + c] - m) * (xd[i * C + c] - m) / C;
    want_mean[i] = m;
    want_rstd[i] = 1 / std::sqrt(v + 1e-5);
  }
  expect_close(mean.data(), want_mean.data(), N, kFwdTol, kFwdTol, "mean");
  expect_close(rstd.data(), want_rstd.data(), N, kFwdTol, 0, "rstd");

  auto dout = random_floats(N * C, rng);
  auto res_grad = random_floats(N * C, rng), dw = random_floats(C, rng), db = random_floats(C, rng);
  std::vector<float> dx(N * C, NAN);  // overwritten
  const auto dw0 = dw, db0 = db;
  in_shares(N, kParts, 1, [&](Range r) {
    k().layernorm_backward_input(dx.data(), res_grad.data(), dout.data(), x.data(), w.data(), mean.data(),
                                 rstd.data(), C, r);
  });
  in_shares(C, kParts, kColumnAlign, [&](Range r) {
    k().layernorm_backward_params(dw.data(), db.data(), dout.data(), x.data(), mean.data(), rstd.data(), N, C, r);
  });
  auto f = [&] {
    Vec o(N * C);
    ref::layernorm(xd.data(), wd.data(), bd.data(), o.data(), N, C);
    return dot(o, dout);
  };
  Vec want_dx = accumulated_fd(res_grad, xd, f), want_dw = accumulated_fd(dw0, wd, f), want_db = accumulated_fd(db0, bd, f);
  expect_close(dx.data(), want_dx.data(), dx.size(), kGradRtol, kGradAtol, "dx + residual gradient");
  expect_close(dw.data(), want_dw.data(), dw.size(), kGradRtol, kGradAtol, "dw");
  expect_close(db.data(), want_db.data(), db.size(), kGradRtol, kGradAtol, "db");

  // Without a residual gradient, dx is the LayerNorm's own; in place over the residual too.
  std::vector<float> dx_alone(N * C, NAN), dx_in_place = res_grad;
  k().layernorm_backward_input(dx_alone.data(), nullptr, dout.data(), x.data(), w.data(), mean.data(), rstd.data(),
                               C, {0, N});
  k().layernorm_backward_input(dx_in_place.data(), dx_in_place.data(), dout.data(), x.data(), w.data(), mean.data(),
                               rstd.data(), C, {0, N});
  EXPECT_EQ(dx_in_place, dx);
  for (int i = 0; i < N * C; ++i) want_dx[i] -= res_grad[i];
  expect_close(dx_alone.data(), want_dx.data(), dx_alone.size(), kGradRtol, kGradAtol, "dx alone");
}

// The linear layer as the model composes it: bias pre-broadcast, GEMM accumulating onto it.
TEST_P(KernelTest, LinearWithBias) {
  const int N = 7, in = 19, out = 23, ld = out + 5;  // ld > out as for the padded LM head
  Rng rng(3);
  auto x = random_floats(N * in, rng), w = random_floats(out * in, rng, 0.2), b = random_floats(out, rng);
  std::vector<float> y(N * out), y_nobias(N * out, NAN);
  in_shares(N, kParts, 1, [&](Range r) {
    k().broadcast_rows(y.data(), b.data(), out, r);
    matmul_forward(y.data(), x.data(), w.data(), in, out, /*accumulate=*/true, r);
    matmul_forward(y_nobias.data(), x.data(), w.data(), in, out, /*accumulate=*/false, r);
  });
  Vec xd = to_double(x), wd = to_double(w), bd = to_double(b), want(N * out);
  ref::linear(xd.data(), wd.data(), bd.data(), want.data(), N, in, out);
  expect_close(y.data(), want.data(), y.size(), kFwdTol, kFwdTol, "linear forward");
  ref::linear(xd.data(), wd.data(), nullptr, want.data(), N, in, out);
  expect_close(y_nobias.data(), want.data(), y.size(), kFwdTol, kFwdTol, "linear forward, overwrite");

  auto dy = random_floats(N * ld, rng);
  std::vector<float> dy_dense(N * out);
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < out; ++o) dy_dense[i * out + o] = dy[i * ld + o];
  std::vector<float> dx(N * in, NAN);
  auto dw = random_floats(out * in, rng), db = random_floats(out, rng);
  const auto dw0 = dw, db0 = db;
  in_shares(N, kParts, 1, [&](Range r) { matmul_backward_input(dx.data(), dy.data(), ld, w.data(), in, out, r); });
  in_shares(out, kParts, 1, [&](Range r) { matmul_backward_weight(dw.data(), dy.data(), ld, x.data(), N, in, r); });
  in_shares(out, kParts, kColumnAlign, [&](Range r) { k().column_sums(db.data(), dy.data(), N, ld, r); });
  auto f = [&] {
    Vec o(N * out);
    ref::linear(xd.data(), wd.data(), bd.data(), o.data(), N, in, out);
    return dot(o, dy_dense);
  };
  Vec want_dx = accumulated_fd(std::vector<float>(N * in, 0.f), xd, f);
  Vec want_dw = accumulated_fd(dw0, wd, f), want_db = accumulated_fd(db0, bd, f);
  expect_close(dx.data(), want_dx.data(), dx.size(), kGradRtol, kGradAtol, "linear dx");
  expect_close(dw.data(), want_dw.data(), dw.size(), kGradRtol, kGradAtol, "linear dw");
  expect_close(db.data(), want_db.data(), db.size(), kGradRtol, kGradAtol, "linear db");
}

TEST_P(KernelTest, BiasGelu) {
  const int N = 6, C = 45;
  Rng rng(4);
  auto x = random_floats(N * C, rng, 2.0), b = random_floats(C, rng, 0.5);
  x[0] = 12.f, x[1] = -12.f, x[2] = 0.f, x[3] = 40.f, x[4] = -40.f;  // saturated tanh both ways, and zero
  auto pre = x;
  std::vector<float> out(N * C);
  in_shares(N, kParts, 1, [&](Range r) { k().bias_gelu_forward(pre.data(), out.data(), b.data(), C, r); });
  Vec xd = to_double(x), bd = to_double(b), want_pre(N * C), want(N * C);
  for (int i = 0; i < N * C; ++i) {
    want_pre[i] = xd[i] + bd[i % C];
    want[i] = ref::gelu(want_pre[i]);
  }
  expect_close(pre.data(), want_pre.data(), pre.size(), 1e-7, 0, "pre-activation");
  expect_close(out.data(), want.data(), out.size(), kFwdTol, kFwdTol, "gelu forward");

  auto d = random_floats(N * C, rng);
  const auto dout = d;
  in_shares(N, kParts, 1, [&](Range r) { k().gelu_backward(d.data(), pre.data(), C, r); });
  auto f = [&] {
    double s = 0;
    for (int i = 0; i < N * C; ++i) s += ref::gelu(xd[i] + bd[i % C]) * dout[i];
    return s;
  };
  Vec want_d = accumulated_fd(std::vector<float>(N * C, 0.f), xd, f);
  expect_close(d.data(), want_d.data(), d.size(), kGradRtol, kGradAtol, "gelu dx");
}

TEST_P(KernelTest, CausalAttention) {
  const int B = 2, T = 40, C = 8, NH = 2;  // T spans two row blocks, the second partial
  Rng rng(5);
  auto qkv = random_floats(B * T * 3 * C, rng);
  std::vector<float> out(B * T * C), att(B * NH * T * T, NAN);
  in_shares(B * NH, kParts, 1, [&](Range r) { k().attention_forward(out.data(), att.data(), qkv.data(), T, C, NH, r); });
  Vec qkv_d = to_double(qkv), want(out.size()), want_att(att.size());
  ref::attention(qkv_d.data(), want.data(), want_att.data(), B, T, C, NH);
  expect_close(out.data(), want.data(), out.size(), kFwdTol, kFwdTol, "attention output");
  expect_close(att.data(), want_att.data(), att.size(), kFwdTol, kFwdTol, "attention probabilities");

  auto dout = random_floats(out.size(), rng);
  std::vector<float> dqkv(qkv.size(), NAN);  // every element must be written
  std::vector<float> scratch(T * T, NAN);
  in_shares(B * NH, kParts, 1, [&](Range r) {
    k().attention_backward(dqkv.data(), dout.data(), att.data(), qkv.data(), T, C, NH, r, scratch.data());
  });
  auto f = [&] {
    Vec o(out.size());
    ref::attention(qkv_d.data(), o.data(), nullptr, B, T, C, NH);
    return dot(o, dout);
  };
  Vec want_dqkv = accumulated_fd(std::vector<float>(qkv.size(), 0.f), qkv_d, f);
  expect_close(dqkv.data(), want_dqkv.data(), dqkv.size(), kGradRtol, kGradAtol, "attention dqkv");
}

TEST_P(KernelTest, SoftmaxCrossEntropy) {
  const int N = 6, V = 37, Vp = 48;
  Rng rng(6);
  auto logits = random_floats(N * Vp, rng, 3.0);
  for (int i = 0; i < N; ++i)
    for (int v = V; v < Vp; ++v) logits[i * Vp + v] = 100.f;  // padded columns: must be ignored
  const std::vector<std::int32_t> targets = {0, 36, 5, 5, 17, 30};
  std::vector<float> lse(N), losses(N);
  in_shares(N, kParts, 1, [&](Range r) {
    k().crossentropy_forward(lse.data(), losses.data(), logits.data(), targets.data(), V, Vp, r);
  });
  Vec ld = to_double(logits), want_lse(N), want_losses(N);
  ref::crossentropy(ld.data(), targets.data(), N, V, Vp, want_lse.data(), want_losses.data());
  expect_close(lse.data(), want_lse.data(), N, kFwdTol, kFwdTol, "log-sum-exp");
  expect_close(losses.data(), want_losses.data(), N, kFwdTol, kFwdTol, "losses");

  const float scale = 0.37f;
  std::vector<float> dlogits(N * Vp, NAN);
  in_shares(N, kParts, 1, [&](Range r) {
    k().crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), V, Vp, scale, r);
  });
  auto f = [&] { return scale * ref::crossentropy(ld.data(), targets.data(), N, V, Vp); };
  Vec want_d = accumulated_fd(std::vector<float>(N * Vp, 0.f), ld, f);
  expect_close(dlogits.data(), want_d.data(), dlogits.size(), kGradRtol, kGradAtol, "dlogits");
  for (int i = 0; i < N; ++i)
    for (int v = V; v < Vp; ++v) EXPECT_EQ(dlogits[i * Vp + v], 0.f) << "padded column " << v;
}

INSTANTIATE_TEST_SUITE_P(Isas, KernelTest, ::testing::ValuesIn(available_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

// Runs every kernel on fixed inputs (shapes with vector tails), each split in `parts`
// shares, and returns all outputs.
std::map<std::string, std::vector<float>> run_all_kernels(const Kernels& k, int parts) {
  const int B = 3, T = 45, C = 24, NH = 3, N = B * T, V = 50, Vp = 64, vocab = 50;
  auto rows = [&](int n, auto&& f) { in_shares(n, parts, 1, f); };
  auto cols = [&](int n, auto&& f) { in_shares(n, parts, kColumnAlign, f); };
  Rng rng(7);
  std::map<std::string, std::vector<float>> r;
  std::vector<std::int32_t> tokens(N);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.below(vocab));
  auto wte = random_floats(vocab * C, rng), wpe = random_floats(T * C, rng);
  auto& x = r["embed"] = std::vector<float>(N * C);
  rows(N, [&](Range s) { k.embed_forward(x.data(), tokens.data(), wte.data(), wpe.data(), T, C, s); });
  auto& dwte = r["dwte"] = random_floats(vocab * C, rng);
  auto& dwpe = r["dwpe"] = random_floats(T * C, rng);
  cols(C, [&](Range s) { k.embed_backward(dwte.data(), dwpe.data(), x.data(), tokens.data(), B, T, C, s); });

  auto w = random_floats(C, rng, 0.2, 1.0), b = random_floats(C, rng, 0.2);
  auto& ln = r["ln"] = std::vector<float>(N * C);
  auto& mean = r["ln_mean"] = std::vector<float>(N);
  auto& rstd = r["ln_rstd"] = std::vector<float>(N);
  auto& res = r["ln_residual"] = std::vector<float>(N * C);
  rows(N, [&](Range s) {
    k.layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), C, s, res.data(), b.data());
  });
  auto& dx = r["ln_dx"] = std::vector<float>(N * C);
  rows(N, [&](Range s) {
    k.layernorm_backward_input(dx.data(), res.data(), ln.data(), x.data(), w.data(), mean.data(), rstd.data(), C, s);
  });
  auto& dw = r["ln_dw"] = std::vector<float>(C);
  auto& db = r["ln_db"] = std::vector<float>(C);
  cols(C, [&](Range s) {
    k.layernorm_backward_params(dw.data(), db.data(), ln.data(), x.data(), mean.data(), rstd.data(), N, C, s);
  });

  auto& pre = r["gelu_pre"] = random_floats(N * 4 * C, rng, 2.0);
  auto& act = r["gelu"] = std::vector<float>(N * 4 * C);
  auto fc_b = random_floats(4 * C, rng);
  rows(N, [&](Range s) { k.bias_gelu_forward(pre.data(), act.data(), fc_b.data(), 4 * C, s); });
  auto& dgelu = r["gelu_d"] = random_floats(N * 4 * C, rng);
  rows(N, [&](Range s) { k.gelu_backward(dgelu.data(), pre.data(), 4 * C, s); });
  auto& colsum = r["column_sums"] = std::vector<float>(3 * C);
  cols(3 * C, [&](Range s) { k.column_sums(colsum.data(), pre.data(), N, 4 * C, s); });
  auto& bcast = r["broadcast"] = std::vector<float>(N * 4 * C);
  rows(N, [&](Range s) { k.broadcast_rows(bcast.data(), fc_b.data(), 4 * C, s); });

  auto qkv = random_floats(N * 3 * C, rng);
  auto& att_out = r["att_out"] = std::vector<float>(N * C);
  auto& att = r["att"] = std::vector<float>(B * NH * T * T);
  rows(B * NH, [&](Range s) { k.attention_forward(att_out.data(), att.data(), qkv.data(), T, C, NH, s); });
  auto& dqkv = r["att_dqkv"] = std::vector<float>(N * 3 * C);
  std::vector<float> scratch(T * T);
  rows(B * NH, [&](Range s) {
    k.attention_backward(dqkv.data(), x.data(), att.data(), qkv.data(), T, C, NH, s, scratch.data());
  });

  auto logits = random_floats(N * Vp, rng, 4.0);
  std::vector<std::int32_t> targets(N);
  for (auto& t : targets) t = static_cast<std::int32_t>(rng.below(V));
  auto& lse = r["lse"] = std::vector<float>(N);
  auto& losses = r["losses"] = std::vector<float>(N);
  rows(N, [&](Range s) { k.crossentropy_forward(lse.data(), losses.data(), logits.data(), targets.data(), V, Vp, s); });
  auto& dlogits = r["dlogits"] = std::vector<float>(N * Vp);
  rows(N, [&](Range s) {
    k.crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), V, Vp, 0.5f, s);
  });
  return r;
}

TEST(KernelIsas, VectorPathsAgreeWithScalar) {
  const auto scalar = run_all_kernels(kernels_for(Isa::Scalar), 1);
  for (Isa isa : available_isas()) {
    const auto got = run_all_kernels(kernels_for(isa), 1);
    for (auto& [name, want] : scalar) {
      const std::vector<float>& g = got.at(name);
      Vec w(want.begin(), want.end());
      double scale = 0;
      for (double x : w) scale = std::max(scale, std::abs(x));
      // Same formulas, different summation orders and fused multiply-adds: a few ulp apart,
      // relative to the output's magnitude where sums cancel.
      expect_close(g.data(), w.data(), w.size(), 2e-6, 5e-6 * scale, std::string(isa_name(isa)) + " " + name);
    }
    // Pure additions in a fixed order: identical on every path.
    for (const char* exact : {"embed", "dwte", "dwpe", "column_sums", "broadcast", "ln_residual"})
      EXPECT_EQ(got.at(exact), scalar.at(exact)) << isa_name(isa) << " " << exact;
  }
}

// Each output element is computed whole by whichever thread owns it.
TEST(KernelIsas, ResultsDoNotDependOnHowWorkIsShared) {
  for (Isa isa : available_isas()) {
    const auto one = run_all_kernels(kernels_for(isa), 1);
    for (int parts : {2, 3, 7}) {
      const auto many = run_all_kernels(kernels_for(isa), parts);
      for (auto& [name, v] : one) EXPECT_EQ(v, many.at(name)) << isa_name(isa) << " " << name << " in " << parts;
    }
  }
}

}  // namespace
}  // namespace strata::model
