#include "model/hf_config.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/fileio.hpp"

namespace strata::model {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The architectures read, by the class name `architectures` lists and the model_type the
// config carries (transformers' own names).
struct Known {
  std::string_view architecture, family;
};
constexpr Known kKnown[] = {{"LlamaForCausalLM", "llama"},
                            {"MistralForCausalLM", "mistral"},
                            {"Qwen2ForCausalLM", "qwen2"},
                            {"GPTNeoXForCausalLM", "gpt_neox"},
                            {"GPT2LMHeadModel", "gpt2"}};

// Keys by which the mixture-of-experts configs of transformers name their experts (Mixtral,
// Qwen2-MoE and Qwen3-MoE, DeepSeek, DBRX's ffn_config, OLMoE...).
constexpr std::string_view kExpertKeys[] = {"num_local_experts", "num_experts", "n_routed_experts",
                                            "moe_num_experts", "num_experts_per_tok", "ffn_config"};

std::string known_architectures() {
  std::vector<std::string_view> names;
  for (const Known& k : kKnown) names.push_back(k.architecture);
  return fmt::format("{}", fmt::join(names, ", "));
}

// Field access naming the file and the key in every refusal.
class Config {
 public:
  Config(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  bool has(std::string_view key) const { return j_.contains(key) && !j_.at(std::string(key)).is_null(); }
  const json& at(std::string_view key) const { return j_.at(std::string(key)); }
  std::string where(std::string_view key) const { return fmt::format("{}: {}", path_, key); }

  int integer(std::string_view key) const {
    if (!has(key)) throw Error(fmt::format("{}: missing (the model's shape needs it)", where(key)));
    return positive_int(key, at(key));
  }
  int integer_or(std::string_view key, int fallback) const { return has(key) ? integer(key) : fallback; }
  // The first of `keys` present (GPT-2's n_positions, older files' n_ctx).
  int first_integer(std::initializer_list<std::string_view> keys) const {
    for (std::string_view k : keys)
      if (has(k)) return integer(k);
    return integer(*keys.begin());
  }
  bool boolean_or(std::string_view key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_boolean()) throw Error(fmt::format("{}: must be true or false", where(key)));
    return at(key).get<bool>();
  }
  double number_or(std::string_view key, double fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_number()) throw Error(fmt::format("{}: must be a number", where(key)));
    return at(key).get<double>();
  }
  std::string string_or(std::string_view key, std::string fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_string()) throw Error(fmt::format("{}: must be a string", where(key)));
    return at(key).get<std::string>();
  }
  // A field whose value strata prices only at `expected`: any other is refused, not ignored.
  void refuse_unless(std::string_view key, bool expected, std::string_view why) const {
    if (boolean_or(key, expected) != expected)
      throw Error(fmt::format("{} = {}: {}", where(key), !expected, why));
  }

 private:
  int positive_int(std::string_view key, const json& v) const {
    if (!v.is_number_integer()) throw Error(fmt::format("{}: must be an integer", where(key)));
    const auto x = v.get<std::int64_t>();
    if (x <= 0 || x > std::numeric_limits<int>::max())
      throw Error(fmt::format("{} = {}: must be a positive integer", where(key), x));
    return static_cast<int>(x);
  }

  const json& j_;
  std::string path_;
};

// The error_code overloads throughout: a name the OS refuses (too long, a NUL) is the user's
// mistake to be named, not a filesystem_error escaping as a crash.
fs::path config_file(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path inside = path / "config.json";
    if (!fs::exists(inside, ec)) throw Error(fmt::format("--model {}: a folder without a config.json", path.string()));
    return inside;
  }
  if (!fs::exists(path, ec))
    throw Error(fmt::format("--model {}: no such file or folder (a Hugging Face config.json, or the folder "
                            "holding it)",
                            path.string()));
  return path;
}

// The architecture a config declares: its `architectures` list (one known class), else its model_type.
Known architecture_of(const Config& c) {
  if (c.has("architectures")) {
    const json& a = c.at("architectures");
    if (!a.is_array() || a.empty() || !a[0].is_string())
      throw Error(fmt::format("{}: must be a list of class names", c.where("architectures")));
    const std::string name = a[0].get<std::string>();
    for (const Known& k : kKnown)
      if (k.architecture == name) return k;
    throw Error(fmt::format("{} = [\"{}\"]: not an architecture strata prices (known: {})", c.where("architectures"),
                            name, known_architectures()));
  }
  const std::string type = c.string_or("model_type", "");
  for (const Known& k : kKnown)
    if (k.family == type) return k;
  throw Error(fmt::format("{}: neither architectures nor a known model_type ('{}'; known: {})",
                          c.where("architectures"), type, known_architectures()));
}

