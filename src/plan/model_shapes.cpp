#include "plan/model_shapes.hpp"

#include <algorithm>
#include <functional>
#include <set>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/text.hpp"
#include "base/suggest.hpp"
#include "model/gpt.hpp"
#include "model/layout.hpp"
#include "model/model.hpp"
#include "plan/names.hpp"

namespace strata::plan {

namespace {

constexpr Named<Recompute::Mode> kRecomputes[] = {
    {Recompute::None, "none"}, {Recompute::Full, "full"}, {Recompute::SelectiveOp, "selective-op"}};

// Shapes from shared/reference/systems.md ("Model shapes that the papers used") and the
// models' published configurations: GPT-NeoX uses rotary positions, untied input and output
// embeddings, LayerNorm and biases; Llama 2 uses rotary positions, RMSNorm, SwiGLU, no
// biases, untied head, and 8 K/V heads at 70B.
ModelShape neox(std::string name, int layers, int hidden, int heads) {
  return {.name = std::move(name), .layers = layers, .hidden = hidden, .heads = heads, .kv_heads = heads,
          .ffn = 4 * hidden, .vocab = 50432, .seq = 2048};
}

ModelShape llama(std::string name, int layers, int hidden, int heads, int kv_heads, int ffn) {
  return {.name = std::move(name), .layers = layers, .hidden = hidden, .heads = heads, .kv_heads = kv_heads,
          .ffn = ffn, .vocab = 32000, .seq = 4096, .mlp = Mlp::SwiGlu, .norm = Norm::RmsNorm, .biases = false};
}

// The shape of one of strata's own trainable configs (either family), kept with it so the
// plan takes units and activations from the runtime's model.
ModelShape from_config(std::string name, const model::ModelConfig& c) {
  ModelShape m{.name = std::move(name), .layers = c.n_layer, .hidden = c.n_embd, .heads = c.n_head,
               .kv_heads = c.kv_heads(), .ffn = c.ffn_size(), .vocab = c.padded_vocab_size, .seq = c.seq_len};
  if (c.family == model::Family::Llama) {
    m.mlp = Mlp::SwiGlu;
    m.norm = Norm::RmsNorm;
    m.biases = false;
  } else {
    m.learned_positions = c.seq_len;
    m.tied_head = true;
  }
  m.gpt = c;
  return m;
}

int parse_int(std::string_view field, std::string_view value) {
  int v = 0;
  if (!parse_whole(value, v))
    throw Error(fmt::format("--shape {}={}: not an integer", field, value));
  return v;
}

bool parse_bool(std::string_view field, std::string_view value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  throw Error(fmt::format("--shape {}={}: expected true or false", field, value));
}

std::int64_t norm_params(const ModelShape& m) { return m.norm == Norm::LayerNorm ? 2LL * m.hidden : m.hidden; }

// A block's parameters on one of `tp` tensor-parallel ranks (1: the whole block): two norms, Q
// and O, K and V, the MLP; column-parallel matrices (Q, K, V, MLP up/gate) and their biases
// split by output, row-parallel ones (attention and MLP output projections) by input with their
// biases replicated, norms replicated.
std::int64_t block_params(const ModelShape& m, std::int64_t tp) {
  const std::int64_t h = m.hidden, kv = m.kv_dim(), f = m.ffn;
  std::int64_t block = 2 * norm_params(m) + (2 * h * h + 2 * h * kv + (m.mlp == Mlp::Gelu ? 2 : 3) * h * f) / tp;
  if (m.biases) block += (h + 2 * kv + (m.mlp == Mlp::Gelu ? f : 2 * f)) / tp + 2 * h;
  else if (m.qkv_biases) block += (h + 2 * kv) / tp;
  return block;
}

// Indices, in the whole model's unit plan, of the units a pipeline stage holds. A tied head's
// last stage holds a copy of the embeddings (the runtime's shard::PipelineSchedule), whose
// gradient it sums with the first stage's.
std::vector<int> stage_units(const ModelShape& m) {
  const parallel::StageSplit split = m.stage_split();
  const int units = m.layers + (m.tied_head ? 2 : 3);
  const bool last = m.stage == m.stages - 1;
  std::vector<int> out;
  for (int u = 0; u < units; ++u) {
    const bool block = u >= 1 && u <= m.layers;
    const bool mine = block ? u - 1 >= split.first_layer && u - 1 < split.end_layer()
                            : (u == 0 ? m.stage == 0 || (last && m.tied_head) : last);
    if (mine) out.push_back(u);
  }
  return out;
}

// The stage's units of a whole model's list a unit, each through `f`.
template <class T, class F = std::identity>
std::vector<T> of_stage(const ModelShape& m, const std::vector<T>& all, F f = {}) {
  std::vector<T> out;
  for (int u : stage_units(m)) out.push_back(f(all[u]));
  return out;
}

}  // namespace

Recompute parse_recompute(std::string_view text) {
  if (const Recompute::Mode* r = value_of(kRecomputes, text)) return *r;
  throw Error(fmt::format("--recompute '{}': expected none, full (the default of a bare --recompute: every block's "
                          "forward rerun in backward) or selective-op (torchtitan's per-op selective checkpointing)",
                          text));
}

std::string_view recompute_name(Recompute r) { return name_of(kRecomputes, r.mode()); }

ModelShape ModelShape::slice(int tp, int stage_index, int num_stages, const std::vector<int>& stage_layers) const {
  if (tp <= 0) throw Error(fmt::format("--tp {}: must be positive", tp));
  for (auto [field, value] : {std::pair{"heads", heads}, {"kv_heads", kv_heads}, {"ffn", ffn}, {"vocab", vocab}})
    if (value % tp != 0)
      throw Error(fmt::format("--tp {}: does not divide model.{} = {} of '{}'", tp, field, value, name));
  parallel::stage_split(layers, num_stages, stage_index, stage_layers);  // refused here, naming the flag
  ModelShape m = whole();
  m.tensor_parallel = tp;
  m.stage = stage_index;
  m.stages = num_stages;
  if (num_stages > 1) m.pp_layers = stage_layers;
  // The runtime splits both families by TP (model::ParamLayout of the split); a pipeline
  // stage of a strata model keeps `gpt`, whose layout sizes the stage's units (unit_plan).
  return m;
}

parallel::StageSplit ModelShape::stage_split() const {
  return parallel::stage_split(layers, stages, stage, pp_layers);
}

model::TensorParallelWalk ModelShape::tensor_parallel_walk(int micro_batch, int seq_tokens, bool recompute,
                                                           DType activations, bool sequence_parallel) const {
  model::TensorParallelWalk walk{stage_split().layers, hidden, micro_batch, seq_tokens, recompute, stage == 0,
                                 stage == stages - 1, activations};
  walk.sequence_parallel = sequence_parallel && tensor_parallel > 1;
  walk.degree = tensor_parallel;
  walk.norm_params = static_cast<int>(norm_params(*this));
  return walk;
}

ModelShape ModelShape::whole() const {
  ModelShape m = *this;
  m.tensor_parallel = 1;
  m.stage = 0;
  m.stages = 1;
  m.pp_layers.clear();
  return m;
}

std::vector<std::string> ModelShape::preset_names() {
  return {"gpt-neox-20b", "gpt-neox-10b", "llama2-7b", "llama2-13b", "llama2-70b", "tinyllama-1.1b", "gpt2-124m",
          "tiny", "mini", "small", "llama-tiny", "llama-small"};
}

ModelShape ModelShape::preset(std::string_view name) {
  if (name == "gpt-neox-20b") return neox("gpt-neox-20b", 44, 6144, 64);
  if (name == "gpt-neox-10b") return neox("gpt-neox-10b", 32, 5120, 40);
  if (name == "llama2-7b") return llama("llama2-7b", 32, 4096, 32, 32, 11008);
  if (name == "llama2-13b") return llama("llama2-13b", 40, 5120, 40, 40, 13824);
  if (name == "llama2-70b") return llama("llama2-70b", 80, 8192, 64, 8, 28672);
  if (name == "tinyllama-1.1b") {  // TinyLlama-1.1B's config.json, as model::ModelConfig's preset
    ModelShape m = llama("tinyllama-1.1b", 22, 2048, 32, 4, 5632);
    m.seq = 2048;
    return m;
  }
  if (name == "gpt2-124m" || name == "tiny" || name == "mini" || name == "small" || name == "llama-tiny" || name == "llama-small")
    return from_config(std::string(name), model::ModelConfig::preset(name));
  throw Error(fmt::format("--model '{}': unknown model (known: {}, custom with --shape FIELD=VALUE, or a Hugging Face "
                          "config.json or its folder)",
                          name, fmt::join(preset_names(), ", ")));
}

ModelShape ModelShape::from_hf(const model::HfModel& hf) {
  ModelShape m;
  if (hf.family == "gpt2") {
    // strata runs GPT-2: priced from the runtime's layout, as the gpt2-124m preset.
    m = from_config(hf.path, model::to_gpt_config(hf));
  } else {
    m = {.name = hf.path, .layers = hf.layers, .hidden = hf.hidden, .heads = hf.heads, .kv_heads = hf.kv_heads,
         .ffn = hf.ffn, .vocab = hf.vocab, .seq = hf.seq, .mlp = hf.swiglu ? Mlp::SwiGlu : Mlp::Gelu,
         .norm = hf.layer_norm ? Norm::LayerNorm : Norm::RmsNorm, .biases = hf.all_biases,
         .qkv_biases = hf.qkv_biases, .tied_head = hf.tied};
  }
  m.source = fmt::format("{} ({})", hf.architecture, hf.path);
  m.notes = hf.notes;
  if (hf.qkv_biases)
    m.notes.push_back("biases on the Q, K and V projections only (transformers' Qwen2Attention), counted in each "
                      "block's parameters; their adds are not priced as FLOPs");
  m.validate();
  return m;
}

std::string ModelShape::describe() const {
  const std::string attention =
      kv_heads == heads ? fmt::format("{} heads", heads)
                        : fmt::format("{} heads sharing {} K/V heads (grouped-query)", heads, kv_heads);
  const std::string bias_text = biases ? "biases on every linear and norm" : qkv_biases ? "biases on Q, K, V only"
                                                                                          : "no biases";
  return fmt::format("{} layers x hidden {}, {}, {} MLP {} wide, {}, {} positions, {}, {} head, vocab {}",
                     layers, hidden, attention, mlp == Mlp::Gelu ? "GELU" : "SwiGLU", ffn,
                     norm == Norm::LayerNorm ? "LayerNorm" : "RMSNorm",
                     learned_positions > 0 ? fmt::format("{} learned", learned_positions) : std::string("rotary"),
                     bias_text, tied_head ? "tied" : "untied", vocab);
}

ModelShape ModelShape::from_name_and_fields(std::string_view name, const std::vector<std::string>& fields) {
  ModelShape m;
  const std::vector<std::string> presets = preset_names();
  if (name == "custom") {
    m.kv_heads = 0;  // defaults to heads below
  } else if (std::find(presets.begin(), presets.end(), name) == presets.end() && model::names_a_config_path(name)) {
    m = from_hf(model::read_hf_config(std::string(name)));
  } else {
    m = preset(name);
  }
  std::set<std::string> given;
  for (const std::string& item : fields) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw Error(fmt::format("--shape '{}': expected FIELD=VALUE (e.g. layers=44)", item));
    const std::string field = item.substr(0, eq), value = item.substr(eq + 1);
    given.insert(field);
    if (field == "layers") m.layers = parse_int(field, value);
    else if (field == "hidden") m.hidden = parse_int(field, value);
    else if (field == "heads") m.heads = parse_int(field, value);
    else if (field == "kv_heads") m.kv_heads = parse_int(field, value);
    else if (field == "ffn") m.ffn = parse_int(field, value);
    else if (field == "vocab") m.vocab = parse_int(field, value);
    else if (field == "seq") m.seq = parse_int(field, value);
    else if (field == "learned_positions") m.learned_positions = parse_int(field, value);
    else if (field == "biases") m.biases = parse_bool(field, value);
    else if (field == "tied_head") m.tied_head = parse_bool(field, value);
    else if (field == "mlp") {
      if (value == "gelu") m.mlp = Mlp::Gelu;
      else if (value == "swiglu") m.mlp = Mlp::SwiGlu;
      else throw Error(fmt::format("--shape mlp={}: expected gelu or swiglu", value));
    } else if (field == "norm") {
      if (value == "layernorm") m.norm = Norm::LayerNorm;
      else if (value == "rmsnorm") m.norm = Norm::RmsNorm;
      else throw Error(fmt::format("--shape norm={}: expected layernorm or rmsnorm", value));
    } else {
      const std::vector<std::string> known{"layers", "hidden",           "heads", "kv_heads", "ffn",    "vocab",
                                           "seq",    "learned_positions", "mlp",   "norm",     "biases", "tied_head"};
      throw Error(fmt::format("--shape {}: unknown field{} (fields: {})", field, did_you_mean(field, known),
                              fmt::join(known, ", ")));
    }
    // Changing a strata model's shape leaves its layout behind: it is priced as a shape.
    if (field != "seq") m.gpt.reset();
  }
  if (!fields.empty() && !m.gpt) m.name = fmt::format("{}*", name);
  if (name == "custom") {
    // No preset to start from: the fields without a default must all be given.
    std::vector<std::string> missing;
    for (const char* field : {"layers", "hidden", "heads", "vocab", "seq"})
      if (!given.contains(field)) missing.push_back(fmt::format("--shape {}=N", field));
    if (!missing.empty())
      throw Error(fmt::format("--model custom: its shape needs {} (optional: kv_heads, default heads; ffn, default "
                              "4 x hidden; learned_positions, default 0 = rotary; mlp, norm, biases, tied_head)",
                              fmt::join(missing, ", ")));
    m.name = "custom";
    if (!given.contains("kv_heads")) m.kv_heads = m.heads;
    if (m.ffn == 0) m.ffn = 4 * m.hidden;
  }
  m.validate();
  return m;
}

