#include "device/cuda/gpt_cuda.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "base/error.hpp"
#include "device/cuda/cuda_device.hpp"
#include "device/cuda/kernels.hpp"
#include "device/cuda/matmul.hpp"
#include "device/cuda/model_ops.hpp"
#include "model/gpt_walk.hpp"
#include "model/team.hpp"

namespace strata::device::cuda {

namespace {

// The largest operand any product of the model reads, in elements (Matmul sizes its bf16
// scratch by it): the logits' gradient and the tied embedding lead for GPT-2.
std::size_t largest_operand(const model::GPTConfig& config, int B, int T) {
  const std::size_t BT = static_cast<std::size_t>(B) * T, C = config.n_embd, Vp = config.padded_vocab_size;
  return std::max({BT * Vp, Vp * C, BT * 4 * C, 4 * C * C});
}

AttentionShape attention_shape(const model::GPTConfig& config, int B, int T) {
  const int C = config.n_embd, NH = config.n_head;
  return {B, T, NH, NH, C / NH, 3 * C, 3 * C, C};
}

// Scratch every row-reducing kernel of the model shares (one stream: never two at once).
std::size_t kernel_scratch_bytes(const model::GPTConfig& config, int B, int T) {
  const int BT = B * T, C = config.n_embd;
  return std::max({embed_backward_scratch_bytes(BT, config.vocab_size), norm_backward_scratch_bytes(BT, C),
                   column_sums_scratch_bytes(BT, C), column_sums_scratch_bytes(BT, 3 * C),
                   column_sums_scratch_bytes(BT, 4 * C), attention_backward_scratch_bytes(attention_shape(config, B, T)),
                   std::size_t{1}});
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

  std::size_t place(const model::GPTConfig& config, int B, int T, bool recompute, float* base);
  const float* block_input(int layer) const { return layer == 0 ? encoded : layers[layer - 1].res3; }
};

// Under recomputation every layer shares layer 0's buffers but its output, as on the CPU.
std::size_t Activations::place(const model::GPTConfig& config, int B, int T, bool recompute, float* base) {
  const std::size_t BT = static_cast<std::size_t>(B) * T, C = config.n_embd;
  const std::size_t NH = config.n_head, Vp = config.padded_vocab_size;
  model::BufferPlacer placer(base);
  auto take = [&](float*& p, std::size_t n) { placer.take(p, n); };
  layers.resize(config.n_layer);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    Layer& la = layers[l];
    if (recompute && l > 0) {
      la = layers[0];
      take(la.res3, BT * C);
      continue;
    }
    take(la.ln1, BT * C); take(la.ln1_mean, BT); take(la.ln1_rstd, BT);
    take(la.qkv, BT * 3 * C);
    take(la.lse, static_cast<std::size_t>(B) * NH * T);
    take(la.atty, BT * C); take(la.res2, BT * C);
    take(la.ln2, BT * C); take(la.ln2_mean, BT); take(la.ln2_rstd, BT);
    take(la.fch, BT * 4 * C); take(la.fch_gelu, BT * 4 * C); take(la.res3, BT * C);
  }
  take(encoded, BT * C); take(lnf, BT * C); take(lnf_mean, BT); take(lnf_rstd, BT);
  take(logits, BT * Vp); take(dlogits, BT * Vp); take(head_lse, BT); take(losses, BT);
  take(dres, BT * C); take(dres_mid, BT * C); take(dres_in, BT * C);
  take(dln1, BT * C); take(dln2, BT * C); take(dfch, BT * 4 * C);
  take(datty, BT * C); take(dqkv, BT * 3 * C);
  return placer.floats();
}

std::size_t activation_floats(const model::GPTConfig& config, int B, int T, bool recompute) {
  Activations counter;
  return counter.place(config, B, T, recompute, nullptr);
}

}  // namespace

struct CudaGPT::Impl {
  Impl(Device& device, const model::GPTConfig& config, int B, int T, bool recompute, Precision precision)
      : device(device),
        storage(device, activation_floats(config, B, T, recompute)),
        ids(device, 2 * static_cast<std::size_t>(B) * T),
        scratch(device, kernel_scratch_bytes(config, B, T)),
        matmul(device, precision, largest_operand(config, B, T), gpu_stream()),
        shape(attention_shape(config, B, T)),
        host_losses(static_cast<std::size_t>(B) * T) {
    a.place(config, B, T, recompute, storage.data());
  }

  Device& device;
  Buffer<float> storage;
  Buffer<std::int32_t> ids;  // this micro-batch's tokens, then its targets
  Buffer<std::uint8_t> scratch;
  Matmul matmul;
  AttentionShape shape;
  Activations a;
  model::BlockOffsets block{};
  model::EmbeddingOffsets embed{};
  model::FinalNormOffsets lnf_off{};
  std::vector<float> host_losses;

  std::int32_t* tokens() { return ids.data(); }
  std::int32_t* targets() { return ids.data() + ids.size() / 2; }
};

