#include "model/llama.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/kernels.hpp"
#include "model/llama_kernels.hpp"
#include "model/team.hpp"
#include "model/vocab_parallel.hpp"

namespace strata::model {

namespace llama_kernels {

// Llama's own kernels, serial over a Range like those of kernels.hpp; GEMMs go through
// matmul_* or, inside attention, cblas_sgemm (OpenBLAS). Gradient outputs named d<param> accumulate (+=).

// out = x * rstd * w per row of [N,C], rstd = 1/sqrt(mean(x^2) + eps); residual_out = x
// when given (the start of the residual sum a GEMM then accumulates into).
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int C, Range rows,
                     float* residual_out) {
  for (int i = rows.begin; i < rows.end; ++i) {
    const float* xi = x + static_cast<std::size_t>(i) * C;
    float ss = 0;
    for (int c = 0; c < C; ++c) ss += xi[c] * xi[c];
    const float r = 1.f / std::sqrt(ss / C + kRmsNormEps);
    rstd[i] = r;
    float* oi = out + static_cast<std::size_t>(i) * C;
    for (int c = 0; c < C; ++c) oi[c] = xi[c] * r * w[c];
    if (residual_out) std::memcpy(residual_out + static_cast<std::size_t>(i) * C, xi, sizeof(float) * C);
  }
}

// dx = residual + dL/dx for dL/d(out) = dout: with y = x r, dx = r (dout w) - r^3 x mean(dout w x).
// residual may be null or alias dx.
void rmsnorm_backward_input(float* dx, const float* residual, const float* dout, const float* x, const float* w,
                            const float* rstd, int C, Range rows) {
  for (int i = rows.begin; i < rows.end; ++i) {
    const std::size_t at = static_cast<std::size_t>(i) * C;
    const float* di = dout + at;
    const float* xi = x + at;
    const float r = rstd[i];
    float dot = 0;
    for (int c = 0; c < C; ++c) dot += di[c] * w[c] * xi[c];
    const float k = r * r * r * dot / C;
    for (int c = 0; c < C; ++c) dx[at + c] = (residual ? residual[at + c] : 0.f) + r * di[c] * w[c] - k * xi[c];
  }
}

// Columns `cols` of dw += sum over all N rows of dout * x * rstd, in row order.
void rmsnorm_backward_weight(float* dw, const float* dout, const float* x, const float* rstd, int N, int C,
                             Range cols) {
  for (int i = 0; i < N; ++i) {
    const std::size_t at = static_cast<std::size_t>(i) * C;
    for (int c = cols.begin; c < cols.end; ++c) dw[c] += dout[at + c] * x[at + c] * rstd[i];
  }
}

// Rotary embedding in place on `heads` heads of hd floats per row of x (row stride
// heads*hd), position = row % T: element j of a head pairs with j + hd/2 (Hugging Face's
// rotate_half), rotated by the angle whose cosine and sine are cos/sin[position, j] ([T, hd/2]);
// sign -1 rotates back (the transpose: gradients at the rotated values become gradients at
// the inputs; negating the sine is exact, so both directions round alike).
static void rotate(float* x, int heads, int hd, int T, const float* cos, const float* sin, float sign, Range rows) {
  const int half = hd / 2;
  for (int i = rows.begin; i < rows.end; ++i) {
    const float* ct = cos + static_cast<std::size_t>(i % T) * half;
    const float* st = sin + static_cast<std::size_t>(i % T) * half;
    for (int h = 0; h < heads; ++h) {
      float* v = x + (static_cast<std::size_t>(i) * heads + h) * hd;
      for (int j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half], sn = sign * st[j];
        v[j] = a * ct[j] - b * sn;
        v[j + half] = b * ct[j] + a * sn;
      }
    }
  }
}

void rope_forward(float* x, int heads, int hd, int T, const float* cos, const float* sin, Range rows) {
  rotate(x, heads, hd, T, cos, sin, 1.f, rows);
}

void rope_backward(float* dx, int heads, int hd, int T, const float* cos, const float* sin, Range rows) {
  rotate(dx, heads, hd, T, cos, sin, -1.f, rows);
}

