// What the sharding runtime reports: its allocations by state, step timing and traffic, the
// run's summary against the schedule.
#include <mpi.h>

#include <algorithm>
#include <iterator>
#include <numeric>

#include "comm/runtime/flight.hpp"
#include "comm/runtime/wait.hpp"
#include "shard/sharded_engine.hpp"
#include "shard/unit_state.hpp"

namespace strata::shard {

nlohmann::json ShardedEngine::describe() const {
  return {{"strategy", schedule_.spec().preset},
          {"world_size", world_size()},
          {"tensor_parallel", dims_.tensor},
          {"shard_spec", schedule_.spec().to_json()},
          {"topology", schedule_.topology().to_json()}};
}

StateMemory ShardedEngine::memory_bytes() const {
  StateMemory m;
  for (auto& U : units_) {
    m.weights += U->weights.bytes();
    m.secondary += U->secondary.bytes();
    m.grads += 4 * U->grad_accum.size();
    m.optimizer += 4 * (U->master.size() + U->exp_avg.size() + U->exp_avg_sq.size() + U->os_grad.size());
  }
  m.grads += 4 * replicated_grads_.size();
  m.gathered = 4 * replicated_params_.size();
  for (auto& b : pool_) m.gathered += 4 * b.size();
  m.communication = executor_.scratch_bytes();
  return m;
}

StepTiming ShardedEngine::take_timing() {
  StepTiming t;
  t.exposed_comm_s = exposed_s_;
  t.compute_s = std::max(0.0, wall_s_ - exposed_s_);
  wall_s_ = exposed_s_ = 0;
  comm::flight_recorder().add_step_time(t.compute_s, t.exposed_comm_s);
  return t;
}

nlohmann::json ShardedEngine::step_report() {
  comm::CommStats now = ctx_.accounting().snapshot();
  comm::CommStats delta = last_stats_.tiers.empty() ? now : now - last_stats_;
  last_stats_ = now;
  StepTiming t = take_timing();
  nlohmann::json j = {{"compute_s", t.compute_s},
                      {"exposed_comm_s", t.exposed_comm_s},
                      {"comm", delta.to_json()["tiers"]},  // per tier: traffic and busy time
                      {"includes_eval", evaluated_since_report_}};
  evaluated_since_report_ = false;
  step_reports_.push_back(j);
  return j;
}

nlohmann::json ShardedEngine::summary_report() {
  // Mean over steps without evaluation traffic and after the first (which also carries the
  // initial weight distribution).
  std::vector<std::string> names;
  for (auto& t : schedule_.topology().tiers()) names.push_back(t.name);
  // Per tier, the step report's fields summed over the counted steps: sums[f * tiers + i].
  static constexpr const char* kFields[] = {"bytes_sent", "bytes_received", "messages", "busy_s"};
  std::vector<double> sums(std::size(kFields) * names.size());
  // Per counted step, this rank's compute: the world's largest each step is the straggler the
  // others wait for, inside their first collective after it.
  std::vector<double> step_compute;
  double exposed = 0;
  for (std::size_t s = 1; s < step_reports_.size(); ++s) {
    const auto& r = step_reports_[s];
    if (r["includes_eval"].get<bool>()) continue;
    for (std::size_t f = 0; f < std::size(kFields); ++f)
      for (std::size_t i = 0; i < names.size(); ++i)
        sums[f * names.size() + i] += r["comm"][names[i]][kFields[f]].get<double>();
    step_compute.push_back(r["compute_s"].get<double>());
    exposed += r["exposed_comm_s"].get<double>();
  }
  const int counted = static_cast<int>(step_compute.size());
  const double compute = std::accumulate(step_compute.begin(), step_compute.end(), 0.0);
  // The least rank's busy time a tier: the collectives without most of the wait for late
  // partners that the mean carries.
  std::vector<double> busy_min(names.size());
  const std::size_t busy_field = std::size(kFields) - 1;
  for (std::size_t i = 0; i < names.size(); ++i) busy_min[i] = sums[busy_field * names.size() + i];
  // Over the world (collective: every rank calls summary_report, with the same steps counted).
  // Each waited for under the collective timeout (comm/wait.hpp).
  const auto world_reduce = [](std::vector<double>& v, MPI_Op op) {
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, op, MPI_COMM_WORLD, &request);
    comm::wait_mpi_collective(request, MPI_COMM_WORLD, "shard:summary_report", "world", "MPI_Iallreduce");
  };
  world_reduce(sums, MPI_SUM);
  world_reduce(busy_min, MPI_MIN);
  world_reduce(step_compute, MPI_MAX);
  for (double& v : sums) v /= world_size();
  nlohmann::json measured = nlohmann::json::object(), scheduled = nlohmann::json::object();
  if (counted)
    for (std::size_t i = 0; i < names.size(); ++i) {
      for (std::size_t f = 0; f < std::size(kFields); ++f)
        measured[names[i]][kFields[f]] = sums[f * names.size() + i] / counted;
      measured[names[i]]["busy_min_s"] = busy_min[i] / counted;
    }
  const double compute_max = std::accumulate(step_compute.begin(), step_compute.end(), 0.0);
  for (auto& t : schedule_.traffic_per_step())
    scheduled[t.tier] = {{"bytes_sent", t.bytes_sent}, {"bytes_received", t.bytes_received}, {"messages", t.messages}};
  StateMemory m = memory_bytes();
  return {{"strategy", schedule_.spec().preset},
          {"shard_spec", schedule_.spec().to_json()},
          {"world_size", world_size()},
          {"tensor_parallel", dims_.tensor},
          {"topology", schedule_.topology().to_json()},
          {"link_emulation", ctx_.emulation().enabled},
          {"comm", {{"per_step", measured}, {"scheduled_per_step", scheduled}, {"steps_measured", counted}}},
          {"compute_s", counted ? compute / counted : 0.0},
          {"compute_max_s", counted ? compute_max / counted : 0.0},
          {"exposed_comm_s", counted ? exposed / counted : 0.0},
          {"memory_bytes",
           {{"weights", m.weights}, {"secondary", m.secondary}, {"grads", m.grads}, {"optimizer", m.optimizer},
            {"gathered", m.gathered}, {"communication", m.communication},
            {"activations", models_.size() * models_.front()->activation_bytes()}}},
          {"recompute", models_.front()->recompute()}};
}

}  // namespace strata::shard
