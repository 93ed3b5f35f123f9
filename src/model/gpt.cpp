#include "model/gpt.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string_view>

#include <fmt/format.h>

#include "base/aligned.hpp"
#include "base/error.hpp"
#include "model/gpt_walk.hpp"
#include "model/kernels.hpp"
#include "model/team.hpp"

namespace strata::model {

// Activation storage. Everything backward needs is kept per layer (under recomputation only
// each layer's output; see place()); gradient buffers are reused from layer to layer.
struct GPT::Impl {
  struct Layer {
    float *ln1, *ln1_mean, *ln1_rstd;  // LayerNorm 1 output and statistics
    float* qkv;                         // [BT, 3C]
    float* att;                         // [B, NH, T, T] probabilities
    float* atty;                        // [BT, C] heads' outputs, before c_proj
    float* res2;                        // [BT, C] x + attention
    float *ln2, *ln2_mean, *ln2_rstd;
    float* fch;       // [BT, 4C] c_fc output (GELU input)
    float* fch_gelu;  // [BT, 4C]
    float* res3;      // [BT, C] block output
  };

  const Kernels* k = nullptr;
  BlockOffsets block{};
  EmbeddingOffsets embed{};
  FinalNormOffsets lnf_off{};

  AlignedBuffer<float> storage;
  std::vector<Layer> layers;
  float *encoded = nullptr, *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
  float *logits = nullptr, *lse = nullptr, *losses = nullptr;
  // Gradients: dres is the residual stream's gradient, walked from the head to the
  // embeddings; a block also fills dres_mid (after its attention) and dres_in (its input).
  float *dres = nullptr, *dres_mid = nullptr, *dres_in = nullptr, *dlogits = nullptr;
  float *dln1 = nullptr, *dln2 = nullptr, *dfch = nullptr, *datty = nullptr, *dqkv = nullptr;
  AlignedBuffer<float> attention_scratch;  // T x T per thread
  // Vocab-parallel loss: each row's (max, sum of exponentials, target logit) on this TP
  // rank's vocabulary slice, and every rank's, gathered.
  std::vector<float> vocab_stats, vocab_stats_all;

  void reserve_attention_scratch(int T) {
    const std::size_t n = static_cast<std::size_t>(T) * T * omp_get_max_threads();
    if (attention_scratch.size() < n) attention_scratch.resize(n);
  }

  std::vector<std::int32_t> tokens, targets;

  std::size_t place(const GPTConfig& config, int tp, int B, int T, bool recompute, float* base);