struct AttentionShape {
  int T, NH, NKV, hd;
  int group() const { return NH / NKV; }  // query heads per K/V head
  std::size_t q_stride() const { return static_cast<std::size_t>(NH) * hd; }
  std::size_t kv_stride() const { return static_cast<std::size_t>(NKV) * hd; }
};

// Causal attention of query head h over K/V head h / group, for the (batch, query head)
// pairs b*NH + h in `pairs`. q [B,T,NH*hd], k and v [B,T,NKV*hd]; att [B,NH,T,T] receives the
// probabilities (zero above the diagonal), out [B,T,NH*hd] the heads' outputs. The products
// are OpenBLAS GEMMs over strided head slices (serial inside a parallel region).
void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                       const AttentionShape& s, Range pairs) {
  const float scale = 1.f / std::sqrt(static_cast<float>(s.hd));
  const std::size_t T = s.T;
  const int qs = static_cast<int>(s.q_stride()), kvs = static_cast<int>(s.kv_stride());
  for (int p = pairs.begin; p < pairs.end; ++p) {
    const int b = p / s.NH, h = p % s.NH, g = h / s.group();
    const float* qh = q + b * T * qs + static_cast<std::size_t>(h) * s.hd;
    const float* kg = k + b * T * kvs + static_cast<std::size_t>(g) * s.hd;
    const float* vg = v + b * T * kvs + static_cast<std::size_t>(g) * s.hd;
    float* a = att + static_cast<std::size_t>(p) * T * T;
    // Scores of every pair (the upper triangle is computed and then masked: one GEMM).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.T, s.T, s.hd, scale, qh, qs, kg, kvs, 0.f, a, s.T);
    for (std::size_t t = 0; t < T; ++t) {
      float* at = a + t * T;
      float max = -INFINITY;
      for (std::size_t u = 0; u <= t; ++u) max = std::max(max, at[u]);
      float sum = 0;
      for (std::size_t u = 0; u <= t; ++u) sum += at[u] = std::exp(at[u] - max);
      const float inv = 1.f / sum;
      for (std::size_t u = 0; u <= t; ++u) at[u] *= inv;
      std::fill(at + t + 1, at + T, 0.f);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.T, s.hd, s.T, 1.f, a, s.T, vg, kvs, 0.f,
                out + b * T * qs + static_cast<std::size_t>(h) * s.hd, qs);
  }
}

// Gradients of q, k and v (overwritten) for the (batch, K/V head) pairs b*NKV + g in
// `pairs`: each pair owns its K/V head's rows, which its group of query heads sum into.
// scratch: T*T floats.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att, const float* q,
                        const float* k, const float* v, const AttentionShape& s, Range pairs, float* scratch) {
  const float scale = 1.f / std::sqrt(static_cast<float>(s.hd));
  const std::size_t T = s.T;
  const int qs = static_cast<int>(s.q_stride()), kvs = static_cast<int>(s.kv_stride());
  for (int p = pairs.begin; p < pairs.end; ++p) {
    const int b = p / s.NKV, g = p % s.NKV;
    const std::size_t kv_at = b * T * kvs + static_cast<std::size_t>(g) * s.hd;
    for (std::size_t u = 0; u < T; ++u) {
      std::fill(dk + kv_at + u * kvs, dk + kv_at + u * kvs + s.hd, 0.f);
      std::fill(dv + kv_at + u * kvs, dv + kv_at + u * kvs + s.hd, 0.f);
    }
    for (int h = g * s.group(); h < (g + 1) * s.group(); ++h) {
      const float* a = att + (static_cast<std::size_t>(b) * s.NH + h) * T * T;
      const std::size_t q_at = b * T * qs + static_cast<std::size_t>(h) * s.hd;
      float* ds = scratch;
      // d(probabilities) = dout v^T; dv += a^T dout.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.T, s.T, s.hd, 1.f, dout + q_at, qs, v + kv_at, kvs, 0.f,
                  ds, s.T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.T, s.hd, s.T, 1.f, a, s.T, dout + q_at, qs, 1.f,
                  dv + kv_at, kvs);
      // Through the softmax: ds = a * (da - sum(a * da)) * scale; zero above the diagonal.
      for (std::size_t t = 0; t < T; ++t) {
        const float* at = a + t * T;
        float* dst = ds + t * T;
        float weighted = 0;
        for (std::size_t u = 0; u <= t; ++u) weighted += at[u] * dst[u];
        for (std::size_t u = 0; u <= t; ++u) dst[u] = at[u] * (dst[u] - weighted) * scale;
        std::fill(dst + t + 1, dst + T, 0.f);
      }
      // dq = ds k; dk += ds^T q.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.T, s.hd, s.T, 1.f, ds, s.T, k + kv_at, kvs, 0.f,
                  dq + q_at, qs);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.T, s.hd, s.T, 1.f, ds, s.T, q + q_at, qs, 1.f,
                  dk + kv_at, kvs);
    }
  }
}

