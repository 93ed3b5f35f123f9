#pragma once
// Float64 references of every GPT-2 and Llama layer and of the whole models, written as plainly as
// possible and independently of src/model, for checking the fp32 kernels: forward outputs
// directly, backward passes against central differences of these functions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "model/config.hpp"
#include "model/layout.hpp"

namespace strata::model::ref {

using Vec = std::vector<double>;

inline void embed(const std::int32_t* tokens, const double* wte, const double* wpe, double* out, int B, int T,
                  int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        out[(b * T + t) * C + c] = wte[tokens[b * T + t] * C + c] + wpe[t * C + c];
}

inline void layernorm(const double* x, const double* w, const double* b, double* out, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const double* xi = x + i * C;
    double mean = 0, var = 0;
    for (int c = 0; c < C; ++c) mean += xi[c];
    mean /= C;
    for (int c = 0; c < C; ++c) var += (xi[c] - mean) * (xi[c] - mean);
    var /= C;
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; ++c) out[i * C + c] = (xi[c] - mean) * rstd * w[c] + b[c];
  }
}

// y [N,out] = x [N,in] W^T + b, W stored [out, in]; b may be null.
inline void linear(const double* x, const double* w, const double* b, double* y, int N, int in, int out) {
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < out; ++o) {
      double s = b ? b[o] : 0.0;
      for (int k = 0; k < in; ++k) s += x[i * in + k] * w[o * in + k];
      y[i * out + o] = s;
    }
}

inline double gelu(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

// Causal self-attention over qkv [B,T,3C]; out [B,T,C]; att [B,NH,T,T] if given.
inline void attention(const double* qkv, double* out, double* att, int B, int T, int C, int NH) {
  const int hd = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> p(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const double* q = qkv + (b * T + t) * 3 * C + h * hd;
        double mx = -1e300;
        for (int s = 0; s <= t; ++s) {
          const double* k = qkv + (b * T + s) * 3 * C + C + h * hd;
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += q[d] * k[d];
          p[s] = dot * scale;
          mx = std::max(mx, p[s]);
        }
        double sum = 0;
        for (int s = 0; s <= t; ++s) sum += (p[s] = std::exp(p[s] - mx));
        for (int d = 0; d < hd; ++d) {
          double o = 0;
          for (int s = 0; s <= t; ++s) o += p[s] / sum * qkv[(b * T + s) * 3 * C + 2 * C + h * hd + d];
          out[(b * T + t) * C + h * hd + d] = o;
        }
        if (att)
          for (int s = 0; s < T; ++s) att[((b * NH + h) * T + t) * T + s] = s <= t ? p[s] / sum : 0.0;
      }
}

// Sum over rows of the cross-entropy of softmax(logits[:, :V]); per-row lse/losses if given.
inline double crossentropy(const double* logits, const std::int32_t* targets, int N, int V, int Vp,
                           double* lse = nullptr, double* losses = nullptr) {
  double total = 0;
  for (int i = 0; i < N; ++i) {
    const double* l = logits + i * Vp;
    double mx = -1e300;
    for (int v = 0; v < V; ++v) mx = std::max(mx, l[v]);
    double sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(l[v] - mx);
    const double row_lse = mx + std::log(sum);
    if (lse) lse[i] = row_lse;
    if (losses) losses[i] = row_lse - l[targets[i]];
    total += row_lse - l[targets[i]];
  }
  return total;
}

// Mean loss of the whole GPT-2 model, parameters given as a float64 copy of the arena.
inline double gpt_loss(const ParamLayout& layout, const double* params, const std::int32_t* tokens,
                       const std::int32_t* targets, int B, int T, Vec* logits_out = nullptr) {
  const ModelConfig& cfg = layout.config();
  const int C = cfg.n_embd, N = B * T, Vp = cfg.padded_vocab_size;
  auto t = [&](const std::string& name) { return params + layout.find(name).offset; };
  Vec x(N * C), ln(N * C), qkv(N * 3 * C), y(N * C), proj(N * C), h(N * 4 * C), mlp(N * C);
  embed(tokens, t("wte.weight"), t("wpe.weight"), x.data(), B, T, C);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    layernorm(x.data(), t(p + "ln_1.weight"), t(p + "ln_1.bias"), ln.data(), N, C);
    linear(ln.data(), t(p + "attn.c_attn.weight"), t(p + "attn.c_attn.bias"), qkv.data(), N, C, 3 * C);
    attention(qkv.data(), y.data(), nullptr, B, T, C, cfg.n_head);
    linear(y.data(), t(p + "attn.c_proj.weight"), t(p + "attn.c_proj.bias"), proj.data(), N, C, C);
    for (int i = 0; i < N * C; ++i) x[i] += proj[i];
    layernorm(x.data(), t(p + "ln_2.weight"), t(p + "ln_2.bias"), ln.data(), N, C);
    linear(ln.data(), t(p + "mlp.c_fc.weight"), t(p + "mlp.c_fc.bias"), h.data(), N, C, 4 * C);
    for (double& v : h) v = gelu(v);
    linear(h.data(), t(p + "mlp.c_proj.weight"), t(p + "mlp.c_proj.bias"), mlp.data(), N, 4 * C, C);
    for (int i = 0; i < N * C; ++i) x[i] += mlp[i];
  }
  layernorm(x.data(), t("ln_f.weight"), t("ln_f.bias"), ln.data(), N, C);
  Vec logits(static_cast<std::size_t>(N) * Vp);
  linear(ln.data(), t("wte.weight"), nullptr, logits.data(), N, C, Vp);
  const double loss = crossentropy(logits.data(), targets, N, cfg.vocab_size, Vp) / N;
  if (logits_out) *logits_out = std::move(logits);
  return loss;
}

