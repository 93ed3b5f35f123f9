// Llama's decoder: llama.cpp's block_forward for one row, with K (rotated at its position)
// and V kept per layer for the n_kv_head K/V heads only.
#include <algorithm>
#include <cstring>
#include <vector>

#include "base/aligned.hpp"
#include "model/decoder.hpp"
#include "model/llama_kernels.hpp"

namespace strata::model {
namespace {

using namespace llama_kernels;

class LlamaDecoder final : public Decoder {
 public:
  LlamaDecoder(const ModelConfig& config, int max_len, const Kernels& kernels)
      : Decoder(config, max_len, kernels), off_(llama_offsets(layout_)) {
    const std::size_t C = config.n_embd, L = config.n_layer, F = config.ffn_size();
    const std::size_t KV = static_cast<std::size_t>(config.kv_heads()) * config.head_dim();
    k_cache_.resize(L * max_len * KV);
    v_cache_.resize(L * max_len * KV);
    x_.resize(C); res_.resize(C); xn_.resize(C); q_.resize(C); atty_.resize(C);
    gate_.resize(F); up_.resize(F); act_.resize(F); scores_.resize(max_len);
    logits_.resize(config.padded_vocab_size);
    rope_tables(config, max_len, rope_cos_, rope_sin_);
  }

  const float* step(const float* params, std::int32_t token) override {
    const int t = begin_step(token);
    const ModelConfig& cfg = config();
    const int C = cfg.n_embd, NH = cfg.n_head, NKV = cfg.kv_heads(), hd = cfg.head_dim(), F = cfg.ffn_size();
    const int KV = NKV * hd;
    const Range row{0, 1};
    float rstd;  // only backward would need it
    // Rotary tables from position t on: rope_forward's row 0 of a one-row "sequence".
    const float* cos = rope_cos_.data() + static_cast<std::size_t>(t) * (hd / 2);
    const float* sin = rope_sin_.data() + static_cast<std::size_t>(t) * (hd / 2);
    const float* e = params + layout_.units()[layout_.embeddings_unit()].offset;
    std::memcpy(x_.data(), e + off_.embed + static_cast<std::size_t>(token) * C, sizeof(float) * C);
    for (int l = 0; l < cfg.n_layer; ++l) {
      const float* p = params + layout_.units()[layout_.block_unit(l)].offset;
      const LlamaBlockOffsets& o = off_.block;
      float* k_row = k_cache_.data() + (static_cast<std::size_t>(l) * max_len_ + t) * KV;
      float* v_row = v_cache_.data() + (static_cast<std::size_t>(l) * max_len_ + t) * KV;
      // As block_forward: res = x + o_proj(attention(rope(q_proj(norm x)), rope(k_proj(norm x)), v_proj(norm x))),
      // K and V written straight into this position's cache rows.
      rmsnorm_forward(xn_.data(), &rstd, x_.data(), p + o.attn_norm, C, row, res_.data());
      matmul_forward(q_.data(), xn_.data(), p + o.q, C, C, false, row);
      matmul_forward(k_row, xn_.data(), p + o.k, C, KV, false, row);
      matmul_forward(v_row, xn_.data(), p + o.v, C, KV, false, row);
      rope_forward(q_.data(), NH, hd, 1, cos, sin, row);
      rope_forward(k_row, NKV, hd, 1, cos, sin, row);
      const float* k_rows = k_row - static_cast<std::size_t>(t) * KV;
      const float* v_rows = v_row - static_cast<std::size_t>(t) * KV;
      attend_cached(atty_.data(), scores_.data(), q_.data(), k_rows, v_rows, t + 1, NH, NKV, hd, KV);
      matmul_forward(res_.data(), atty_.data(), p + o.o, C, C, true, row);
      // x = res + down_proj(silu(gate_proj(norm res)) * up_proj(norm res)): the next block's input.
      rmsnorm_forward(xn_.data(), &rstd, res_.data(), p + o.mlp_norm, C, row, x_.data());
      matmul_forward(gate_.data(), xn_.data(), p + o.gate, C, F, false, row);
      matmul_forward(up_.data(), xn_.data(), p + o.up, C, F, false, row);
      swiglu_forward(act_.data(), gate_.data(), up_.data(), F, row);
      matmul_forward(x_.data(), act_.data(), p + o.down, F, C, true, row);
    }
    const float* n = params + layout_.units()[layout_.final_norm_unit()].offset;
    const float* h = params + layout_.units()[layout_.head_unit()].offset;
    rmsnorm_forward(xn_.data(), &rstd, x_.data(), n + off_.final_norm, C, row, nullptr);
    matmul_forward(logits_.data(), xn_.data(), h + off_.head, C, cfg.padded_vocab_size, false, row);
    end_step();
    return logits_.data();
  }

 private:
  LlamaOffsets off_;
  AlignedBuffer<float> k_cache_, v_cache_;  // [n_layer, max_len, n_kv_head * head_dim] each
  std::vector<float> rope_cos_, rope_sin_;  // [max_len, head_dim / 2]
  // One row of each activation of the block (llama.cpp names them alike).
  AlignedBuffer<float> x_, res_, xn_, q_, atty_, gate_, up_, act_, scores_, logits_;
};

}  // namespace

std::unique_ptr<Decoder> make_llama_decoder(const ModelConfig& config, int max_len, const Kernels& kernels) {
  return std::make_unique<LlamaDecoder>(config, max_len, kernels);
}

}  // namespace strata::model
