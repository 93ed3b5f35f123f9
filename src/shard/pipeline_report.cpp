#include "shard/pipeline_report.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/plural.hpp"
#include "shard/schedule.hpp"

namespace strata::shard {

namespace {

const char* group_name(PipelineOp::Group g) {
  switch (g) {
    case PipelineOp::Previous: return "previous";
    case PipelineOp::Next: return "next";
    case PipelineOp::Tied: return "tied";
  }
  return "?";
}

// The tiers `world_rank`'s messages in a group cross: one name, or innermost..outermost.
std::string tier_span(const std::vector<int>& members, const topo::Topology& physical, int world_rank) {
  int lo = physical.num_tiers(), hi = -1;
  for (int m : members)
    if (m != world_rank) {
      lo = std::min(lo, physical.tier_between(world_rank, m));
      hi = std::max(hi, physical.tier_between(world_rank, m));
    }
  if (hi < 0) return "-";
  return lo == hi ? physical.tier(hi).name : fmt::format("{}..{}", physical.tier(lo).name, physical.tier(hi).name);
}

nlohmann::json stage_json(const PipelineEngine& engine) {
  const PipelineSchedule& schedule = engine.schedule();
  const PipelineGroups& groups = engine.groups();
  const topo::Topology& physical = engine.topology();
  const int rank = engine.rank(), stage = engine.stage();
  nlohmann::json program = nlohmann::json::array();
  for (const parallel::PipelineAction& a : schedule.program())
    program.push_back({{"action", parallel::action_name(a.kind)}, {"micro_batch", a.micro_batch}});
  nlohmann::json ops = nlohmann::json::array();
  for (const PipelineOp& op : schedule.ops()) {
    const std::vector<int>& members = groups.of(op.group);
    const comm::TierTraffic sent = op_traffic(op, groups, physical, rank).total();
    nlohmann::json j{{"purpose", op.purpose},
                     {"kind", kind_name(op.kind)},
                     {"group", group_name(op.group)},
                     {"group_size", members.size()},
                     {"tier", tier_span(members, physical, rank)},
                     {"bytes", op.bytes},
                     {"bytes_sent", sent.bytes_sent},
                     {"bytes_received", sent.bytes_received},
                     {"messages", sent.messages}};
    if (!op.kind) {
      j["micro_batch"] = op.micro_batch;
      j["peer_stage"] = op.group == PipelineOp::Next ? stage + 1 : stage - 1;
    } else {
      j["run"] = {op.begin, op.end};
    }
    ops.push_back(std::move(j));
  }
  const parallel::StageSplit& split = schedule.split();
  nlohmann::json out{{"stage", stage},     {"rank", rank},       {"first_layer", split.first_layer},
                     {"layers", split.layers}, {"program", program}, {"ops", ops}};
  // The stage's own schedule of gathers and reductions over its units.
  out["sharding"] = schedule.sharding()->to_json();
  out["sharding_table"] = schedule.sharding()->table();
  return out;
}

}  // namespace

nlohmann::json pipeline_schedule_json(PipelineEngine& engine) {
  const parallel::ParallelDims dims = engine.parallel_dims();
  const bool renders = dims.data_parallel_rank(engine.rank()) == 0;
  const std::vector<std::string> all = engine.all_gather_strings(renders ? stage_json(engine).dump() : "");
  nlohmann::json stages = nlohmann::json::array();
  for (const std::string& text : all)
    if (!text.empty()) stages.push_back(nlohmann::json::parse(text));
  const nlohmann::json per_step = engine.scheduled_per_step();
  std::sort(stages.begin(), stages.end(), [](const auto& a, const auto& b) { return a["stage"] < b["stage"]; });
  return {{"pipeline_stages", dims.pipeline},
          {"world_size", engine.world_size()},
          {"replicas_a_stage", dims.data_parallel_size()},
          {"topology", engine.topology().name()},
          {"stages", stages},
          {"tiers", engine.topology().tier_names()},  // innermost first
          {"per_step", per_step}};
}

namespace {

std::string stage_table(const nlohmann::json& stage) {
  const int first = stage["first_layer"], layers = stage["layers"];
  std::vector<std::string> steps;
  for (const nlohmann::json& a : stage["program"])
    steps.push_back(fmt::format("{} {}", a["action"].get<std::string>(), a["micro_batch"].get<int>()));
  std::string s = fmt::format("stage {} (blocks {}..{}), as rank {} runs it:\n  1F1B: {}\n", stage["stage"].get<int>(),
                              first, first + layers - 1, stage["rank"].get<int>(), fmt::join(steps, ", "));
  std::vector<OpRow> messages, step_ops;
  for (const nlohmann::json& op : stage["ops"]) {
    const std::string purpose = op["purpose"];
    OpRow row{"step",
              purpose,
              "-",
              op["kind"].get<std::string>(),
              op["tier"].get<std::string>(),
              op["group_size"].get<int>(),
              "fp32",
              op["bytes_sent"].get<std::uint64_t>(),
              op["messages"].get<std::uint64_t>()};
    if (op.contains("peer_stage")) {
      const bool sends = op["bytes_sent"].get<std::uint64_t>() > 0;
      row.when = purpose == "activation-send" ? "forward" : "backward";
      row.unit = fmt::format("mb {}", op["micro_batch"].get<int>());
      row.collective = fmt::format("{} {}", sends ? "send to" : "recv from", op["peer_stage"].get<int>());
      messages.push_back(std::move(row));
    } else {
      row.unit = fmt::format("[{}, {})", op["run"][0].get<std::size_t>(), op["run"][1].get<std::size_t>());
      step_ops.push_back(std::move(row));
    }
  }
  s += op_section("per step, its messages to and from the neighbouring stages (in program order):", messages);
  s += op_section("per optimizer step:", step_ops);
  s += "  the stage's sharding over its units and replicas:\n" + stage["sharding_table"].get<std::string>();
  return s;
}

}  // namespace

std::string pipeline_schedule_table(const nlohmann::json& doc) {
  std::string s = fmt::format("schedule: {} pipeline stages of {} on {} of '{}'\n", doc["pipeline_stages"].get<int>(),
                              count_of(doc["replicas_a_stage"].get<int>(), "replica"),
                              count_of(doc["world_size"].get<int>(), "rank"), doc["topology"].get<std::string>());
  for (const nlohmann::json& stage : doc["stages"]) s += stage_table(stage);
  std::vector<TierRow> tiers;
  for (const nlohmann::json& name : doc["tiers"]) {
    const std::string tier = name.get<std::string>();
    const nlohmann::json& t = doc["per_step"][tier];
    tiers.push_back({tier, t["bytes_sent"].get<double>(), t["bytes_received"].get<double>(), t["messages"].get<double>()});
  }
  s += tier_section("per step, per rank (the mean over the world's ranks), by tier:", tiers);
  return s;
}

}  // namespace strata::shard