inline void rmsnorm(const double* x, const double* w, double* out, int N, int C) {
  for (int i = 0; i < N; ++i) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += x[i * C + c] * x[i * C + c];
    const double r = 1.0 / std::sqrt(ss / C + 1e-5);
    for (int c = 0; c < C; ++c) out[i * C + c] = x[i * C + c] * r * w[c];
  }
}

// Hugging Face's rotary embedding: pairs (j, j + hd/2) of each head rotated by t * theta^(-2j/hd).
inline void rope(double* x, int N, int T, int heads, int hd, double theta) {
  const int half = hd / 2;
  for (int i = 0; i < N; ++i)
    for (int h = 0; h < heads; ++h)
      for (int j = 0; j < half; ++j) {
        const double angle = (i % T) * std::pow(theta, -2.0 * j / hd);
        double* v = x + (i * heads + h) * hd;
        const double a = v[j], b = v[j + half];
        v[j] = a * std::cos(angle) - b * std::sin(angle);
        v[j + half] = b * std::cos(angle) + a * std::sin(angle);
      }
}

// Causal grouped-query attention: q [B,T,NH*hd], k and v [B,T,NKV*hd]; out [B,T,NH*hd].
inline void gqa_attention(const double* q, const double* k, const double* v, double* out, int B, int T, int NH,
                          int NKV, int hd) {
  std::vector<double> p(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const int g = h / (NH / NKV);
      for (int t = 0; t < T; ++t) {
        const double* qt = q + (b * T + t) * NH * hd + h * hd;
        double mx = -1e300;
        for (int s = 0; s <= t; ++s) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += qt[d] * k[(b * T + s) * NKV * hd + g * hd + d];
          p[s] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, p[s]);
        }
        double sum = 0;
        for (int s = 0; s <= t; ++s) sum += (p[s] = std::exp(p[s] - mx));
        for (int d = 0; d < hd; ++d) {
          double o = 0;
          for (int s = 0; s <= t; ++s) o += p[s] / sum * v[(b * T + s) * NKV * hd + g * hd + d];
          out[(b * T + t) * NH * hd + h * hd + d] = o;
        }
      }
    }
}

