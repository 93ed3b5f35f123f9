// strata topo: the topology resolved for a world size and, under mpirun, every rank's
// process groups (gathered to rank 0, printed once).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "cli/command.hpp"
#include "cli/format.hpp"
#include "comm/runtime/agree.hpp"
#include "comm/runtime/mpi_session.hpp"
#include "topo/groups.hpp"
#include "topo/topology.hpp"

namespace strata::cli {
namespace {

struct TopoOptions {
  std::string topology = "host";
  int nodes = 0;
  std::vector<std::string> tier_overrides;
  bool json = false;
};

// "4-7" for a run of consecutive ranks, else "1,5".
std::string rank_list(const std::vector<int>& members) {
  bool consecutive = members.size() > 2;
  for (std::size_t i = 1; i < members.size(); ++i)
    consecutive = consecutive && members[i] == members[i - 1] + 1;
  if (consecutive) return fmt::format("{}-{}", members.front(), members.back());
  return fmt::format("{}", fmt::join(members, ","));
}

// Every rank's groups as JSON, gathered on rank 0 (empty elsewhere).
nlohmann::json gather_groups(const topo::ProcessGroups& groups) {
  nlohmann::json mine = groups.to_json();
  char host[MPI_MAX_PROCESSOR_NAME];
  int host_len = 0;
  MPI_Get_processor_name(host, &host_len);
  mine["host"] = std::string(host, host_len);
  nlohmann::json ranks = nlohmann::json::array();
  for (const std::string& text : comm::all_gather_strings(MPI_COMM_WORLD, mine.dump(), "gather_groups", "world"))
    if (groups.rank() == 0) ranks.push_back(nlohmann::json::parse(text));
  return ranks;
}

void print_text(const topo::Topology& topology, const nlohmann::json& doc) {
  std::vector<std::string> sizes;
  for (int t = 0; t < topology.num_tiers(); ++t) {
    const bool known = topology.resolved() || t < topology.outermost();
    sizes.push_back(
        fmt::format("{} {}", topology.tier(t).name, known ? std::to_string(topology.tier(t).size) : "?"));
  }
  fmt::print("topology '{}': {} = {}\n", topology.name(),
             topology.resolved() ? count_of(topology.world_size(), "rank") : std::string("unresolved"),
             fmt::join(sizes, " x "));
  fmt::print("  {:<10} {:>6} {:>13} {:>8} {:>8} {:>11} {:>11}\n", "tier", "size", "ranks/domain", "domains",
             "GB/s", "latency_us", "efficiency");
  const nlohmann::json& tiers = doc["topology"]["tiers"];
  for (const auto& t : tiers) {
    auto cell = [](const nlohmann::json& v) { return v.is_null() ? std::string("?") : v.dump(); };
    fmt::print("  {:<10} {:>6} {:>13} {:>8} {:>8} {:>11} {:>11.2f}\n", t["name"].get<std::string>(),
               cell(t["size"]), cell(t["domain_ranks"]), cell(t["num_domains"]),
               t["bandwidth_GBps"].get<double>(), t["latency_us"].get<double>(),
               t["efficiency"].get<double>());
  }
  for (const auto& t : topology.tiers())
    if (!t.source.empty()) fmt::print("  {} source: {}\n", t.name, t.source);
  if (doc.contains("note")) fmt::print("{}\n", doc["note"].get<std::string>());
  if (!doc.contains("ranks")) return;
  fmt::print("groups (within {{members}} / across {{members}}, per tier):\n");
  for (const auto& rank : doc["ranks"]) {
    std::vector<std::string> parts;
    for (const auto& t : rank["tiers"])
      parts.push_back(fmt::format("{} {{{}}} {} {{{}}}", t["within"]["name"].get<std::string>(),
                                  rank_list(t["within"]["members"]), t["across"]["name"].get<std::string>(),
                                  rank_list(t["across"]["members"])));
    fmt::print("  rank {} ({}): {}\n", rank["rank"].get<int>(), rank["host"].get<std::string>(),
               fmt::join(parts, " | "));
  }
}

// The topology as run_topo shows it: loaded, overridden, resolved for `processes` (or
// --nodes); a topology that does not fit one process gets a note in `doc` instead.
topo::Topology load_resolved(const TopoOptions& o, int processes, nlohmann::json& doc) {
  topo::Topology topology = topo::Topology::load(o.topology);
  for (const auto& spec : o.tier_overrides) topology.apply_override(topo::parse_tier_override(spec));
  if (o.nodes > 0) {
    const int wanted = topology.world_size_for_nodes(o.nodes);
    if (processes > 1 && wanted != processes)
      throw Error(
          fmt::format("topo: --nodes {} of topology '{}' makes {} ranks, but {} processes were started",
                      o.nodes, topology.name(), wanted, processes));
    topology.resolve(wanted);
  } else if (processes > 1) {
    topology.resolve(processes);
  } else {
    // One process and no --nodes: show the topology for a world of 1 if it fits, else say why.
    try {
      topology.resolve(1);
    } catch (const Error& e) {
      doc["note"] =
          fmt::format("{}; pass --nodes N or run under mpirun -np N with a world size that fits", e.what());
    }
  }
  return topology;
}

void run_topo(const TopoOptions& o) {
  const comm::MpiSession& mpi = comm::mpi_session();
  const int processes = mpi.world_size();
  nlohmann::json doc;
  // Every rank reads the same file: a refusal is agreed on and printed once.
  std::optional<topo::Topology> loaded;
  comm::agree(MPI_COMM_WORLD, "world", [&] { loaded.emplace(load_resolved(o, processes, doc)); });
  topo::Topology& topology = *loaded;
  doc["processes"] = processes;
  if (topology.resolved() && topology.world_size() == processes) {
    topo::ProcessGroups groups(topology);
    nlohmann::json ranks = gather_groups(groups);
    if (mpi.world_rank() == 0) doc["ranks"] = std::move(ranks);
  } else if (topology.resolved()) {
    doc["note"] =
        fmt::format("one process: the groups of each rank show under mpirun -np {}", topology.world_size());
  }
  if (mpi.world_rank() != 0) return;
  doc["topology"] = topology.to_json();
  if (o.json) {
    fmt::print("{}\n", doc.dump(2));
  } else {
    print_text(topology, doc);
  }
  std::fflush(stdout);
}

const CommandRegistrar kRegisterTopo(50, [](CLI::App& app) {
  auto options = std::make_shared<TopoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "topo", "Show a topology's tiers and, under mpirun, the process groups of every rank");
  cmd->add_option("--topology", options->topology,
                  "preset (frontier, dgx-a100, dgx-h100, host) or a TOML file of [[tiers]]")
      ->capture_default_str();
  cmd->add_option("--nodes", options->nodes,
                  "number of domains of the tier inside the outermost one (nodes); sets the world size")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--tier", options->tier_overrides, "override a tier field: NAME.FIELD=VALUE (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--json", options->json, "print one JSON document");
  cmd->callback([options] { run_topo(*options); });
});

}  // namespace
}  // namespace strata::cli
