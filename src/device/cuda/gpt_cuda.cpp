// GPT-2 on the GPU: the same model as model::GPT (gpt.hpp: its walk, its units, its
// parameter layout, its kernels' conventions) computing with the CUDA kernels (kernels.hpp)
// and cuBLASLt (matmul.hpp) on device buffers the engine lends. Attention is the fused,
// memory-efficient kernel: it keeps each row's log-sum-exp instead of T x T probabilities.
#include <algorithm>
#include <utility>

#include "device/cuda/cuda_device.hpp"
#include "device/cuda/cuda_model.hpp"
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

class CudaGPT final : public CudaModel {
 public:
  CudaGPT(Device& device, const model::ModelConfig& config, int batch, int seq, bool recompute, Precision precision)
      : CudaModel(device, config, model::Family::Gpt2, batch, seq, recompute, precision, cuda_gpt_sizes),
        shape_(attention_shape(config, batch, seq)),
        block_(model::block_offsets(layout_)),
        embed_(model::embedding_offsets(layout_)),
        lnf_off_(model::final_norm_offsets(layout_)) {
    a_.place(config, batch, seq, recompute, buffers().storage.data());
  }

  const float* logits() const override { return a_.logits; }  // in device memory

 private:  // CudaModel's per-unit steps
  void embed_forward(const float* embed_params, const std::int32_t* tokens) override;
  void block_forward(int layer, const float* p) override;
  float head_forward(const float* lnf_params, const float* embed_params, const std::int32_t* targets,
                     float dlogits_scale) override;
  void head_backward(const float* lnf_params, const float* embed_params, float* lnf_grads, float* embed_grads) override;
  void block_backward(int layer, const float* p, float* g) override;
  void embed_backward(float* embed_grads) override;

  AttentionShape shape_;
  Activations a_;
  model::BlockOffsets block_;
  model::EmbeddingOffsets embed_;
  model::FinalNormOffsets lnf_off_;
};

}  // namespace

ModelSizes cuda_gpt_sizes(const model::ModelConfig& config, int B, int T, bool recompute) {
  Activations counter;
  return {counter.place(config, B, T, recompute, nullptr), static_cast<std::size_t>(B) * T,
          kernel_scratch_bytes(config, B, T), largest_operand(config, B, T)};
}

std::unique_ptr<CudaModel> make_cuda_gpt(Device& device, const model::ModelConfig& config, int batch, int seq,
                                         bool recompute, Precision precision) {
  return std::make_unique<CudaGPT>(device, config, batch, seq, recompute, precision);
}

void CudaGPT::embed_forward(const float* embed_params, const std::int32_t* tokens) {
  const int BT = B_ * T_;
  buffers().upload_tokens(tokens);
  cuda::embed_forward(a_.encoded, buffers().tokens(), embed_params + embed_.wte, embed_params + embed_.wpe, BT, T_,
                      config().n_embd, config().vocab_size, gpu_stream());
}

void CudaGPT::block_forward(int layer, const float* p) {
  const model::BlockOffsets& o = block_;
  Activations::Layer& la = a_.layers[layer];
  const int BT = B_ * T_, C = config().n_embd;
  const Stream s = gpu_stream();
  const float* x = a_.block_input(layer);
  // Biases are pre-broadcast into the outputs so the products add onto them; the residual
  // stream likewise starts as input + projection bias (the CPU model's order).
  layernorm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, x, p + o.ln1_w, p + o.ln1_b, BT, C, s);
  residual_with_bias(la.res2, x, p + o.attn_proj_b, BT, C, s);
  broadcast_rows(la.qkv, p + o.attn_b, BT, 3 * C, s);
  buffers().matmul.forward(la.qkv, la.ln1, p + o.attn_w, BT, C, 3 * C, true);
  attention_forward(la.atty, la.lse, la.qkv, la.qkv + C, la.qkv + 2 * C, shape_, s);
  buffers().matmul.forward(la.res2, la.atty, p + o.attn_proj_w, BT, C, C, true);
  layernorm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.res2, p + o.ln2_w, p + o.ln2_b, BT, C, s);
  residual_with_bias(la.res3, la.res2, p + o.fc_proj_b, BT, C, s);
  buffers().matmul.forward(la.fch, la.ln2, p + o.fc_w, BT, C, 4 * C, false);
  bias_gelu_forward(la.fch, la.fch_gelu, p + o.fc_b, BT, 4 * C, s);
  buffers().matmul.forward(la.res3, la.fch_gelu, p + o.fc_proj_w, BT, 4 * C, C, true);
}