  // The input of block `layer`, also the input of ln_f when layer == n_layer.
  const float* block_input(int layer) const { return layer == 0 ? encoded : layers[layer - 1].res3; }
};

// Hands out the activation buffers from `base` (nullptr: only counts) and returns the floats
// they take (recomputation: place_layers, layout.hpp). Under TP degree `tp` the heads' buffers, the MLP's and the logits hold this rank's slice.
std::size_t GPT::Impl::place(const GPTConfig& config, int tp, int B, int T, bool recompute, float* base) {
  const std::size_t BT = static_cast<std::size_t>(B) * T, C = config.n_embd;
  const std::size_t NH = config.n_head / tp, Vp = config.padded_vocab_size / tp, Ca = C / tp, F = 4 * C / tp;
  BufferPlacer placer(base);
  auto take = [&](float*& p, std::size_t n) { placer.take(p, n); };
  place_layers(layers, config.n_layer, recompute, placer, BT * C, [&](Layer& la) {
    take(la.ln1, BT * C); take(la.ln1_mean, BT); take(la.ln1_rstd, BT);
    take(la.qkv, BT * 3 * Ca);
    take(la.att, static_cast<std::size_t>(B) * NH * T * T);
    take(la.atty, BT * Ca); take(la.res2, BT * C);
    take(la.ln2, BT * C); take(la.ln2_mean, BT); take(la.ln2_rstd, BT);
    take(la.fch, BT * F); take(la.fch_gelu, BT * F); take(la.res3, BT * C);
  });
  take(encoded, BT * C); take(lnf, BT * C); take(lnf_mean, BT); take(lnf_rstd, BT);
  take(logits, BT * Vp); take(lse, BT); take(losses, BT);
  take(dres, BT * C); take(dres_mid, BT * C); take(dres_in, BT * C); take(dlogits, BT * Vp);
  take(dln1, BT * C); take(dln2, BT * C); take(dfch, BT * F);
  take(datty, BT * Ca); take(dqkv, BT * 3 * Ca);
  return placer.floats();
}

GPT::GPT(const GPTConfig& config, int batch, int seq, bool recompute, const Kernels& kernels,
         const TensorParallel& tp)
    : layout_(config, tp.split),
      tp_group_(tp.group),
      B_(batch),
      T_(seq),
      recompute_(recompute),
      impl_(std::make_unique<Impl>()) {
  if (tp.split.size > 1 && !tp.group)
    throw Error(fmt::format("model: --tp {} needs a tensor-parallel group to reduce over", tp.split.size));
  if (config.family != Family::Gpt2)
    throw Error(fmt::format("model: GPT built for family {}", family_name(config.family)));
  if (batch <= 0) throw Error(fmt::format("model: batch = {}: must be positive", batch));
  if (seq <= 0 || seq > config.seq_len)
    throw Error(fmt::format("model: seq = {}: must be in [1, model.seq_len = {}]", seq, config.seq_len));
  Impl& m = *impl_;
  m.k = &kernels;
  m.block = block_offsets(layout_);
  m.embed = embedding_offsets(layout_);
  m.lnf_off = final_norm_offsets(layout_);
  const int N = tp.split.size;
  m.storage.resize(m.place(config, N, B_, T_, recompute_, nullptr));
  m.place(config, N, B_, T_, recompute_, m.storage.data());
  const std::size_t BT = static_cast<std::size_t>(B_) * T_;
  if (N > 1) {
    m.vocab_stats.resize(3 * BT);
    m.vocab_stats_all.resize(3 * BT * N);
  }
  m.tokens.resize(BT);
  m.targets.resize(BT);
}

std::uint64_t GPT::activation_bytes(const GPTConfig& config, int batch, int seq, bool recompute) {
  Impl counter;
  return 4 * counter.place(config, 1, batch, seq, recompute, nullptr);
}

std::uint64_t GPT::activation_bytes() const { return 4 * impl_->storage.size(); }

GPT::~GPT() = default;
GPT::GPT(GPT&&) noexcept = default;
GPT& GPT::operator=(GPT&&) noexcept = default;

const float* GPT::logits() const { return impl_->logits; }

void GPT::tp_sum(float* data, std::size_t n) {
  if (tp_group_) tp_group_->all_reduce_sum(data, n);
}

void GPT::embed_forward(const float* embed_params, const std::int32_t* tokens) {
  Impl& m = *impl_;
  const int BT = B_ * T_, C = config().n_embd;
  check_ids(tokens, static_cast<std::size_t>(BT), config().vocab_size, "token");
  std::copy(tokens, tokens + BT, m.tokens.begin());
  const float* wte = embed_params + m.embed.wte;
  const float* wpe = embed_params + m.embed.wpe;
  const TensorSplit& tp = layout_.split();
  if (tp.size == 1) {
    in_parallel([&](const Team& team) {
      m.k->embed_forward(m.encoded, m.tokens.data(), wte, wpe, T_, C, team.share(BT));
    });
    return;
  }
  // Vocab-parallel: the rank holding a token's row contributes it, TP rank 0 the position's
  // row, the others zeros; the sum is the whole model's wte + wpe, bit for bit.
  const int rows = config().padded_vocab_size / tp.size, first = tp.rank * rows;
  in_parallel([&](const Team& team) {
    const Range r = team.share(BT);
    for (int i = r.begin; i < r.end; ++i) {
      float* out = m.encoded + static_cast<std::size_t>(i) * C;
      const int local = m.tokens[i] - first;
      if (local >= 0 && local < rows) std::copy_n(wte + static_cast<std::size_t>(local) * C, C, out);
      else std::fill_n(out, C, 0.f);
      if (tp.rank == 0) {
        const float* pos = wpe + static_cast<std::size_t>(i % T_) * C;
        for (int c = 0; c < C; ++c) out[c] += pos[c];
      }
    }
  });
  tp_sum(m.encoded, static_cast<std::size_t>(BT) * C);
}

void GPT::block_forward(int layer, const float* p) {
  Impl& m = *impl_;
  const Kernels& k = *m.k;
  const BlockOffsets& o = m.block;
  Impl::Layer& la = m.layers[layer];
  const int N = layout_.split().size;
  const int BT = B_ * T_, C = config().n_embd, NH = config().n_head / N, Ca = C / N, F = 4 * C / N;
  // Row-parallel outputs are partial sums: TP rank 0 starts them from the residual and the
  // whole bias, the other ranks from zero; tp_sum completes them.
  const bool lead = layout_.split().rank == 0;
  const float* x = m.block_input(layer);
  auto start_residual = [&](float* ln, float* mean, float* rstd, const float* in, const float* w, const float* b,
                            float* residual, const float* bias, Range rows) {
    k.layernorm_forward(ln, mean, rstd, in, w, b, C, rows, lead ? residual : nullptr, bias);
    if (!lead) std::fill_n(residual + static_cast<std::size_t>(rows.begin) * C, static_cast<std::size_t>(rows.size()) * C, 0.f);
  };
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    // Biases are pre-broadcast into the outputs so the GEMMs add onto them; the residual
    // stream likewise starts as input + projection bias.
    start_residual(la.ln1, la.ln1_mean, la.ln1_rstd, x, p + o.ln1_w, p + o.ln1_b, la.res2, p + o.attn_proj_b, rows);
    k.broadcast_rows(la.qkv, p + o.attn_b, 3 * Ca, rows);
    matmul_forward(la.qkv, la.ln1, p + o.attn_w, C, 3 * Ca, true, rows);
    const bool sync = !team.owns_whole_sequences(B_);
    if (sync) barrier();  // attention reads whole sequences
    k.attention_forward(la.atty, la.att, la.qkv, T_, Ca, NH, team.share(B_ * NH));
    if (sync) barrier();  // c_proj reads every head of its rows
    matmul_forward(la.res2, la.atty, p + o.attn_proj_w, Ca, C, true, rows);
  });
  tp_sum(la.res2, static_cast<std::size_t>(BT) * C);
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    start_residual(la.ln2, la.ln2_mean, la.ln2_rstd, la.res2, p + o.ln2_w, p + o.ln2_b, la.res3, p + o.fc_proj_b,
                   rows);
    matmul_forward(la.fch, la.ln2, p + o.fc_w, C, F, false, rows);
    k.bias_gelu_forward(la.fch, la.fch_gelu, p + o.fc_b, F, rows);
    matmul_forward(la.res3, la.fch_gelu, p + o.fc_proj_w, F, C, true, rows);
  });
  tp_sum(la.res3, static_cast<std::size_t>(BT) * C);
}