void ModelShape::validate() const {
  for (auto [field, v] : {std::pair{"layers", layers}, {"hidden", hidden}, {"heads", heads}, {"kv_heads", kv_heads},
                          {"ffn", ffn}, {"vocab", vocab}, {"seq", seq}})
    if (v <= 0) throw Error(fmt::format("model.{} = {}: must be positive", field, v));
  if (learned_positions < 0)
    throw Error(fmt::format("model.learned_positions = {}: must be zero (rotary) or positive", learned_positions));
  if (hidden % heads != 0)
    throw Error(fmt::format("model.heads = {} does not divide model.hidden = {}", heads, hidden));
  if (heads % kv_heads != 0)
    throw Error(fmt::format("model.kv_heads = {} does not divide model.heads = {}", kv_heads, heads));
  if (learned_positions > 0 && seq > learned_positions)
    throw Error(fmt::format("model.seq = {} exceeds model.learned_positions = {}", seq, learned_positions));
}

std::int64_t ModelShape::num_params() const {
  if (gpt) return gpt->num_params();
  const std::int64_t h = hidden, V = vocab;
  std::int64_t total = V * h + learned_positions * h + layers * block_params(*this, 1) + norm_params(*this);
  if (!tied_head) total += V * h;
  return total;
}

std::int64_t ModelShape::matmul_params() const {
  const std::int64_t h = hidden, kv = kv_dim(), f = ffn;
  const std::int64_t block = 2 * h * h + 2 * h * kv + (mlp == Mlp::Gelu ? 2 : 3) * h * f;
  return layers * block + static_cast<std::int64_t>(vocab) * h;
}

