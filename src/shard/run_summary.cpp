#include "shard/run_summary.hpp"

#include <mpi.h>

#include <iterator>
#include <numeric>

#include "comm/runtime/wait.hpp"

namespace strata::shard {

nlohmann::json add_step_report(std::vector<nlohmann::json>& reports, const comm::CommStats& traffic, double compute_s,
                               double exposed_comm_s, bool includes_eval) {
  return reports.emplace_back(nlohmann::json{{"compute_s", compute_s},
                                             {"exposed_comm_s", exposed_comm_s},
                                             {"comm", traffic.to_json()["tiers"]},
                                             {"includes_eval", includes_eval}});
}

nlohmann::json measured_summary(const std::vector<nlohmann::json>& step_reports,
                                const std::vector<std::string>& tiers, int world_size) {
  // Per tier, the step report's fields summed over the counted steps: sums[f * tiers + i].
  static constexpr const char* kFields[] = {"bytes_sent", "bytes_received", "messages", "busy_s"};
  std::vector<double> sums(std::size(kFields) * tiers.size());
  // Per counted step, this rank's compute: the world's largest each step is the straggler the
  // others wait for, inside their first collective after it.
  std::vector<double> step_compute;
  double exposed = 0;
  for (std::size_t s = 1; s < step_reports.size(); ++s) {
    const auto& r = step_reports[s];
    if (r["includes_eval"].get<bool>()) continue;
    for (std::size_t f = 0; f < std::size(kFields); ++f)
      for (std::size_t i = 0; i < tiers.size(); ++i)
        sums[f * tiers.size() + i] += r["comm"][tiers[i]][kFields[f]].get<double>();
    step_compute.push_back(r["compute_s"].get<double>());
    exposed += r["exposed_comm_s"].get<double>();
  }
  const int counted = static_cast<int>(step_compute.size());
  const double compute = std::accumulate(step_compute.begin(), step_compute.end(), 0.0);
  // The least rank's busy time a tier: the collectives without most of the wait for late
  // partners that the mean carries.
  std::vector<double> busy_min(tiers.size());
  const std::size_t busy_field = std::size(kFields) - 1;
  for (std::size_t i = 0; i < tiers.size(); ++i) busy_min[i] = sums[busy_field * tiers.size() + i];
  // Each waited for under the collective timeout (comm/wait.hpp).
  const auto world_reduce = [](std::vector<double>& v, MPI_Op op) {
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, op, MPI_COMM_WORLD, &request);
    comm::wait_mpi_collective(request, MPI_COMM_WORLD, "shard:summary_report", "world", "MPI_Iallreduce");
  };
  world_reduce(sums, MPI_SUM);
  world_reduce(busy_min, MPI_MIN);
  world_reduce(step_compute, MPI_MAX);
  for (double& v : sums) v /= world_size;
  nlohmann::json measured = nlohmann::json::object();
  if (counted)
    for (std::size_t i = 0; i < tiers.size(); ++i) {
      for (std::size_t f = 0; f < std::size(kFields); ++f)
        measured[tiers[i]][kFields[f]] = sums[f * tiers.size() + i] / counted;
      measured[tiers[i]]["busy_min_s"] = busy_min[i] / counted;
    }
  const double compute_max = std::accumulate(step_compute.begin(), step_compute.end(), 0.0);
  return {{"per_step", measured},
          {"steps_measured", counted},
          {"compute_s", counted ? compute / counted : 0.0},
          {"compute_max_s", counted ? compute_max / counted : 0.0},
          {"exposed_comm_s", counted ? exposed / counted : 0.0}};
}

}  // namespace strata::shard
