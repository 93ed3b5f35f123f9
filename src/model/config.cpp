#include "model/config.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace strata::model {

int pad_vocab(int vocab_size) { return (vocab_size + 63) / 64 * 64; }

std::vector<std::string> GPTConfig::preset_names() { return {"tiny", "small", "gpt2-124m"}; }

GPTConfig GPTConfig::preset(std::string_view name) {
  GPTConfig c;
  if (name == "tiny") {
    c = {2, 2, 64, 64, 256, 256};
  } else if (name == "small") {
    c = {6, 6, 384, 256, 256, 256};
  } else if (name == "gpt2-124m") {
    c = {12, 12, 768, 1024, 50257, 50304};
  } else {
    throw Error(fmt::format("model: unknown preset '{}' (known: {})", name,
                            fmt::join(preset_names(), ", ")));
  }
  return c;
}

void GPTConfig::validate() const {
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
  if (vocab_size > 65536)
    throw Error(fmt::format("model.vocab_size = {}: token files hold uint16 ids, at most 65536",
                            vocab_size));
}

std::int64_t GPTConfig::num_params() const {
  const std::int64_t C = n_embd, L = n_layer;
  std::int64_t per_block = 2 * C            // ln_1
                           + C * 3 * C + 3 * C  // c_attn
                           + C * C + C          // attn c_proj
                           + 2 * C              // ln_2
                           + C * 4 * C + 4 * C  // c_fc
                           + 4 * C * C + C;     // mlp c_proj
  return static_cast<std::int64_t>(padded_vocab_size) * C + static_cast<std::int64_t>(seq_len) * C +
         L * per_block + 2 * C;
}

double GPTConfig::flops_per_token(int seq) const {
  // Matmul weights only (embedding lookups cost no FLOPs, the tied LM head does).
  const double C = n_embd, L = n_layer;
  double matmul_params = L * 12.0 * C * C + static_cast<double>(padded_vocab_size) * C;
  // Causal attention computed densely: QK^T and AV, forward 2x2xTxC a token per layer, x3 with backward.
  double attention = L * 12.0 * C * seq;
  return 6.0 * matmul_params + attention;
}

nlohmann::json GPTConfig::to_json() const {
  return {{"n_layer", n_layer},       {"n_head", n_head},         {"n_embd", n_embd},
          {"seq_len", seq_len},       {"vocab_size", vocab_size}, {"padded_vocab_size", padded_vocab_size}};
}

GPTConfig GPTConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("model: expected a JSON object");
  GPTConfig c;
  const std::pair<const char*, int*> fields[] = {
      {"n_layer", &c.n_layer},   {"n_head", &c.n_head},         {"n_embd", &c.n_embd},
      {"seq_len", &c.seq_len},   {"vocab_size", &c.vocab_size}, {"padded_vocab_size", &c.padded_vocab_size}};
  for (auto& [key, value] : j.items()) {
    bool known = false;
    for (auto& f : fields) known |= key == f.first;
    if (!known) throw Error(fmt::format("model.{}: unknown key", key));
  }
  for (auto& [name, ptr] : fields) {
    if (!j.contains(name)) throw Error(fmt::format("model.{}: missing", name));
    if (!j[name].is_number_integer()) throw Error(fmt::format("model.{}: must be an integer", name));
    *ptr = j[name].get<int>();
  }
  c.validate();
  return c;
}

}  // namespace strata::model
