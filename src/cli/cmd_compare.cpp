// strata compare RUN...: one table of the summary.json files of several runs (the demo's
// strategy comparison), a row a run folder: strategy, ranks, final and validation loss, speed,
// exposed communication, bytes per step per tier of each topology, memory per rank by state.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// The model a run trained, as its summary records it: "tiny 4x128 0.84M" (preset, layers x
// width, parameters): runs of one preset with other shapes are told apart.
std::string model_cell(const nlohmann::json& summary) {
  if (!summary.contains("model")) return kNone;
  const nlohmann::json& m = summary["model"];
  const nlohmann::json& c = m["config"];
  return fmt::format("{} {}x{} {:.2f}M", m.value("preset", std::string("custom")), c.value("n_layer", 0),
                     c.value("n_embd", 0), m.value("params", 0.0) / 1e6);
}

// A tier column: the topology it belongs to and the tier's name there.
struct TierKey {
  std::string topology, tier;
  bool operator==(const TierKey&) const = default;
};

// The wires a run quantizes ("int8 weights, int4 gradients"), empty when all are fp32: what its
// extra compute pays for.
std::string quantized_wires(const nlohmann::json& summary) {
  if (!summary.contains("shard_spec")) return "";
  const nlohmann::json& spec = summary["shard_spec"];
  std::vector<std::string> parts;
  const std::pair<const char*, const char*> wires[] = {
      {"weight_wire", "weights"}, {"grad_wire", "gradients"}, {"step_grad_wire", "step gradients"}};
  for (const auto& [key, what] : wires) {
    const std::string dtype = spec.value(key, std::string("fp32"));
    if (dtype != "fp32") parts.push_back(fmt::format("{} {}", dtype, what));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// One line under the table: why each sharded run is faster or slower than the one that moves the
// most bytes over the outermost link, in the three things that decide it: the bytes it moves
// there, what they cost at the link's rate (α + n/β a message, the emulation's and the
// planner's formula), and the compute that quantizing its wires adds (measured). Printed when
// two or more sharded runs share a topology.
void explain_outer_link(const std::vector<std::string>& runs, const std::vector<nlohmann::json>& s) {
  std::vector<std::size_t> sharded;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i].contains("topology") && s[i].contains("comm") &&
        s[i]["topology"]["name"] == s[sharded.empty() ? i : sharded.front()]["topology"]["name"])
      sharded.push_back(i);
  if (sharded.size() < 2) return;
  const nlohmann::json& outer = s[sharded.front()]["topology"]["tiers"].back();
  const std::string tier = outer["name"].get<std::string>();
  const double rate_GBps = outer.value("rank_bandwidth_GBps", outer.value("bandwidth_GBps", 0.0));
  const double latency_s = outer.value("latency_us", 0.0) * 1e-6;
  auto traffic = [&](std::size_t i, const char* key) {
    return s[i]["comm"]["per_step"].value(tier, nlohmann::json::object()).value(key, 0.0);
  };
  auto link_s = [&](std::size_t i) {
    return traffic(i, "messages") * latency_s + (rate_GBps > 0 ? traffic(i, "bytes_sent") / (rate_GBps * 1e9) : 0.0);
  };
  auto name = [&](std::size_t i) { return s[i].value("strategy", runs[i]); };
  const std::size_t base = *std::max_element(sharded.begin(), sharded.end(), [&](std::size_t a, std::size_t b) {
    return traffic(a, "bytes_sent") < traffic(b, "bytes_sent");
  });
  std::vector<std::string> parts;
  for (std::size_t i : sharded) {
    if (i == base) continue;
    const std::string quant = quantized_wires(s[i]);
    parts.push_back(fmt::format("{} {} = {:.3f} s, compute {:+.3f} s{} -> {:.2f}x its speed", name(i),
                                human_bytes(traffic(i, "bytes_sent")), link_s(i),
                                s[i].value("compute_s", 0.0) - s[base].value("compute_s", 0.0),
                                quant.empty() ? "" : fmt::format(" (quantizing {})", quant),
                                s[i]["tokens_per_s"].get<double>() / s[base]["tokens_per_s"].get<double>()));
  }
  fmt::print("why: at {:g} GB/s a rank over the {} link, {}'s {} a step cost {:.3f} s; against it: {}. Fewer bytes "
             "win where the link time they save exceeds the compute quantizing adds\n",
             rate_GBps, tier, name(base), human_bytes(traffic(base, "bytes_sent")), link_s(base),
             fmt::join(parts, "; "));
}

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
  Column run("run", true), model("model", true), strategy("strategy", true), ranks("ranks"), loss("loss"), val("val loss"),
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
    model.cells.push_back(model_cell(j));
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
  std::vector<Column> columns{run, model, strategy, ranks, loss, val, speed, compute, exposed};
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
  explain_outer_link(runs, s);
}

CommandRegistrar registrar(15, [](CLI::App& app) {
  auto runs = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("compare", "Tabulate the summary.json of several runs side by side");
  cmd->add_option("runs", *runs, "output folders of `strata train` (or their summary.json files)")->required();
  cmd->callback([runs] { compare(*runs); });
});

}  // namespace
}  // namespace strata::cli
