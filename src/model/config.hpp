#pragma once
// The shape of a GPT-2-style decoder. Every field can be overridden from a preset.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata::model {

struct GPTConfig {
  int n_layer = 2;
  int n_head = 2;
  int n_embd = 64;
  int seq_len = 64;             // maximum sequence length (rows of wpe)
  int vocab_size = 256;         // real vocabulary; logits past it are masked out
  int padded_vocab_size = 256;  // rows of wte; a multiple of 64 keeps the LM head GEMM aligned

  // Presets: tiny, small, gpt2-124m. Throws Error listing the known names.
  static GPTConfig preset(std::string_view name);
  static std::vector<std::string> preset_names();

  // Throws Error naming the field and the problem ("model.n_head = 5 does not divide ...").
  void validate() const;

  int head_dim() const { return n_embd / n_head; }
  std::int64_t num_params() const;  // including padded vocab rows
  // Forward+backward FLOPs per token: 6 x (matmul params) + attention, as in the PaLM/llm.c count.
  double flops_per_token(int seq) const;

  nlohmann::json to_json() const;
  static GPTConfig from_json(const nlohmann::json& j);  // throws Error on missing/unknown keys
  bool operator==(const GPTConfig&) const = default;
};

// Round a vocabulary up to the next multiple of 64 (50257 -> 50304).
int pad_vocab(int vocab_size);

}  // namespace strata::model
