#include "model/config.hpp"

#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace strata::model {

int pad_vocab(int vocab_size) { return (vocab_size + 63) / 64 * 64; }

std::string_view family_name(Family f) { return f == Family::Llama ? "llama" : "gpt2"; }

namespace {

Family parse_family(std::string_view name) {
  if (name == "gpt2") return Family::Gpt2;
  if (name == "llama") return Family::Llama;
  throw Error(fmt::format("model.family = '{}': unknown family (known: gpt2, llama)", name));
}

ModelConfig llama(int n_layer, int n_head, int n_kv_head, int n_embd, int seq_len, int vocab_size, int ffn_hidden) {
  ModelConfig c{n_layer, n_head, n_embd, seq_len, vocab_size, pad_vocab(vocab_size)};
  c.family = Family::Llama;
  c.n_kv_head = n_kv_head;
  c.ffn_hidden = ffn_hidden;
  return c;
}

// The presets, in the order preset_names() lists them.
const std::vector<std::pair<std::string, ModelConfig>>& presets() {
  static const std::vector<std::pair<std::string, ModelConfig>> table = {
      {"tiny", {2, 2, 64, 64, 256, 256}},
      {"mini", {4, 4, 192, 128, 256, 256}},  // between them: steps of about a second on the namespace cluster
      {"small", {6, 6, 384, 256, 256, 256}},
      {"gpt2-124m", {12, 12, 768, 1024, 50257, 50304}},
      {"llama-tiny", llama(2, 4, 2, 64, 64, 256, 0)},  // grouped-query: two query heads per K/V head
      {"llama-small", llama(6, 6, 2, 384, 256, 256, 0)},
      {"tinyllama-1.1b", llama(22, 32, 4, 2048, 2048, 32000, 5632)},  // TinyLlama/TinyLlama-1.1B's config.json
      {"llama2-7b", llama(32, 32, 32, 4096, 4096, 32000, 11008)},     // meta-llama/Llama-2-7b-hf's config.json
  };
  return table;
}

}  // namespace

std::vector<std::string> ModelConfig::preset_names() {
  std::vector<std::string> names;
  for (const auto& preset : presets()) names.push_back(preset.first);
  return names;
}

ModelConfig ModelConfig::preset(std::string_view name) {
  for (const auto& [preset_name, config] : presets())
    if (preset_name == name) return config;
  throw Error(fmt::format("model: unknown preset '{}' (known: {})", name, fmt::join(preset_names(), ", ")));
}

void ModelConfig::validate() const {
  auto positive = [](const char* field, int v) {
    if (v <= 0) throw Error(fmt::format("model.{} = {}: must be positive", field, v));
  };
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  positive("n_embd", n_embd);
  positive("seq_len", seq_len);
  positive("vocab_size", vocab_size);
  positive("padded_vocab_size", padded_vocab_size);
  if (n_embd % n_head != 0)
    throw Error(fmt::format("model.n_head = {} does not divide model.n_embd = {}", n_head, n_embd));
  if (padded_vocab_size < vocab_size)
    throw Error(fmt::format("model.padded_vocab_size = {} is smaller than model.vocab_size = {}",
                            padded_vocab_size, vocab_size));
  if (family == Family::Gpt2) {
    // GPT-2's attention and MLP have no such knobs: a value here would be silently ignored.
    if (n_kv_head != 0 && n_kv_head != n_head)
      throw Error(fmt::format("model.n_kv_head = {}: family gpt2 has one K/V head per head (n_head = {}); "
                              "grouped-query attention needs model.family = \"llama\"", n_kv_head, n_head));
    if (ffn_hidden != 0 && ffn_hidden != 4 * n_embd)
      throw Error(fmt::format("model.ffn_hidden = {}: family gpt2's MLP is 4 x n_embd = {}", ffn_hidden, 4 * n_embd));
    if (rope_theta != 10000)
      throw Error(fmt::format("model.rope_theta = {}: family gpt2 has learned positions, no rotary embedding",
                              rope_theta));
  } else {
    if (n_kv_head < 0) throw Error(fmt::format("model.n_kv_head = {}: must be positive", n_kv_head));
    if (n_head % kv_heads() != 0)
      throw Error(fmt::format("model.n_kv_head = {} does not divide model.n_head = {}", kv_heads(), n_head));
    if (head_dim() % 2 != 0)
      throw Error(fmt::format("model.n_embd / model.n_head = {}: rotary embeddings need an even head size",
                              head_dim()));
    if (ffn_hidden < 0) throw Error(fmt::format("model.ffn_hidden = {}: must be positive", ffn_hidden));
    if (!(rope_theta > 1) || !std::isfinite(rope_theta))
      throw Error(fmt::format("model.rope_theta = {}: must be a finite number above 1", rope_theta));
  }
  if (vocab_size > 65536)
    throw Error(fmt::format("model.vocab_size = {}: token files hold uint16 ids, at most 65536",
                            vocab_size));
}

