#include "model/gpt.hpp"

#include <algorithm>

#include "model/kernels.hpp"
#include "model/team.hpp"
#include "model/vocab_parallel.hpp"

namespace strata::model {

struct GPT::Layer {
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

// Activation storage. Everything backward needs is kept per layer (under recomputation only
// each layer's output; see place()); gradient buffers are reused from layer to layer.
struct GPT::Impl : HostActivations<GPT::Layer> {
  BlockOffsets block{};
  EmbeddingOffsets embed{};
  FinalNormOffsets lnf_off{};

  float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
  float *dln1 = nullptr, *dln2 = nullptr, *dfch = nullptr, *datty = nullptr, *dqkv = nullptr;

  std::size_t place(const ModelConfig& config, int tp, bool sp, int B, int T, bool recompute, const StageRange& stage,
                    float* base);

  // A block's pieces over all BT rows, shared by the runs with and without sequence
  // parallelism.
  using Dims = BlockDims;
  // Team-wide: q, k, v of the rank's heads from la.ln1, attention, and c_proj's output written
  // to `out` (accumulate: added onto it).
  void attention_forward(Layer& la, const float* p, float* out, bool accumulate, const Dims& d, const Team& team);
  // Rows `rows`: c_fc, GELU and c_proj's output written to `out` (accumulate: added onto it).
  void mlp_forward(Layer& la, const float* p, float* out, bool accumulate, const Dims& d, Range rows);
  // Rows `rows`: dfch and dln2 (a partial sum under TP) from the block output's gradient d_out.
  void mlp_backward_input(const Layer& la, const float* p, const float* d_out, const Dims& d, Range rows);
  // Team-wide: datty, dqkv and dln1 (a partial sum under TP) from the gradient after attention.
  void attention_backward_input(const Layer& la, const float* p, const float* d_mid, const Dims& d, const Team& team);
  // Team-wide, after both: the matrices' and biases' gradients (not the norms').
  void matrix_grads(const Layer& la, float* g, const float* d_out, const float* d_mid, const Dims& d,
                    const Team& team);
};

// Hands out the activation buffers from `base` (nullptr: only counts) and returns the floats
// they take (recomputation and a stage's blocks: place_layers, layout.hpp): the embeddings'
// output only on the first stage, the head's buffers only on the last. Under TP degree `tp` the heads' buffers, the MLP's and the logits hold this rank's slice;
// under sequence parallelism (`sp`) the residual stream, the norms' statistics and the
// residual gradients hold the rank's R = BT/tp rows (the norms' outputs are kept gathered).
std::size_t GPT::Impl::place(const ModelConfig& config, int tp, bool sp, int B, int T, bool recompute,
                             const StageRange& stage, float* base) {
  const std::size_t BT = static_cast<std::size_t>(B) * T, C = config.n_embd, R = sp ? BT / tp : BT;
  const std::size_t NH = config.n_head / tp, Vp = config.padded_vocab_size / tp, Ca = C / tp, F = 4 * C / tp;
  BufferPlacer placer(base);
  auto take = [&](float*& p, std::size_t n) { placer.take(p, n); };
  place_layers(layers, config.n_layer, stage.first_layer, stage.end_layer, recompute, placer, R * C, [&](Layer& la) {
    take(la.ln1, BT * C); take(la.ln1_mean, R); take(la.ln1_rstd, R);
    take(la.qkv, BT * 3 * Ca);
    take(la.att, static_cast<std::size_t>(B) * NH * T * T);
    take(la.atty, BT * Ca); take(la.res2, R * C);
    take(la.ln2, BT * C); take(la.ln2_mean, R); take(la.ln2_rstd, R);
    take(la.fch, BT * F); take(la.fch_gelu, BT * F); take(la.res3, R * C);
  });
  if (stage.first) take(encoded, R * C);
  if (stage.last) {
    take(lnf, BT * C); take(lnf_mean, R); take(lnf_rstd, R);
    take(logits, BT * Vp); take(lse, BT); take(losses, BT);
  }
  take(dres, R * C); take(dres_mid, R * C); take(dres_in, R * C);
  if (stage.last) take(dlogits, BT * Vp);
  if (sp) {
    take(sp_rows, R * C); take(sp_whole, BT * C); take(sp_whole2, BT * C); take(sp_norm_grads, 4 * C);
  }
  take(dln1, BT * C); take(dln2, BT * C); take(dfch, BT * F);
  take(datty, BT * Ca); take(dqkv, BT * 3 * Ca);
  return placer.floats();
}

GPT::BlockDims GPT::block_dims() const {
  const int N = layout_.split().size, C = config().n_embd;
  return {B_, T_, B_ * T_, sequence_parallel_ ? B_ * T_ / N : B_ * T_, C, config().n_head / N, C / N, 4 * C / N};
}

struct GPT::Block {
  Impl& m;
  const Kernels& k;
  const BlockOffsets& o;
  Impl::Layer& la;
  BlockDims d;
};

GPT::Block GPT::block(int layer) {
  Impl& m = *impl_;
  return {m, *m.k, m.block, m.layers[layer], block_dims()};
}

void GPT::Impl::attention_forward(Layer& la, const float* p, float* out, bool accumulate, const Dims& d,
                                  const Team& team) {
  const BlockOffsets& o = block;
  const Range rows = team.share(d.BT);
  k->broadcast_rows(la.qkv, p + o.attn_b, 3 * d.Ca, rows);
  matmul_forward(la.qkv, la.ln1, p + o.attn_w, d.C, 3 * d.Ca, true, rows);
  const bool sync = !team.owns_whole_sequences(d.B);
  if (sync) barrier();  // attention reads whole sequences
  k->attention_forward(la.atty, la.att, la.qkv, d.T, d.Ca, d.NH, team.share(d.B * d.NH));
  if (sync) barrier();  // c_proj reads every head of its rows
  matmul_forward(out, la.atty, p + o.attn_proj_w, d.Ca, d.C, accumulate, rows);
}

void GPT::Impl::mlp_forward(Layer& la, const float* p, float* out, bool accumulate, const Dims& d, Range rows) {
  const BlockOffsets& o = block;
  matmul_forward(la.fch, la.ln2, p + o.fc_w, d.C, d.F, false, rows);
  k->bias_gelu_forward(la.fch, la.fch_gelu, p + o.fc_b, d.F, rows);
  matmul_forward(out, la.fch_gelu, p + o.fc_proj_w, d.F, d.C, accumulate, rows);
}

void GPT::Impl::mlp_backward_input(const Layer& la, const float* p, const float* d_out, const Dims& d, Range rows) {
  const BlockOffsets& o = block;
  matmul_backward_input(dfch, d_out, d.C, p + o.fc_proj_w, d.F, d.C, rows);
  k->gelu_backward(dfch, la.fch, d.F, rows);
  matmul_backward_input(dln2, dfch, d.F, p + o.fc_w, d.C, d.F, rows);
}

void GPT::Impl::attention_backward_input(const Layer& la, const float* p, const float* d_mid, const Dims& d,
                                         const Team& team) {
  const BlockOffsets& o = block;
  const Range rows = team.share(d.BT);
  matmul_backward_input(datty, d_mid, d.C, p + o.attn_proj_w, d.Ca, d.C, rows);
  const bool sync = !team.owns_whole_sequences(d.B);
  if (sync) barrier();  // attention reads whole sequences
  k->attention_backward(dqkv, datty, la.att, la.qkv, d.T, d.Ca, d.NH, team.share(d.B * d.NH),
                        attention_scratch.data() + static_cast<std::size_t>(team.id) * d.T * d.T);
  if (sync) barrier();  // c_attn reads every head of its rows
  matmul_backward_input(dln1, dqkv, 3 * d.Ca, p + o.attn_w, d.C, 3 * d.Ca, rows);
}

void GPT::Impl::matrix_grads(const Layer& la, float* g, const float* d_out, const float* d_mid, const Dims& d,
                             const Team& team) {
  const BlockOffsets& o = block;
  const Range cols = team.share(d.C, kColumnAlign);
  matmul_backward_weight(g + o.fc_proj_w, d_out, d.C, la.fch_gelu, d.BT, d.F, team.share(d.C));
  k->column_sums(g + o.fc_proj_b, d_out, d.BT, d.C, cols);
  matmul_backward_weight(g + o.fc_w, dfch, d.F, la.ln2, d.BT, d.C, team.share(d.F));
  k->column_sums(g + o.fc_b, dfch, d.BT, d.F, team.share(d.F, kColumnAlign));
  matmul_backward_weight(g + o.attn_proj_w, d_mid, d.C, la.atty, d.BT, d.Ca, team.share(d.C));
  k->column_sums(g + o.attn_proj_b, d_mid, d.BT, d.C, cols);
  matmul_backward_weight(g + o.attn_w, dqkv, 3 * d.Ca, la.ln1, d.BT, d.C, team.share(3 * d.Ca));
  k->column_sums(g + o.attn_b, dqkv, d.BT, 3 * d.Ca, team.share(3 * d.Ca, kColumnAlign));
}

GPT::GPT(const ModelConfig& config, int batch, int seq, bool recompute, const Kernels& kernels,
         const TensorParallel& tp, const std::optional<StageRange>& stage)
    : HostModel(config, Family::Gpt2, "GPT", batch, seq, recompute, tp, stage), impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  acts_ = &m;
  m.k = &kernels;
  m.block = block_offsets(layout_);
  m.embed = embedding_offsets(layout_);
  m.lnf_off = final_norm_offsets(layout_);
  const int N = tp.split.size;
  m.allocate([&](float* base) { return m.place(config, N, sequence_parallel_, B_, T_, recompute_, stage_, base); },
             static_cast<std::size_t>(B_) * T_, N);
}

std::uint64_t GPT::activation_bytes(const ModelConfig& config, int batch, int seq, bool recompute, int tp,
                                    bool sequence_parallel, const std::optional<StageRange>& stage) {
  Impl counter;
  return 4 * counter.place(config, tp, sequence_parallel && tp > 1, batch, seq, recompute,
                           stage.value_or(whole_model(config)), nullptr);
}

GPT::~GPT() = default;

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
  const VocabSlice slice(config(), tp);
  float* whole = sequence_parallel_ ? m.sp_whole : m.encoded;
  in_parallel([&](const Team& team) {
    const Range r = team.share(BT);
    vocab_parallel_lookup(whole, m.tokens.data(), wte, slice, C, r);
    if (tp.rank != 0) return;
    for (int i = r.begin; i < r.end; ++i) {
      float* out = whole + static_cast<std::size_t>(i) * C;
      const float* pos = wpe + static_cast<std::size_t>(i % T_) * C;
      for (int c = 0; c < C; ++c) out[c] += pos[c];
    }
  });
  if (sequence_parallel_) shards_.scatter(whole, m.encoded);  // the rank's rows of the sum
  else tp_sum(m.encoded, static_cast<std::size_t>(BT) * C);
}

