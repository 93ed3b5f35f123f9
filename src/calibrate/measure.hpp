#pragma once
// strata calibrate's harness (docs/calibration.md): under mpirun, measures what the planner
// otherwise assumes: every tier's collectives over a sweep of message sizes, alone and beside
// compute; the model's matmuls over the shapes a plan of it uses, its whole step, Adam and the
// wire codecs; and how much a tier's collectives slow compute beside them. Every rank measures
// at once, as a training step runs: ranks that share ports or cores share them here too.
#include <cstddef>
#include <string>
#include <vector>

#include "plan/calibration.hpp"

namespace strata::calibrate {

struct MeasureOptions {
  std::string topology, model = "tiny";
  std::vector<std::string> tier_overrides;
  double min_kib = 16, max_mib = 4;
  int points = 6, iterations = 3, micro_batch = 8, seq = 0;
  std::string command_line;  // recorded in the file
  std::string out;           // the file the command writes: refused when empty, before measuring
};

// A collective whose warm-up took under kCheapCollective_s is timed at least
// kMinCollectiveTimings times: at the sweep's small sizes one stalled timing in three would
// set a curve's fixed cost. The large sizes keep --iterations.
constexpr double kCheapCollective_s = 0.05;
constexpr int kMinCollectiveTimings = 7;
// Compute timings take the median of at least this many: where ranks share cores, one timing
// in a few lands on a burst of other work.
constexpr int kMinComputeTimings = 7;
// Compute is timed in this many passes, spread over the run (before the collective sweep,
// between its alone and busy halves, after it), each figure the median of all passes'
// timings, so a slow spell of the machine over one pass does not set it (plan::PassTimings).
constexpr int kComputePasses = 3;
// Passes further apart than this (the slowest's matmul time over the fastest's) are noted.
constexpr double kPassSpreadNoted = 1.25;

// Timings a compute measurement takes in each pass: kMinComputeTimings (or --iterations)
// over the passes, rounded up.
int timings_per_pass(const MeasureOptions& o);
// The all-reduce the overlap slowdown is timed beside: a block's weights in fp32 (the model's
// median unit, what a step's gathers and reductions move), within the sweep: the ops a step
// overlaps are what the factor prices.
std::size_t overlap_bytes(const MeasureOptions& o);

struct Measured {
  plan::Calibration calibration;
  std::vector<double> pass_ratios;  // each compute pass's matmul time over the fastest pass's
};
// Every rank of the job, at once: the options checked (a refusal agreed on), then the
// measurements; every rank returns the same calibration.
Measured measure(const MeasureOptions& o);

}  // namespace strata::calibrate