float GPT::head_forward(const float* lnf_params, const float* embed_params, const std::int32_t* targets) {
  Impl& m = *impl_;
  const GPTConfig& cfg = config();
  const int BT = B_ * T_, C = cfg.n_embd;
  check_ids(targets, static_cast<std::size_t>(BT), cfg.vocab_size, "target");
  std::copy(targets, targets + BT, m.targets.begin());
  if (layout_.split().size > 1) return head_forward_vocab_parallel(lnf_params, embed_params + m.embed.wte);
  const float* x = m.block_input(cfg.n_layer);
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    m.k->layernorm_forward(m.lnf, m.lnf_mean, m.lnf_rstd, x, lnf_params + m.lnf_off.w, lnf_params + m.lnf_off.b, C,
                           rows, nullptr, nullptr);
    matmul_forward(m.logits, m.lnf, embed_params + m.embed.wte, C, cfg.padded_vocab_size, false, rows);
    m.k->crossentropy_forward(m.lse, m.losses, m.logits, m.targets.data(), cfg.vocab_size, cfg.padded_vocab_size,
                              rows);
  });
  double total = 0;  // in row order: deterministic
  for (int i = 0; i < BT; ++i) total += m.losses[i];
  return static_cast<float>(total / BT);
}

// The real vocabulary rows of TP rank `rank`'s slice of `rows` rows: those below vocab_size.
static int real_vocab_rows(const GPTConfig& cfg, int rows, int rank) {
  return std::clamp(cfg.vocab_size - rank * rows, 0, rows);
}

