// strata sample: text from a trained model (a checkpoint, or a safetensors file that `strata
// export` wrote) through the KV-cache decoder (model/decoder.hpp) and the sampler
// (model/sampling.hpp).
#include <omp.h>

#include <chrono>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/aligned.hpp"
#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/fileio.hpp"
#include "cli/checkpoints.hpp"
#include "cli/command.hpp"
#include "data/safetensors.hpp"
#include "data/tokenizer.hpp"
#include "data/utf8.hpp"
#include "model/decoder.hpp"
#include "model/sampling.hpp"
#include "train/checkpoint.hpp"
#include "train/config.hpp"

namespace strata::cli {
namespace {

// What an empty prompt starts from: the start of a line, as the training text's lines begin.
constexpr std::string_view kEmptyPromptText = "\n";
constexpr int kDefaultNewTokens = 100;

struct SampleArgs {
  std::string checkpoint, safetensors, model, config, tokenizer;
  std::string prompt, prompt_file;
  int max_new_tokens = kDefaultNewTokens;
  CLI::Option* max_new_tokens_option = nullptr;
  model::SamplingOptions sampling;
  std::uint64_t seed = 1;
  int threads = 0;
  bool json = false;
};

// The weights and their model: a checkpoint records its model, and so does a safetensors file
// that `strata export` wrote (its metadata); for another's, --model and/or --config (the run's
// config file, its [model] section) describe it, and they win over the metadata.
struct Weights {
  model::ModelConfig config;
  AlignedBuffer<float> params;
  std::string source;
};

Weights load_weights(const SampleArgs& a) {
  if (a.checkpoint.empty() == a.safetensors.empty())
    throw Error("sample: give one of --checkpoint DIR (a run's checkpoint or output folder) or --safetensors FILE");
  Weights w;
  if (!a.checkpoint.empty()) {
    if (!a.model.empty() || !a.config.empty())
      throw Error(fmt::format("sample: {}: a checkpoint records its model; --model and --config go with --safetensors",
                              a.model.empty() ? "--config" : "--model"));
    const std::filesystem::path dir = intact_checkpoint("sample", a.checkpoint);
    const train::Checkpoint ckpt = train::Checkpoint::open(dir);
    w.config = ckpt.info().model;
    const model::ParamLayout layout(w.config);
    w.params.resize(layout.total_floats());
    ckpt.read(0, layout.total_floats(), w.params.data(), nullptr, nullptr);
    w.source = dir.string();
    return w;
  }
  if (a.model.empty() && a.config.empty()) {
    const std::optional<model::ModelConfig> recorded = data::safetensors_model(data::SafetensorsFile(a.safetensors));
    if (!recorded)
      throw Error(fmt::format("sample: --safetensors {}: the file carries no model config; give --model PRESET or "
                              "--config FILE (the config the run was trained with)",
                              a.safetensors));
    w.config = *recorded;
  } else {
    train::Settings settings = a.config.empty() ? train::Settings{} : train::read_config_file(a.config);
    if (!a.model.empty()) settings["model.preset"] = a.model;  // the flag wins over the file, as in train
    w.config = train::build_model(settings);
  }
  const model::ParamLayout layout(w.config);
  w.params.resize(layout.total_floats());
  data::import_hf_safetensors(layout, a.safetensors, w.params.data());
  w.source = a.safetensors;
  return w;
}

// The prompt's text; refused, naming where it came from and the byte, unless valid UTF-8.
std::string read_prompt(const SampleArgs& a) {
  if (!a.prompt.empty() && !a.prompt_file.empty()) throw Error("sample: give --prompt or --prompt-file, not both");
  const std::string text = a.prompt_file.empty() ? a.prompt : read_file_text(a.prompt_file);
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = data::utf8_sequence_length(text, i);
    if (n == 0)
      throw Error(fmt::format("sample: {}: not valid UTF-8 (byte {} of {}, 0x{:02x})",
                              a.prompt_file.empty() ? "--prompt" : "--prompt-file " + a.prompt_file, i, text.size(),
                              static_cast<unsigned char>(text[i])));
    i += n;
  }
  return text;
}

void run_sample(SampleArgs a) {
  if (a.threads < 0) throw Error(fmt::format("sample: --threads = {}: must be positive", a.threads));
  if (a.threads > 0) omp_set_num_threads(a.threads);  // OpenBLAS (OpenMP build) follows
  a.sampling.validate();
  const std::string prompt = read_prompt(a);
  const Weights w = load_weights(a);
  const model::ModelConfig& cfg = w.config;
  const std::unique_ptr<data::Tokenizer> tokenizer = data::make_tokenizer(a.tokenizer);
  if (tokenizer->vocab_size() > cfg.vocab_size)
    throw Error(fmt::format("sample: --tokenizer: tokenizer '{}' has {} ids, more than the model's vocab_size = {}",
                            tokenizer->name(), tokenizer->vocab_size(), cfg.vocab_size));

  // The last new token is never fed back: the prompt and N - 1 new tokens take the positions.
  if (a.max_new_tokens_option->count() == 0) a.max_new_tokens = std::min(kDefaultNewTokens, cfg.seq_len);
  if (a.max_new_tokens <= 0 || a.max_new_tokens > cfg.seq_len)
    throw Error(fmt::format("sample: --max-new-tokens = {}: must be in [1, model.seq_len = {}]", a.max_new_tokens,
                            cfg.seq_len));
  std::vector<std::int32_t> tokens = tokenizer->encode(prompt.empty() ? kEmptyPromptText : prompt);
  const std::size_t room = static_cast<std::size_t>(cfg.seq_len) + 1 - a.max_new_tokens;
  const std::size_t prompt_tokens = tokens.size();
  if (tokens.size() > room) {
    tokens.erase(tokens.begin(), tokens.end() - static_cast<std::ptrdiff_t>(room));
    fmt::print(stderr,
               "strata: sample: the prompt's {} tokens and --max-new-tokens = {} exceed model.seq_len = {}: "
               "keeping the prompt's last {} tokens\n",
               prompt_tokens, a.max_new_tokens, cfg.seq_len, room);
  }

  const auto decoder = model::make_decoder(cfg, cfg.seq_len);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::int32_t> drawn = model::generate(*decoder, w.params.data(), tokens, a.max_new_tokens,
                                                          tokenizer->vocab_size(), a.sampling, a.seed);
  const double seconds = seconds_since(t0);
  std::vector<std::int32_t> all = tokens;
  all.insert(all.end(), drawn.begin(), drawn.end());
  // Decoded together: a character may span the prompt's last token and the first new one.
  const std::string text = data::to_valid_utf8(tokenizer->decode(all));
  if (a.json) {
    const nlohmann::json j = {{"source", w.source},
                              {"model", cfg.to_json()},
                              {"tokenizer", tokenizer->name()},
                              {"seed", a.seed},
                              {"temperature", a.sampling.temperature},
                              {"top_k", a.sampling.top_k},
                              {"top_p", a.sampling.top_p},
                              {"prompt_tokens", prompt_tokens},
                              {"prompt_tokens_kept", tokens.size()},
                              {"new_tokens", drawn},
                              {"completion", data::to_valid_utf8(tokenizer->decode(drawn))},
                              {"text", text},
                              {"seconds", seconds}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{}\n", text);
  }
}

CommandRegistrar registrar(22, [](CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  CLI::App* cmd = app.add_subcommand("sample", "Generate text from a trained model with a KV cache");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint folder, or an output folder (its newest intact checkpoint)");
  cmd->add_option("--safetensors", a->safetensors, "weights as `strata export` writes them (their model is in the metadata; another's needs --model or --config)");
  cmd->add_option("--model", a->model, "with --safetensors: the model preset");
  cmd->add_option("--config", a->config, "with --safetensors: the run's config file ([model] section; --model wins)");
  cmd->add_option("--prompt", a->prompt, "text to continue (UTF-8; empty: start from a newline)");
  cmd->add_option("--prompt-file", a->prompt_file, "read the prompt from this file");
  a->max_new_tokens_option =
      cmd->add_option("--max-new-tokens", a->max_new_tokens,
                      fmt::format("tokens to generate, at most model.seq_len (default {}, or seq_len if fewer)",
                                  kDefaultNewTokens));
  cmd->add_option("--temperature", a->sampling.temperature, "softmax temperature; 0: greedy")->capture_default_str();
  cmd->add_option("--top-k", a->sampling.top_k, "draw among the k most likely tokens; 0: all")->capture_default_str();
  cmd->add_option("--top-p", a->sampling.top_p, "draw among the most likely tokens reaching this probability (0, 1]")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "the same seed gives the same text")->capture_default_str();
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer folder (default: bytes)");
  cmd->add_option("--threads", a->threads, "OpenMP threads (default: OMP_NUM_THREADS or all cores)");
  cmd->add_flag("--json", a->json, "print one JSON object: text, new token ids, settings");
  cmd->callback([a] { run_sample(*a); });
});

}  // namespace
}  // namespace strata::cli