shard::UnitPlan ModelShape::unit_plan() const {
  if (gpt && stages == 1) return shard::unit_plan(model::ParamLayout(*gpt, {tensor_parallel, 0}));
  if (sliced()) {
    // The whole model's plan, its split units resized, cut to the stage's units (events
    // renumbered, in the whole walk's order).
    const shard::UnitPlan all = whole().unit_plan();
    const std::size_t h = hidden, V = vocab;
    const std::vector<int> mine = stage_units(*this);
    // A strata model's stage units as the runtime holds them (its layout's, alignment included).
    std::optional<model::ParamLayout> runtime;
    if (gpt) runtime.emplace(*gpt, model::TensorSplit{tensor_parallel, 0});
    std::vector<int> index(all.numel.size(), -1);
    shard::UnitPlan p;
    for (int u : mine) {
      index[u] = static_cast<int>(p.names.size());
      p.names.push_back(all.names[u]);
      std::size_t n = all.numel[u];
      if (runtime) n = runtime->units()[u].numel;
      else if (u == 0) n = V * h / tensor_parallel + static_cast<std::size_t>(learned_positions) * h;
      else if (u <= layers) n = static_cast<std::size_t>(block_params(*this, tensor_parallel));
      else if (u == layers + 2) n = V * h / tensor_parallel;
      p.numel.push_back(n);
      p.layout_unit.push_back(u);
    }
    for (model::UnitEvent e : all.events)
      if (index[e.unit] >= 0) p.events.push_back({e.kind, index[e.unit], e.phase});
    return p;
  }
  shard::UnitPlan p;
  const std::size_t h = hidden, V = vocab;
  p.names.push_back("embeddings");
  p.numel.push_back(V * h + static_cast<std::size_t>(learned_positions) * h);
  for (int l = 0; l < layers; ++l) {
    p.names.push_back(fmt::format("h.{}", l));
    p.numel.push_back(static_cast<std::size_t>(block_params(*this, 1)));
  }
  p.names.push_back("ln_f");
  p.numel.push_back(static_cast<std::size_t>(norm_params(*this)));
  // The runtime's own order. Tied: the head reuses the embedding unit (model/gpt.hpp).
  // Untied: the runtime's Llama walk (model/llama.cpp), whose embedding is a lookup needed in
  // forward only and whose final norm and head run together.
  model::ModelConfig order_of;
  order_of.n_layer = layers;
  if (!tied_head) {
    p.names.push_back("lm_head");
    p.numel.push_back(V * h);
    order_of.family = model::Family::Llama;
  }
  p.events = model::unit_event_order(order_of);
  return p;
}

