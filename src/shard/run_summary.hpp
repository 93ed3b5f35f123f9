#pragma once
// summary.json's measured figures, the same for the flat engine (ShardedEngine) and the
// pipeline (PipelineEngine): the mean over a run's step reports and over the world's ranks.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/instrument/accounting.hpp"

namespace strata::shard {

// One step's report, as step_report returns it, appended to `reports`: its traffic and busy
// time per tier (`traffic`), its timing, and whether an evaluation ran in it.
nlohmann::json add_step_report(std::vector<nlohmann::json>& reports, const comm::CommStats& traffic, double compute_s,
                               double exposed_comm_s, bool includes_eval);

// `step_reports`: this rank's, as step_report returns them ("compute_s", "exposed_comm_s",
// "includes_eval", and "comm" per tier: "bytes_sent", "bytes_received", "messages",
// "busy_s"); `tiers`: the tier names, innermost first. Counted: the steps after the first
// (the warm-up, and in the flat engine also the initial weight distribution) without
// evaluation traffic. Returns "per_step" (per tier the world's mean of each field and
// "busy_min_s", the least rank's busy time), "steps_measured", "compute_s", "compute_max_s"
// (each step's slowest rank's compute) and "exposed_comm_s", each a mean per counted step.
// Collective over MPI_COMM_WORLD: every rank calls it with the same steps counted.
nlohmann::json measured_summary(const std::vector<nlohmann::json>& step_reports,
                                const std::vector<std::string>& tiers, int world_size);

}  // namespace strata::shard