std::uint64_t CudaGPT::device_bytes(const model::GPTConfig& config, int batch, int seq, bool recompute,
                                    Precision precision) {
  const std::size_t BT = static_cast<std::size_t>(batch) * seq;
  return pool_bytes(activation_floats(config, batch, seq, recompute) * sizeof(float)) +
         pool_bytes(2 * BT * sizeof(std::int32_t)) + pool_bytes(kernel_scratch_bytes(config, batch, seq)) +
         Matmul::device_bytes(precision, largest_operand(config, batch, seq));
}

CudaGPT::CudaGPT(Device& device, const model::GPTConfig& config, int batch, int seq, bool recompute,
                 Precision precision)
    : layout_(config), B_(batch), T_(seq), recompute_(recompute) {
  if (config.family != model::Family::Gpt2)
    throw Error(fmt::format("train.device = 'cuda': model family {} has no GPU model yet (gpt2 has)",
                            model::family_name(config.family)));
  if (batch <= 0) throw Error(fmt::format("model: batch = {}: must be positive", batch));
  if (seq <= 0 || seq > config.seq_len)
    throw Error(fmt::format("model: seq = {}: must be in [1, model.seq_len = {}]", seq, config.seq_len));
  if (config.n_embd / config.n_head > 128)
    throw Error(fmt::format("train.device = 'cuda': head size {} (model.n_embd / model.n_head): the GPU attention "
                            "takes at most 128",
                            config.n_embd / config.n_head));
  impl_ = std::make_unique<Impl>(device, config, batch, seq, recompute, precision);
  impl_->block = model::block_offsets(layout_);
  impl_->embed = model::embedding_offsets(layout_);
  impl_->lnf_off = model::final_norm_offsets(layout_);
}

CudaGPT::~CudaGPT() = default;

const float* CudaGPT::logits() const { return impl_->a.logits; }

std::uint64_t CudaGPT::activation_bytes() const {
  return impl_->storage.size() * sizeof(float);
}

void CudaGPT::embed_forward(const float* embed_params, const std::int32_t* tokens) {
  Impl& m = *impl_;
  const int BT = B_ * T_;
  m.device.from_host(m.ids.data(), tokens, static_cast<std::size_t>(BT) * sizeof(std::int32_t));
  cuda::embed_forward(m.a.encoded, m.tokens(), embed_params + m.embed.wte, embed_params + m.embed.wpe, BT, T_,
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
  m.matmul.forward(la.qkv, la.ln1, p + o.attn_w, BT, C, 3 * C, true);
  attention_forward(la.atty, la.lse, la.qkv, la.qkv + C, la.qkv + 2 * C, m.shape, s);
  m.matmul.forward(la.res2, la.atty, p + o.attn_proj_w, BT, C, C, true);
  layernorm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.res2, p + o.ln2_w, p + o.ln2_b, BT, C, s);
  residual_with_bias(la.res3, la.res2, p + o.fc_proj_b, BT, C, s);
  m.matmul.forward(la.fch, la.ln2, p + o.fc_w, BT, C, 4 * C, false);
  bias_gelu_forward(la.fch, la.fch_gelu, p + o.fc_b, BT, 4 * C, s);
  m.matmul.forward(la.res3, la.fch_gelu, p + o.fc_proj_w, BT, 4 * C, C, true);
}

float CudaGPT::head_forward(const float* lnf_params, const float* embed_params, const std::int32_t* targets,
                            float dlogits_scale) {
  Impl& m = *impl_;
  const model::GPTConfig& cfg = config();
  const int BT = B_ * T_, C = cfg.n_embd;
  const Stream s = gpu_stream();
  m.device.from_host(m.targets(), targets, static_cast<std::size_t>(BT) * sizeof(std::int32_t));
  const float* x = m.a.block_input(cfg.n_layer);
  layernorm_forward(m.a.lnf, m.a.lnf_mean, m.a.lnf_rstd, x, lnf_params + m.lnf_off.w, lnf_params + m.lnf_off.b, BT, C,
                    s);
  m.matmul.forward(m.a.logits, m.a.lnf, embed_params + m.embed.wte, BT, C, cfg.padded_vocab_size, false);
  // The loss and the logits' gradient in one pass; the logits stay for logits().
  crossentropy_fused(m.a.dlogits, m.a.losses, m.a.head_lse, m.a.logits, m.targets(), BT, cfg.vocab_size,
                     cfg.padded_vocab_size, dlogits_scale, s);
  m.device.to_host(m.host_losses.data(), m.a.losses, m.host_losses.size() * sizeof(float));
  double total = 0;  // in row order, as the CPU model sums
  for (float loss : m.host_losses) total += loss;
  return static_cast<float>(total / BT);
}