// Cross-entropy over logits split by vocabulary rows. Each rank reduces its slice of a row
// to (max, sum of exp(logit - max), the target's logit or 0); one all-gather of those three
// per row gives every rank every slice's, which each combines in rank order into the same
// log-sum-exp: Megatron's max and sum all-reduces (and the target logit's) in one collective.
float GPT::head_forward_vocab_parallel(const float* lnf_params, const float* wte) {
  Impl& m = *impl_;
  const GPTConfig& cfg = config();
  const TensorSplit& tp = layout_.split();
  const int BT = B_ * T_, C = cfg.n_embd, Vl = cfg.padded_vocab_size / tp.size;
  const int real = real_vocab_rows(cfg, Vl, tp.rank), first = tp.rank * Vl;
  const float* x = m.block_input(cfg.n_layer);
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    m.k->layernorm_forward(m.lnf, m.lnf_mean, m.lnf_rstd, x, lnf_params + m.lnf_off.w, lnf_params + m.lnf_off.b, C,
                           rows, nullptr, nullptr);
    matmul_forward(m.logits, m.lnf, wte, C, Vl, false, rows);
    for (int i = rows.begin; i < rows.end; ++i) {
      const float* l = m.logits + static_cast<std::size_t>(i) * Vl;
      float mx = -3.4e38f;
      for (int j = 0; j < real; ++j) mx = std::max(mx, l[j]);
      float sum = 0;
      for (int j = 0; j < real; ++j) sum += std::exp(l[j] - mx);
      const int t = m.targets[i] - first;
      float* st = m.vocab_stats.data() + 3 * static_cast<std::size_t>(i);
      st[0] = mx, st[1] = sum, st[2] = t >= 0 && t < real ? l[t] : 0.f;
    }
  });
  tp_group_->all_gather(m.vocab_stats.data(), m.vocab_stats.size(), m.vocab_stats_all.data());
  const std::size_t per_rank = m.vocab_stats.size();
  double total = 0;  // in row order: deterministic
  for (int i = 0; i < BT; ++i) {
    float mx = -3.4e38f, sum = 0, target = 0;
    for (int r = 0; r < tp.size; ++r) mx = std::max(mx, m.vocab_stats_all[r * per_rank + 3 * i]);
    for (int r = 0; r < tp.size; ++r) {
      const float* st = m.vocab_stats_all.data() + r * per_rank + 3 * i;
      sum += st[1] * std::exp(st[0] - mx);
      target += st[2];
    }
    m.lse[i] = mx + std::log(sum);
    m.losses[i] = m.lse[i] - target;
    total += m.losses[i];
  }
  return static_cast<float>(total / BT);
}

void GPT::head_backward(const float* lnf_params, const float* embed_params, float* lnf_grads, float* embed_grads,
                        float grad_scale) {
  Impl& m = *impl_;
  const Kernels& k = *m.k;
  const GPTConfig& cfg = config();
  const TensorSplit& tp = layout_.split();
  const int BT = B_ * T_, C = cfg.n_embd, Vl = cfg.padded_vocab_size / tp.size;
  // Logits past the vocabulary carry no gradient: only the slice's real rows of wte take part.
  const int real = real_vocab_rows(cfg, Vl, tp.rank), first = tp.rank * Vl;
  const float* x = m.block_input(cfg.n_layer);
  const float* wte = embed_params + m.embed.wte;
  float* dlnf = m.dln1;
  const float scale = grad_scale / BT;
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    if (tp.size == 1) {
      k.crossentropy_backward(m.dlogits, m.logits, m.lse, m.targets.data(), real, Vl, scale, rows);
    } else {
      for (int i = rows.begin; i < rows.end; ++i) {
        const float* l = m.logits + static_cast<std::size_t>(i) * Vl;
        float* d = m.dlogits + static_cast<std::size_t>(i) * Vl;
        for (int j = 0; j < real; ++j) d[j] = scale * std::exp(l[j] - m.lse[i]);
        std::fill(d + real, d + Vl, 0.f);
        const int t = m.targets[i] - first;
        if (t >= 0 && t < real) d[t] -= scale;
      }
    }
    matmul_backward_input(dlnf, m.dlogits, Vl, wte, C, real, rows);
  });
  tp_sum(dlnf, static_cast<std::size_t>(BT) * C);  // each rank's vocabulary rows' share
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    k.layernorm_backward_input(m.dres, nullptr, dlnf, x, lnf_params + m.lnf_off.w, m.lnf_mean, m.lnf_rstd, C, rows);
    barrier();  // parameter gradients sum over every row
    matmul_backward_weight(embed_grads + m.embed.wte, m.dlogits, Vl, m.lnf, BT, C, team.share(real));
    k.layernorm_backward_params(lnf_grads + m.lnf_off.w, lnf_grads + m.lnf_off.b, dlnf, x, m.lnf_mean, m.lnf_rstd,
                                BT, C, team.share(C, kColumnAlign));
  });
}