// Sequence parallelism's block (tensor_parallel.hpp): the norms and the residual sums on the
// rank's R rows, the column- and row-parallel layers on all BT rows between a gather and a
// reduce-scatter.
void GPT::block_forward_sequence_parallel(int layer, const float* p) {
  auto [m, k, o, la, d] = block(layer);
  const int BT = d.BT, R = d.R, C = d.C;
  const float* x = m.block_input(layer);
  // res2 = x + bias + attention; the norm's output gathered for c_attn.
  in_parallel([&](const Team& team) {
    k.layernorm_forward(m.sp_rows, la.ln1_mean, la.ln1_rstd, x, p + o.ln1_w, p + o.ln1_b, C, team.share(R), la.res2,
                        p + o.attn_proj_b);
  });
  shards_.gather(m.sp_rows, la.ln1);
  in_parallel([&](const Team& team) { m.attention_forward(la, p, m.sp_whole, false, d, team); });
  shards_.scatter(m.sp_whole, m.sp_rows);
  // res3 = res2 + bias + MLP.
  in_parallel([&](const Team& team) {
    const Range rows = team.share(R);
    add_rows(la.res2, m.sp_rows, C, rows);
    k.layernorm_forward(m.sp_rows, la.ln2_mean, la.ln2_rstd, la.res2, p + o.ln2_w, p + o.ln2_b, C, rows, la.res3,
                        p + o.fc_proj_b);
  });
  shards_.gather(m.sp_rows, la.ln2);
  in_parallel([&](const Team& team) { m.mlp_forward(la, p, m.sp_whole, false, d, team.share(BT)); });
  shards_.scatter(m.sp_whole, m.sp_rows);
  in_parallel([&](const Team& team) { add_rows(la.res3, m.sp_rows, C, team.share(R)); });
}

