// The flight recorder's cost per op (comm/flight.hpp): one issue, start and end, as the
// sharded engine records each op of its schedule. Multiply by the ops a rank issues a step
// (a dump's `issued` / `timed_steps`) and divide by the step's time for the share of it;
// bench/flight_overhead.sh measures the same on whole training runs.
//   ./build/bench/flight_bench
#include <benchmark/benchmark.h>

#include "comm/runtime/flight.hpp"

using namespace strata;

namespace {

void BM_FlightRecordOneOp(benchmark::State& state) {
  comm::FlightRecorder f;
  f.configure(static_cast<int>(state.range(0)), "");
  const comm::FlightOp op{3, "all-gather", "W gather (forward)", 1, "across-cluster#0.1", 65536, 5, 0, 7};
  for (auto _ : state) {
    const std::uint64_t seq = f.issue(op);
    f.start(seq);
    f.end(seq);
    benchmark::DoNotOptimize(seq);
  }
}
BENCHMARK(BM_FlightRecordOneOp)->Arg(4096)->Arg(0);

}  // namespace