std::vector<double> ModelShape::forward_flops_per_token(int seq_tokens) const {
  // Sliced: every matmul (and the attention products, by heads) thinner by tp; the
  // vocab-parallel head too.
  if (sliced())
    return of_stage(*this, whole().forward_flops_per_token(seq_tokens), [&](double f) { return f / tensor_parallel; });
  const double h = hidden, kv = kv_dim(), f = ffn;
  const double block_matmul = 2 * h * h + 2 * h * kv + (mlp == Mlp::Gelu ? 2 : 3) * h * f;
  const double block = 2 * block_matmul + 4 * h * seq_tokens;
  const double head = 2.0 * vocab * h;
  std::vector<double> flops(layers + (tied_head ? 2 : 3), 0.0);
  for (int l = 0; l < layers; ++l) flops[1 + l] = block;
  flops[tied_head ? layers + 1 : layers + 2] = head;
  return flops;
}

std::vector<int> ModelShape::forward_matmuls() const {
  if (sliced()) return of_stage(*this, whole().forward_matmuls());
  std::vector<int> matmuls(layers + (tied_head ? 2 : 3), 0);
  for (int l = 0; l < layers; ++l) matmuls[1 + l] = mlp == Mlp::Gelu ? 6 : 7;
  matmuls[tied_head ? layers + 1 : layers + 2] = 1;
  return matmuls;
}

