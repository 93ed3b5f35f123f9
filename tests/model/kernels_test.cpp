// Every layer kernel, on every instruction set this CPU has: forward against a float64
// reference, backward against central differences of that reference. Then the paths
// against each other, and the thread-count independence of the non-GEMM kernels.
#include <gtest/gtest.h>
#include <omp.h>

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

constexpr double kFwdTol = 2e-6;   // fp32 kernel vs float64 reference, values of order 1
constexpr double kGradRtol = 1e-4; // fp32 analytic gradients vs float64 central differences
constexpr double kGradAtol = 1e-5;

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
  k().embed_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  Vec wte_d = to_double(wte), wpe_d = to_double(wpe), want(out.size());
  ref::embed(tokens.data(), wte_d.data(), wpe_d.data(), want.data(), B, T, C);
  expect_close(out.data(), want.data(), out.size(), kFwdTol, 0, "embedding forward");

  auto dout = random_floats(out.size(), rng);
  auto dwte = random_floats(wte.size(), rng), dwpe = random_floats(wpe.size(), rng);
  const auto dwte0 = dwte, dwpe0 = dwpe;
  k().embed_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
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
  k().layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, residual.data(),
                        residual_bias.data());
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
  auto dx = random_floats(N * C, rng), dw = random_floats(C, rng), db = random_floats(C, rng);
  auto colsum = random_floats(C, rng);
  const auto dx0 = dx, dw0 = dw, db0 = db, colsum0 = colsum;
  k().layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(),
                         N, C, /*accumulate=*/true, colsum.data());
  auto f = [&] {
    Vec o(N * C);
    ref::layernorm(xd.data(), wd.data(), bd.data(), o.data(), N, C);
    return dot(o, dout);
  };
  Vec want_dx = accumulated_fd(dx0, xd, f), want_dw = accumulated_fd(dw0, wd, f), want_db = accumulated_fd(db0, bd, f);
  expect_close(dx.data(), want_dx.data(), dx.size(), kGradRtol, kGradAtol, "dx (accumulated)");
  expect_close(dw.data(), want_dw.data(), dw.size(), kGradRtol, kGradAtol, "dw");
  expect_close(db.data(), want_db.data(), db.size(), kGradRtol, kGradAtol, "db");
  Vec want_colsum(C);
  for (int c = 0; c < C; ++c) {
    want_colsum[c] = colsum0[c];
    for (int i = 0; i < N; ++i) want_colsum[c] += want_dx[i * C + c];
  }
  expect_close(colsum.data(), want_colsum.data(), C, kGradRtol, kGradAtol, "column sums of dx");

  // Without accumulation dx is overwritten: its old contents (here NaN) must not leak in.
  std::vector<float> dx_fresh(N * C, NAN);
  k().layernorm_backward(dx_fresh.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                         rstd.data(), N, C, /*accumulate=*/false, nullptr);
  for (int i = 0; i < N * C; ++i) want_dx[i] -= dx0[i];
  expect_close(dx_fresh.data(), want_dx.data(), dx_fresh.size(), kGradRtol, kGradAtol, "dx (overwritten)");
}

