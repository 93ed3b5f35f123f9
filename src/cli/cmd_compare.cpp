// strata compare RUN...: one table of the summary.json files of several runs (the demo's
// strategy comparison): final loss, speed, exposed communication, bytes per step per tier,
// memory per rank by state.
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

void compare(const std::vector<std::string>& runs) {
  std::vector<nlohmann::json> s;
  for (auto& r : runs) s.push_back(read_summary(r));
  std::vector<std::string> tiers;
  bool emulated = false;
  for (auto& j : s) {
    // Innermost tier first, as the topology lists them.
    if (j.contains("topology"))
      for (auto& t : j["topology"]["tiers"])
        if (std::find(tiers.begin(), tiers.end(), t["name"].get<std::string>()) == tiers.end())
          tiers.push_back(t["name"].get<std::string>());
    emulated |= j.value("link_emulation", false);
  }
  std::string head = fmt::format("{:<14} {:>8} {:>9} {:>10} {:>10}", "strategy", "loss", "tokens/s", "compute", "exposed");
  for (auto& t : tiers) head += fmt::format(" {:>11}", t + " B/step");
  head += fmt::format(" {:>10} {:>10} {:>10} {:>10}", "weights", "secondary", "grads", "optimizer");
  fmt::print("{}\n", head);
  for (auto& j : s) {
    std::string name = j.value("strategy", std::string("single"));
    std::string line = fmt::format("{:<14} {:>8.4f} {:>9.0f} {:>9.3f}s {:>9.3f}s", name, j["loss"]["final"].get<double>(),
                                   j["tokens_per_s"].get<double>(), j.value("compute_s", 0.0),
                                   j.value("exposed_comm_s", 0.0));
    for (auto& t : tiers) {
      double b = j.contains("comm") && j["comm"]["per_step"].contains(t)
                     ? j["comm"]["per_step"][t]["bytes_sent"].get<double>()
                     : 0.0;
      line += fmt::format(" {:>11}", human_bytes(b));
    }
    if (j.contains("memory_bytes")) {
      const auto& m = j["memory_bytes"];
      for (const char* k : {"weights", "secondary", "grads", "optimizer"})
        line += fmt::format(" {:>10}", human_bytes(m[k].get<double>()));
    }
    fmt::print("{}\n", line);
  }
  fmt::print("per rank; compute and exposed communication are seconds a step; B/step are bytes each rank sends a "
             "step over links of that tier{}\n",
             emulated ? "\nlink emulation ON: every message was held back to the topology's bandwidth and latency" : "");
}

CommandRegistrar registrar(15, [](CLI::App& app) {
  auto runs = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("compare", "Tabulate the summary.json of several runs side by side");
  cmd->add_option("runs", *runs, "output folders of `strata train` (or their summary.json files)")->required();
  cmd->callback([runs] { compare(*runs); });
});

}  // namespace
}  // namespace strata::cli