void GPT::block_forward(int layer, const float* p) {
  if (sequence_parallel_) return block_forward_sequence_parallel(layer, p);
  auto [m, k, o, la, d] = block(layer);
  const int BT = d.BT, C = d.C;
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
    m.attention_forward(la, p, la.res2, true, d, team);
  });
  tp_sum(la.res2, static_cast<std::size_t>(BT) * C);
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    start_residual(la.ln2, la.ln2_mean, la.ln2_rstd, la.res2, p + o.ln2_w, p + o.ln2_b, la.res3, p + o.fc_proj_b,
                   rows);
    m.mlp_forward(la, p, la.res3, true, d, rows);
  });
  tp_sum(la.res3, static_cast<std::size_t>(BT) * C);
}

float GPT::head_forward(const float* lnf_params, const float* embed_params, const std::int32_t* targets) {
  Impl& m = *impl_;
  const float* x = m.block_input(config().n_layer);
  // The tied head is wte.
  return head_loss(m.lnf, embed_params + m.embed.wte, targets, [&](float* out, Range rows) {
                     m.k->layernorm_forward(out, m.lnf_mean, m.lnf_rstd, x, lnf_params + m.lnf_off.w,
                                            lnf_params + m.lnf_off.b, config().n_embd, rows, nullptr, nullptr);
                   });
}