std::vector<BlockLinear> ModelShape::block_linears() const {
  const int h = hidden, kv = kv_dim(), f = ffn;
  if (mlp == Mlp::SwiGlu)  // torchtitan's Llama: xq, xk, xv = wq(x), wk(x), wv(x); w2(silu(w1(x)) * w3(x))
    return {{"wq", h, h, false}, {"wk", h, kv, false}, {"wv", h, kv, false}, {"wo", h, h, true},
            {"w1", h, f, false}, {"w3", h, f, false}, {"w2", f, h, true}};
  return {{"qkv", h, h + 2 * kv, false}, {"proj", h, h, true}, {"fc", h, f, false}, {"mlp_proj", f, h, true}};
}

namespace {

// For each of m.block_linears(), whether torchtitan's per-op policy recomputes it: every
// second aten.mm of the block; every aten.addmm (a linear with a bias).
std::vector<bool> selective_op_recomputes(const ModelShape& m) {
  std::vector<bool> out;
  int mm_calls = 0;
  for (const BlockLinear& l : m.block_linears()) {
    const std::string_view name = l.name;
    const bool bias = m.biases || (m.qkv_biases && (name == "wq" || name == "wk" || name == "wv" || name == "qkv"));
    out.push_back(bias || ++mm_calls % 2 == 0);
  }
  return out;
}

}  // namespace

