#pragma once
// A model as its users have it: a Hugging Face config.json (or the folder holding it) of a
// dense decoder of a known family, read into the fields that change what training it costs.
// The one reader for `strata plan --model PATH` (priced as a shape, plan/model_shapes.hpp)
// and `strata train --model PATH` (the families strata runs: GPT-2 and Llama). Anything it
// cannot price faithfully (mixture of experts, an unknown architecture, biases or rotary
// variants strata has no account for) is refused naming the field, never guessed.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.hpp"

namespace strata::model {

struct HfModel {
  std::string path;          // the config.json read
  std::string architecture;  // e.g. LlamaForCausalLM (the config's `architectures`, or its model_type's class)
  std::string family;        // llama, mistral, qwen2, gpt_neox, gpt2 (HF's model_type)
  int layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  int max_positions = 0;     // max_position_embeddings / n_positions
  int seq = 0;               // default training length: max_positions, or rope_scaling's original length
  bool tied = false;         // tie_word_embeddings
  bool learned_positions = false;  // GPT-2's wpe; the others are rotary
  bool layer_norm = false;   // LayerNorm (GPT-2, GPT-NeoX); else RMSNorm
  bool swiglu = false;       // gate + up + down MLP; else GELU up + down
  bool all_biases = false;   // every linear layer and norm carries biases (GPT-2, GPT-NeoX)
  bool qkv_biases = false;   // only Q, K and V carry biases (Qwen2)
  double rope_theta = 10000;
  bool rope_scaling = false;  // rope_scaling given (read for the default length; not priced)
  std::vector<std::string> notes;  // read but not priced, and why (rope_scaling, sliding window)
};

// Reads PATH (a config.json, or a folder holding one). Errors name the file and the field.
HfModel read_hf_config(const std::filesystem::path& path);
// Whether --model's value names a file or folder rather than a preset: it exists, or it
// looks like a path (holds '/' or ends in .json), so that a missing file is reported as such.
bool names_a_config_path(std::string_view name);
// The config as a model strata trains (GPT-2 or Llama, as model/gpt.hpp and model/llama.hpp
// run them); throws Error naming the architecture or the field it does not run.
ModelConfig to_gpt_config(const HfModel& hf);

}  // namespace strata::model