float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// act = silu(gate) * up over rows of [N,F].
void swiglu_forward(float* act, const float* gate, const float* up, int F, Range rows) {
  for (std::size_t i = static_cast<std::size_t>(rows.begin) * F; i < static_cast<std::size_t>(rows.end) * F; ++i)
    act[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

// dgate, dup (overwritten) from dact: silu'(g) = s (1 + g (1 - s)).
void swiglu_backward(float* dgate, float* dup, const float* dact, const float* gate, const float* up, int F,
                     Range rows) {
  for (std::size_t i = static_cast<std::size_t>(rows.begin) * F; i < static_cast<std::size_t>(rows.end) * F; ++i) {
    const float s = sigmoid(gate[i]);
    dup[i] = dact[i] * gate[i] * s;
    dgate[i] = dact[i] * up[i] * s * (1.f + gate[i] * (1.f - s));
  }
}

void rope_tables(const ModelConfig& config, int T, std::vector<float>& cos, std::vector<float>& sin) {
  // Angles in double, as HF's inv_freq = theta^(-2j/hd) times the position.
  const int half = config.head_dim() / 2;
  cos.resize(static_cast<std::size_t>(T) * half);
  sin.resize(cos.size());
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < half; ++j) {
      const double angle = t * std::pow(config.rope_theta, -2.0 * j / config.head_dim());
      cos[static_cast<std::size_t>(t) * half + j] = static_cast<float>(std::cos(angle));
      sin[static_cast<std::size_t>(t) * half + j] = static_cast<float>(std::sin(angle));
    }
}

}  // namespace llama_kernels
using namespace llama_kernels;

struct Llama::Layer {
  float *xn1, *rstd1;      // attention RMSNorm output and 1/rms per row
  float *q, *k, *v;        // [BT, C], [BT, KV], [BT, KV] (a TP rank's heads); q and k rotated
  float* att;              // [B, NH, T, T] probabilities
  float* atty;             // [BT, C] heads' outputs, before o_proj
  float* res2;             // [BT, C] x + attention
  float *xn2, *rstd2;      // MLP RMSNorm
  float *gate, *up, *act;  // [BT, F] each; act = silu(gate) * up
  float* res3;             // [BT, C] block output
};

// Activation storage. Everything backward needs is kept per layer; gradient buffers are
// reused from layer to layer.
struct Llama::Impl : HostActivations<Llama::Layer> {
  LlamaOffsets off{};
  AttentionShape shape{};
  std::vector<float> rope_cos, rope_sin;  // [T, hd/2]
  float *xf = nullptr, *rstdf = nullptr;
  float *dxn1 = nullptr, *dxn2 = nullptr, *dtmp = nullptr, *datty = nullptr;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr, *dact = nullptr, *dgate = nullptr, *dup = nullptr;
  int B = 0, T = 0, C = 0, F = 0;  // the micro-batch, the width, this rank's SwiGLU width