// The linear layer as the model composes it: bias pre-broadcast, GEMM accumulating onto it.
TEST_P(KernelTest, LinearWithBias) {
  const int N = 7, in = 19, out = 23, ld = out + 5;  // ld > out as for the padded LM head
  Rng rng(3);
  auto x = random_floats(N * in, rng), w = random_floats(out * in, rng, 0.2), b = random_floats(out, rng);
  std::vector<float> y(N * out);
  k().broadcast_rows(y.data(), b.data(), N, out);
  matmul_forward(y.data(), x.data(), w.data(), N, in, out, /*accumulate=*/true);
  Vec xd = to_double(x), wd = to_double(w), bd = to_double(b), want(N * out);
  ref::linear(xd.data(), wd.data(), bd.data(), want.data(), N, in, out);
  expect_close(y.data(), want.data(), y.size(), kFwdTol, kFwdTol, "linear forward");
  std::vector<float> y_nobias(N * out, NAN);
  matmul_forward(y_nobias.data(), x.data(), w.data(), N, in, out, /*accumulate=*/false);
  ref::linear(xd.data(), wd.data(), nullptr, want.data(), N, in, out);
  expect_close(y_nobias.data(), want.data(), y.size(), kFwdTol, kFwdTol, "linear forward, overwrite");

  auto dy = random_floats(N * ld, rng);
  std::vector<float> dy_dense(N * out);
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < out; ++o) dy_dense[i * out + o] = dy[i * ld + o];
  std::vector<float> dx(N * in, NAN);
  auto dw = random_floats(out * in, rng), db = random_floats(out, rng);
  const auto dw0 = dw, db0 = db;
  matmul_backward_input(dx.data(), dy.data(), ld, w.data(), N, in, out);
  matmul_backward_weight(dw.data(), dy.data(), ld, x.data(), N, in, out);
  k().column_sums(db.data(), dy.data(), N, out, ld);
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
  k().bias_gelu_forward(pre.data(), out.data(), b.data(), N, C);
  Vec xd = to_double(x), bd = to_double(b), want_pre(N * C), want(N * C);
  for (int i = 0; i < N * C; ++i) {
    want_pre[i] = xd[i] + bd[i % C];
    want[i] = ref::gelu(want_pre[i]);
  }
  expect_close(pre.data(), want_pre.data(), pre.size(), 1e-7, 0, "pre-activation");
  expect_close(out.data(), want.data(), out.size(), kFwdTol, kFwdTol, "gelu forward");

  auto d = random_floats(N * C, rng), dbias = random_floats(C, rng);
  const auto dout = d, dbias0 = dbias;
  k().gelu_backward(d.data(), dbias.data(), pre.data(), N, C);
  auto f = [&] {
    double s = 0;
    for (int i = 0; i < N * C; ++i) s += ref::gelu(xd[i] + bd[i % C]) * dout[i];
    return s;
  };
  Vec want_d = accumulated_fd(std::vector<float>(N * C, 0.f), xd, f), want_db = accumulated_fd(dbias0, bd, f);
  expect_close(d.data(), want_d.data(), d.size(), kGradRtol, kGradAtol, "gelu dx");
  expect_close(dbias.data(), want_db.data(), dbias.size(), kGradRtol, kGradAtol, "gelu dbias");
}

TEST_P(KernelTest, CausalAttention) {
  const int B = 2, T = 40, C = 8, NH = 2;  // T spans two row blocks, the second partial
  Rng rng(5);
  auto qkv = random_floats(B * T * 3 * C, rng);
  std::vector<float> out(B * T * C), att(B * NH * T * T, NAN);
  k().attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  Vec qkv_d = to_double(qkv), want(out.size()), want_att(att.size());
  ref::attention(qkv_d.data(), want.data(), want_att.data(), B, T, C, NH);
  expect_close(out.data(), want.data(), out.size(), kFwdTol, kFwdTol, "attention output");
  expect_close(att.data(), want_att.data(), att.size(), kFwdTol, kFwdTol, "attention probabilities");

  auto dout = random_floats(out.size(), rng);
  std::vector<float> dqkv(qkv.size(), NAN);  // every element must be written
  std::vector<float> scratch(attention_scratch_floats(T, omp_get_max_threads()));
  k().attention_backward(dqkv.data(), dout.data(), att.data(), qkv.data(), B, T, C, NH, scratch.data());
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
  const double total = k().crossentropy_forward(lse.data(), losses.data(), logits.data(), targets.data(), N, V, Vp);
  Vec ld = to_double(logits), want_lse(N), want_losses(N);
  const double want_total = ref::crossentropy(ld.data(), targets.data(), N, V, Vp, want_lse.data(), want_losses.data());
  EXPECT_NEAR(total, want_total, 1e-5 * std::abs(want_total));
  expect_close(lse.data(), want_lse.data(), N, kFwdTol, kFwdTol, "log-sum-exp");
  expect_close(losses.data(), want_losses.data(), N, kFwdTol, kFwdTol, "losses");

  const float scale = 0.37f;
  std::vector<float> dlogits(N * Vp, NAN);
  k().crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), N, V, Vp, scale);
  auto f = [&] { return scale * ref::crossentropy(ld.data(), targets.data(), N, V, Vp); };
  Vec want_d = accumulated_fd(std::vector<float>(N * Vp, 0.f), ld, f);
  expect_close(dlogits.data(), want_d.data(), dlogits.size(), kGradRtol, kGradAtol, "dlogits");
  for (int i = 0; i < N; ++i)
    for (int v = V; v < Vp; ++v) EXPECT_EQ(dlogits[i * Vp + v], 0.f) << "padded column " << v;
}

