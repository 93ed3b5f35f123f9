// strata bench: the benchmark group, and `bench step`, the speed of a full training step.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/clock.hpp"
#include "base/cpu.hpp"
#include "base/error.hpp"
#include "cli/command.hpp"
#include "cli/format.hpp"
#include "device/device.hpp"
#include "train/config.hpp"
#include "train/local_engine.hpp"

namespace strata::cli {

namespace {

struct ModelOverride {
  const char* key;
  CLI::Option* option = nullptr;
  std::int64_t value = 0;
};

struct StepArgs {
  std::string model = "small";
  ModelOverride overrides[7] = {{"model.n_layer"}, {"model.n_head"},   {"model.n_embd"},    {"model.seq_len"},
                                {"model.vocab_size"}, {"model.n_kv_head"}, {"model.ffn_hidden"}};
  int batch = 4, seq = 0, threads = 0, steps = 10, warmup = 3;
  bool json = false;
  bool recompute = false;
  std::string device = "cpu", precision = "fp32";
};

// Step times of one engine, in the order they ran.
struct StepTimes {
  std::vector<double> s;
  double total() const { return std::accumulate(s.begin(), s.end(), 0.0); }
  double mean() const { return total() / static_cast<double>(s.size()); }
  double median() const {
    std::vector<double> sorted = s;
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }
  double min() const { return *std::min_element(s.begin(), s.end()); }
  nlohmann::json to_json() const { return {{"mean", mean()}, {"median", median()}, {"min", min()}}; }
};

void run_bench_step(const StepArgs& a) {
  train::Settings settings{{"model.preset", a.model}};
  for (auto& o : a.overrides)
    if (o.option->count() > 0) settings[o.key] = o.value;
  const model::ModelConfig config = train::build_model(settings);
  const int seq = a.seq > 0 ? a.seq : config.seq_len;
  auto positive = [](const char* flag, int v) {
    if (v <= 0) throw strata::Error(fmt::format("bench step: {} = {}: must be positive", flag, v));
  };
  positive("--batch", a.batch);
  positive("--seq", seq);
  positive("--steps", a.steps);
  if (a.warmup < 0) throw strata::Error(fmt::format("bench step: --warmup = {}: must not be negative", a.warmup));
  if (seq > config.seq_len)
    throw strata::Error(fmt::format("bench step: --seq = {} exceeds model.seq_len = {}", seq, config.seq_len));
  if (a.threads < 0) throw strata::Error(fmt::format("bench step: --threads = {}: must be positive", a.threads));
  if (a.threads > 0) omp_set_num_threads(a.threads);  // OpenBLAS (OpenMP build) follows

  // With --recompute, a second engine recomputes activations; the two take turns step by step,
  // so drifts of the machine's speed fall on both alike and their ratio comes from one run.
  device::Device& dev = device::device_named(a.device, "--device");
  const Precision precision = precision_named(a.precision, "--precision");
  if (dev.host_visible() && precision != Precision::F32)
    throw strata::Error(fmt::format("bench step: --precision {}: the {} device computes in fp32; bf16 needs --device "
                                    "cuda",
                                    a.precision, dev.name()));
  std::vector<std::unique_ptr<train::LocalEngine>> engines;
  engines.push_back(std::make_unique<train::LocalEngine>(config, a.batch, seq, /*seed=*/1, false, dev, precision));
  if (a.recompute)
    engines.push_back(std::make_unique<train::LocalEngine>(config, a.batch, seq, 1, true, dev, precision));
  const std::size_t n = static_cast<std::size_t>(a.batch) * seq;
  std::vector<std::int32_t> tokens(n), targets(n);
  std::mt19937_64 rng(42);  // the standard fixes mt19937_64's output: the same tokens everywhere
  for (std::size_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(config.vocab_size));
    targets[i] = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(config.vocab_size));
  }
  const optim::AdamWConfig hp;
  std::vector<StepTimes> times(engines.size());
  for (int i = 0; i < a.warmup + a.steps; ++i)
    for (std::size_t e = 0; e < engines.size(); ++e) {
      const auto t0 = std::chrono::steady_clock::now();
      engines[e]->micro_step(tokens.data(), targets.data(), 1.0f);
      engines[e]->optimizer_step(hp, train::StepArgs{1e-4f, i + 1});
      const double dt = seconds_since(t0);
      if (i >= a.warmup) times[e].s.push_back(dt);
    }
  const StepTimes& kept = times.front();
  const double total = kept.total();
  const double tokens_per_s = static_cast<double>(n) * a.steps / total;
  const double flops_per_token = config.flops_per_token(seq);
  const double gflops = tokens_per_s * flops_per_token / 1e9;