  // A block's pieces over all B*T rows, shared by the runs with and without sequence
  // parallelism. Team-wide: attention from la.xn1, o_proj's output written to `out`
  // (accumulate: added onto it).
  void attention_forward(Layer& la, const float* p, float* out, bool accumulate, const Team& team);
  // Rows `rows`: SwiGLU from la.xn2, down_proj's output written to `out` (accumulate: added).
  void mlp_forward(Layer& la, const float* p, float* out, bool accumulate, Range rows);
  // Rows `rows`: dxn2 (a partial sum under TP) from the block output's gradient d_out.
  void mlp_backward_input(const Layer& la, const float* p, const float* d_out, Range rows);
  // Team-wide: dxn1 (a partial sum under TP) from the gradient after attention d_mid.
  void attention_backward_input(const Layer& la, const float* p, const float* d_mid, const Team& team);
  // Team-wide, after both: the projections' weight gradients (not the norms').
  void matrix_grads(const Layer& la, float* g, const float* d_out, const float* d_mid, const Team& team);

  std::size_t place(const ModelConfig& config, int tp, bool sp, int B, int T, bool recompute, const StageRange& stage,
                    float* base);
};

// Hands out the activation buffers from `base` (nullptr: only counts) and returns the floats
// they take (recomputation and a stage's blocks: place_layers, layout.hpp; as GPT's). Under TP degree `tp` the heads'
// buffers, the MLP's and the logits hold this rank's slice.
std::size_t Llama::Impl::place(const ModelConfig& config, int tp, bool sp, int B, int T, bool recompute,
                               const StageRange& stage, float* base) {
  const std::size_t BT = static_cast<std::size_t>(B) * T, C = config.n_embd, Cq = C / tp, R = sp ? BT / tp : BT;
  const std::size_t NH = config.n_head / tp, KV = static_cast<std::size_t>(config.kv_heads()) * config.head_dim() / tp;
  const std::size_t F = config.ffn_size() / tp, Vp = config.padded_vocab_size / tp;
  BufferPlacer placer(base);
  auto take = [&](float*& p, std::size_t n) { placer.take(p, n); };
  place_layers(layers, config.n_layer, stage.first_layer, stage.end_layer, recompute, placer, R * C, [&](Layer& la) {
    take(la.xn1, BT * C); take(la.rstd1, R);
    take(la.q, BT * Cq); take(la.k, BT * KV); take(la.v, BT * KV);
    take(la.att, static_cast<std::size_t>(B) * NH * T * T);
    take(la.atty, BT * Cq); take(la.res2, R * C);
    take(la.xn2, BT * C); take(la.rstd2, R);
    take(la.gate, BT * F); take(la.up, BT * F); take(la.act, BT * F); take(la.res3, R * C);
  });
  if (stage.first) take(encoded, R * C);
  if (stage.last) {
    take(xf, BT * C); take(rstdf, R);
    take(logits, BT * Vp); take(lse, BT); take(losses, BT);
  }
  take(dres, R * C); take(dres_mid, R * C); take(dres_in, R * C);
  if (stage.last) take(dlogits, BT * Vp);
  if (sp) {
    take(sp_rows, R * C); take(sp_whole, BT * C); take(sp_whole2, BT * C); take(sp_norm_grads, 2 * C);
  }
  take(dxn1, BT * C); take(dxn2, BT * C); take(dtmp, BT * C); take(datty, BT * Cq);
  take(dq, BT * Cq); take(dk, BT * KV); take(dv, BT * KV);
  take(dact, BT * F); take(dgate, BT * F); take(dup, BT * F);
  return placer.floats();
}

Llama::Llama(const ModelConfig& config, int batch, int seq, bool recompute, const Kernels& kernels,
             const TensorParallel& tp, const std::optional<StageRange>& stage)
    : HostModel(config, Family::Llama, "Llama", batch, seq, recompute, tp, stage), impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  acts_ = &m;
  m.k = &kernels;
  m.off = llama_offsets(layout_);
  const int N = tp.split.size;
  m.shape = {T_, config.n_head / N, config.kv_heads() / N, config.head_dim()};

  rope_tables(config, T_, m.rope_cos, m.rope_sin);

  m.B = B_, m.T = T_, m.C = config.n_embd, m.F = config.ffn_size() / N;
  m.allocate([&](float* base) { return m.place(config, N, sequence_parallel_, B_, T_, recompute_, stage_, base); },
             static_cast<std::size_t>(B_) * T_, N);
}

Llama::~Llama() = default;

