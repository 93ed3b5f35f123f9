// What the sharding runtime reports: its allocations by state, step timing and traffic, the
// run's summary against the schedule.
#include <algorithm>
#include <utility>

#include "comm/runtime/flight.hpp"
#include "shard/run_summary.hpp"
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
  return add_step_report(step_reports_, delta, t.compute_s, t.exposed_comm_s,
                         std::exchange(evaluated_since_report_, false));
}

nlohmann::json ShardedEngine::memory_report() const {
  const StateMemory m = memory_bytes();
  return {{"weights", m.weights},     {"secondary", m.secondary}, {"grads", m.grads},
          {"optimizer", m.optimizer}, {"gathered", m.gathered},   {"communication", m.communication},
          {"activations", models_.size() * models_.front()->activation_bytes()}};
}

nlohmann::json ShardedEngine::summary_report() {
  const nlohmann::json measured = measured_summary(step_reports_, schedule_.topology().tier_names(), world_size());
  nlohmann::json scheduled = nlohmann::json::object();
  for (auto& t : schedule_.traffic_per_step())
    scheduled[t.tier] = {{"bytes_sent", t.bytes_sent}, {"bytes_received", t.bytes_received}, {"messages", t.messages}};
  nlohmann::json j = describe();
  j.update({{"link_emulation", ctx_.emulation().enabled},
            {"comm",
             {{"per_step", measured["per_step"]},
              {"scheduled_per_step", scheduled},
              {"steps_measured", measured["steps_measured"]}}},
            {"compute_s", measured["compute_s"]},
            {"compute_max_s", measured["compute_max_s"]},
            {"exposed_comm_s", measured["exposed_comm_s"]},
            {"memory_bytes", memory_report()},
            {"recompute", models_.front()->recompute()}});
  return j;
}

}  // namespace strata::shard
