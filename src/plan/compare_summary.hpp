#pragma once
// `strata plan --compare-summary`: the planner's bytes against what a training run reports.
#include <cstdio>
#include <string>
#include <vector>

#include "base/precision.hpp"
#include "plan/cost_model.hpp"
#include "plan/model_parallel.hpp"
#include "topo/topology.hpp"

namespace strata::plan {

// Planner bytes per tier (ModelParallelPlan::run_traffic) against a training run's
// summary.json at `path` (comm.scheduled_per_step and, when present, the measured
// comm.per_step), a line each printed to `out`: equal, or an Error naming the first
// difference. The run's setup is checked first (strategy, sequence parallelism, stages, world
// size, `topology`, `precision`), since no byte count can agree after a difference there.
void compare_summary(std::FILE* out, const std::string& path, const Estimate& e, const topo::Topology& topology,
                     Precision precision, bool sequence_parallel,
                     const std::vector<ModelParallelPlan::RunTraffic>& planned,
                     const std::vector<std::string>& not_compared);

}  // namespace strata::plan