std::uint64_t Llama::activation_bytes(const ModelConfig& config, int batch, int seq, bool recompute, int tp,
                                      bool sequence_parallel, const std::optional<StageRange>& stage) {
  Impl counter;
  return sizeof(float) * counter.place(config, tp, sequence_parallel && tp > 1, batch, seq, recompute,
                                       stage.value_or(whole_model(config)), nullptr);
}

void Llama::embed_forward(const float* embed_params, const std::int32_t* tokens) {
  Impl& m = *impl_;
  const int BT = B_ * T_, C = config().n_embd;
  check_ids(tokens, static_cast<std::size_t>(BT), config().vocab_size, "token");
  std::copy(tokens, tokens + BT, m.tokens.begin());  // embed_backward scatters by them
  const VocabSlice slice(config(), layout_.split());
  float* whole = sequence_parallel_ ? m.sp_whole : m.encoded;
  in_parallel([&](const Team& team) {
    vocab_parallel_lookup(whole, m.tokens.data(), embed_params + m.off.embed, slice, C, team.share(BT));
  });
  // Vocab-parallel: the slices' rows summed (under sequence parallelism, the rank's rows of the sum).
  if (sequence_parallel_) shards_.scatter(whole, m.encoded);
  else tp_sum(m.encoded, static_cast<std::size_t>(BT) * C);
}

// Rows `rows` of RMSNorm's output and of the residual sum the row-parallel projection after
// it accumulates into: x on TP rank 0, zero on the others (tp_sum then adds x once).
void Llama::norm_and_residual(float* out, float* rstd, const float* x, const float* w, float* residual,
                              Range rows) const {
  const int C = config().n_embd;
  const bool lead = layout_.split().rank == 0;
  rmsnorm_forward(out, rstd, x, w, C, rows, lead ? residual : nullptr);
  if (!lead)
    std::fill_n(residual + static_cast<std::size_t>(rows.begin) * C, static_cast<std::size_t>(rows.size()) * C, 0.f);
}

void Llama::Impl::attention_forward(Layer& la, const float* p, float* out, bool accumulate, const Team& team) {
  const LlamaBlockOffsets& o = off.block;
  const AttentionShape& s = shape;
  const int Cq = static_cast<int>(s.q_stride()), KV = static_cast<int>(s.kv_stride());
  const Range rows = team.share(B * T);
  // o_proj(attention(rope(q_proj(xn1)), rope(k_proj(xn1)), v_proj(xn1)))
  matmul_forward(la.q, la.xn1, p + o.q, C, Cq, false, rows);
  matmul_forward(la.k, la.xn1, p + o.k, C, KV, false, rows);
  matmul_forward(la.v, la.xn1, p + o.v, C, KV, false, rows);
  rope_forward(la.q, s.NH, s.hd, T, rope_cos.data(), rope_sin.data(), rows);
  rope_forward(la.k, s.NKV, s.hd, T, rope_cos.data(), rope_sin.data(), rows);
  const bool sync = !team.owns_whole_sequences(B);
  if (sync) barrier();  // attention reads whole sequences
  llama_kernels::attention_forward(la.atty, la.att, la.q, la.k, la.v, s, team.share(B * s.NH));
  if (sync) barrier();  // o_proj reads every head of its rows
  matmul_forward(out, la.atty, p + o.o, Cq, C, accumulate, rows);
}

void Llama::Impl::mlp_forward(Layer& la, const float* p, float* out, bool accumulate, Range rows) {
  const LlamaBlockOffsets& o = off.block;
  // down_proj(silu(gate_proj(xn2)) * up_proj(xn2))
  matmul_forward(la.gate, la.xn2, p + o.gate, C, F, false, rows);
  matmul_forward(la.up, la.xn2, p + o.up, C, F, false, rows);
  swiglu_forward(la.act, la.gate, la.up, F, rows);
  matmul_forward(out, la.act, p + o.down, F, C, accumulate, rows);
}

void Llama::Impl::mlp_backward_input(const Layer& la, const float* p, const float* d_out, Range rows) {
  const LlamaBlockOffsets& o = off.block;
  matmul_backward_input(dact, d_out, C, p + o.down, F, C, rows);
  swiglu_backward(dgate, dup, dact, la.gate, la.up, F, rows);
  matmul_backward_input(dxn2, dgate, F, p + o.gate, C, F, rows);
  matmul_backward_input(dtmp, dup, F, p + o.up, C, F, rows);
  add_rows(dxn2, dtmp, C, rows);
}