void GPT::head_backward(const float* lnf_params, const float* embed_params, float* lnf_grads, float* embed_grads,
                        float grad_scale) {
  Impl& m = *impl_;
  const int C = config().n_embd;
  const float* x = m.block_input(config().n_layer);
  float* dw = sequence_parallel_ ? m.sp_norm_grads : lnf_grads + m.lnf_off.w;
  float* db = sequence_parallel_ ? m.sp_norm_grads + C : lnf_grads + m.lnf_off.b;
  head_backward_through_norm(
      m.lnf, embed_params + m.embed.wte, embed_grads + m.embed.wte, m.dln1, grad_scale, lnf_grads,
      {m.lnf_off.w, m.lnf_off.b},
      [&](const float* d, Range rows) {
        m.k->layernorm_backward_input(m.dres, nullptr, d, x, lnf_params + m.lnf_off.w, m.lnf_mean, m.lnf_rstd, C, rows);
      },
      [&](const float* d, int R, Range cols) {
        m.k->layernorm_backward_params(dw, db, d, x, m.lnf_mean, m.lnf_rstd, R, C, cols);
      });
}

// Sequence parallelism's block backward: the residual gradients on the rank's R rows, gathered
// before the row-parallel layers; the norms' input gradients reduce-scattered to those rows;
// the norms' parameter gradients summed over them and completed over the group.
void GPT::block_backward_sequence_parallel(int layer, const float* p, float* g) {
  if (recompute_) block_forward_sequence_parallel(layer, p);
  auto [m, k, o, la, d] = block(layer);
  const int BT = d.BT, R = d.R, C = d.C;
  const float* x = m.block_input(layer);
  const float* d_out = m.dres;  // the rank's rows; gathered whole into sp_whole
  float* d_mid = m.dres_mid;    // the rank's rows; gathered whole into sp_whole2
  float* d_in = m.dres_in;
  float* ng = m.sp_norm_grads;  // ln_1 gain, bias, ln_2 gain, bias
  std::fill_n(ng, 4 * C, 0.f);
  m.reserve_attention_scratch(T_);
  shards_.gather(d_out, m.sp_whole);
  in_parallel([&](const Team& team) { m.mlp_backward_input(la, p, m.sp_whole, d, team.share(BT)); });
  shards_.scatter(m.dln2, m.sp_rows);
  in_parallel([&](const Team& team) {
    k.layernorm_backward_input(d_mid, d_out, m.sp_rows, la.res2, p + o.ln2_w, la.ln2_mean, la.ln2_rstd, C,
                               team.share(R));
    k.layernorm_backward_params(ng + 2 * C, ng + 3 * C, m.sp_rows, la.res2, la.ln2_mean, la.ln2_rstd, R, C,
                                team.share(C, kColumnAlign));
  });
  shards_.gather(d_mid, m.sp_whole2);
  in_parallel([&](const Team& team) { m.attention_backward_input(la, p, m.sp_whole2, d, team); });
  shards_.scatter(m.dln1, m.sp_rows);
  in_parallel([&](const Team& team) {
    const Range cols = team.share(C, kColumnAlign);
    k.layernorm_backward_input(d_in, d_mid, m.sp_rows, x, p + o.ln1_w, la.ln1_mean, la.ln1_rstd, C, team.share(R));
    k.layernorm_backward_params(ng, ng + C, m.sp_rows, x, la.ln1_mean, la.ln1_rstd, R, C, cols);
    m.matrix_grads(la, g, m.sp_whole, m.sp_whole2, d, team);
  });
  shards_.finish_norm_grads(ng, g, {o.ln1_w, o.ln1_b, o.ln2_w, o.ln2_b});
  std::swap(m.dres, m.dres_in);  // the next block (or the embeddings) continues from here
}

