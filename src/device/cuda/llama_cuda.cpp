// Llama on the GPU: the same model as model::Llama (llama.hpp: its walk, model/gpt_walk.hpp,
// its units, its parameter layout, its kernels' conventions) computing with the CUDA kernels
// (kernels.hpp) and cuBLASLt (matmul.hpp) on device buffers the engine lends. Attention is
// the fused, memory-efficient grouped-query kernel: it keeps each row's log-sum-exp instead
// of T x T probabilities.
#include <algorithm>
#include <utility>
#include <vector>

#include "device/cuda/cuda_device.hpp"
#include "device/cuda/cuda_model.hpp"
#include "device/cuda/kernels.hpp"
#include "device/cuda/model_ops.hpp"
#include "model/llama.hpp"
#include "model/llama_kernels.hpp"
#include "model/gpt_walk.hpp"

namespace strata::device::cuda {

namespace {

// The largest operand any product of the model reads, in elements (Matmul sizes its bf16
// scratch by it): the logits, their gradient and the LM head, or the MLP's.
std::size_t largest_operand(const model::ModelConfig& config, int B, int T) {
  const std::size_t BT = static_cast<std::size_t>(B) * T, C = config.n_embd, Vp = config.padded_vocab_size,
                    F = config.ffn_size();
  return std::max({BT * Vp, Vp * C, BT * F, F * C, BT * C, C * C});
}

// q [BT, C], k and v [BT, KV] as the projections write them; out [BT, C].
AttentionShape attention_shape(const model::ModelConfig& config, int B, int T) {
  const int C = config.n_embd, KV = config.kv_heads() * config.head_dim();
  return {B, T, config.n_head, config.kv_heads(), config.head_dim(), C, KV, C};
}

// Scratch every row-reducing kernel of the model shares (one stream: never two at once).
std::size_t kernel_scratch_bytes(const model::ModelConfig& config, int B, int T) {
  const int BT = B * T;
  return std::max({embed_backward_scratch_bytes(BT, config.vocab_size), norm_backward_scratch_bytes(BT, config.n_embd),
                   attention_backward_scratch_bytes(attention_shape(config, B, T))});
}

// Where each activation lives, laid out as model::Llama's (llama.cpp) but for attention's
// log-sum-exp in place of its T x T probabilities, and without the CPU's dtmp: the products
// that feed one input gradient accumulate into it. place() with no base only counts.
struct Activations {
  struct Layer {
    float *xn1, *rstd1;      // attention RMSNorm output and 1/rms per row
    float *q, *k, *v;        // [BT, C], [BT, KV], [BT, KV]; q and k rotated
    float* lse;              // [B, NH, T] attention's row log-sum-exp
    float* atty;             // [BT, C] heads' outputs, before o_proj
    float* res2;             // [BT, C] x + attention
    float *xn2, *rstd2;      // MLP RMSNorm
    float *gate, *up, *act;  // [BT, F] each; act = silu(gate) * up
    float* res3;             // [BT, C] block output
  };
  std::vector<Layer> layers;
  float *encoded = nullptr, *xf = nullptr, *rstdf = nullptr;
  float *logits = nullptr, *dlogits = nullptr, *head_lse = nullptr, *losses = nullptr;
  // dres: the residual stream's gradient, walked from the head down; a block also fills
  // dres_mid (after its attention) and dres_in (its input).
  float *dres = nullptr, *dres_mid = nullptr, *dres_in = nullptr;
  float *dxn1 = nullptr, *dxn2 = nullptr, *datty = nullptr;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr, *dact = nullptr, *dgate = nullptr, *dup = nullptr;