void CudaGPT::head_backward(const float* lnf_params, const float* embed_params, float* lnf_grads, float* embed_grads) {
  Impl& m = *impl_;
  const model::GPTConfig& cfg = config();
  const int BT = B_ * T_, C = cfg.n_embd, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
  const Stream s = gpu_stream();
  const float* x = m.a.block_input(cfg.n_layer);
  float* dlnf = m.a.dln1;
  // Logits past V carry no gradient: only the first V rows of wte take part.
  m.matmul.backward_input(dlnf, m.a.dlogits, Vp, embed_params + m.embed.wte, BT, C, V);
  layernorm_backward(m.a.dres, lnf_grads + m.lnf_off.w, lnf_grads + m.lnf_off.b, nullptr, dlnf, x,
                     lnf_params + m.lnf_off.w, m.a.lnf_mean, m.a.lnf_rstd, BT, C, m.scratch.data(), s);
  m.matmul.backward_weight(embed_grads + m.embed.wte, m.a.dlogits, Vp, m.a.lnf, BT, C, V);
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
  void* scratch = m.scratch.data();
  const float* x = m.a.block_input(layer);
  const float* d_out = m.a.dres;
  float* d_mid = m.a.dres_mid;
  float* d_in = m.a.dres_in;
  m.matmul.backward_input(m.a.dfch, d_out, C, p + o.fc_proj_w, BT, 4 * C, C);
  gelu_backward(m.a.dfch, la.fch, BT, 4 * C, s);
  m.matmul.backward_input(m.a.dln2, m.a.dfch, 4 * C, p + o.fc_w, BT, C, 4 * C);
  layernorm_backward(d_mid, g + o.ln2_w, g + o.ln2_b, d_out, m.a.dln2, la.res2, p + o.ln2_w, la.ln2_mean,
                     la.ln2_rstd, BT, C, scratch, s);
  m.matmul.backward_input(m.a.datty, d_mid, C, p + o.attn_proj_w, BT, C, C);
  attention_backward(m.a.dqkv, m.a.dqkv + C, m.a.dqkv + 2 * C, m.a.datty, la.atty, la.lse, la.qkv, la.qkv + C,
                     la.qkv + 2 * C, m.shape, scratch, s);
  m.matmul.backward_input(m.a.dln1, m.a.dqkv, 3 * C, p + o.attn_w, BT, C, 3 * C);
  layernorm_backward(d_in, g + o.ln1_w, g + o.ln1_b, d_mid, m.a.dln1, x, p + o.ln1_w, la.ln1_mean, la.ln1_rstd, BT,
                     C, scratch, s);
  m.matmul.backward_weight(g + o.fc_proj_w, d_out, C, la.fch_gelu, BT, 4 * C, C);
  column_sums(g + o.fc_proj_b, d_out, BT, C, C, scratch, s);
  m.matmul.backward_weight(g + o.fc_w, m.a.dfch, 4 * C, la.ln2, BT, C, 4 * C);
  column_sums(g + o.fc_b, m.a.dfch, BT, 4 * C, 4 * C, scratch, s);
  m.matmul.backward_weight(g + o.attn_proj_w, d_mid, C, la.atty, BT, C, C);
  column_sums(g + o.attn_proj_b, d_mid, BT, C, C, scratch, s);
  m.matmul.backward_weight(g + o.attn_w, m.a.dqkv, 3 * C, la.ln1, BT, C, 3 * C);
  column_sums(g + o.attn_b, m.a.dqkv, BT, 3 * C, 3 * C, scratch, s);
  std::swap(m.a.dres, m.a.dres_in);  // the next block (or the embeddings) continues from here
}

void CudaGPT::embed_backward(float* embed_grads) {
  Impl& m = *impl_;
  cuda::embed_backward(embed_grads + m.embed.wte, embed_grads + m.embed.wpe, m.a.dres, m.tokens(), B_ * T_, T_,
                       config().n_embd, config().vocab_size, m.scratch.data(), gpu_stream());
}

float CudaGPT::forward_walk(model::UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                            float dlogits_scale) {
  const std::size_t BT = static_cast<std::size_t>(B_) * T_;
  // Bad ids are refused here, before anything is acquired (a kernel would only trap on them).
  model::check_ids(tokens, BT, config().vocab_size, "token");
  model::check_ids(targets, BT, config().vocab_size, "target");
  return model::gpt2_forward_walk(
      layout_, access, [&](const float* embed) { embed_forward(embed, tokens); },
      [&](int l, const float* p) { block_forward(l, p); },
      [&](const float* lnf, const float* embed) { return head_forward(lnf, embed, targets, dlogits_scale); });
}

float CudaGPT::forward(model::UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets) {
  return forward_walk(access, tokens, targets, 0.0f);
}

float CudaGPT::forward_backward(model::UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                                float grad_scale) {
  // The fused cross-entropy scales the logits' gradient in the forward already.
  const float loss = forward_walk(access, tokens, targets, grad_scale / static_cast<float>(B_ * T_));
  model::gpt2_backward_walk(
      layout_, access,
      [&](const float* lnf, const float* embed, float* lnf_grads, float* embed_grads) {
        head_backward(lnf, embed, lnf_grads, embed_grads);
      },
      [&](int l, const float* p, float* g) { block_backward(l, p, g); },
      [&](float* embed_grads) { embed_backward(embed_grads); });
  synchronize("gpt2 forward/backward");
  return loss;
}

}  // namespace strata::device::cuda
