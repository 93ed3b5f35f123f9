#include "shard/schedule.hpp"

#include <numeric>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/plural.hpp"
#include "model/gpt.hpp"

namespace strata::shard {

std::string_view to_string(OpKind k) { return k == OpKind::AllGather ? "all-gather" : "reduce-scatter"; }
std::string_view to_string(Algorithm a) { return a == Algorithm::Ring ? "ring" : "all-to-all"; }
std::string_view to_string(When w) {
  switch (w) {
    case When::Forward: return "forward";
    case When::Backward: return "backward";
    case When::Step: return "step";
  }
  return "?";
}
std::string_view to_string(Purpose p) {
  switch (p) {
    case Purpose::WeightGatherForward: return "W gather (forward)";
    case Purpose::WeightGatherBackward: return "W gather (backward)";
    case Purpose::GradReduce: return "G reduce";
    case Purpose::StepGradReduce: return "G -> OS reduce";
    case Purpose::StepGradGather: return "OS -> G gather";
    case Purpose::ReplicaReduce: return "replica reduce";
    case Purpose::ReplicaGather: return "replica gather";
    case Purpose::WeightGatherStep: return "W gather (after step)";
    case Purpose::GradNormAllReduce: return "grad-norm all-reduce";
    case Purpose::LossAllReduce: return "loss all-reduce";  // with the stop flag
  }
  return "?";
}

namespace {

std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

// One level's op on a per-rank buffer of `elements` (full buffer for reduce-scatter, shard
// for all-gather). Both algorithms send group_size - 1 chunks a rank: the ring forwards
// one chunk per step, the all-to-all sends each peer its chunk.
ScheduledOp level_op(When when, Purpose purpose, OpKind kind, int unit, int level, int group_size, Wire wire,
                     std::size_t elements, int block) {
  ScheduledOp op{when, purpose, kind};
  op.algorithm = kind == OpKind::ReduceScatter && wire_quantized(wire) ? Algorithm::AllToAll : Algorithm::Ring;
  op.unit = unit;
  op.level = level;
  op.group_size = group_size;
  op.wire = wire;
  op.elements_in = elements;
  std::size_t chunk = kind == OpKind::ReduceScatter ? elements / group_size : elements;
  op.elements_out = kind == OpKind::ReduceScatter ? chunk : elements * group_size;
  op.messages = group_size - 1;
  op.bytes_sent = op.bytes_received = static_cast<std::size_t>(group_size - 1) * wire_bytes(chunk, wire, block);
  return op;
}

}  // namespace

UnitPlan unit_plan(const model::ParamLayout& layout) {
  UnitPlan p;
  for (auto& u : layout.units()) {
    p.names.push_back(u.name);
    p.numel.push_back(u.numel);
  }
  p.events = model::unit_event_order(layout.config());
  return p;
}

Schedule::Schedule(UnitPlan units, const topo::Topology& topology, const ShardSpec& spec, int accumulation_steps)
    : units_(std::move(units)), topology_(topology), spec_(spec), levels_(resolve(spec, topology)), accum_(accumulation_steps) {
  if (accumulation_steps <= 0)
    throw Error(fmt::format("train.grad_accum = {}: must be positive", accumulation_steps));
  const int world = world_size();
  const bool quantized = wire_quantized(spec.weight_wire) || wire_quantized(spec.grad_wire) ||
                         wire_quantized(spec.step_grad_wire);
  const std::size_t align = quantized ? std::lcm<std::size_t>(16, spec.block_size) : 16;
  for (std::size_t n : units_.numel) padded_.push_back(round_up(n, static_cast<std::size_t>(world) * align));

  const LevelSpec& L = levels_;
  const int block = spec.block_size;
  auto size_at = [&](int unit, int levels) { return padded_[unit] / L.degree(levels); };

  // All-gather from `from` levels down to `to` levels: outer level first.
  auto gather = [&](std::vector<ScheduledOp>& out, When when, Purpose purpose, int unit, int from, int to, Wire wire) {
    for (int t = from - 1; t >= to; --t)
      out.push_back(level_op(when, purpose, OpKind::AllGather, unit, t, L.level_size[t], wire, size_at(unit, t + 1),
                             block));
  };
  // Reduce-scatter from `from` levels up to `to` levels: inner level first.
  auto reduce = [&](std::vector<ScheduledOp>& out, When when, Purpose purpose, int unit, int from, int to, Wire wire) {
    for (int t = from; t < to; ++t)
      out.push_back(level_op(when, purpose, OpKind::ReduceScatter, unit, t, L.level_size[t], wire, size_at(unit, t),
                             block));
  };

  // Per micro-batch, in the order the model walks the units.
  for (int event = 0; event < static_cast<int>(units_.events.size()); ++event) {
    const model::UnitEvent& e = units_.events[event];
    const std::size_t first = micro_.size();
    if (e.kind == model::UnitEvent::Acquire && L.weights > 0) {
      if (e.phase == model::Phase::Forward) {
        gather(micro_, When::Forward, Purpose::WeightGatherForward, e.unit, L.weights, 0, spec.weight_wire);
      } else if (spec.free_after_forward) {
        int from = L.secondary > 0 ? L.secondary : L.weights;
        gather(micro_, When::Backward, Purpose::WeightGatherBackward, e.unit, from, 0, spec.weight_wire);
      }
    } else if (e.kind == model::UnitEvent::GradsReady) {
      reduce(micro_, When::Backward, Purpose::GradReduce, e.unit, 0, L.grads, spec.grad_wire);
    }
    for (std::size_t i = first; i < micro_.size(); ++i) micro_[i].event = event;
  }

  // Once per optimizer step, unit by unit.
  for (int u = 0; u < static_cast<int>(padded_.size()); ++u) {
    reduce(step_, When::Step, Purpose::StepGradReduce, u, L.grads, L.optimizer, spec.step_grad_wire);
    // Ranks outside the OS domain hold the same OS slice: sum it over them (hierarchical
    // all-reduce: reduce-scatter up the remaining levels, gather back down).
    reduce(step_, When::Step, Purpose::ReplicaReduce, u, L.optimizer, L.num_levels, spec.step_grad_wire);
    gather(step_, When::Step, Purpose::ReplicaGather, u, L.num_levels, L.optimizer, spec.step_grad_wire);
    if (spec.step_grad_allreduce)
      gather(step_, When::Step, Purpose::StepGradGather, u, L.optimizer, L.grads, spec.step_grad_wire);
  }
  // Scalars are all-gathered level by level and summed in member order, so every rank gets
  // the same bits. The squared gradient norm needs one OS domain (it covers the model
  // once); the logged loss needs every rank, and carries each rank's stop request with it.
  auto scalar = [&](Purpose purpose, int levels, int values) {
    for (int t = 0; t < levels; ++t) {
      ScheduledOp op{When::Step, purpose, OpKind::AllGather};
      op.level = t;
      op.group_size = L.level_size[t];
      op.elements_in = static_cast<std::size_t>(values);  // fp64 values a rank
      op.elements_out = static_cast<std::size_t>(values) * L.level_size[t];
      op.messages = L.level_size[t] - 1;
      op.bytes_sent = op.bytes_received = 8u * values * (L.level_size[t] - 1);
      step_.push_back(op);
    }
  };
  scalar(Purpose::GradNormAllReduce, L.optimizer, 1);
  scalar(Purpose::LossAllReduce, L.num_levels, 2);
  for (int u = 0; u < static_cast<int>(padded_.size()); ++u)
    gather(step_, When::Step, Purpose::WeightGatherStep, u, L.optimizer, L.weights, spec.weight_wire);
}

std::size_t Schedule::total_padded() const { return std::accumulate(padded_.begin(), padded_.end(), std::size_t{0}); }

Slice Schedule::slice(int unit, int rank, int levels) const {
  const std::size_t n = padded_.at(unit);
  std::size_t offset = 0;
  int stride = 1;  // ranks per domain below level t
  for (int t = 0; t < levels; ++t) {
    int digit = (rank / stride) % levels_.level_size[t];
    stride *= levels_.level_size[t];
    offset += static_cast<std::size_t>(digit) * (n / stride);
  }
  return {offset, n / levels_.degree(levels)};
}

std::vector<TierTraffic> Schedule::traffic_per_step() const {
  std::vector<TierTraffic> out;
  for (auto& t : topology_.tiers()) out.push_back({t.name});
  auto add = [&](const std::vector<ScheduledOp>& ops, std::uint64_t times) {
    for (auto& op : ops) {
      out[op.level].bytes_sent += times * op.bytes_sent;
      out[op.level].bytes_received += times * op.bytes_received;
      out[op.level].messages += times * op.messages;
    }
  };
  add(micro_, accum_);
  add(step_, 1);
  return out;
}

StateMemory Schedule::memory_per_rank(int compute_bytes) const {
  if (compute_bytes != 2 && compute_bytes != 4)
    throw Error(fmt::format("memory_per_rank: compute_bytes = {}: expected 2 (bf16) or 4 (fp32)", compute_bytes));
  const LevelSpec& L = levels_;
  StateMemory m;
  std::size_t largest = 0;
  for (std::size_t u = 0; u < padded_.size(); ++u) {
    std::size_t n = padded_[u];
    largest = std::max(largest, n);
    m.weights += wire_bytes(n / L.degree(L.weights), spec_.weight_wire, spec_.block_size);
    if (L.secondary > 0) m.secondary += wire_bytes(n / L.degree(L.secondary), spec_.weight_wire, spec_.block_size);
    m.grads += compute_bytes * (n / L.degree(L.grads));
    m.optimizer += 12 * (n / L.degree(L.optimizer));
  }
  // Full-unit compute buffers: weights for the computing unit and those prefetched, plus one
  // gradient buffer, when weights or gradients are sharded.
  if (L.weights > 0) m.gathered += compute_bytes * largest * static_cast<std::uint64_t>(spec_.prefetch + 1);
  if (L.grads > 0) m.gathered += compute_bytes * largest;
  return m;
}

static nlohmann::json op_json(const ScheduledOp& op, const topo::Topology& topology) {
  return {{"when", to_string(op.when)},
          {"purpose", to_string(op.purpose)},
          {"kind", to_string(op.kind)},
          {"algorithm", to_string(op.algorithm)},
          {"unit", op.unit},
          {"tier", topology.tier(op.level).name},
          {"group_size", op.group_size},
          {"wire", wire_name(op.wire)},
          {"elements_in", op.elements_in},
          {"elements_out", op.elements_out},
          {"bytes_sent", op.bytes_sent},
          {"bytes_received", op.bytes_received},
          {"messages", op.messages}};
}

nlohmann::json Schedule::to_json() const {
  nlohmann::json j;
  j["spec"] = spec_.to_json();
  j["world_size"] = world_size();
  j["accumulation_steps"] = accum_;
  j["micro_batch_ops"] = nlohmann::json::array();
  for (auto& op : micro_) j["micro_batch_ops"].push_back(op_json(op, topology_));
  j["step_ops"] = nlohmann::json::array();
  for (auto& op : step_) j["step_ops"].push_back(op_json(op, topology_));
  nlohmann::json per_tier = nlohmann::json::object();
  for (auto& t : traffic_per_step())
    per_tier[t.tier] = {{"bytes_sent", t.bytes_sent}, {"bytes_received", t.bytes_received}, {"messages", t.messages}};
  j["per_step"] = per_tier;
  StateMemory m = memory_per_rank();
  j["memory_bytes"] = {{"weights", m.weights},     {"secondary", m.secondary}, {"grads", m.grads},
                       {"optimizer", m.optimizer}, {"gathered", m.gathered}};
  return j;
}

std::string Schedule::table() const {
  std::string s = fmt::format("schedule: strategy {} on {} of '{}', {} a step\n", spec_.preset,
                              count_of(world_size(), "rank"), topology_.name(),
                              count_of(accum_, "micro-batch", "micro-batches"));
  auto unit_name = [&](int u) { return u < 0 ? std::string("-") : units_.names[u]; };
  auto section = [&](const char* title, const std::vector<ScheduledOp>& ops) {
    s += fmt::format("{}\n  {:<10} {:<22} {:<12} {:<14} {:<11} {:>5} {:<5} {:>12} {:>5}\n", title, "when", "purpose",
                     "unit", "collective", "tier", "group", "wire", "bytes sent", "msgs");
    for (auto& op : ops)
      s += fmt::format("  {:<10} {:<22} {:<12} {:<14} {:<11} {:>5} {:<5} {:>12} {:>5}\n", to_string(op.when),
                       to_string(op.purpose), unit_name(op.unit), to_string(op.kind), topology_.tier(op.level).name,
                       op.group_size, wire_name(op.wire), op.bytes_sent, op.messages);
    if (ops.empty()) s += "  (none)\n";
  };
  section("per micro-batch:", micro_);
  section("per optimizer step:", step_);
  s += fmt::format("per step, per rank, by tier:\n  {:<11} {:>14} {:>14} {:>9}\n", "tier", "bytes sent", "bytes recv",
                   "messages");
  for (auto& t : traffic_per_step())
    s += fmt::format("  {:<11} {:>14} {:>14} {:>9}\n", t.tier, t.bytes_sent, t.bytes_received, t.messages);
  StateMemory m = memory_per_rank();
  s += fmt::format("memory per rank: weights {} B, secondary {} B, grads {} B, optimizer {} B, gathered {} B\n",
                   m.weights, m.secondary, m.grads, m.optimizer, m.gathered);
  return s;
}

std::vector<ArenaRun> optimizer_runs(const Schedule& schedule, const model::ParamLayout& layout, int rank) {
  if (layout.units().size() != static_cast<std::size_t>(schedule.num_units()))
    throw Error(fmt::format("shard: the layout has {} units, the schedule {}", layout.units().size(),
                            schedule.num_units()));
  std::vector<ArenaRun> runs;
  const int levels = schedule.levels().optimizer;
  for (int u = 0; u < schedule.num_units(); ++u) {
    const Slice o = schedule.slice(u, rank, levels);
    const std::size_t numel = schedule.units().numel[u];
    if (o.offset >= numel) continue;  // all padding
    const std::size_t begin = layout.units()[u].offset + o.offset;
    runs.push_back({u, begin, begin + std::min(o.count, numel - o.offset)});
  }
  return runs;
}

bool saves_optimizer_state(const Schedule& schedule, int rank) {
  return rank < schedule.levels().degree(schedule.levels().optimizer);
}

}  // namespace strata::shard
