#include "train/config.hpp"

#include "base/precision.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "base/suggest.hpp"
#include "base/toml.hpp"
#include "base/dtype.hpp"
#include "model/hf_config.hpp"
#include "optim/loss_scaler.hpp"
#include "parallel/pipeline.hpp"

namespace strata::train {

namespace {

// A float as the shortest decimal that reads back as it (0.0006, not 0.0006000000284984708).
nlohmann::json recorded(float f) { return std::stod(fmt::format("{}", f)); }
template <class T>
nlohmann::json recorded(const T& value) { return value; }

// A setting's field of TrainConfig and the rule that reads it; model.* keys have none, as
// build_config applies them as one model.
struct Entry {
  SettingInfo info;
  std::function<void(TrainConfig&, const std::string& key, const SettingValue&)> apply;
  std::function<nlohmann::json(const TrainConfig&)> record;
  Entry(SettingInfo i) : info(std::move(i)) {}
  template <class Member, class Rule>
  Entry(SettingInfo i, Member TrainConfig::*field, Rule rule)
      : info(std::move(i)),
        apply([=](TrainConfig& c, const std::string& k, const SettingValue& v) { c.*field = rule(k, v); }),
        record([=](const TrainConfig& c) { return recorded(c.*field); }) {}
  // A field of one of TrainConfig's parts (adamw, shard).
  template <class Part, class Member, class Rule>
  Entry(SettingInfo i, Part TrainConfig::*part, Member Part::*field, Rule rule)
      : info(std::move(i)),
        apply([=](TrainConfig& c, const std::string& k, const SettingValue& v) { c.*part.*field = rule(k, v); }),
        record([=](const TrainConfig& c) { return recorded(c.*part.*field); }) {}
};

std::int64_t as_int(const std::string& key, const SettingValue& v) {
  if (auto* i = std::get_if<std::int64_t>(&v)) return *i;
  throw Error(fmt::format("{}: must be an integer", key));
}

// Sizes and counts: a value given explicitly must be positive (0 never means "default" there).
template <class T, std::int64_t kLeast>
T at_least(const std::string& key, const SettingValue& v) {
  const std::int64_t i = as_int(key, v);
  if (i < kLeast)
    throw Error(fmt::format("{} = {}: must {}", key, i, kLeast > 0 ? "be positive" : "not be negative"));
  if constexpr (sizeof(T) < sizeof(std::int64_t))
    if (i > std::numeric_limits<T>::max()) throw Error(fmt::format("{} = {}: too large", key, i));
  return static_cast<T>(i);
}
constexpr auto positive_int = at_least<int, 1>;
constexpr auto positive_int64 = at_least<std::int64_t, 1>;
constexpr auto non_negative_int = at_least<int, 0>;
constexpr auto non_negative_int64 = at_least<std::int64_t, 0>;
float as_float(const std::string& key, const SettingValue& v) {
  double d;
  if (auto* f = std::get_if<double>(&v))
    d = *f;
  else if (auto* i = std::get_if<std::int64_t>(&v))
    d = static_cast<double>(*i);
  else
    throw Error(fmt::format("{}: must be a number", key));
  if (!std::isfinite(d)) throw Error(fmt::format("{} = {}: must be finite", key, d));
  return static_cast<float>(d);
}
std::string as_string(const std::string& key, const SettingValue& v) {
  auto* s = std::get_if<std::string>(&v);
  if (!s) throw Error(fmt::format("{}: must be a string", key));
  // Settings are recorded as JSON (summary.json, checkpoint manifests), which holds only UTF-8;
  // a flag may carry any bytes.
  try {
    (void)nlohmann::json(*s).dump();
  } catch (const nlohmann::json::type_error&) {
    throw Error(fmt::format("{}: not UTF-8 text", key));
  }
  return *s;
}

// comm.piece_kib: 0 (whole messages) up to the largest piece a message can be.
std::int64_t piece_kib(const std::string& key, const SettingValue& v) {
  const std::int64_t i = as_int(key, v);
  constexpr std::int64_t most = comm::kMaxPieceBytes / 1024;
  if (i < 0 || i > most)
    throw Error(fmt::format("{} = {}: must lie in [0, {}] (KiB a piece; 0: whole messages)", key, i, most));
  return i;
}

// A wire format, refused here when unknown so that an error names what the user gave.
std::string wire(const std::string& key, const SettingValue& v) {
  std::string s = as_string(key, v);
  parse_dtype(s, key);
  return s;
}

// shard.pp_layers: empty means --pp equal stages.
std::vector<int> stage_layers(const std::string& key, const SettingValue& v) {
  const std::string text = as_string(key, v);
  return text.empty() ? std::vector<int>{} : parallel::parse_stage_layers(key, text);
}

const std::vector<Entry>& entries() {
  using K = SettingKind;
  using AdamW = optim::AdamWConfig;
  using Shard = parallel::ShardOptions;
  static const std::vector<Entry> table = {
      {{"model.preset", "--model", K::String,
        "model preset: tiny, mini, small, gpt2-124m, llama-tiny, llama-small, tinyllama-1.1b, llama2-7b; or a Hugging "
        "Face config.json (or its folder) of a GPT-2 or Llama model"}},
      {{"model.family", "--model-family", K::String, "gpt2 or llama (a preset's own unless given)"}},
      {{"model.n_layer", "--n-layer", K::Int, "transformer blocks"}},
      {{"model.n_head", "--n-head", K::Int, "attention heads (must divide n_embd)"}},
      {{"model.n_kv_head", "--n-kv-head", K::Int, "llama: K/V heads (must divide n_head; 0 in a preset: n_head)"}},
      {{"model.n_embd", "--n-embd", K::Int, "hidden size"}},
      {{"model.ffn_hidden", "--ffn-hidden", K::Int,
        "llama: SwiGLU width (0 in a preset: 8/3 n_embd rounded up to a multiple of 256)"}},
      {{"model.rope_theta", "--rope-theta", K::Float, "llama: rotary embedding base"}},
      {{"model.seq_len", "--seq-len", K::Int, "longest sequence the model takes (rows of wpe)"}},
      {{"model.vocab_size", "--vocab-size", K::Int, "vocabulary size (the padded size follows unless given)"}},
      {{"model.padded_vocab_size", "--padded-vocab-size", K::Int, "rows of wte, >= vocab_size"}},

      {{"data.train", "--train-data", K::String, "training tokens (.bin, llm.c format)"},
       &TrainConfig::train_data, as_string},
      {{"data.val", "--val-data", K::String, "validation tokens (.bin); none: no validation"},
       &TrainConfig::val_data, as_string},

      {{"optim.lr", "--lr", K::Float, "peak learning rate"}, &TrainConfig::lr, as_float},
      {{"optim.min_lr", "--min-lr", K::Float, "learning rate at the end of the cosine decay"},
       &TrainConfig::min_lr, as_float},
      {{"optim.warmup", "--warmup", K::Int, "linear warm-up steps"}, &TrainConfig::warmup, non_negative_int64},
      {{"optim.weight_decay", "--weight-decay", K::Float, "decoupled weight decay (matrices and embeddings)"},
       &TrainConfig::adamw, &AdamW::weight_decay, as_float},
      {{"optim.beta1", "--beta1", K::Float, "Adam beta1"}, &TrainConfig::adamw, &AdamW::beta1, as_float},
      {{"optim.beta2", "--beta2", K::Float, "Adam beta2"}, &TrainConfig::adamw, &AdamW::beta2, as_float},
      {{"optim.eps", "--eps", K::Float, "Adam epsilon"}, &TrainConfig::adamw, &AdamW::eps, as_float},
      {{"optim.grad_clip", "--grad-clip", K::Float, "clip the global gradient norm to this (0: off)"},
       &TrainConfig::adamw, &AdamW::grad_clip, as_float},

      {{"train.batch", "--batch", K::Int, "sequences per micro-batch (per rank)"}, &TrainConfig::batch, positive_int},
      {{"train.seq", "--seq", K::Int, "tokens per training sequence"}, &TrainConfig::seq, positive_int},
      {{"train.grad_accum", "--grad-accum", K::Int, "micro-batches per optimizer step"},
       &TrainConfig::grad_accum, positive_int},
      {{"train.steps", "--steps", K::Int, "optimizer steps in the whole run"}, &TrainConfig::steps, positive_int64},
      {{"train.seed", "--seed", K::Int, "initialisation and data-order seed"}, &TrainConfig::seed, non_negative_int64},
      {{"train.threads", "--threads", K::Int, "OpenMP threads"}, &TrainConfig::threads, positive_int},
      {{"train.device", "--device", K::String,
        "compute device: cpu, or cuda (a GPU a process; sharded under mpirun over NCCL; docs/gpu.md)"},
       &TrainConfig::device, as_string},
      {{"train.precision", "--precision", K::String,
        "matmul inputs: fp32, or bf16 with fp32 accumulation and fp32 master weights (cuda only)"},
       &TrainConfig::precision, as_string},
      {{"train.val_every", "--val-every", K::Int, "validate every N steps (0: only at the end)"},
       &TrainConfig::val_every, non_negative_int64},
      {{"train.val_batches", "--val-batches", K::Int, "micro-batches per validation (per rank)"},
       &TrainConfig::val_batches, positive_int},
      {{"train.save_every", "--save-every", K::Int, "checkpoint every N steps (0: only at the end)"},
       &TrainConfig::save_every, non_negative_int64},
      {{"train.keep_last", "--keep-last", K::Int,
        "checkpoints to keep (0: all); older ones go only once a newer one is complete"},
       &TrainConfig::keep_last, non_negative_int},
      {{"train.max_skipped_steps", "--max-skipped-steps", K::Int,
        "steps in a row with a non-finite loss or gradient norm (skipped) that stop the run"},
       &TrainConfig::max_skipped_steps, positive_int},
      {{"train.recompute", "--recompute", K::String,
        "none (keep activations for backward) or full (also a bare --recompute: keep each block's input, "
        "recompute the block in backward: the same numbers for about one more forward)",
        "full"}, &TrainConfig::recompute, as_string},
      {{"train.loss_scale", "--loss-scale", K::String,
        "auto (dynamic when gradients cross an fp16 wire), dynamic, or off"}, &TrainConfig::loss_scale, as_string},
      {{"train.initial_loss_scale", "--initial-loss-scale", K::Float, "first dynamic loss scale (a power of two)"},
       &TrainConfig::initial_loss_scale, as_float},
      {{"train.loss_scale_window", "--loss-scale-window", K::Int,
        "good steps in a row after which the dynamic loss scale doubles"},
       &TrainConfig::loss_scale_window, positive_int64},
      {{"train.log_every", "--log-every", K::Int, "steps between progress lines when not on a terminal"},
       &TrainConfig::log_every, positive_int64},
      {{"train.out", "--out", K::String, "output folder: metrics.jsonl, summary.json, ckpt/"},
       &TrainConfig::out_dir, as_string},
      {{"train.collective_timeout", "--collective-timeout", K::Float,
        "seconds a sharded run waits for a peer before aborting every rank (a rank died or stalls)"},
       &TrainConfig::collective_timeout, as_float},
      {{"train.flight_ops", "--flight-ops", K::Int,
        "ops each rank of a sharded run keeps in its flight recorder, dumped to OUT/flight/ on a timeout, a fatal "
        "error or SIGUSR2 (0: off)"}, &TrainConfig::flight_ops, non_negative_int},
      {{"train.flight_dump", "--flight-dump", K::String,
        "when the flight recorder dumps: on-fault (a timeout, a fatal error, SIGUSR2) or always (also at exit)"},
       &TrainConfig::flight_dump, as_string},

      {{"comm.piece_kib", "--piece-kib", K::Int,
        "strata's host collectives (over MPI) put each message on the wire in pieces of about this many KiB, kept "
        "in flight while earlier ones are reduced and forwarded (as NCCL's chunks; 0: whole messages); the bytes, "
        "messages and results are the same at any size"}, &TrainConfig::piece_kib, piece_kib},

      {{"shard.strategy", "--strategy", K::String,
        "run sharded under mpirun: ddp, zero1, zero2, zero3, hsdp, zeropp, topo, or a framework's name for one "
        "(fsdp/full_shard, hybrid_shard, shard_grad_op, no_shard, zero-1/2/3, zero++)"},
       &TrainConfig::shard, &Shard::strategy, as_string},
      {{"shard.topology", "--topology", K::String, "tiers of the cluster: host, frontier, dgx-a100, dgx-h100, or a "
                                                   "TOML file"}, &TrainConfig::shard, &Shard::topology, as_string},
      {{"shard.shard", "--shard", K::String, "tier of each state on top of the strategy, e.g. W=gpu,G=node,OS=cluster"},
       &TrainConfig::shard, &Shard::shard, as_string},
      {{"shard.secondary", "--secondary", K::String, "tier of the secondary weight copy for backward (hpZ), or none"},
       &TrainConfig::shard, &Shard::secondary, as_string},
      {{"shard.weight_wire", "--weight-wire", K::String, "weight gathers: fp32, bf16, fp16, int8"},
       &TrainConfig::shard, &Shard::weight_wire, wire},
      {{"shard.grad_wire", "--grad-wire", K::String, "per-micro-batch gradient reduction: fp32, bf16, fp16 (the loss is then scaled), int8, int4"},
       &TrainConfig::shard, &Shard::grad_wire, wire},
      {{"shard.step_grad_wire", "--step-grad-wire", K::String,
        "once-per-step gradient reduction across the wider tiers: fp32, bf16, fp16, int8, int4"},
       &TrainConfig::shard, &Shard::step_grad_wire, wire},
      {{"shard.block_size", "--block-size", K::Int, "elements per scale of int8/int4 wires"},
       &TrainConfig::shard, &Shard::block_size, positive_int},
      {{"shard.prefetch", "--prefetch", K::Int, "units gathered ahead of the one computing"},
       &TrainConfig::shard, &Shard::prefetch, non_negative_int},
      {{"shard.bucket_bytes", "--bucket-bytes", K::Int,
        "replicated gradients (ddp, zero1): reduce them in buckets of at most this many bytes while the step's "
        "last backward runs (25 MiB as PyTorch DDP's; 0: after backward, unit by unit)"},
       &TrainConfig::shard, &Shard::bucket_bytes, non_negative_int64},
      {{"shard.first_bucket_bytes", "--first-bucket-bytes", K::Int,
        "the first of those buckets, which backward fills first, holds at most this many bytes, so its reduction "
        "overlaps the rest of backward (1 MiB as PyTorch DDP's first bucket; at most --bucket-bytes)"},
       &TrainConfig::shard, &Shard::first_bucket_bytes, non_negative_int64},
      {{"shard.tp", "--tp", K::Int,
        "tensor-parallel degree (Megatron splits of GPT-2 and Llama): that many consecutive ranks of --tp-tier hold one "
        "replica; sharding runs over the ranks of each TP index"}, &TrainConfig::shard, &Shard::tp, positive_int},
      {{"shard.tp_tier", "--tp-tier", K::String, "the tier the tensor-parallel groups lie in"},
       &TrainConfig::shard, &Shard::tp_tier, as_string},
      {{"shard.pp", "--pp", K::Int,
        "pipeline stages (1F1B over the step's micro-batches, --grad-accum; strata plan: --accum, or a +ppN "
        "suffix on a --strategy name): that many consecutive domains of --pp-tier hold one stage each, the blocks "
        "split equally unless --pp-layers"}, &TrainConfig::shard, &Shard::pp, positive_int},
      {{"shard.pp_tier", "--pp-tier", K::String, "the tier the pipeline stages cross; empty: the outermost"},
       &TrainConfig::shard, &Shard::pp_tier, as_string},
      {{"shard.pp_layers", "--pp-layers", K::String,
        "the blocks of each pipeline stage, comma-separated (1,3: one block on the first of two stages, three on "
        "the second), summing to the model's; empty: --pp equal stages"},
       &TrainConfig::shard, &Shard::pp_layers, stage_layers},
      {{"shard.emulate_scale", "--emulate-scale", K::Float,
        "with --emulate-links: multiply every emulated link time (0.1 = links ten times faster)"},
       &TrainConfig::shard, &Shard::emulate_scale, as_float},
  };
  return table;
}

const Entry* find_entry(std::string_view key) {
  for (auto& e : entries())
    if (key == e.info.key) return &e;
  return nullptr;
}

}  // namespace

const std::vector<SettingInfo>& setting_infos() {
  static const std::vector<SettingInfo> infos = [] {
    std::vector<SettingInfo> v;
    for (auto& e : entries()) v.push_back(e.info);
    return v;
  }();
  return infos;
}

bool shapes_spec(const SettingInfo& info) {
  const std::string_view key = info.key;
  return key.starts_with("shard.") && key != "shard.strategy" && key != "shard.topology" &&
         key != "shard.emulate_scale";
}

namespace {
// The defaults with `settings`, all of `section`, applied by the table's rules; errors name a
// setting by its flag.
TrainConfig apply_section(const Settings& settings, std::string_view section) {
  TrainConfig c;
  for (auto& [key, value] : settings) {
    const Entry* e = find_entry(key);
    if (!e || !key.starts_with(fmt::format("{}.", section)))
      throw Error(fmt::format("{}: not a {} setting", key, section));
    e->apply(c, e->info.flag, value);
  }
  return c;
}
}  // namespace

parallel::ShardOptions build_shard_options(const Settings& settings) { return apply_section(settings, "shard").shard; }

std::size_t build_piece_bytes(const Settings& settings) { return apply_section(settings, "comm").piece_bytes(); }

const SettingInfo& setting_info(std::string_view key) {
  const Entry* e = find_entry(key);
  if (!e) throw Error(fmt::format("{}: unknown setting", key));
  return e->info;
}

Settings parse_config_toml(std::string_view text, std::string_view origin) {
  const toml::table root = parse_toml(text, origin);
  Settings out;
  for (auto&& [section, node] : root) {
    const toml::table* tbl = node.as_table();
    if (!tbl) throw Error(fmt::format("{}: {}: expected a section ([{}]), not a value", origin, section.str(), section.str()));
    for (auto&& [name, value] : *tbl) {
      std::string key = fmt::format("{}.{}", section.str(), name.str());
      const Entry* e = find_entry(key);
      if (!e) {
        std::vector<std::string> keys;
        for (const Entry& known : entries()) keys.push_back(known.info.key);
        throw Error(fmt::format("{}: {}: unknown key{}", origin, key, did_you_mean(key, keys)));
      }
      switch (e->info.kind) {
        case SettingKind::Int:
          if (!value.is_integer()) throw Error(fmt::format("{}: {}: must be an integer", origin, key));
          out[key] = value.as_integer()->get();
          break;
        case SettingKind::Float:
          if (value.is_integer())
            out[key] = static_cast<double>(value.as_integer()->get());
          else if (value.is_floating_point())
            out[key] = value.as_floating_point()->get();
          else
            throw Error(fmt::format("{}: {}: must be a number", origin, key));
          break;
        case SettingKind::String:
          if (!value.is_string()) throw Error(fmt::format("{}: {}: must be a string", origin, key));
          out[key] = value.as_string()->get();
          break;
      }
    }
  }
  return out;
}

Settings read_config_file(const std::filesystem::path& path) {
  return parse_config_toml(read_file_text(path), path.string());
}

model::ModelConfig build_model(const Settings& settings, std::string* preset_name) {
  std::string name = "tiny";
  if (auto it = settings.find("model.preset"); it != settings.end()) name = as_string(it->first, it->second);
  const std::vector<std::string> presets = model::ModelConfig::preset_names();
  const bool config_json =
      std::find(presets.begin(), presets.end(), name) == presets.end() && model::names_a_config_path(name);
  nlohmann::json model =
      (config_json ? model::to_gpt_config(model::read_hf_config(name)) : model::ModelConfig::preset(name)).to_json();
  bool padded_given = false, vocab_given = false;
  for (auto& [key, value] : settings) {
    if (!key.starts_with("model.") || key == "model.preset") continue;
    if (!find_entry(key)) throw Error(fmt::format("{}: unknown setting", key));
    if (key == "model.family")
      model["family"] = as_string(key, value);
    else if (key == "model.rope_theta")
      model["rope_theta"] = as_float(key, value);
    else
      model[key.substr(6)] = positive_int(key, value);
    padded_given |= key == "model.padded_vocab_size";
    vocab_given |= key == "model.vocab_size";
  }
  if (vocab_given && !padded_given) model["padded_vocab_size"] = model::pad_vocab(model["vocab_size"].get<int>());
  if (preset_name) *preset_name = name;
  return model::ModelConfig::from_json(model);
}

TrainConfig build_config(const Settings& settings) {
  TrainConfig c;
  for (auto& [key, value] : settings)
    if (!find_entry(key)) throw Error(fmt::format("{}: unknown setting", key));

  c.model = build_model(settings, &c.model_name);

  for (auto& [key, value] : settings) {
    const Entry* e = find_entry(key);
    if (e->apply) e->apply(c, key, value);
  }
  // The decay floor follows the peak unless given, so --lr alone never conflicts with it.
  if (!settings.contains("optim.min_lr")) c.min_lr = c.lr * 0.1f;
  c.validate();
  return c;
}

void TrainConfig::validate() const {
  model.validate();
  auto positive = [](const char* key, std::int64_t v) {
    if (v <= 0) throw Error(fmt::format("{} = {}: must be positive", key, v));
  };
  positive("train.batch", batch);
  positive("train.grad_accum", grad_accum);
  positive("train.steps", steps);
  positive("train.val_batches", val_batches);
  positive("train.log_every", log_every);
  if (seq < 0) throw Error(fmt::format("train.seq = {}: must be positive", seq));
  if (seq_len() > model.seq_len)
    throw Error(fmt::format("train.seq = {} exceeds model.seq_len = {}: raise model.seq_len (--seq-len {}, or "
                            "seq_len in [model]) or shorten train.seq",
                            seq_len(), model.seq_len, seq_len()));
  if (threads < 0) throw Error(fmt::format("train.threads = {}: must be positive", threads));
  if (!(lr > 0)) throw Error(fmt::format("optim.lr = {}: must be positive", lr));
  if (!(min_lr >= 0 && min_lr <= lr))
    throw Error(fmt::format("optim.min_lr = {}: must lie in [0, optim.lr = {}]", min_lr, lr));
  if (warmup < 0) throw Error(fmt::format("optim.warmup = {}: must not be negative", warmup));
  if (!(adamw.weight_decay >= 0))
    throw Error(fmt::format("optim.weight_decay = {}: must not be negative", adamw.weight_decay));
  if (!(adamw.beta1 >= 0 && adamw.beta1 < 1)) throw Error(fmt::format("optim.beta1 = {}: must lie in [0, 1)", adamw.beta1));
  if (!(adamw.beta2 >= 0 && adamw.beta2 < 1)) throw Error(fmt::format("optim.beta2 = {}: must lie in [0, 1)", adamw.beta2));
  if (!(adamw.eps > 0)) throw Error(fmt::format("optim.eps = {}: must be positive", adamw.eps));
  if (!(adamw.grad_clip >= 0)) throw Error(fmt::format("optim.grad_clip = {}: must not be negative", adamw.grad_clip));
  if (train_data.empty()) throw Error("data.train: missing (give --train-data or [data] train in the config file)");
  if (val_every < 0) throw Error(fmt::format("train.val_every = {}: must not be negative", val_every));
  if (save_every < 0) throw Error(fmt::format("train.save_every = {}: must not be negative", save_every));
  if (save_every > 0 && out_dir.empty()) throw Error("train.save_every: checkpoints need an output folder (--out)");
  if (keep_last < 0) throw Error(fmt::format("train.keep_last = {}: must not be negative", keep_last));
  if (max_skipped_steps <= 0)
    throw Error(fmt::format("train.max_skipped_steps = {}: must be positive", max_skipped_steps));
  if (recompute != "none" && recompute != "full")
    throw Error(fmt::format("train.recompute = '{}': must be none or full", recompute));
  precision_named(precision, "train.precision");
  if (loss_scale != "auto" && loss_scale != "dynamic" && loss_scale != "off")
    throw Error(fmt::format("train.loss_scale = '{}': must be auto, dynamic or off", loss_scale));
  optim::LossScaler::validate(initial_loss_scale, loss_scale_window);
  if (!(collective_timeout > 0))
    throw Error(fmt::format("train.collective_timeout = {}: must be positive", collective_timeout));
  comm::parse_flight_dump(flight_dump);
  if (!(shard.emulate_scale > 0))
    throw Error(fmt::format("shard.emulate_scale = {}: must be positive", shard.emulate_scale));
  if (stop_after < 0 || stop_after > steps)
    throw Error(fmt::format("--stop-after {}: must lie in [1, train.steps = {}]", stop_after, steps));
}

// Every setting under its key, recorded by the table (summary.json, checkpoints, --help's defaults).
nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j = {{"model", {{"preset", model_name}, {"config", model.to_json()}}}};
  for (const Entry& e : entries()) {
    if (!e.record) continue;
    const std::string_view key = e.info.key;
    const std::size_t dot = key.find('.');
    j[key.substr(0, dot)][key.substr(dot + 1)] = e.record(*this);
  }
  j["train"]["seq"] = seq_len();
  j["shard"]["sequence_parallel"] = shard.sequence_parallel;
  j["shard"]["emulate_links"] = shard.emulate_links;
  return j;
}

}  // namespace strata::train