float CudaGPT::head_forward(const float* lnf_params, const float* embed_params, const std::int32_t* targets,
                            float dlogits_scale) {
  const model::ModelConfig& cfg = config();
  const int BT = B_ * T_, C = cfg.n_embd;
  const Stream s = gpu_stream();
  buffers().upload_targets(targets);
  const float* x = a_.block_input(cfg.n_layer);
  layernorm_forward(a_.lnf, a_.lnf_mean, a_.lnf_rstd, x, lnf_params + lnf_off_.w, lnf_params + lnf_off_.b, BT, C,
                    s);
  buffers().matmul.forward(a_.logits, a_.lnf, embed_params + embed_.wte, BT, C, cfg.padded_vocab_size, false);
  // The loss and the logits' gradient in one pass; the logits stay for logits().
  crossentropy_fused(a_.dlogits, a_.losses, a_.head_lse, a_.logits, buffers().targets(), BT, cfg.vocab_size,
                     cfg.padded_vocab_size, dlogits_scale, s);
  return buffers().mean_loss(a_.losses);
}

void CudaGPT::head_backward(const float* lnf_params, const float* embed_params, float* lnf_grads, float* embed_grads) {
  const model::ModelConfig& cfg = config();
  const int BT = B_ * T_, C = cfg.n_embd, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
  const Stream s = gpu_stream();
  const float* x = a_.block_input(cfg.n_layer);
  float* dlnf = a_.dln1;
  // Logits past V carry no gradient: only the first V rows of wte take part.
  buffers().matmul.backward_input(dlnf, a_.dlogits, Vp, embed_params + embed_.wte, BT, C, V);
  layernorm_backward(a_.dres, lnf_grads + lnf_off_.w, lnf_grads + lnf_off_.b, nullptr, dlnf, x,
                     lnf_params + lnf_off_.w, a_.lnf_mean, a_.lnf_rstd, BT, C, buffers().scratch.data(), s);
  buffers().matmul.backward_weight(embed_grads + embed_.wte, a_.dlogits, Vp, a_.lnf, BT, C, V);
}

void CudaGPT::block_backward(int layer, const float* p, float* g) {
  const model::BlockOffsets& o = block_;
  // Recomputation: later blocks overwrote this block's activations; its forward from the kept
  // input restores them.
  if (recompute_) block_forward(layer, p);
  Activations::Layer& la = a_.layers[layer];
  const int BT = B_ * T_, C = config().n_embd;
  const Stream s = gpu_stream();
  void* scratch = buffers().scratch.data();
  const float* x = a_.block_input(layer);
  const float* d_out = a_.dres;
  float* d_mid = a_.dres_mid;
  float* d_in = a_.dres_in;
  buffers().matmul.backward_input(a_.dfch, d_out, C, p + o.fc_proj_w, BT, 4 * C, C);
  gelu_backward(a_.dfch, la.fch, BT, 4 * C, s);
  buffers().matmul.backward_input(a_.dln2, a_.dfch, 4 * C, p + o.fc_w, BT, C, 4 * C);
  layernorm_backward(d_mid, g + o.ln2_w, g + o.ln2_b, d_out, a_.dln2, la.res2, p + o.ln2_w, la.ln2_mean,
                     la.ln2_rstd, BT, C, scratch, s);
  buffers().matmul.backward_input(a_.datty, d_mid, C, p + o.attn_proj_w, BT, C, C);
  attention_backward(a_.dqkv, a_.dqkv + C, a_.dqkv + 2 * C, a_.datty, la.atty, la.lse, la.qkv, la.qkv + C,
                     la.qkv + 2 * C, shape_, scratch, s);
  buffers().matmul.backward_input(a_.dln1, a_.dqkv, 3 * C, p + o.attn_w, BT, C, 3 * C);
  layernorm_backward(d_in, g + o.ln1_w, g + o.ln1_b, d_mid, a_.dln1, x, p + o.ln1_w, la.ln1_mean, la.ln1_rstd, BT,
                     C, scratch, s);
  buffers().matmul.backward_weight(g + o.fc_proj_w, d_out, C, la.fch_gelu, BT, 4 * C, C);
  column_sums(g + o.fc_proj_b, d_out, BT, C, C, scratch, s);
  buffers().matmul.backward_weight(g + o.fc_w, a_.dfch, 4 * C, la.ln2, BT, C, 4 * C);
  column_sums(g + o.fc_b, a_.dfch, BT, 4 * C, 4 * C, scratch, s);
  buffers().matmul.backward_weight(g + o.attn_proj_w, d_mid, C, la.atty, BT, C, C);
  column_sums(g + o.attn_proj_b, d_mid, BT, C, C, scratch, s);
  buffers().matmul.backward_weight(g + o.attn_w, a_.dqkv, 3 * C, la.ln1, BT, C, 3 * C);
  column_sums(g + o.attn_b, a_.dqkv, BT, 3 * C, 3 * C, scratch, s);
  std::swap(a_.dres, a_.dres_in);  // the next block (or the embeddings) continues from here
}

void CudaGPT::embed_backward(float* embed_grads) {
  cuda::embed_backward(embed_grads + embed_.wte, embed_grads + embed_.wpe, a_.dres, buffers().tokens(), B_ * T_, T_,
                       config().n_embd, config().vocab_size, buffers().scratch.data(), gpu_stream());
}

}  // namespace strata::device::cuda
