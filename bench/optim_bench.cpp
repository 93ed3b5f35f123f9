// AdamW and sum_squares throughput per instruction set. Each benchmark also times memcpy
// moving the same number of bytes in the same run and reports `vs_memcpy` (its bandwidth /
// memcpy's): on arenas larger than the caches the update is memory-bound, so that ratio,
// not the FLOP rate, is what to push.
//   OMP_NUM_THREADS=2 ./build/bench/optim_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/aligned.hpp"
#include "base/cpu.hpp"
#include "model/layout.hpp"
#include "optim/adamw.hpp"

using namespace strata;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Bytes/s of memcpy when `traffic` bytes move: traffic / 2 read and traffic / 2 written.
double memcpy_bandwidth(std::size_t traffic) {
  AlignedBuffer<std::byte> src(traffic / 2), dst(traffic / 2);
  std::memset(src.data(), 1, src.size());
  double best = 1e30;
  for (int rep = 0; rep < 10; ++rep) {
    const auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    best = std::min(best, seconds_since(t0));
  }
  return static_cast<double>(traffic) / best;
}

// Runs body once per iteration and reports bandwidth relative to memcpy of the same traffic.
template <class Body>
void run_against_memcpy(benchmark::State& state, Isa isa, double traffic_bytes, Body&& body) {
  if (static_cast<int>(isa) > static_cast<int>(detected_isa()))
    return state.SkipWithError("instruction set not supported on this CPU");
  const double baseline = memcpy_bandwidth(static_cast<std::size_t>(traffic_bytes));
  const auto t0 = Clock::now();
  for (auto _ : state) body();
  const double elapsed = seconds_since(t0);
  state.SetBytesProcessed(static_cast<std::int64_t>(traffic_bytes) * state.iterations());
  state.counters["vs_memcpy"] = traffic_bytes * static_cast<double>(state.iterations()) / elapsed / baseline;
  state.SetLabel(std::string(isa_name(isa)));
}

void BM_AdamW(benchmark::State& state) {
  const auto isa = static_cast<Isa>(state.range(0));
  const auto n = static_cast<std::size_t>(state.range(1));
  AlignedBuffer<float> p(n), g(n), m(n), v(n);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = 0.01f * static_cast<float>(i % 97);
    g[i] = 0.001f * static_cast<float>(i % 89) - 0.04f;
  }
  const optim::AdamWConfig hp;
  std::int64_t step = 1;
  // Reads params, grads and both moments; writes params and both moments.
  run_against_memcpy(state, isa, 7.0 * sizeof(float) * static_cast<double>(n), [&] {
    optim::detail::adamw_update_isa(isa, p.data(), g.data(), m.data(), v.data(), n, hp, 1e-3f, 0.1f, step++, 1.0f);
    benchmark::ClobberMemory();
  });
}

void BM_SumSquares(benchmark::State& state) {
  const auto isa = static_cast<Isa>(state.range(0));
  const auto n = static_cast<std::size_t>(state.range(1));
  AlignedBuffer<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = 0.01f * static_cast<float>(i % 101);
  run_against_memcpy(state, isa, sizeof(float) * static_cast<double>(n),
                     [&] { benchmark::DoNotOptimize(optim::detail::sum_squares_isa(isa, x.data(), n)); });
}

void arena_sizes(benchmark::internal::Benchmark* b) {
  // 64 Ki floats stay in cache (compute-bound); the `small` arena does not (memory-bound).
  const auto small = static_cast<std::int64_t>(model::ParamLayout(model::ModelConfig::preset("small")).total_floats());
  for (std::int64_t n : {std::int64_t{1} << 16, small})
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) b->Args({static_cast<std::int64_t>(isa), n});
  b->ArgNames({"isa", "n"})->UseRealTime();
}

}  // namespace

BENCHMARK(BM_AdamW)->Apply(arena_sizes);
BENCHMARK(BM_SumSquares)->Apply(arena_sizes);