void refuse_experts(const Config& c) {
  for (std::string_view key : kExpertKeys)
    if (c.has(key))
      throw Error(fmt::format("{} = {}: a mixture of experts; strata prices dense decoders only", c.where(key),
                              c.at(key).dump()));
}

// rope_scaling changes where positions fall, not what a step computes or stores: read, noted,
// and its original length taken as the default training length.
void read_rope_scaling(const Config& c, HfModel& m) {
  if (!c.has("rope_scaling")) return;
  const json& r = c.at("rope_scaling");
  if (!r.is_object()) throw Error(fmt::format("{}: must be an object", c.where("rope_scaling")));
  m.rope_scaling = true;
  const std::string type = r.value("rope_type", r.value("type", std::string("?")));
  std::string note = fmt::format("rope_scaling {} (factor {})", type, r.contains("factor") ? r["factor"].dump() : "?");
  if (r.contains("original_max_position_embeddings")) {
    const json& original = r["original_max_position_embeddings"];
    if (!original.is_number_integer() || original.get<std::int64_t>() <= 0 ||
        original.get<std::int64_t>() > m.max_positions)
      throw Error(fmt::format("{}.original_max_position_embeddings: must be a positive integer up to "
                              "max_position_embeddings = {}",
                              c.where("rope_scaling"), m.max_positions));
    m.seq = original.get<int>();
    note += fmt::format(", extended from {} positions: the default --seq is {}", m.seq, m.seq);
  }
  m.notes.push_back(note + "; rotary scaling adds no parameters or FLOPs");
}

// The shape fields transformers' Llama-style and GPT-NeoX configs share.
void read_shape(const Config& c, HfModel& m) {
  m.layers = c.integer("num_hidden_layers");
  m.hidden = c.integer("hidden_size");
  m.heads = c.integer("num_attention_heads");
  m.kv_heads = c.integer_or("num_key_value_heads", m.heads);
  m.ffn = c.integer("intermediate_size");
  m.vocab = c.integer("vocab_size");
  m.max_positions = c.integer("max_position_embeddings");
  m.seq = m.max_positions;
  m.tied = c.boolean_or("tie_word_embeddings", false);
}

void read_llama_like(const Config& c, HfModel& m) {
  read_shape(c, m);
  m.swiglu = true;
  m.rope_theta = c.number_or("rope_theta", 10000);
  if (c.has("head_dim") && c.integer("head_dim") * m.heads != m.hidden)
    throw Error(fmt::format("{} = {}: heads x head_dim = {} is not hidden_size = {}; strata prices heads of "
                            "hidden_size / num_attention_heads",
                            c.where("head_dim"), c.integer("head_dim"), c.integer("head_dim") * m.heads, m.hidden));
  const std::string act = c.string_or("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    throw Error(fmt::format("{} = \"{}\": strata prices a SwiGLU MLP (silu)", c.where("hidden_act"), act));
  if (m.family == "qwen2") {
    m.qkv_biases = true;  // transformers' Qwen2Attention: q, k and v projections with bias, o without
    if (c.boolean_or("use_sliding_window", false))
      m.notes.push_back(fmt::format("use_sliding_window with sliding_window {}: attention priced over the whole "
                                    "sequence (an upper bound beyond the window)",
                                    c.has("sliding_window") ? c.at("sliding_window").dump() : "?"));
  } else {
    c.refuse_unless("attention_bias", false, "attention projections with biases are not priced for this family");
    c.refuse_unless("mlp_bias", false, "MLP projections with biases are not priced for this family");
  }
  if (m.family == "mistral" && c.has("sliding_window"))
    m.notes.push_back(fmt::format("sliding_window {}: attention priced over the whole sequence (an upper bound "
                                  "for --seq beyond the window)",
                                  c.at("sliding_window").dump()));
  read_rope_scaling(c, m);
}

