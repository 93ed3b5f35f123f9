#include "device/cuda/gpt_cuda.hpp"

#include <algorithm>
#include <utility>

#include "device/cuda/cuda_device.hpp"
#include "device/cuda/kernels.hpp"
#include "device/cuda/model_ops.hpp"
#include "model/gpt_walk.hpp"

namespace strata::device::cuda {

namespace {

// The largest operand any product of the model reads, in elements (Matmul sizes its bf16
// scratch by it): the logits' gradient and the tied embedding lead for GPT-2.
std::size_t largest_operand(const model::ModelConfig& config, int B, int T) {
  const std::size_t BT = static_cast<std::size_t>(B) * T, C = config.n_embd, Vp = config.padded_vocab_size;
  return std::max({BT * Vp, Vp * C, BT * 4 * C, 4 * C * C});
}

AttentionShape attention_shape(const model::ModelConfig& config, int B, int T) {
  const int C = config.n_embd, NH = config.n_head;
  return {B, T, NH, NH, C / NH, 3 * C, 3 * C, C};
}

// Scratch every row-reducing kernel of the model shares (one stream: never two at once).
std::size_t kernel_scratch_bytes(const model::ModelConfig& config, int B, int T) {
  const int BT = B * T, C = config.n_embd;
  return std::max({embed_backward_scratch_bytes(BT, config.vocab_size), norm_backward_scratch_bytes(BT, C),
                   column_sums_scratch_bytes(BT, C), column_sums_scratch_bytes(BT, 3 * C),
                   column_sums_scratch_bytes(BT, 4 * C), attention_backward_scratch_bytes(attention_shape(config, B, T))});
}

// Where each activation lives, laid out as model::GPT's (gpt.cpp) but for attention's
// log-sum-exp in place of its T x T probabilities. place() with no base only counts.
struct Activations {
  struct Layer {
    float *ln1, *ln1_mean, *ln1_rstd;
    float* qkv;   // [BT, 3C]
    float* lse;   // [B, NH, T] attention's row log-sum-exp
    float* atty;  // [BT, C]
    float* res2;  // [BT, C] x + attention
    float *ln2, *ln2_mean, *ln2_rstd;
    float* fch;       // [BT, 4C]
    float* fch_gelu;  // [BT, 4C]
    float* res3;      // [BT, C] block output
  };
  std::vector<Layer> layers;
  float *encoded = nullptr, *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
  float *logits = nullptr, *dlogits = nullptr, *head_lse = nullptr, *losses = nullptr;
  // dres: the residual stream's gradient, walked from the head down; a block also fills
  // dres_mid (after its attention) and dres_in (its input).
  float *dres = nullptr, *dres_mid = nullptr, *dres_in = nullptr;
  float *dln1 = nullptr, *dln2 = nullptr, *dfch = nullptr, *datty = nullptr, *dqkv = nullptr;

  std::size_t place(const model::ModelConfig& config, int B, int T, bool recompute, float* base);
  const float* block_input(int layer) const { return layer == 0 ? encoded : layers[layer - 1].res3; }
};

// Under recomputation every layer shares layer 0's buffers but its output, as on the CPU
// (model::place_layers).
std::size_t Activations::place(const model::ModelConfig& config, int B, int T, bool recompute, float* base) {
  const std::size_t BT = static_cast<std::size_t>(B) * T, C = config.n_embd;
  const std::size_t NH = config.n_head, Vp = config.padded_vocab_size;
  model::BufferPlacer placer(base);
  auto take = [&](float*& p, std::size_t n) { placer.take(p, n); };
  model::place_layers(layers, config.n_layer, recompute, placer, BT * C, [&](Layer& la) {
    take(la.ln1, BT * C); take(la.ln1_mean, BT); take(la.ln1_rstd, BT);
    take(la.qkv, BT * 3 * C);
    take(la.lse, static_cast<std::size_t>(B) * NH * T);
    take(la.atty, BT * C); take(la.res2, BT * C);
    take(la.ln2, BT * C); take(la.ln2_mean, BT); take(la.ln2_rstd, BT);
    take(la.fch, BT * 4 * C); take(la.fch_gelu, BT * 4 * C); take(la.res3, BT * C);
  });
  take(encoded, BT * C); take(lnf, BT * C); take(lnf_mean, BT); take(lnf_rstd, BT);
  take(logits, BT * Vp); take(dlogits, BT * Vp); take(head_lse, BT); take(losses, BT);
  take(dres, BT * C); take(dres_mid, BT * C); take(dres_in, BT * C);
  take(dln1, BT * C); take(dln2, BT * C); take(dfch, BT * 4 * C);
  take(datty, BT * C); take(dqkv, BT * 3 * C);
  return placer.floats();
}

}  // namespace

ModelSizes CudaGPT::sizes(const model::ModelConfig& config, int B, int T, bool recompute) {
  Activations counter;
  return {counter.place(config, B, T, recompute, nullptr), static_cast<std::size_t>(B) * T,
          kernel_scratch_bytes(config, B, T), largest_operand(config, B, T)};
}

struct CudaGPT::Impl {
  Impl(ModelBuffers& buffers, const model::ParamLayout& layout, int B, int T, bool recompute)
      : buffers(buffers),
        shape(attention_shape(layout.config(), B, T)),
        block(model::block_offsets(layout)),
        embed(model::embedding_offsets(layout)),
        lnf_off(model::final_norm_offsets(layout)) {
    a.place(layout.config(), B, T, recompute, buffers.storage.data());
  }

