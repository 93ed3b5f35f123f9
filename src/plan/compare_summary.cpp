#include "plan/compare_summary.hpp"

#include <utility>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "plan/report.hpp"

namespace strata::plan {

namespace {

// A pipeline's blocks a stage: the run's (config.shard.pp_layers; none: equal stages) against
// the plan's, so that an uneven run is not compared with an even plan or the other way round.
template <class Differs>
void check_same_stages(const nlohmann::json* shard, const Estimate& e, const Differs& differs) {
  std::vector<int> planned, run;
  for (const Estimate::PipelineStage& s : e.stages) planned.push_back(s.blocks);
  if (shard && shard->is_object() && shard->contains("pp_layers") && (*shard)["pp_layers"].is_array())
    for (const nlohmann::json& n : (*shard)["pp_layers"]) run.push_back(n.is_number_integer() ? n.get<int>() : -1);
  const bool even = run.empty();
  if (even) {
    int blocks = 0;
    for (int b : planned) blocks += b;
    run.assign(planned.size(), blocks / static_cast<int>(planned.size()));
  }
  if (run != planned)
    throw differs("blocks a stage", fmt::format("{}", fmt::join(run, ",")), fmt::format("{}", fmt::join(planned, ",")),
                  even ? std::string("leave out --pp-layers") : fmt::format("give --pp-layers {}", fmt::join(run, ",")));
}

// The run's setup against the plan's, in the order a user would put it right: strategy,
// sequence parallelism, world size, topology, precision. The first that differs is named with both values, since
// no byte count can agree after it.
void check_same_setup(const std::string& path, const nlohmann::json& summary, const Estimate& e,
                      const topo::Topology& topology, Precision precision, bool sequence_parallel) {
  auto differs = [&](const char* field, const std::string& run, const std::string& planned, const std::string& fix) {
    return Error(fmt::format("--compare-summary {}: {} differs: the run has {}, the plan {} ({})", path, field, run,
                             planned, fix));
  };
  if (!summary.contains("strategy") || !summary["strategy"].is_string())
    throw Error(fmt::format("--compare-summary {}: no strategy: a single-process run, whose bytes the planner does "
                            "not price (compare a run under mpirun with --strategy)",
                            path));
  // A preset changed by overrides: '*' in the plan, '+custom' in the run; a TP run's degree as
  // the plan names it (zero3+tp2).
  const ModelParallel run_mp{summary.value("tensor_parallel", 1), summary.value("pipeline_stages", 1), "", ""};
  const std::string run_strategy = variant_name(summary["strategy"].get<std::string>(), run_mp);
  std::string plan_strategy = e.strategy;
  if (const std::size_t star = plan_strategy.find('*'); star != std::string::npos)
    plan_strategy.replace(star, 1, "+custom");
  if (run_strategy != plan_strategy)
    throw differs("strategy", run_strategy, plan_strategy,
                  fmt::format("plan it with --strategy {}",
                              variant_name(run_strategy.substr(0, run_strategy.find('+')), run_mp)));
  // The run's own setting (config.shard in summary.json); runs from before the flag had none.
  const nlohmann::json* shard = nullptr;
  if (summary.contains("config") && summary["config"].is_object() && summary["config"].contains("shard"))
    shard = &summary["config"]["shard"];
  const bool run_sp = shard && shard->is_object() && shard->contains("sequence_parallel") &&
                      (*shard)["sequence_parallel"].is_boolean() && (*shard)["sequence_parallel"].get<bool>();
  if (run_sp != sequence_parallel)
    throw differs("sequence parallelism", run_sp ? "on" : "off", sequence_parallel ? "on" : "off",
                  run_sp ? "give --sequence-parallel" : "leave out --sequence-parallel");
  if (!e.stages.empty()) check_same_stages(shard, e, differs);
  if (summary.contains("world_size") && summary["world_size"] != e.world_size)
    throw differs("world size", fmt::format("{} ranks", summary["world_size"].dump()),
                  fmt::format("{} ranks", e.world_size), "choose --nodes to match");
  if (summary.contains("topology") && summary["topology"].is_object()) {
    const nlohmann::json& t = summary["topology"];
    std::vector<std::string> tiers;
    if (t.contains("tiers") && t["tiers"].is_array())
      for (const nlohmann::json& tier : t["tiers"])
        tiers.push_back(fmt::format("{} {}", tier.value("name", std::string("?")), tier.value("size", nlohmann::json()).dump()));
    const std::string run_topology = fmt::format("'{}' ({})", t.value("name", std::string("?")), fmt::join(tiers, " x "));
    const std::string plan_topology = fmt::format("'{}' ({})", topology.name(), tier_sizes(topology));
    if (run_topology != plan_topology) throw differs("topology", run_topology, plan_topology, "give the run's --topology");
  }
  // strata's runtime computes, keeps and sends every state in fp32 unless a wire says otherwise.
  if (precision != Precision::F32)
    throw differs("precision", "fp32 (strata's runtime)", std::string(precision_name(precision)),
                  "give --precision fp32");
}

}  // namespace

void compare_summary(std::FILE* out, const std::string& path, const Estimate& e, const topo::Topology& topology,
                     Precision precision, bool sequence_parallel,
                     const std::vector<ModelParallelPlan::RunTraffic>& planned,
                     const std::vector<std::string>& not_compared) {
  nlohmann::json summary;
  try {
    summary = nlohmann::json::parse(read_file_text(path));
  } catch (const nlohmann::json::exception& ex) {
    throw Error(fmt::format("--compare-summary {}: not JSON ({})", path, ex.what()));
  }
  if (!summary.is_object()) throw Error(fmt::format("--compare-summary {}: not a summary.json (a JSON object)", path));
  check_same_setup(path, summary, e, topology, precision, sequence_parallel);
  if (!summary.contains("comm") || !summary["comm"].contains("scheduled_per_step"))
    throw Error(fmt::format("--compare-summary {}: no comm.scheduled_per_step", path));
  std::vector<std::string> sections{"scheduled_per_step"};
  if (summary["comm"].contains("per_step")) sections.push_back("per_step");
  fmt::print(out, "\nbytes a rank a step, planner vs {} ({}):\n", path, fmt::join(sections, ", "));
  for (const ModelParallelPlan::RunTraffic& t : planned) {
    const std::pair<const char*, double> fields[] = {
        {"bytes_sent", t.bytes_sent}, {"bytes_received", t.bytes_received}, {"messages", t.messages}};
    for (const std::string& section : sections) {
      const nlohmann::json& per_tier = summary["comm"][section];
      if (!per_tier.contains(t.tier))
        throw Error(fmt::format("--compare-summary {}: comm.{} has no tier '{}'", path, section, t.tier));
      for (auto [field, want] : fields) {
        const nlohmann::json& v = per_tier[t.tier][field];
        if (!v.is_number())
          throw Error(
              fmt::format("--compare-summary {}: comm.{}.{}.{} is not a number", path, section, t.tier, field));
        const double got = v.get<double>();
        fmt::print(out, "  {:<10} {:<15} {:<19} planner {:>14.1f}  summary {:>16.1f}  {}\n", t.tier, field, section,
                   want, got, got == want ? "equal" : "DIFFERENT");
        if (got != want)
          throw Error(fmt::format("--compare-summary {}: comm.{}.{}.{} = {} but the planner prices {}", path, section,
                                  t.tier, field, v.dump(), want));
      }
    }
  }
  if (!not_compared.empty())
    fmt::print(out, "not compared: {} (the pipeline stages reduce their gradients outside the stage schedule the "
                    "planner prices)\n",
                    fmt::join(not_compared, ", "));
  fmt::print(out, "all equal\n");
}

}  // namespace strata::plan