void read_gpt_neox(const Config& c, HfModel& m) {
  read_shape(c, m);  // GPT-NeoX's attention is multi-head: no num_key_value_heads in its configs
  m.layer_norm = true;
  m.all_biases = true;
  c.refuse_unless("attention_bias", true, "GPT-NeoX without attention biases is not priced");
  m.rope_theta = c.number_or("rotary_emb_base", 10000);
  if (c.has("rotary_pct"))
    m.notes.push_back(fmt::format("rotary_pct {}: partial rotary adds no parameters or FLOPs",
                                  c.at("rotary_pct").dump()));
  if (c.boolean_or("use_parallel_residual", true))
    m.notes.push_back("use_parallel_residual: attention and MLP read the same input; the same weights and FLOPs");
  read_rope_scaling(c, m);
}

void read_gpt2(const Config& c, HfModel& m) {
  m.layers = c.integer("n_layer");
  m.hidden = c.integer("n_embd");
  m.heads = m.kv_heads = c.integer("n_head");
  m.ffn = c.integer_or("n_inner", 4 * m.hidden);
  m.vocab = c.integer("vocab_size");
  m.max_positions = c.first_integer({"n_positions", "n_ctx"});
  m.seq = m.max_positions;
  m.tied = c.boolean_or("tie_word_embeddings", true);
  m.learned_positions = true;
  m.layer_norm = true;
  m.all_biases = true;
}

}  // namespace

bool names_a_config_path(std::string_view name) {
  std::error_code ec;
  return name.find('/') != std::string_view::npos || name.ends_with(".json") || fs::exists(fs::path(name), ec);
}

HfModel read_hf_config(const fs::path& path) {
  const fs::path file = config_file(path);
  json j;
  try {
    j = json::parse(read_file_text(file));
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not JSON ({})", file.string(), e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: not a config.json (a JSON object)", file.string()));
  const Config c(j, file.string());
  refuse_experts(c);
  const Known k = architecture_of(c);
  HfModel m;
  m.path = file.string();
  m.architecture = std::string(k.architecture);
  m.family = std::string(k.family);
  if (m.family == "gpt2") read_gpt2(c, m);
  else if (m.family == "gpt_neox") read_gpt_neox(c, m);
  else read_llama_like(c, m);
  if (m.hidden % m.heads != 0)
    throw Error(fmt::format("{}: {} heads do not divide the hidden size {}", c.where("num_attention_heads"), m.heads,
                            m.hidden));
  if (m.heads % m.kv_heads != 0)
    throw Error(fmt::format("{}: {} K/V heads do not divide the {} heads", c.where("num_key_value_heads"), m.kv_heads,
                            m.heads));
  return m;
}

ModelConfig to_gpt_config(const HfModel& hf) {
  if (hf.family != "gpt2" && hf.family != "llama")
    throw Error(fmt::format("{}: architectures = {}: strata train runs GPT-2 (GPT2LMHeadModel) and Llama "
                            "(LlamaForCausalLM) models; plan it with strata plan --model {}",
                            hf.path, hf.architecture, hf.path));
  ModelConfig c;
  c.n_layer = hf.layers;
  c.n_head = hf.heads;
  c.n_embd = hf.hidden;
  c.seq_len = hf.max_positions;
  c.vocab_size = hf.vocab;
  c.padded_vocab_size = pad_vocab(hf.vocab);
  if (hf.family == "gpt2") {
    if (!hf.tied)
      throw Error(fmt::format("{}: tie_word_embeddings = false: strata's GPT-2 ties its LM head to the embedding",
                              hf.path));
    if (hf.ffn != 4 * hf.hidden)
      throw Error(fmt::format("{}: n_inner = {}: strata's GPT-2 MLP is 4 x n_embd = {}", hf.path, hf.ffn,
                              4 * hf.hidden));
  } else {
    if (hf.tied)
      throw Error(fmt::format("{}: tie_word_embeddings = true: strata's Llama has an untied LM head", hf.path));
    if (hf.rope_scaling)
      throw Error(fmt::format("{}: rope_scaling: strata's Llama runs plain rotary positions", hf.path));
    c.family = Family::Llama;
    c.n_kv_head = hf.kv_heads;
    c.ffn_hidden = hf.ffn;
    c.rope_theta = hf.rope_theta;
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", hf.path, e.what()));
  }
  return c;
}

}  // namespace strata::model