// Mean loss of the whole Llama model, parameters given as a float64 copy of the arena.
inline double llama_loss(const ParamLayout& layout, const double* params, const std::int32_t* tokens,
                         const std::int32_t* targets, int B, int T, Vec* logits_out = nullptr) {
  const ModelConfig& cfg = layout.config();
  const int C = cfg.n_embd, N = B * T, Vp = cfg.padded_vocab_size, NH = cfg.n_head, NKV = cfg.kv_heads();
  const int hd = C / NH, KV = NKV * hd, F = cfg.ffn_size();
  auto t = [&](const std::string& name) { return params + layout.find(name).offset; };
  Vec x(N * C), xn(N * C), q(N * C), k(N * KV), v(N * KV), y(N * C), proj(N * C);
  Vec gate(N * F), up(N * F), mlp(N * C);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < C; ++c) x[i * C + c] = t("model.embed_tokens.weight")[tokens[i] * C + c];
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    rmsnorm(x.data(), t(p + "input_layernorm.weight"), xn.data(), N, C);
    linear(xn.data(), t(p + "self_attn.q_proj.weight"), nullptr, q.data(), N, C, C);
    linear(xn.data(), t(p + "self_attn.k_proj.weight"), nullptr, k.data(), N, C, KV);
    linear(xn.data(), t(p + "self_attn.v_proj.weight"), nullptr, v.data(), N, C, KV);
    rope(q.data(), N, T, NH, hd, cfg.rope_theta);
    rope(k.data(), N, T, NKV, hd, cfg.rope_theta);
    gqa_attention(q.data(), k.data(), v.data(), y.data(), B, T, NH, NKV, hd);
    linear(y.data(), t(p + "self_attn.o_proj.weight"), nullptr, proj.data(), N, C, C);
    for (int i = 0; i < N * C; ++i) x[i] += proj[i];
    rmsnorm(x.data(), t(p + "post_attention_layernorm.weight"), xn.data(), N, C);
    linear(xn.data(), t(p + "mlp.gate_proj.weight"), nullptr, gate.data(), N, C, F);
    linear(xn.data(), t(p + "mlp.up_proj.weight"), nullptr, up.data(), N, C, F);
    for (int i = 0; i < N * F; ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    linear(gate.data(), t(p + "mlp.down_proj.weight"), nullptr, mlp.data(), N, F, C);
    for (int i = 0; i < N * C; ++i) x[i] += mlp[i];
  }
  rmsnorm(x.data(), t("model.norm.weight"), xn.data(), N, C);
  Vec logits(static_cast<std::size_t>(N) * Vp);
  linear(xn.data(), t("lm_head.weight"), nullptr, logits.data(), N, C, Vp);
  const double loss = crossentropy(logits.data(), targets, N, cfg.vocab_size, Vp) / N;
  if (logits_out) *logits_out = std::move(logits);
  return loss;
}

// d f / d x[i] by central differences; x[i] is restored.
inline double central_diff(const std::function<double()>& f, double& xi, double h) {
  const double saved = xi;
  xi = saved + h;
  const double up = f();
  xi = saved - h;
  const double down = f();
  xi = saved;
  return (up - down) / (2 * h);
}

inline std::vector<float> random_floats(std::size_t n, Rng& rng, double stddev = 1.0, double mean = 0.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(mean + stddev * rng.normal());
  return v;
}

inline Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// |got - want| <= atol + rtol |want| element-wise; reports the worst element.
inline void expect_close(const float* got, const double* want, std::size_t n, double rtol, double atol,
                         const std::string& what) {
  std::size_t worst = 0;
  double worst_excess = -INFINITY;
  for (std::size_t i = 0; i < n; ++i) {
    double excess = std::abs(got[i] - want[i]) - (atol + rtol * std::abs(want[i]));
    if (std::isnan(excess)) excess = INFINITY;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_LE(worst_excess, 0.0) << what << ": element " << worst << " is " << got[worst] << ", expected "
                               << want[worst] << " (n = " << n << ")";
}

}  // namespace strata::model::ref