void Llama::Impl::attention_backward_input(const Layer& la, const float* p, const float* d_mid, const Team& team) {
  const LlamaBlockOffsets& o = off.block;
  const AttentionShape& s = shape;
  const int Cq = static_cast<int>(s.q_stride()), KV = static_cast<int>(s.kv_stride());
  const Range rows = team.share(B * T);
  const std::size_t scratch_per_thread = static_cast<std::size_t>(T) * T;
  matmul_backward_input(datty, d_mid, C, p + o.o, Cq, C, rows);
  const bool sync = !team.owns_whole_sequences(B);
  if (sync) barrier();  // attention reads whole sequences
  attention_backward(dq, dk, dv, datty, la.att, la.q, la.k, la.v, s, team.share(B * s.NKV),
                     attention_scratch.data() + scratch_per_thread * team.id);
  if (sync) barrier();  // the projections read every head of their rows
  rope_backward(dq, s.NH, s.hd, T, rope_cos.data(), rope_sin.data(), rows);
  rope_backward(dk, s.NKV, s.hd, T, rope_cos.data(), rope_sin.data(), rows);
  matmul_backward_input(dxn1, dq, Cq, p + o.q, C, Cq, rows);
  matmul_backward_input(dtmp, dk, KV, p + o.k, C, KV, rows);
  add_rows(dxn1, dtmp, C, rows);
  matmul_backward_input(dtmp, dv, KV, p + o.v, C, KV, rows);
  add_rows(dxn1, dtmp, C, rows);
}

void Llama::Impl::matrix_grads(const Layer& la, float* g, const float* d_out, const float* d_mid, const Team& team) {
  const LlamaBlockOffsets& o = off.block;
  const int BT = B * T, Cq = static_cast<int>(shape.q_stride()), KV = static_cast<int>(shape.kv_stride());
  matmul_backward_weight(g + o.down, d_out, C, la.act, BT, F, team.share(C));
  matmul_backward_weight(g + o.gate, dgate, F, la.xn2, BT, C, team.share(F));
  matmul_backward_weight(g + o.up, dup, F, la.xn2, BT, C, team.share(F));
  matmul_backward_weight(g + o.o, d_mid, C, la.atty, BT, Cq, team.share(C));
  matmul_backward_weight(g + o.q, dq, Cq, la.xn1, BT, C, team.share(Cq));
  matmul_backward_weight(g + o.k, dk, KV, la.xn1, BT, C, team.share(KV));
  matmul_backward_weight(g + o.v, dv, KV, la.xn1, BT, C, team.share(KV));
}

void Llama::block_forward(int layer, const float* p) {
  if (sequence_parallel_) return block_forward_sequence_parallel(layer, p);
  Impl& m = *impl_;
  const LlamaBlockOffsets& o = m.off.block;
  Impl::Layer& la = m.layers[layer];
  const int BT = B_ * T_, C = config().n_embd;
  const float* x = m.block_input(layer);
  in_parallel([&](const Team& team) {
    // h = x + o_proj(attention(...)) of the norm's output
    norm_and_residual(la.xn1, la.rstd1, x, p + o.attn_norm, la.res2, team.share(BT));
    m.attention_forward(la, p, la.res2, true, team);
  });
  tp_sum(la.res2, static_cast<std::size_t>(BT) * C);  // o_proj is row-parallel
  in_parallel([&](const Team& team) {
    // out = h + down_proj(silu(gate_proj(norm h)) * up_proj(norm h))
    const Range rows = team.share(BT);
    norm_and_residual(la.xn2, la.rstd2, la.res2, p + o.mlp_norm, la.res3, rows);
    m.mlp_forward(la, p, la.res3, true, rows);
  });
  tp_sum(la.res3, static_cast<std::size_t>(BT) * C);  // down_proj is row-parallel
}