  ModelBuffers& buffers;
  AttentionShape shape;
  Activations a;
  model::BlockOffsets block;
  model::EmbeddingOffsets embed;
  model::FinalNormOffsets lnf_off;
};

CudaGPT::CudaGPT(Device& device, const model::ModelConfig& config, int batch, int seq, bool recompute,
                 Precision precision)
    : CudaModel(device, config, model::Family::Gpt2, batch, seq, recompute, precision, sizes),
      impl_(std::make_unique<Impl>(buffers(), layout_, batch, seq, recompute)) {}

CudaGPT::~CudaGPT() = default;

const float* CudaGPT::logits() const { return impl_->a.logits; }

void CudaGPT::embed_forward(const float* embed_params, const std::int32_t* tokens) {
  Impl& m = *impl_;
  const int BT = B_ * T_;
  m.buffers.upload_tokens(tokens);
  cuda::embed_forward(m.a.encoded, m.buffers.tokens(), embed_params + m.embed.wte, embed_params + m.embed.wpe, BT, T_,
                      config().n_embd, config().vocab_size, gpu_stream());
}

void CudaGPT::block_forward(int layer, const float* p) {
  Impl& m = *impl_;
  const model::BlockOffsets& o = m.block;
  Activations::Layer& la = m.a.layers[layer];
  const int BT = B_ * T_, C = config().n_embd;
  const Stream s = gpu_stream();
  const float* x = m.a.block_input(layer);
  // Biases are pre-broadcast into the outputs so the products add onto them; the residual
  // stream likewise starts as input + projection bias (the CPU model's order).
  layernorm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, x, p + o.ln1_w, p + o.ln1_b, BT, C, s);
  residual_with_bias(la.res2, x, p + o.attn_proj_b, BT, C, s);
  broadcast_rows(la.qkv, p + o.attn_b, BT, 3 * C, s);
  m.buffers.matmul.forward(la.qkv, la.ln1, p + o.attn_w, BT, C, 3 * C, true);
  attention_forward(la.atty, la.lse, la.qkv, la.qkv + C, la.qkv + 2 * C, m.shape, s);
  m.buffers.matmul.forward(la.res2, la.atty, p + o.attn_proj_w, BT, C, C, true);
  layernorm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.res2, p + o.ln2_w, p + o.ln2_b, BT, C, s);
  residual_with_bias(la.res3, la.res2, p + o.fc_proj_b, BT, C, s);
  m.buffers.matmul.forward(la.fch, la.ln2, p + o.fc_w, BT, C, 4 * C, false);
  bias_gelu_forward(la.fch, la.fch_gelu, p + o.fc_b, BT, 4 * C, s);
  m.buffers.matmul.forward(la.res3, la.fch_gelu, p + o.fc_proj_w, BT, 4 * C, C, true);
}

float CudaGPT::head_forward(const float* lnf_params, const float* embed_params, const std::int32_t* targets,
                            float dlogits_scale) {
  Impl& m = *impl_;
  const model::ModelConfig& cfg = config();
  const int BT = B_ * T_, C = cfg.n_embd;
  const Stream s = gpu_stream();
  m.buffers.upload_targets(targets);
  const float* x = m.a.block_input(cfg.n_layer);
  layernorm_forward(m.a.lnf, m.a.lnf_mean, m.a.lnf_rstd, x, lnf_params + m.lnf_off.w, lnf_params + m.lnf_off.b, BT, C,
                    s);
  m.buffers.matmul.forward(m.a.logits, m.a.lnf, embed_params + m.embed.wte, BT, C, cfg.padded_vocab_size, false);
  // The loss and the logits' gradient in one pass; the logits stay for logits().
  crossentropy_fused(m.a.dlogits, m.a.losses, m.a.head_lse, m.a.logits, m.buffers.targets(), BT, cfg.vocab_size,
                     cfg.padded_vocab_size, dlogits_scale, s);
  return m.buffers.mean_loss(m.a.losses);
}