int ModelConfig::ffn_size() const {
  if (family == Family::Gpt2) return 4 * n_embd;
  if (ffn_hidden > 0) return ffn_hidden;
  constexpr int kMultipleOf = 256;  // Llama's multiple_of
  const int hidden = 2 * (4 * n_embd) / 3;
  return (hidden + kMultipleOf - 1) / kMultipleOf * kMultipleOf;
}

std::int64_t ModelConfig::num_params() const {
  const std::int64_t C = n_embd, L = n_layer;
  if (family == Family::Llama) {
    const std::int64_t kv = static_cast<std::int64_t>(kv_heads()) * head_dim(), F = ffn_size();
    const std::int64_t per_block = 2 * C + 2 * C * C + 2 * C * kv + 3 * C * F;  // norms, q o, k v, MLP
    return 2 * static_cast<std::int64_t>(padded_vocab_size) * C + L * per_block + C;
  }
  std::int64_t per_block = 2 * C            // ln_1
                           + C * 3 * C + 3 * C  // c_attn
                           + C * C + C          // attn c_proj
                           + 2 * C              // ln_2
                           + C * 4 * C + 4 * C  // c_fc
                           + 4 * C * C + C;     // mlp c_proj
  return static_cast<std::int64_t>(padded_vocab_size) * C + static_cast<std::int64_t>(seq_len) * C +
         L * per_block + 2 * C;
}

double ModelConfig::flops_per_token(int seq) const {
  // Matmul weights only (embedding lookups cost no FLOPs, the tied LM head does).
  const double C = n_embd, L = n_layer, kv = static_cast<double>(kv_heads()) * head_dim(), F = ffn_size();
  const double block = family == Family::Llama ? 2 * C * C + 2 * C * kv + 3 * C * F : 12.0 * C * C;
  double matmul_params = L * block + static_cast<double>(padded_vocab_size) * C;
  // Causal attention computed densely: QK^T and AV, forward 2x2xTxC a token per layer, x3 with backward.
  double attention = L * 12.0 * C * seq;
  return 6.0 * matmul_params + attention;
}

nlohmann::json ModelConfig::to_json() const {
  return {{"family", family_name(family)}, {"n_layer", n_layer},       {"n_head", n_head},
          {"n_kv_head", n_kv_head},          {"n_embd", n_embd},         {"ffn_hidden", ffn_hidden},
          {"seq_len", seq_len},              {"vocab_size", vocab_size}, {"padded_vocab_size", padded_vocab_size},
          {"rope_theta", rope_theta}};
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("model: expected a JSON object");
  ModelConfig c;
  const std::pair<const char*, int*> fields[] = {
      {"n_layer", &c.n_layer},   {"n_head", &c.n_head},         {"n_embd", &c.n_embd},
      {"seq_len", &c.seq_len},   {"vocab_size", &c.vocab_size}, {"padded_vocab_size", &c.padded_vocab_size}};
  // The family's fields may be absent: checkpoints from before Llama hold GPT-2 models.
  const std::pair<const char*, int*> optional_fields[] = {{"n_kv_head", &c.n_kv_head}, {"ffn_hidden", &c.ffn_hidden}};
  for (auto& [key, value] : j.items()) {
    bool known = key == "family" || key == "rope_theta";
    for (auto& f : fields) known |= key == f.first;
    for (auto& f : optional_fields) known |= key == f.first;
    if (!known) throw Error(fmt::format("model.{}: unknown key", key));
  }
  auto read_int = [&](const char* name, int* ptr) {
    if (!j[name].is_number_integer()) throw Error(fmt::format("model.{}: must be an integer", name));
    const auto v = j[name].get<std::int64_t>();
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      throw Error(fmt::format("model.{} = {}: out of range", name, v));
    *ptr = static_cast<int>(v);
  };
  for (auto& [name, ptr] : fields) {
    if (!j.contains(name)) throw Error(fmt::format("model.{}: missing", name));
    read_int(name, ptr);
  }
  for (auto& [name, ptr] : optional_fields)
    if (j.contains(name)) read_int(name, ptr);
  if (j.contains("family")) {
    if (!j["family"].is_string()) throw Error("model.family: must be a string");
    c.family = parse_family(j["family"].get<std::string>());
  }
  if (j.contains("rope_theta")) {
    if (!j["rope_theta"].is_number()) throw Error("model.rope_theta: must be a number");
    c.rope_theta = j["rope_theta"].get<double>();
  }
  c.validate();
  return c;
}

}  // namespace strata::model