INSTANTIATE_TEST_SUITE_P(Isas, KernelTest, ::testing::ValuesIn(available_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

// Runs every kernel on fixed inputs (shapes with vector tails) and returns all outputs.
std::map<std::string, std::vector<float>> run_all_kernels(const Kernels& k) {
  const int B = 3, T = 45, C = 24, NH = 3, N = B * T, V = 50, Vp = 64, vocab = 50;
  Rng rng(7);
  std::map<std::string, std::vector<float>> r;
  std::vector<std::int32_t> tokens(N);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.below(vocab));
  auto wte = random_floats(vocab * C, rng), wpe = random_floats(T * C, rng);
  auto& x = r["embed"] = std::vector<float>(N * C);
  k.embed_forward(x.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  auto& dwte = r["dwte"] = random_floats(vocab * C, rng);
  auto& dwpe = r["dwpe"] = random_floats(T * C, rng);
  k.embed_backward(dwte.data(), dwpe.data(), x.data(), tokens.data(), B, T, C);

  auto w = random_floats(C, rng, 0.2, 1.0), b = random_floats(C, rng, 0.2);
  auto& ln = r["ln"] = std::vector<float>(N * C);
  auto& mean = r["ln_mean"] = std::vector<float>(N);
  auto& rstd = r["ln_rstd"] = std::vector<float>(N);
  auto& res = r["ln_residual"] = std::vector<float>(N * C);
  k.layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, res.data(), b.data());
  auto& dx = r["ln_dx"] = random_floats(N * C, rng);
  auto& dw = r["ln_dw"] = std::vector<float>(C);
  auto& db = r["ln_db"] = std::vector<float>(C);
  auto& dsum = r["ln_dx_colsum"] = std::vector<float>(C);
  k.layernorm_backward(dx.data(), dw.data(), db.data(), ln.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                       C, true, dsum.data());

  auto& pre = r["gelu_pre"] = random_floats(N * 4 * C, rng, 2.0);
  auto& act = r["gelu"] = std::vector<float>(N * 4 * C);
  auto fc_b = random_floats(4 * C, rng);
  k.bias_gelu_forward(pre.data(), act.data(), fc_b.data(), N, 4 * C);
  auto& dgelu = r["gelu_d"] = random_floats(N * 4 * C, rng);
  auto& dfc_b = r["gelu_dbias"] = std::vector<float>(4 * C);
  k.gelu_backward(dgelu.data(), dfc_b.data(), pre.data(), N, 4 * C);
  auto& colsum = r["column_sums"] = std::vector<float>(3 * C);
  k.column_sums(colsum.data(), pre.data(), N, 3 * C, 4 * C);
  auto& rows = r["broadcast"] = std::vector<float>(N * 4 * C);
  k.broadcast_rows(rows.data(), fc_b.data(), N, 4 * C);

  auto qkv = random_floats(N * 3 * C, rng);
  auto& att_out = r["att_out"] = std::vector<float>(N * C);
  auto& att = r["att"] = std::vector<float>(B * NH * T * T);
  k.attention_forward(att_out.data(), att.data(), qkv.data(), B, T, C, NH);
  auto& dqkv = r["att_dqkv"] = std::vector<float>(N * 3 * C);
  std::vector<float> scratch(attention_scratch_floats(T, omp_get_max_threads()));
  k.attention_backward(dqkv.data(), x.data(), att.data(), qkv.data(), B, T, C, NH, scratch.data());

  auto logits = random_floats(N * Vp, rng, 4.0);
  std::vector<std::int32_t> targets(N);
  for (auto& t : targets) t = static_cast<std::int32_t>(rng.below(V));
  auto& lse = r["lse"] = std::vector<float>(N);
  auto& losses = r["losses"] = std::vector<float>(N);
  r["loss_sum"] = {static_cast<float>(
      k.crossentropy_forward(lse.data(), losses.data(), logits.data(), targets.data(), N, V, Vp))};
  auto& dlogits = r["dlogits"] = std::vector<float>(N * Vp);
  k.crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), N, V, Vp, 0.5f);
  return r;
}

TEST(KernelIsas, VectorPathsAgreeWithScalar) {
  const auto scalar = run_all_kernels(kernels_for(Isa::Scalar));
  for (Isa isa : available_isas()) {
    const auto got = run_all_kernels(kernels_for(isa));
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

TEST(KernelIsas, ResultsDoNotDependOnThreadCount) {
  const int saved = omp_get_max_threads();
  for (Isa isa : available_isas()) {
    omp_set_num_threads(1);
    auto one = run_all_kernels(kernels_for(isa));
    omp_set_num_threads(3);
    auto three = run_all_kernels(kernels_for(isa));
    // Attention's per-head GEMMs run in OpenBLAS, which gives no such promise.
    for (const char* blas : {"att_out", "att", "att_dqkv"}) one.erase(blas), three.erase(blas);
    for (auto& [name, v] : one) EXPECT_EQ(v, three.at(name)) << isa_name(isa) << " " << name;
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace strata::model
