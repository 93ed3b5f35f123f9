// Forward + backward of one micro-batch, the bulk of a training step, on the two shapes the
// foundation's speed targets name, with 2 OpenMP threads. Counters: tokens/s and model
// GFLOP/s (6 x matmul parameters + attention per token). Run: build/bench/model_bench on an
// otherwise idle machine (2 threads sharing 2 busy cores measure the scheduler, not us).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <vector>

#include "base/rng.hpp"
#include "model/gpt.hpp"

namespace {

using strata::model::ArenaAccess;
using strata::model::GPT;
using strata::model::ModelConfig;

struct Shape {
  ModelConfig config;
  int batch;
};

Shape small() { return {ModelConfig::preset("small"), 4}; }
// hidden 128, 4 layers, 4 heads, seq 128, vocab 256
Shape h128() { return {ModelConfig{4, 4, 128, 128, 256, 256}, 8}; }

void run(benchmark::State& state, const Shape& shape, bool backward) {
  omp_set_num_threads(2);
  const ModelConfig& cfg = shape.config;
  const int B = shape.batch, T = cfg.seq_len;
  GPT gpt(cfg, B, T);
  std::vector<float> params(gpt.layout().total_floats()), grads(params.size());
  gpt.init_params(params.data(), 1);
  strata::Rng rng(2);
  std::vector<std::int32_t> tokens(B * T), targets(B * T);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.below(cfg.vocab_size));
  for (auto& t : targets) t = static_cast<std::int32_t>(rng.below(cfg.vocab_size));
  ArenaAccess access(gpt.layout(), params.data(), grads.data());
  for (auto _ : state) {
    float loss = backward ? gpt.forward_backward(access, tokens.data(), targets.data(), 1.f)
                          : gpt.forward(access, tokens.data(), targets.data());
    benchmark::DoNotOptimize(loss);
  }
  const double tokens_per_iter = static_cast<double>(B) * T;
  const double flops_per_token = cfg.flops_per_token(T) / (backward ? 1.0 : 3.0);
  state.counters["tokens/s"] = benchmark::Counter(tokens_per_iter, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(tokens_per_iter * flops_per_token * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void BM_ForwardBackward_Small(benchmark::State& s) { run(s, small(), true); }
void BM_ForwardBackward_H128(benchmark::State& s) { run(s, h128(), true); }
void BM_Forward_Small(benchmark::State& s) { run(s, small(), false); }
void BM_Forward_H128(benchmark::State& s) { run(s, h128(), false); }

BENCHMARK(BM_ForwardBackward_Small)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);
BENCHMARK(BM_ForwardBackward_H128)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);
BENCHMARK(BM_Forward_Small)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2);
BENCHMARK(BM_Forward_H128)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2);

}  // namespace