void GPT::block_backward(int layer, const float* p, float* g) {
  Impl& m = *impl_;
  const Kernels& k = *m.k;
  const BlockOffsets& o = m.block;
  Impl::Layer& la = m.layers[layer];
  const int N = layout_.split().size;
  const int BT = B_ * T_, C = config().n_embd, NH = config().n_head / N, Ca = C / N, F = 4 * C / N;
  // Recomputation: this block's activations were overwritten by later blocks; its forward from
  // the kept input restores them bit for bit (the same kernels on the same threads).
  if (recompute_) block_forward(layer, p);
  const float* x = m.block_input(layer);
  // Gradients of the residual stream at the block's output (given), after attention, and at
  // its input (computed): all three are needed until the parameter gradients are done.
  const float* d_out = m.dres;
  float* d_mid = m.dres_mid;
  float* d_in = m.dres_in;
  m.reserve_attention_scratch(T_);
  // Under TP the gradients of the column-parallel layers' inputs (ln_2's and ln_1's outputs)
  // are partial sums over the rank's columns: tp_sum completes them between the regions.
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    matmul_backward_input(m.dfch, d_out, C, p + o.fc_proj_w, F, C, rows);
    k.gelu_backward(m.dfch, la.fch, F, rows);
    matmul_backward_input(m.dln2, m.dfch, F, p + o.fc_w, C, F, rows);
  });
  tp_sum(m.dln2, static_cast<std::size_t>(BT) * C);
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    k.layernorm_backward_input(d_mid, d_out, m.dln2, la.res2, p + o.ln2_w, la.ln2_mean, la.ln2_rstd, C, rows);
    matmul_backward_input(m.datty, d_mid, C, p + o.attn_proj_w, Ca, C, rows);
    const bool sync = !team.owns_whole_sequences(B_);
    if (sync) barrier();  // attention reads whole sequences
    k.attention_backward(m.dqkv, m.datty, la.att, la.qkv, T_, Ca, NH, team.share(B_ * NH),
                         m.attention_scratch.data() + static_cast<std::size_t>(team.id) * T_ * T_);
    if (sync) barrier();  // c_attn reads every head of its rows
    matmul_backward_input(m.dln1, m.dqkv, 3 * Ca, p + o.attn_w, C, 3 * Ca, rows);
  });
  tp_sum(m.dln1, static_cast<std::size_t>(BT) * C);
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    k.layernorm_backward_input(d_in, d_mid, m.dln1, x, p + o.ln1_w, la.ln1_mean, la.ln1_rstd, C, rows);
    barrier();  // parameter gradients sum over every row
    const Range cols = team.share(C, kColumnAlign);
    matmul_backward_weight(g + o.fc_proj_w, d_out, C, la.fch_gelu, BT, F, team.share(C));
    k.column_sums(g + o.fc_proj_b, d_out, BT, C, cols);
    matmul_backward_weight(g + o.fc_w, m.dfch, F, la.ln2, BT, C, team.share(F));
    k.column_sums(g + o.fc_b, m.dfch, BT, F, team.share(F, kColumnAlign));
    k.layernorm_backward_params(g + o.ln2_w, g + o.ln2_b, m.dln2, la.res2, la.ln2_mean, la.ln2_rstd, BT, C, cols);
    matmul_backward_weight(g + o.attn_proj_w, d_mid, C, la.atty, BT, Ca, team.share(C));
    k.column_sums(g + o.attn_proj_b, d_mid, BT, C, cols);
    matmul_backward_weight(g + o.attn_w, m.dqkv, 3 * Ca, la.ln1, BT, C, team.share(3 * Ca));
    k.column_sums(g + o.attn_b, m.dqkv, BT, 3 * Ca, team.share(3 * Ca, kColumnAlign));
    k.layernorm_backward_params(g + o.ln1_w, g + o.ln1_b, m.dln1, x, la.ln1_mean, la.ln1_rstd, BT, C, cols);
  });
  std::swap(m.dres, m.dres_in);  // the next block (or the embeddings) continues from here
}