void GPT::block_backward(int layer, const float* p, float* g) {
  if (sequence_parallel_) return block_backward_sequence_parallel(layer, p, g);
  auto [m, k, o, la, d] = block(layer);
  const int BT = d.BT, C = d.C;
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
  in_parallel([&](const Team& team) { m.mlp_backward_input(la, p, d_out, d, team.share(BT)); });
  tp_sum(m.dln2, static_cast<std::size_t>(BT) * C);
  in_parallel([&](const Team& team) {
    k.layernorm_backward_input(d_mid, d_out, m.dln2, la.res2, p + o.ln2_w, la.ln2_mean, la.ln2_rstd, C,
                               team.share(BT));
    m.attention_backward_input(la, p, d_mid, d, team);
  });
  tp_sum(m.dln1, static_cast<std::size_t>(BT) * C);
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    k.layernorm_backward_input(d_in, d_mid, m.dln1, x, p + o.ln1_w, la.ln1_mean, la.ln1_rstd, C, rows);
    barrier();  // parameter gradients sum over every row
    const Range cols = team.share(C, kColumnAlign);
    m.matrix_grads(la, g, d_out, d_mid, d, team);
    k.layernorm_backward_params(g + o.ln2_w, g + o.ln2_b, m.dln2, la.res2, la.ln2_mean, la.ln2_rstd, BT, C, cols);
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
  // whole here and gets every position's (the same on every TP rank). Under sequence
  // parallelism the residual gradient's rows are first gathered from every rank.
  const VocabSlice slice(config(), tp);
  const float* dres = m.dres;
  if (sequence_parallel_) {
    shards_.gather(m.dres, m.sp_whole);
    dres = m.sp_whole;
  }
  in_parallel([&](const Team& team) {
    const Range cols = team.share(C, kColumnAlign);
    vocab_parallel_scatter(dwte, dres, m.tokens.data(), B_ * T_, slice, C, cols);
    for (int i = 0; i < B_ * T_; ++i) {
      const float* d = dres + static_cast<std::size_t>(i) * C;
      float* pos = dwpe + static_cast<std::size_t>(i % T_) * C;
      for (int c = cols.begin; c < cols.end; ++c) pos[c] += d[c];
    }
  });
}

float* GPT::residual(int layer) {
  check_residual(layer);
  return const_cast<float*>(impl_->block_input(layer));
}

}  // namespace strata::model
