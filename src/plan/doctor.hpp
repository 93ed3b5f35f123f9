#pragma once
// `strata doctor OUT`: a run folder read offline and held against its own plan. From the
// flight recorder's dumps (OUT/flight, comm/flight.hpp) and the run's summary.json (its
// settings and resolved topology), it rebuilds the run's schedule, prices every recorded op as
// the planner does (price_op, with a calibration when given) and says:
//   - per tier and op kind, the measured seconds an op against the planned ones;
//   - slow links: for each op over a group, how long after its receiver was ready the data of
//     each member's left neighbour (its sender in the ring) arrived: a host whose messages
//     arrive late on a tier is named with that tier (the figures compare hosts' wall clocks,
//     which NTP keeps far closer than the delays it names);
//   - stragglers: a rank that reaches its collectives late against the other members of their
//     groups, op after op, is slow at computing (or starved of its core);
//   - a hang: the desync report of the dumps (comm::desync_report).
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/calibration.hpp"

namespace strata::plan {

struct DoctorReport {
  std::vector<std::string> lines;
  nlohmann::json json;
};

// Throws Error naming the file or field when the folder holds no readable dumps or its
// summary.json is not one; a missing or damaged dump is reported by name, not refused.
DoctorReport diagnose_run(const std::filesystem::path& out, const Calibration* calibration);

}  // namespace strata::plan