void CudaGPT::head_backward(const float* lnf_params, const float* embed_params, float* lnf_grads, float* embed_grads) {
  Impl& m = *impl_;
  const model::ModelConfig& cfg = config();
  const int BT = B_ * T_, C = cfg.n_embd, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
  const Stream s = gpu_stream();
  const float* x = m.a.block_input(cfg.n_layer);
  float* dlnf = m.a.dln1;
  // Logits past V carry no gradient: only the first V rows of wte take part.
  m.buffers.matmul.backward_input(dlnf, m.a.dlogits, Vp, embed_params + m.embed.wte, BT, C, V);
  layernorm_backward(m.a.dres, lnf_grads + m.lnf_off.w, lnf_grads + m.lnf_off.b, nullptr, dlnf, x,
                     lnf_params + m.lnf_off.w, m.a.lnf_mean, m.a.lnf_rstd, BT, C, m.buffers.scratch.data(), s);
  m.buffers.matmul.backward_weight(embed_grads + m.embed.wte, m.a.dlogits, Vp, m.a.lnf, BT, C, V);
}

void CudaGPT::block_backward(int layer, const float* p, float* g) {
  Impl& m = *impl_;
  const model::BlockOffsets& o = m.block;
  // Recomputation: later blocks overwrote this block's activations; its forward from the kept
  // input restores them.
  if (recompute_) block_forward(layer, p);
  Activations::Layer& la = m.a.layers[layer];
  const int BT = B_ * T_, C = config().n_embd;
  const Stream s = gpu_stream();
  void* scratch = m.buffers.scratch.data();
  const float* x = m.a.block_input(layer);
  const float* d_out = m.a.dres;
  float* d_mid = m.a.dres_mid;
  float* d_in = m.a.dres_in;
  m.buffers.matmul.backward_input(m.a.dfch, d_out, C, p + o.fc_proj_w, BT, 4 * C, C);
  gelu_backward(m.a.dfch, la.fch, BT, 4 * C, s);
  m.buffers.matmul.backward_input(m.a.dln2, m.a.dfch, 4 * C, p + o.fc_w, BT, C, 4 * C);
  layernorm_backward(d_mid, g + o.ln2_w, g + o.ln2_b, d_out, m.a.dln2, la.res2, p + o.ln2_w, la.ln2_mean,
                     la.ln2_rstd, BT, C, scratch, s);
  m.buffers.matmul.backward_input(m.a.datty, d_mid, C, p + o.attn_proj_w, BT, C, C);
  attention_backward(m.a.dqkv, m.a.dqkv + C, m.a.dqkv + 2 * C, m.a.datty, la.atty, la.lse, la.qkv, la.qkv + C,
                     la.qkv + 2 * C, m.shape, scratch, s);
  m.buffers.matmul.backward_input(m.a.dln1, m.a.dqkv, 3 * C, p + o.attn_w, BT, C, 3 * C);
  layernorm_backward(d_in, g + o.ln1_w, g + o.ln1_b, d_mid, m.a.dln1, x, p + o.ln1_w, la.ln1_mean, la.ln1_rstd, BT,
                     C, scratch, s);
  m.buffers.matmul.backward_weight(g + o.fc_proj_w, d_out, C, la.fch_gelu, BT, 4 * C, C);
  column_sums(g + o.fc_proj_b, d_out, BT, C, C, scratch, s);
  m.buffers.matmul.backward_weight(g + o.fc_w, m.a.dfch, 4 * C, la.ln2, BT, C, 4 * C);
  column_sums(g + o.fc_b, m.a.dfch, BT, 4 * C, 4 * C, scratch, s);
  m.buffers.matmul.backward_weight(g + o.attn_proj_w, d_mid, C, la.atty, BT, C, C);
  column_sums(g + o.attn_proj_b, d_mid, BT, C, C, scratch, s);
  m.buffers.matmul.backward_weight(g + o.attn_w, m.a.dqkv, 3 * C, la.ln1, BT, C, 3 * C);
  column_sums(g + o.attn_b, m.a.dqkv, BT, 3 * C, 3 * C, scratch, s);
  std::swap(m.a.dres, m.a.dres_in);  // the next block (or the embeddings) continues from here
}

void CudaGPT::embed_backward(float* embed_grads) {
  Impl& m = *impl_;
  cuda::embed_backward(embed_grads + m.embed.wte, embed_grads + m.embed.wpe, m.a.dres, m.buffers.tokens(), B_ * T_, T_,
                       config().n_embd, config().vocab_size, m.buffers.scratch.data(), gpu_stream());
}

}  // namespace strata::device::cuda