void GPT::embed_backward(float* embed_grads) {
  Impl& m = *impl_;
  const int C = config().n_embd;
  const TensorSplit& tp = layout_.split();
  float* dwte = embed_grads + m.embed.wte;
  float* dwpe = embed_grads + m.embed.wpe;
  if (tp.size == 1) {
    in_parallel([&](const Team& team) {
      m.k->embed_backward(dwte, dwpe, m.dres, m.tokens.data(), B_, T_, C, team.share(C, kColumnAlign));
    });
    return;
  }
  // Vocab-parallel: this rank's rows of wte take the gradient of the tokens they hold; wpe is
  // whole here and gets every position's (the same on every TP rank).
  const int rows = config().padded_vocab_size / tp.size, first = tp.rank * rows;
  in_parallel([&](const Team& team) {
    const Range cols = team.share(C, kColumnAlign);
    for (int i = 0; i < B_ * T_; ++i) {
      const float* d = m.dres + static_cast<std::size_t>(i) * C;
      const int local = m.tokens[i] - first;
      float* pos = dwpe + static_cast<std::size_t>(i % T_) * C;
      float* row = local >= 0 && local < rows ? dwte + static_cast<std::size_t>(local) * C : nullptr;
      for (int c = cols.begin; c < cols.end; ++c) {
        pos[c] += d[c];
        if (row) row[c] += d[c];
      }
    }
  });
}

float* GPT::residual(int layer) {
  if (layer < 0 || layer > config().n_layer)
    throw Error(fmt::format("model: no residual stream at layer {} of {}", layer, config().n_layer));
  return const_cast<float*>(impl_->block_input(layer));
}

float* GPT::residual_grad() { return impl_->dres; }

float GPT::forward(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets) {
  const std::size_t BT = static_cast<std::size_t>(B_) * T_;
  // Refuse bad ids before acquiring anything, so no unit is left acquired.
  check_ids(tokens, BT, config().vocab_size, "token");
  check_ids(targets, BT, config().vocab_size, "target");
  return gpt2_forward_walk(
      layout_, access, [&](const float* embed) { embed_forward(embed, tokens); },
      [&](int l, const float* p) { block_forward(l, p); },
      [&](const float* lnf, const float* embed) { return head_forward(lnf, embed, targets); });
}

float GPT::forward_backward(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                            float grad_scale) {
  const float loss = forward(access, tokens, targets);
  gpt2_backward_walk(
      layout_, access,
      [&](const float* lnf, const float* embed, float* lnf_grads, float* embed_grads) {
        head_backward(lnf, embed, lnf_grads, embed_grads, grad_scale);
      },
      [&](int l, const float* p, float* g) { block_backward(l, p, g); },
      [&](float* embed_grads) { embed_backward(embed_grads); });
  return loss;
}

std::vector<UnitEvent> GPT::event_order(const GPTConfig& config) {
  using K = UnitEvent;
  const int L = config.n_layer, E = 0, F = L + 1;
  const Phase fwd = Phase::Forward, bwd = Phase::Backward;
  std::vector<UnitEvent> ev;
  ev.push_back({K::Acquire, E, fwd});
  for (int l = 0; l < L; ++l) {
    ev.push_back({K::Acquire, 1 + l, fwd});
    ev.push_back({K::Release, 1 + l, fwd});
  }
  ev.push_back({K::Acquire, F, fwd});
  ev.push_back({K::Release, F, fwd});
  ev.push_back({K::Release, E, fwd});
  ev.push_back({K::Acquire, F, bwd});
  ev.push_back({K::Acquire, E, bwd});
  ev.push_back({K::Release, E, bwd});
  ev.push_back({K::Release, F, bwd});
  ev.push_back({K::GradsReady, F, bwd});
  for (int l = L - 1; l >= 0; --l) {
    ev.push_back({K::Acquire, 1 + l, bwd});
    ev.push_back({K::Release, 1 + l, bwd});
    ev.push_back({K::GradsReady, 1 + l, bwd});
  }
  ev.push_back({K::GradsReady, E, bwd});
  return ev;
}

}  // namespace strata::model