  std::size_t place(const model::ModelConfig& config, int B, int T, bool recompute, float* base);
  const float* block_input(int layer) const { return layer == 0 ? encoded : layers[layer - 1].res3; }
};

std::size_t Activations::place(const model::ModelConfig& config, int B, int T, bool recompute, float* base) {
  const std::size_t BT = static_cast<std::size_t>(B) * T, C = config.n_embd;
  const std::size_t NH = config.n_head, KV = static_cast<std::size_t>(config.kv_heads()) * config.head_dim();
  const std::size_t F = config.ffn_size(), Vp = config.padded_vocab_size;
  model::BufferPlacer placer(base);
  auto take = [&](float*& p, std::size_t n) { placer.take(p, n); };
  model::place_layers(layers, config.n_layer, recompute, placer, BT * C, [&](Layer& la) {
    take(la.xn1, BT * C); take(la.rstd1, BT);
    take(la.q, BT * C); take(la.k, BT * KV); take(la.v, BT * KV);
    take(la.lse, static_cast<std::size_t>(B) * NH * T);
    take(la.atty, BT * C); take(la.res2, BT * C);
    take(la.xn2, BT * C); take(la.rstd2, BT);
    take(la.gate, BT * F); take(la.up, BT * F); take(la.act, BT * F); take(la.res3, BT * C);
  });
  take(encoded, BT * C); take(xf, BT * C); take(rstdf, BT);
  take(logits, BT * Vp); take(dlogits, BT * Vp); take(head_lse, BT); take(losses, BT);
  take(dres, BT * C); take(dres_mid, BT * C); take(dres_in, BT * C);
  take(dxn1, BT * C); take(dxn2, BT * C); take(datty, BT * C);
  take(dq, BT * C); take(dk, BT * KV); take(dv, BT * KV);
  take(dact, BT * F); take(dgate, BT * F); take(dup, BT * F);
  return placer.floats();
}

class CudaLlama final : public CudaModel {
 public:
  CudaLlama(Device& device, const model::ModelConfig& config, int batch, int seq, bool recompute,
            Precision precision)
      : CudaModel(device, config, model::Family::Llama, batch, seq, recompute, precision, cuda_llama_sizes),
        shape_(attention_shape(config, batch, seq)),
        off_(model::llama_offsets(layout_)) {
    a_.place(config, batch, seq, recompute, buffers().storage.data());
    // The CPU model's tables (the same angles, the same rounding), copied once.
    std::vector<float> cos, sin;
    model::llama_kernels::rope_tables(config, seq, cos, sin);
    float* tables = buffers().tables.data();
    device.from_host(tables, cos.data(), cos.size() * sizeof(float));
    device.from_host(tables + cos.size(), sin.data(), sin.size() * sizeof(float));
    rope_cos_ = tables;
    rope_sin_ = tables + cos.size();
  }

  const float* logits() const override { return a_.logits; }  // in device memory

 private:  // CudaModel's per-unit steps
  void embed_forward(const float* embed_params, const std::int32_t* tokens) override;
  void block_forward(int layer, const float* p) override;
  float head_forward(const float* norm_params, const float* head_params, const std::int32_t* targets,
                     float dlogits_scale) override;
  void head_backward(const float* norm_params, const float* head_params, float* norm_grads, float* head_grads) override;
  void block_backward(int layer, const float* p, float* g) override;
  void embed_backward(float* embed_grads) override;

