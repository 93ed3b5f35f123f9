// strata bench decode: the time of one generated token with the KV cache (model/decoder.hpp)
// against recomputing the whole prefix's forward for it, at given context lengths.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/aligned.hpp"
#include "base/clock.hpp"
#include "base/cpu.hpp"
#include "base/error.hpp"
#include "base/rng.hpp"
#include "cli/command.hpp"
#include "cli/format.hpp"
#include "model/decoder.hpp"
#include "model/init.hpp"
#include "model/model.hpp"
#include "train/config.hpp"

namespace strata::cli {
namespace {

struct DecodeArgs {
  std::string model = "small";
  std::vector<int> contexts = {64, 256};
  int repeats = 5, threads = 0;
  bool json = false;
};

template <class F>
double median_seconds(int repeats, F&& timed) {
  std::vector<double> s;
  for (int r = 0; r < repeats; ++r) s.push_back(timed());
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

void run_bench_decode(const DecodeArgs& a) {
  const model::ModelConfig config = train::build_model({{"model.preset", a.model}});
  if (a.repeats <= 0) throw Error(fmt::format("bench decode: --repeats = {}: must be positive", a.repeats));
  if (a.threads < 0) throw Error(fmt::format("bench decode: --threads = {}: must be positive", a.threads));
  for (int n : a.contexts)
    if (n <= 0 || n > config.seq_len)
      throw Error(fmt::format("bench decode: --contexts: {} is not in [1, model.seq_len = {}]", n, config.seq_len));
  if (a.threads > 0) omp_set_num_threads(a.threads);  // OpenBLAS (OpenMP build) follows

  const model::ParamLayout layout(config);
  AlignedBuffer<float> params(layout.total_floats());
  model::init_params(layout, params.data(), 1);
  Rng rng(42);
  std::vector<std::int32_t> tokens(config.seq_len);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.below(config.vocab_size));
  const auto decoder = model::make_decoder(config, config.seq_len);

  nlohmann::json rows = nlohmann::json::array();
  if (!a.json)
    fmt::print("bench decode: model {} ({:.2f}M parameters), {}, {}; median of {} per figure\n", a.model,
               static_cast<double>(config.num_params()) / 1e6, count_of(omp_get_max_threads(), "thread"),
               isa_name(detected_isa()), a.repeats);
  for (int n : a.contexts) {
    // The token at position n - 1 (a context of n tokens): with the cache, one step after n - 1
    // cached positions; without, the forward of all n positions, whose last row is that step's.
    const double cached = median_seconds(a.repeats, [&] {
      decoder->reset();
      for (int t = 0; t + 1 < n; ++t) decoder->step(params.data(), tokens[t]);
      const auto t0 = std::chrono::steady_clock::now();
      decoder->step(params.data(), tokens[n - 1]);
      return seconds_since(t0);
    });
    const auto full = model::make_model(config, 1, n);
    model::ArenaAccess access(layout, params.data(), nullptr);
    const double recomputed = median_seconds(a.repeats, [&] {
      const auto t0 = std::chrono::steady_clock::now();
      full->forward(access, tokens.data(), tokens.data());
      return seconds_since(t0);
    });
    rows.push_back({{"context", n}, {"kv_cache_s", cached}, {"full_prefix_s", recomputed},
                    {"ratio", recomputed / cached}});
    if (!a.json)
      fmt::print("  context {:4}: {:8.3f} ms/token with the KV cache, {:8.3f} ms recomputing the prefix: {:.1f}x\n",
                 n, 1e3 * cached, 1e3 * recomputed, recomputed / cached);
  }
  if (a.json)
    fmt::print("{}\n", nlohmann::json{{"bench", "decode"},
                                      {"model", a.model},
                                      {"config", config.to_json()},
                                      {"threads", omp_get_max_threads()},
                                      {"isa", std::string(isa_name(detected_isa()))},
                                      {"repeats", a.repeats},
                                      {"contexts", rows}}
                           .dump(2));
}

CommandRegistrar registrar(91, [](CLI::App& app) {
  auto a = std::make_shared<DecodeArgs>();
  CLI::App* cmd = bench_group(app)->add_subcommand(
      "decode", "Time a generated token with the KV cache against recomputing the whole prefix");
  cmd->add_option("--model", a->model, "model preset (random weights)")->capture_default_str();
  cmd->add_option("--contexts", a->contexts, "context lengths (tokens before the new one, inclusive)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "timings per figure (the median is kept)")->capture_default_str();
  cmd->add_option("--threads", a->threads, "OpenMP threads (default: OMP_NUM_THREADS or all cores)");
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->callback([a] { run_bench_decode(*a); });
});

}  // namespace
}  // namespace strata::cli