// Sequence parallelism's block (tensor_parallel.hpp): the norms and the residual sums on the
// rank's R rows, the column- and row-parallel projections on all BT rows between a gather and
// a reduce-scatter.
void Llama::block_forward_sequence_parallel(int layer, const float* p) {
  Impl& m = *impl_;
  const LlamaBlockOffsets& o = m.off.block;
  Impl::Layer& la = m.layers[layer];
  const int R = B_ * T_ / layout_.split().size, C = config().n_embd;
  const float* x = m.block_input(layer);
  in_parallel([&](const Team& team) {
    rmsnorm_forward(m.sp_rows, la.rstd1, x, p + o.attn_norm, C, team.share(R), la.res2);
  });
  shards_.gather(m.sp_rows, la.xn1);
  in_parallel([&](const Team& team) { m.attention_forward(la, p, m.sp_whole, false, team); });
  shards_.scatter(m.sp_whole, m.sp_rows);
  in_parallel([&](const Team& team) {
    const Range rows = team.share(R);
    add_rows(la.res2, m.sp_rows, C, rows);
    rmsnorm_forward(m.sp_rows, la.rstd2, la.res2, p + o.mlp_norm, C, rows, la.res3);
  });
  shards_.gather(m.sp_rows, la.xn2);
  in_parallel([&](const Team& team) { m.mlp_forward(la, p, m.sp_whole, false, team.share(B_ * T_)); });
  shards_.scatter(m.sp_whole, m.sp_rows);
  in_parallel([&](const Team& team) { add_rows(la.res3, m.sp_rows, C, team.share(R)); });
}

float Llama::head_forward(const float* norm_params, const float* head_params, const std::int32_t* targets) {
  Impl& m = *impl_;
  const float* x = m.block_input(config().n_layer);
  const float* w = norm_params + m.off.final_norm;
  return head_loss(m.xf, head_params + m.off.head, targets,
                   [&](float* out, Range rows) { rmsnorm_forward(out, m.rstdf, x, w, config().n_embd, rows, nullptr); });
}

void Llama::head_backward(const float* norm_params, const float* head_params, float* norm_grads, float* head_grads,
                          float grad_scale) {
  Impl& m = *impl_;
  const int C = config().n_embd;
  const float* x = m.block_input(config().n_layer);
  float* dw = sequence_parallel_ ? m.sp_norm_grads : norm_grads + m.off.final_norm;
  head_backward_through_norm(
      m.xf, head_params + m.off.head, head_grads + m.off.head, m.dxn1, grad_scale, norm_grads, {m.off.final_norm},
      [&](const float* d, Range rows) {
        rmsnorm_backward_input(m.dres, nullptr, d, x, norm_params + m.off.final_norm, m.rstdf, C, rows);
      },
      [&](const float* d, int R, Range cols) { rmsnorm_backward_weight(dw, d, x, m.rstdf, R, C, cols); });
}

void Llama::block_backward(int layer, const float* p, float* g) {
  if (sequence_parallel_) return block_backward_sequence_parallel(layer, p, g);
  Impl& m = *impl_;
  const LlamaBlockOffsets& o = m.off.block;
  Impl::Layer& la = m.layers[layer];
  const int BT = B_ * T_, C = config().n_embd;
  // Recomputation: this block's activations were overwritten by later blocks; its forward from
  // the kept input restores them bit for bit (the same kernels on the same threads).
  if (recompute_) block_forward(layer, p);
  const float* x = m.block_input(layer);
  // Gradients of the residual stream at the block's output (given), after attention, and at
  // its input (computed).
  const float* d_out = m.dres;
  float* d_mid = m.dres_mid;
  float* d_in = m.dres_in;
  m.reserve_attention_scratch(T_);
  // Under TP the gradients of the column-parallel projections' inputs (the norms' outputs) are
  // partial sums over the rank's heads or SwiGLU columns: tp_sum completes them between the regions.
  in_parallel([&](const Team& team) { m.mlp_backward_input(la, p, d_out, team.share(BT)); });
  tp_sum(m.dxn2, static_cast<std::size_t>(BT) * C);
  in_parallel([&](const Team& team) {
    // The MLP's norm plus the residual; then attention back to its norm's output.
    rmsnorm_backward_input(d_mid, d_out, m.dxn2, la.res2, p + o.mlp_norm, la.rstd2, C, team.share(BT));
    m.attention_backward_input(la, p, d_mid, team);
  });
  tp_sum(m.dxn1, static_cast<std::size_t>(BT) * C);
  in_parallel([&](const Team& team) {
    rmsnorm_backward_input(d_in, d_mid, m.dxn1, x, p + o.attn_norm, la.rstd1, C, team.share(BT));
    barrier();  // parameter gradients sum over every row
    const Range cols = team.share(C, kColumnAlign);
    m.matrix_grads(la, g, d_out, d_mid, team);
    rmsnorm_backward_weight(g + o.mlp_norm, m.dxn2, la.res2, la.rstd2, BT, C, cols);
    rmsnorm_backward_weight(g + o.attn_norm, m.dxn1, x, la.rstd1, BT, C, cols);
  });
  std::swap(m.dres, m.dres_in);  // the next block (or the embeddings) continues from here
}