std::vector<BlockLinear> ModelShape::selective_op_recomputed() const {
  const std::vector<BlockLinear> all = block_linears();
  const std::vector<bool> again = selective_op_recomputes(*this);
  std::vector<BlockLinear> out;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (again[i]) out.push_back(all[i]);
  return out;
}

std::vector<Rerun> ModelShape::rerun_per_token(int seq_tokens, Recompute recompute, int act_bytes) const {
  if (sliced()) {
    // Matmuls thinner by tp; the memory-bound part's split tensors too (norms and residuals
    // stay whole, counted in the whole model's share below).
    const double h = hidden, kv = kv_dim(), f = ffn;
    const double split = (learned_positions == 0 ? 2 * (h + kv) : 0) + (mlp == Mlp::SwiGlu ? 3 : 2) * f;
    return of_stage(*this, whole().rerun_per_token(seq_tokens, recompute, act_bytes), [&](Rerun r) {
      r.matmul_flops /= tensor_parallel;
      if (r.memory_bound_bytes > 0) r.memory_bound_bytes -= split * act_bytes * (1.0 - 1.0 / tensor_parallel);
      return r;
    });
  }
  std::vector<Rerun> rerun(layers + (tied_head ? 2 : 3));
  if (!recompute) return rerun;
  Rerun block;
  if (recompute == Recompute::Full) {
    block.matmul_flops = forward_flops_per_token(seq_tokens)[1];
    block.matmuls = forward_matmuls()[1];
  } else {
    for (const BlockLinear& l : selective_op_recomputed()) {
      block.matmul_flops += 2.0 * l.in * l.out;
      ++block.matmuls;
    }
    // The non-matmul ops backward needs rerun, each reading its inputs and writing its output
    // once (fused, as torch.compile runs them): both norms (in, out), the residual sum the
    // second norm reads (two in, one out), rotary positions on q and k (in, out), and the
    // MLP's activation (SwiGLU: gate and up in, product out; GELU: in, out).
    const double h = hidden, kv = kv_dim(), f = ffn;
    const double elements = 4 * h + 3 * h + (learned_positions == 0 ? 2 * (h + kv) : 0) +
                            (mlp == Mlp::SwiGlu ? 3 : 2) * f;
    block.memory_bound_bytes = elements * act_bytes;
  }
  for (int l = 0; l < layers; ++l) rerun[1 + l] = block;
  return rerun;
}

double ModelShape::model_flops_per_token(int seq_tokens) const {
  return 6.0 * static_cast<double>(matmul_params()) + 12.0 * layers * static_cast<double>(hidden) * seq_tokens;
}

double ModelShape::hardware_flops_per_token(int seq_tokens, Recompute recompute) const {
  if (sliced()) return whole().hardware_flops_per_token(seq_tokens, recompute);
  double flops = 0;
  for (double f : forward_flops_per_token(seq_tokens)) flops += 3 * f;
  for (const Rerun& r : rerun_per_token(seq_tokens, recompute, 2)) flops += r.matmul_flops;
  return flops;
}

