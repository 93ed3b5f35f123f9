// GPT-2's decoder: gpt.cpp's block_forward for one row, with K and V kept per layer.
#include <algorithm>

#include "base/aligned.hpp"
#include "model/decoder.hpp"

namespace strata::model {
namespace {

class GptDecoder final : public Decoder {
 public:
  GptDecoder(const ModelConfig& config, int max_len, const Kernels& kernels)
      : Decoder(config, max_len, kernels),
        block_(block_offsets(layout_)),
        embed_(embedding_offsets(layout_)),
        lnf_(final_norm_offsets(layout_)) {
    const std::size_t C = config.n_embd, L = config.n_layer;
    k_cache_.resize(L * max_len * C);
    v_cache_.resize(L * max_len * C);
    x_.resize(C); res_.resize(C); ln_.resize(C); qkv_.resize(3 * C); atty_.resize(C);
    fch_.resize(4 * C); fch_gelu_.resize(4 * C); scores_.resize(max_len);
    logits_.resize(config.padded_vocab_size);
  }

  const float* step(const float* params, std::int32_t token) override {
    const int t = begin_step(token);
    const ModelConfig& cfg = config();
    const int C = cfg.n_embd, NH = cfg.n_head;
    const Kernels& k = kernels_;
    const Range row{0, 1};
    float mean, rstd;  // LayerNorm statistics, only backward would need them
    const float* e = params + layout_.units()[layout_.embeddings_unit()].offset;
    // x = wte[token] + wpe[t]: the embedding kernel for one row whose position table starts at t.
    k.embed_forward(x_.data(), &token, e + embed_.wte, e + embed_.wpe + static_cast<std::size_t>(t) * C, 1, C, row);
    for (int l = 0; l < cfg.n_layer; ++l) {
      const float* p = params + layout_.units()[layout_.block_unit(l)].offset;
      const BlockOffsets& o = block_;
      float* k_rows = k_cache_.data() + static_cast<std::size_t>(l) * max_len_ * C;
      float* v_rows = v_cache_.data() + static_cast<std::size_t>(l) * max_len_ * C;
      // As block_forward: res = x + attn_proj_b + c_proj(attention(c_attn(ln_1 x))).
      k.layernorm_forward(ln_.data(), &mean, &rstd, x_.data(), p + o.ln1_w, p + o.ln1_b, C, row, res_.data(),
                          p + o.attn_proj_b);
      k.broadcast_rows(qkv_.data(), p + o.attn_b, 3 * C, row);
      matmul_forward(qkv_.data(), ln_.data(), p + o.attn_w, C, 3 * C, true, row);
      std::copy_n(qkv_.data() + C, C, k_rows + static_cast<std::size_t>(t) * C);
      std::copy_n(qkv_.data() + 2 * C, C, v_rows + static_cast<std::size_t>(t) * C);
      attend_cached(atty_.data(), scores_.data(), qkv_.data(), k_rows, v_rows, t + 1, NH, NH, C / NH, C);
      matmul_forward(res_.data(), atty_.data(), p + o.attn_proj_w, C, C, true, row);
      // x = res + fc_proj_b + mlp(ln_2 res): the next block's input.
      k.layernorm_forward(ln_.data(), &mean, &rstd, res_.data(), p + o.ln2_w, p + o.ln2_b, C, row, x_.data(),
                          p + o.fc_proj_b);
      matmul_forward(fch_.data(), ln_.data(), p + o.fc_w, C, 4 * C, false, row);
      k.bias_gelu_forward(fch_.data(), fch_gelu_.data(), p + o.fc_b, 4 * C, row);
      matmul_forward(x_.data(), fch_gelu_.data(), p + o.fc_proj_w, 4 * C, C, true, row);
    }
    const float* f = params + layout_.units()[layout_.final_norm_unit()].offset;
    k.layernorm_forward(ln_.data(), &mean, &rstd, x_.data(), f + lnf_.w, f + lnf_.b, C, row, nullptr, nullptr);
    matmul_forward(logits_.data(), ln_.data(), e + embed_.wte, C, cfg.padded_vocab_size, false, row);  // tied head
    end_step();
    return logits_.data();
  }

 private:
  BlockOffsets block_;
  EmbeddingOffsets embed_;
  FinalNormOffsets lnf_;
  AlignedBuffer<float> k_cache_, v_cache_;  // [n_layer, max_len, C] each
  // One row of each activation of the block (gpt.cpp names them alike).
  AlignedBuffer<float> x_, res_, ln_, qkv_, atty_, fch_, fch_gelu_, scores_, logits_;
};

}  // namespace

std::unique_ptr<Decoder> make_gpt_decoder(const ModelConfig& config, int max_len, const Kernels& kernels) {
  return std::make_unique<GptDecoder>(config, max_len, kernels);
}

}  // namespace strata::model