// Sequence parallelism's block backward: the residual gradients on the rank's R rows, gathered
// before the row-parallel projections; the norms' input gradients reduce-scattered to those
// rows; the norms' weight gradients summed over them and completed over the group.
void Llama::block_backward_sequence_parallel(int layer, const float* p, float* g) {
  if (recompute_) block_forward_sequence_parallel(layer, p);
  const int R = B_ * T_ / layout_.split().size, C = config().n_embd;
  Impl& m = *impl_;
  const LlamaBlockOffsets& o = m.off.block;
  Impl::Layer& la = m.layers[layer];
  const float* x = m.block_input(layer);
  const float* d_out = m.dres;  // the rank's rows; gathered whole into sp_whole
  float* d_mid = m.dres_mid;    // the rank's rows; gathered whole into sp_whole2
  float* ng = m.sp_norm_grads;  // attention norm, MLP norm
  std::fill_n(ng, 2 * C, 0.f);
  m.reserve_attention_scratch(T_);
  shards_.gather(d_out, m.sp_whole);
  in_parallel([&](const Team& team) { m.mlp_backward_input(la, p, m.sp_whole, team.share(B_ * T_)); });
  shards_.scatter(m.dxn2, m.sp_rows);
  in_parallel([&](const Team& team) {
    rmsnorm_backward_input(d_mid, d_out, m.sp_rows, la.res2, p + o.mlp_norm, la.rstd2, C, team.share(R));
    rmsnorm_backward_weight(ng + C, m.sp_rows, la.res2, la.rstd2, R, C, team.share(C, kColumnAlign));
  });
  shards_.gather(d_mid, m.sp_whole2);
  in_parallel([&](const Team& team) { m.attention_backward_input(la, p, m.sp_whole2, team); });
  shards_.scatter(m.dxn1, m.sp_rows);
  in_parallel([&](const Team& team) {
    rmsnorm_backward_input(m.dres_in, d_mid, m.sp_rows, x, p + o.attn_norm, la.rstd1, C, team.share(R));
    rmsnorm_backward_weight(ng, m.sp_rows, x, la.rstd1, R, C, team.share(C, kColumnAlign));
    m.matrix_grads(la, g, m.sp_whole, m.sp_whole2, team);
  });
  shards_.finish_norm_grads(ng, g, {o.attn_norm, o.mlp_norm});
  std::swap(m.dres, m.dres_in);  // the next block (or the embeddings) continues from here
}

float* Llama::residual(int layer) {
  check_residual(layer);
  return const_cast<float*>(impl_->block_input(layer));
}

void Llama::embed_backward(float* embed_grads) {
  Impl& m = *impl_;
  const int BT = B_ * T_, C = config().n_embd;
  const VocabSlice slice(config(), layout_.split());
  const float* dres = m.dres;
  if (sequence_parallel_) {  // every rank's rows of the residual gradient
    shards_.gather(m.dres, m.sp_whole);
    dres = m.sp_whole;
  }
  in_parallel([&](const Team& team) {
    vocab_parallel_scatter(embed_grads + m.off.embed, dres, m.tokens.data(), BT, slice, C,
                           team.share(C, kColumnAlign));
  });
}

}  // namespace strata::model
