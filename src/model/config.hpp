#pragma once
// The shape of a decoder-only transformer of one of two families, every field overridable
// from a preset:
//   gpt2   LayerNorm with biases, learned positions, GELU MLP of 4 x n_embd, multi-head
//          attention, LM head tied to the token embedding (model/gpt.hpp)
//   llama  RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention (n_kv_head K/V heads
//          shared by n_head / n_kv_head query heads each), untied LM head, no biases (model/llama.hpp)
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata::model {

enum class Family { Gpt2, Llama };
std::string_view family_name(Family f);  // "gpt2", "llama"

struct ModelConfig {
  int n_layer = 2;
  int n_head = 2;
  int n_embd = 64;
  int seq_len = 64;             // maximum sequence length (rows of wpe)
  int vocab_size = 256;         // real vocabulary; logits past it are masked out
  int padded_vocab_size = 256;  // rows of wte; a multiple of 64 keeps the LM head GEMM aligned
  Family family = Family::Gpt2;
  // Llama only (GPT-2 refuses other values than these defaults):
  int n_kv_head = 0;            // K/V heads, dividing n_head; 0: n_head (multi-head attention)
  int ffn_hidden = 0;           // SwiGLU width; 0: Llama's 8/3 n_embd rounded up to a multiple of 256
  double rope_theta = 10000;    // rotary base

  // Presets: tiny, mini, small, gpt2-124m, llama-tiny, llama-small, tinyllama-1.1b, llama2-7b.
  // Throws Error listing the known names.
  static ModelConfig preset(std::string_view name);
  static std::vector<std::string> preset_names();

  // Throws Error naming the field and the problem ("model.n_head = 5 does not divide ...").
  void validate() const;

  int head_dim() const { return n_embd / n_head; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int ffn_size() const;  // the MLP's hidden width, defaults resolved
  std::int64_t num_params() const;  // including padded vocab rows
  // Forward+backward FLOPs per token: 6 x (matmul params) + attention, as in the PaLM/llm.c count.
  double flops_per_token(int seq) const;

  nlohmann::json to_json() const;
  static ModelConfig from_json(const nlohmann::json& j);  // throws Error on missing/unknown keys
  bool operator==(const ModelConfig&) const = default;
};

// Round a vocabulary up to the next multiple of 64 (50257 -> 50304).
int pad_vocab(int vocab_size);

}  // namespace strata::model