  AttentionShape shape_;
  model::LlamaOffsets off_;
  Activations a_;
  const float *rope_cos_ = nullptr, *rope_sin_ = nullptr;  // [T, hd/2] each, in buffers().tables
};

}  // namespace

ModelSizes cuda_llama_sizes(const model::ModelConfig& config, int B, int T, bool recompute) {
  Activations counter;
  // The rotary tables: cos and sin of T positions by hd/2 frequencies.
  const std::size_t rope_floats = 2 * static_cast<std::size_t>(T) * (config.head_dim() / 2);
  return {counter.place(config, B, T, recompute, nullptr), static_cast<std::size_t>(B) * T,
          kernel_scratch_bytes(config, B, T), largest_operand(config, B, T), rope_floats};
}

std::unique_ptr<CudaModel> make_cuda_llama(Device& device, const model::ModelConfig& config, int batch, int seq,
                                           bool recompute, Precision precision) {
  return std::make_unique<CudaLlama>(device, config, batch, seq, recompute, precision);
}

void CudaLlama::embed_forward(const float* embed_params, const std::int32_t* tokens) {
  buffers().upload_tokens(tokens);
  cuda::embed_forward(a_.encoded, buffers().tokens(), embed_params + off_.embed, nullptr, B_ * T_, T_,
                      config().n_embd, config().vocab_size, gpu_stream());
}

void CudaLlama::block_forward(int layer, const float* p) {
  const model::LlamaBlockOffsets& o = off_.block;
  const AttentionShape& sh = shape_;
  Activations::Layer& la = a_.layers[layer];
  const int BT = B_ * T_, C = config().n_embd, KV = sh.kv_stride, F = config().ffn_size();
  const Stream s = gpu_stream();
  const float* x = a_.block_input(layer);
  Matmul& mm = buffers().matmul;
  // h = x + o_proj(attention(rope(q_proj(norm x)), rope(k_proj(norm x)), v_proj(norm x))); the
  // residual stream starts as x, and o_proj accumulates onto it (the CPU model's order).
  rmsnorm_forward(la.xn1, la.rstd1, x, p + o.attn_norm, BT, C, model::kRmsNormEps, s);
  residual_with_bias(la.res2, x, nullptr, BT, C, s);
  mm.forward(la.q, la.xn1, p + o.q, BT, C, C, false);
  mm.forward(la.k, la.xn1, p + o.k, BT, C, KV, false);
  mm.forward(la.v, la.xn1, p + o.v, BT, C, KV, false);
  rope_forward(la.q, BT, sh.NH, sh.hd, T_, rope_cos_, rope_sin_, s);
  rope_forward(la.k, BT, sh.NKV, sh.hd, T_, rope_cos_, rope_sin_, s);
  attention_forward(la.atty, la.lse, la.q, la.k, la.v, sh, s);
  mm.forward(la.res2, la.atty, p + o.o, BT, C, C, true);
  // out = h + down_proj(silu(gate_proj(norm h)) * up_proj(norm h))
  rmsnorm_forward(la.xn2, la.rstd2, la.res2, p + o.mlp_norm, BT, C, model::kRmsNormEps, s);
  residual_with_bias(la.res3, la.res2, nullptr, BT, C, s);
  mm.forward(la.gate, la.xn2, p + o.gate, BT, C, F, false);
  mm.forward(la.up, la.xn2, p + o.up, BT, C, F, false);
  swiglu_forward(la.act, la.gate, la.up, static_cast<std::size_t>(BT) * F, s);
  mm.forward(la.res3, la.act, p + o.down, BT, F, C, true);
}

float CudaLlama::head_forward(const float* norm_params, const float* head_params, const std::int32_t* targets,
                              float dlogits_scale) {
  const model::ModelConfig& cfg = config();
  const int BT = B_ * T_, C = cfg.n_embd;
  const Stream s = gpu_stream();
  buffers().upload_targets(targets);
  const float* x = a_.block_input(cfg.n_layer);
  rmsnorm_forward(a_.xf, a_.rstdf, x, norm_params + off_.final_norm, BT, C, model::kRmsNormEps, s);
  buffers().matmul.forward(a_.logits, a_.xf, head_params + off_.head, BT, C, cfg.padded_vocab_size, false);
  // The loss and the logits' gradient in one pass; the logits stay for logits().
  crossentropy_fused(a_.dlogits, a_.losses, a_.head_lse, a_.logits, buffers().targets(), BT, cfg.vocab_size,
                     cfg.padded_vocab_size, dlogits_scale, s);
  return buffers().mean_loss(a_.losses);
}

void CudaLlama::head_backward(const float* norm_params, const float* head_params, float* norm_grads,
                              float* head_grads) {
  const model::ModelConfig& cfg = config();
  const int BT = B_ * T_, C = cfg.n_embd, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
  const float* x = a_.block_input(cfg.n_layer);
  float* dxf = a_.dxn1;
  // Logits past V carry no gradient: only the first V rows of lm_head take part.
  buffers().matmul.backward_input(dxf, a_.dlogits, Vp, head_params + off_.head, BT, C, V);
  rmsnorm_backward(a_.dres, norm_grads + off_.final_norm, nullptr, dxf, x, norm_params + off_.final_norm,
                   a_.rstdf, BT, C, buffers().scratch.data(), gpu_stream());
  buffers().matmul.backward_weight(head_grads + off_.head, a_.dlogits, Vp, a_.xf, BT, C, V);
}

void CudaLlama::block_backward(int layer, const float* p, float* g) {
  const model::LlamaBlockOffsets& o = off_.block;
  const AttentionShape& sh = shape_;
  // Recomputation: later blocks overwrote this block's activations; its forward from the kept
  // input restores them.
  if (recompute_) block_forward(layer, p);
  Activations::Layer& la = a_.layers[layer];
  Activations& a = a_;
  const int BT = B_ * T_, C = config().n_embd, KV = sh.kv_stride, F = config().ffn_size();
  const Stream s = gpu_stream();
  void* scratch = buffers().scratch.data();
  Matmul& mm = buffers().matmul;
  const float* x = a.block_input(layer);
  const float* d_out = a.dres;
  float* d_mid = a.dres_mid;
  float* d_in = a.dres_in;
  // MLP: through down_proj, SwiGLU, gate_proj + up_proj (both into dxn2), the norm; plus the residual.
  mm.backward_input(a.dact, d_out, C, p + o.down, BT, F, C);
  swiglu_backward(a.dgate, a.dup, a.dact, la.gate, la.up, static_cast<std::size_t>(BT) * F, s);
  mm.backward_input(a.dxn2, a.dgate, F, p + o.gate, BT, C, F);
  mm.backward_input(a.dxn2, a.dup, F, p + o.up, BT, C, F, true);
  rmsnorm_backward(d_mid, g + o.mlp_norm, d_out, a.dxn2, la.res2, p + o.mlp_norm, la.rstd2, BT, C, scratch, s);
  // Attention: through o_proj, the softmax, the rotation, q/k/v_proj (all into dxn1), the
  // norm; plus the residual.
  mm.backward_input(a.datty, d_mid, C, p + o.o, BT, C, C);
  attention_backward(a.dq, a.dk, a.dv, a.datty, la.atty, la.lse, la.q, la.k, la.v, sh, scratch, s);
  rope_backward(a.dq, BT, sh.NH, sh.hd, T_, rope_cos_, rope_sin_, s);
  rope_backward(a.dk, BT, sh.NKV, sh.hd, T_, rope_cos_, rope_sin_, s);
  mm.backward_input(a.dxn1, a.dq, C, p + o.q, BT, C, C);
  mm.backward_input(a.dxn1, a.dk, KV, p + o.k, BT, C, KV, true);
  mm.backward_input(a.dxn1, a.dv, KV, p + o.v, BT, C, KV, true);
  rmsnorm_backward(d_in, g + o.attn_norm, d_mid, a.dxn1, x, p + o.attn_norm, la.rstd1, BT, C, scratch, s);
  // The weights' gradients, summed over every row.
  mm.backward_weight(g + o.down, d_out, C, la.act, BT, F, C);
  mm.backward_weight(g + o.gate, a.dgate, F, la.xn2, BT, C, F);
  mm.backward_weight(g + o.up, a.dup, F, la.xn2, BT, C, F);
  mm.backward_weight(g + o.o, d_mid, C, la.atty, BT, C, C);
  mm.backward_weight(g + o.q, a.dq, C, la.xn1, BT, C, C);
  mm.backward_weight(g + o.k, a.dk, KV, la.xn1, BT, C, KV);
  mm.backward_weight(g + o.v, a.dv, KV, la.xn1, BT, C, KV);
  std::swap(a.dres, a.dres_in);  // the next block (or the embeddings) continues from here
}

void CudaLlama::embed_backward(float* embed_grads) {
  // The lookup has no position table: only the token rows take gradients.
  cuda::embed_backward(embed_grads + off_.embed, nullptr, a_.dres, buffers().tokens(), B_ * T_, T_,
                       config().n_embd, config().vocab_size, buffers().scratch.data(), gpu_stream());
}

}  // namespace strata::device::cuda
