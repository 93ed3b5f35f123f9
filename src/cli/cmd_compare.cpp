// strata compare RUN...: one table of the summary.json files of several runs (the demo's
// strategy comparison), a row a run folder: strategy, ranks, final and validation loss, speed,
// exposed communication, bytes per step per tier of each topology, memory per rank by state.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "cli/command.hpp"
#include "cli/format.hpp"

namespace strata::cli {
namespace {

nlohmann::json read_summary(const std::filesystem::path& run) {
  std::filesystem::path file = std::filesystem::is_directory(run) ? run / "summary.json" : run;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file_text(file));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not a summary.json: {}", file.string(), e.what()));
  }
  for (const char* key : {"loss", "tokens_per_s"})
    if (!j.contains(key)) throw Error(fmt::format("{}: field '{}' missing", file.string(), key));
  return j;
}

// One column of a summary table: rows right-aligned, the label column left-aligned.
struct Column {
  explicit Column(std::string heading, bool left_aligned = false) : head(std::move(heading)), left(left_aligned) {}
  std::string head;
  bool left;
  std::vector<std::string> cells;
};

void print_table(const std::vector<Column>& columns) {
  std::vector<std::size_t> width;
  for (const Column& c : columns) {
    std::size_t w = c.head.size();
    for (const std::string& cell : c.cells) w = std::max(w, cell.size());
    width.push_back(w);
  }
  const std::size_t rows = columns.front().cells.size();
  for (std::size_t r = 0; r <= rows; ++r) {
    std::string line;
    for (std::size_t i = 0; i < columns.size(); ++i) {
      const std::string& text = r == 0 ? columns[i].head : columns[i].cells[r - 1];
      if (i > 0) line += "  ";
      line += columns[i].left ? fmt::format("{:<{}}", text, width[i]) : fmt::format("{:>{}}", text, width[i]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    fmt::print("{}\n", line);
  }
}

// What a run has no figure for: a single-process run shards and communicates nothing; a
// tier column belongs to another run's topology.
constexpr const char* kNone = "-";

// A tier column: the topology it belongs to and the tier's name there.
struct TierKey {
  std::string topology, tier;
  bool operator==(const TierKey&) const = default;
};

void compare(const std::vector<std::string>& runs) {
  std::vector<nlohmann::json> s;
  for (auto& r : runs) s.push_back(read_summary(r));
  // Tiers of different topologies stay apart even when their names agree: 'node' of a
  // 4-rank node and of an 8-rank one are different links.
  std::vector<TierKey> tiers;
  std::vector<std::string> topologies;
  bool emulated = false, single = false;
  for (auto& j : s) {
    if (j.contains("topology")) {
      const std::string topo = j["topology"]["name"].get<std::string>();
      if (std::find(topologies.begin(), topologies.end(), topo) == topologies.end()) topologies.push_back(topo);
      for (auto& t : j["topology"]["tiers"]) {  // innermost tier first, as the topology lists them
        const TierKey key{topo, t["name"].get<std::string>()};
        if (std::find(tiers.begin(), tiers.end(), key) == tiers.end()) tiers.push_back(key);
      }
    }
    single |= !j.contains("strategy");
    emulated |= j.value("link_emulation", false);
  }
  auto number = [](const nlohmann::json& j, const char* key, const char* format) -> std::string {
    return j.contains(key) && j[key].is_number() ? fmt::format(fmt::runtime(format), j[key].get<double>()) : kNone;
  };
  Column run("run", true), strategy("strategy", true), ranks("ranks"), loss("loss"), val("val loss"),
      speed("tokens/s"), compute("compute"), exposed("exposed");
  std::vector<Column> tier_columns;
  for (const TierKey& t : tiers)
    tier_columns.emplace_back(topologies.size() > 1 ? fmt::format("{}:{} B/step", t.topology, t.tier)
                                                    : t.tier + " B/step");
  const char* states[] = {"weights", "secondary", "grads", "optimizer"};
  std::vector<Column> memory;
  for (const char* k : states) memory.emplace_back(k);
  for (std::size_t i = 0; i < s.size(); ++i) {
    const nlohmann::json& j = s[i];
    run.cells.push_back(runs[i]);
    strategy.cells.push_back(j.value("strategy", std::string("single")));
    ranks.cells.push_back(std::to_string(j.value("world_size", 1)));
    loss.cells.push_back(fmt::format("{:.4f}", j["loss"]["final"].get<double>()));
    val.cells.push_back(number(j, "val_loss", "{:.4f}"));
    speed.cells.push_back(number(j, "tokens_per_s", "{:.0f}"));
    compute.cells.push_back(number(j, "compute_s", "{:.3f}s"));
    exposed.cells.push_back(number(j, "exposed_comm_s", "{:.3f}s"));
    const std::string topo = j.contains("topology") ? j["topology"]["name"].get<std::string>() : "";
    for (std::size_t t = 0; t < tiers.size(); ++t) {
      const bool has = tiers[t].topology == topo && j.contains("comm") && j["comm"]["per_step"].contains(tiers[t].tier);
      tier_columns[t].cells.push_back(
          has ? human_bytes(j["comm"]["per_step"][tiers[t].tier]["bytes_sent"].get<double>()) : kNone);
    }
    for (std::size_t k = 0; k < memory.size(); ++k)
      memory[k].cells.push_back(j.contains("memory_bytes") ? human_bytes(j["memory_bytes"][states[k]].get<double>())
                                                           : kNone);
  }
  std::vector<Column> columns{run, strategy, ranks, loss, val, speed, compute, exposed};
  columns.insert(columns.end(), tier_columns.begin(), tier_columns.end());
  columns.insert(columns.end(), memory.begin(), memory.end());
  print_table(columns);
  fmt::print("per rank; compute and exposed communication are seconds a step; B/step are bytes each rank sends a "
             "step over links of that tier{}; val loss: the last validation (- without --val-data)\n",
             topologies.size() > 1 ? " (of that topology)" : "");
  if (single)
    fmt::print("single: a single-process run; it shards and communicates nothing, so it has no compute/exposed "
               "split, traffic or memory by state (-)\n");
  if (emulated)
    fmt::print("link emulation ON: every message was held back to the topology's bandwidth and latency\n");
}

CommandRegistrar registrar(15, [](CLI::App& app) {
  auto runs = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("compare", "Tabulate the summary.json of several runs side by side");
  cmd->add_option("runs", *runs, "output folders of `strata train` (or their summary.json files)")->required();
  cmd->callback([runs] { compare(*runs); });
});

}  // namespace
}  // namespace strata::cli