std::uint64_t ModelShape::activation_bytes(int micro_batch, int seq_tokens, int act_bytes, Recompute recompute,
                                           bool flash_attention, bool sequence_parallel) const {
  const bool sp = sequence_parallel && tensor_parallel > 1;
  // strata's own models in fp32 with dense attention, as the runtime runs them: the bytes
  // the model allocates (a pipeline stage's model its part of the walk's, a micro-batch), so
  // the plan and the engine's memory report cannot drift apart.
  if (gpt && act_bytes == 4 && !flash_attention && recompute != Recompute::SelectiveOp) {
    const bool full = recompute == Recompute::Full;
    if (stages == 1) return model::activation_bytes(*gpt, micro_batch, seq_tokens, full, tensor_parallel, sp);
    const parallel::StageSplit s = stage_split();
    return model::stage_activation_bytes(*gpt, {s.first_layer, s.end_layer(), s.first, s.last}, micro_batch,
                                         seq_tokens, full, tensor_parallel, sp);
  }
  const std::uint64_t h = hidden, tokens = static_cast<std::uint64_t>(micro_batch) * seq_tokens;
  // Elements a block keeps for its backward, a token: norm-1 input and output, Q, K, V, the
  // attention output, norm-2 input and output (6·h + 2·kv), the MLP's ffn-wide tensors
  // (GELU: pre-activation and activation; SwiGLU: gate, up and their product), and unless
  // attention is flash, one softmax row of seq per head.
  // Under tensor parallelism without sequence parallelism the norms' inputs and outputs (4·h)
  // are whole on every rank (with it, a 1/tp share); Q, K, V, the attention output, the
  // MLP's tensors and the softmax rows (by heads) are split.
  const std::uint64_t tp = tensor_parallel;
  std::uint64_t split = 2 * h + 2 * static_cast<std::uint64_t>(kv_dim()) +
                        (mlp == Mlp::Gelu ? 2u : 3u) * static_cast<std::uint64_t>(ffn);
  if (!flash_attention) split += static_cast<std::uint64_t>(heads) * seq_tokens;
  const std::uint64_t whole_part = sp ? 4 * h / tp : 4 * h;
  const std::uint64_t block = whole_part + split / tp;
  // Final norm input and output, and the fp32 logits the loss works on (its gradient is
  // written over them; vocab-parallel: a rank's share). Only the last pipeline stage.
  const std::uint64_t head =
      stage == stages - 1 ? whole_part / 2 * act_bytes + 4 * static_cast<std::uint64_t>(vocab) / tp : 0;
  const std::uint64_t stage_layers = static_cast<std::uint64_t>(stage_split().layers);
  switch (recompute.mode()) {
    case Recompute::None: return tokens * (stage_layers * block * act_bytes + head);
    case Recompute::Full:
      // Only each block's input is kept, plus one block's full set while that block is
      // recomputed in backward.
      return tokens * ((stage_layers * (sp ? h / tp : h) + block) * act_bytes + head);
    case Recompute::SelectiveOp: break;
  }
  // Each block keeps its input, the outputs of the projections the policy saves (a
  // row-parallel one whole on every rank) and the attention kernel's output and fp32
  // log-sum-exp (a head's row each); plus one block's full set while it is recomputed.
  const std::vector<BlockLinear> all = block_linears();
  const std::vector<bool> again = selective_op_recomputes(*this);
  std::uint64_t saved_whole = h, saved_split = h;  // the block input; the attention output
  for (std::size_t i = 0; i < all.size(); ++i)
    if (!again[i]) (all[i].row_parallel ? saved_whole : saved_split) += static_cast<std::uint64_t>(all[i].out);
  const std::uint64_t saved =
      ((sp ? saved_whole / tp : saved_whole) + saved_split / tp) * act_bytes + 4 * static_cast<std::uint64_t>(heads) / tp;
  return tokens * (stage_layers * saved + block * act_bytes + head);
}

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ModelShape, name, layers, hidden, heads, kv_heads, ffn, vocab, seq,
                                   learned_positions, biases, qkv_biases, source, notes, tied_head, tensor_parallel)

nlohmann::json ModelShape::to_json() const {
  nlohmann::json out = *this;  // the fields under their own names, then what is derived from them
  out.update({{"mlp", mlp == Mlp::Gelu ? "gelu" : "swiglu"},
              {"norm", norm == Norm::LayerNorm ? "layernorm" : "rmsnorm"},
              {"architecture", describe()},
              {"units_from", gpt ? "model::ParamLayout (as the runtime)" : "shape"},
              {"pipeline_stage", stage},
              {"pipeline_stages", stages},
              {"params", num_params()},
              {"matmul_params", matmul_params()}});
  return out;
}

}  // namespace strata::plan