  if (a.json) {
    nlohmann::json j = {{"bench", "step"},
                        {"model", a.model},
                        {"config", config.to_json()},
                        {"params", config.num_params()},
                        {"batch", a.batch},
                        {"seq", seq},
                        {"device", a.device},
                        {"precision", a.precision},
                        {"threads", omp_get_max_threads()},
                        {"isa", std::string(isa_name(detected_isa()))},
                        {"warmup_steps", a.warmup},
                        {"steps", a.steps},
                        {"step_s", kept.to_json()},
                        {"tokens_per_s", tokens_per_s},
                        {"flops_per_token", flops_per_token},
                        {"gflops", gflops},
                        {"activation_bytes", engines[0]->model().activation_bytes()}};
    if (a.recompute)
      j["recompute"] = {{"step_s", times[1].to_json()},
                        {"tokens_per_s", static_cast<double>(n) * a.steps / times[1].total()},
                        {"activation_bytes", engines[1]->model().activation_bytes()},
                        {"time_ratio", times[1].median() / kept.median()}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("bench step: model {} ({:.2f}M parameters), batch {} x seq {}, {}\n", a.model,
               static_cast<double>(config.num_params()) / 1e6, a.batch, seq,
               dev.host_visible() ? fmt::format("{}, {}", count_of(omp_get_max_threads(), "thread"),
                                                isa_name(detected_isa()))
                                  : fmt::format("{} in {}", dev.name(), a.precision));
    fmt::print("  {} steps after {} warm-up: {:.1f} ms/step mean, {:.1f} median, {:.1f} min\n", a.steps, a.warmup,
               1e3 * kept.mean(), 1e3 * kept.median(), 1e3 * kept.min());
    fmt::print("  {:.0f} tokens/s, {:.1f} GFLOP/s (forward + backward + AdamW)\n", tokens_per_s, gflops);
    if (a.recompute) {
      const StepTimes& again = times[1];
      fmt::print("  with --recompute (steps taken in turns with the run above): {:.1f} ms/step mean, {:.1f} median, "
                 "{:.1f} min; {:.3f}x the step time (medians)\n",
                 1e3 * again.mean(), 1e3 * again.median(), 1e3 * again.min(), again.median() / kept.median());
      fmt::print("  activations: {} kept, {} recomputed\n",
                 human_bytes(static_cast<double>(engines[0]->model().activation_bytes())),
                 human_bytes(static_cast<double>(engines[1]->model().activation_bytes())));
    }
  }
}

CommandRegistrar registrar(90, [](CLI::App& app) {
  auto a = std::make_shared<StepArgs>();
  CLI::App* cmd = bench_group(app)->add_subcommand(
      "step", "Time full training steps (forward, backward, AdamW) on random tokens after warm-up");
  cmd->add_option("--model", a->model,
                  "model preset: tiny, mini, small, gpt2-124m, llama-tiny, llama-small, tinyllama-1.1b, llama2-7b")
      ->capture_default_str();
  const char* flags[7][2] = {{"--n-layer", "override the preset's transformer blocks"},
                             {"--n-head", "override the preset's attention heads"},
                             {"--n-embd", "override the preset's hidden size"},
                             {"--seq-len", "override the preset's longest sequence"},
                             {"--vocab-size", "override the preset's vocabulary"},
                             {"--n-kv-head", "llama: override the preset's K/V heads"},
                             {"--ffn-hidden", "llama: override the preset's SwiGLU width"}};
  for (int i = 0; i < 7; ++i) a->overrides[i].option = cmd->add_option(flags[i][0], a->overrides[i].value, flags[i][1]);
  cmd->add_option("--batch", a->batch, "sequences per step")->capture_default_str();
  cmd->add_option("--seq", a->seq, "tokens per sequence (default: the model's seq_len)");
  cmd->add_option("--threads", a->threads, "OpenMP threads (default: OMP_NUM_THREADS or all cores)");
  cmd->add_option("--steps", a->steps, "timed steps")->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "untimed steps first")->capture_default_str();
  cmd->add_option("--device", a->device, "compute device: cpu, or cuda (one GPU; docs/gpu.md)")->capture_default_str();
  cmd->add_option("--precision", a->precision, "matmul inputs: fp32, or bf16 with fp32 accumulation (cuda)")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->add_flag("--recompute", a->recompute,
                "also time steps with full activation recomputation, in turns with the kept-activation steps, "
                "and print the ratio");
  cmd->callback([a] { run_bench_step(*a); });
});

}  // namespace
}  // namespace strata::cli
