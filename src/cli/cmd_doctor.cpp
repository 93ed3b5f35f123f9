// strata doctor OUT [--json] [--calibration FILE]: a run folder held against its plan, from
// its flight recorder dumps (plan/doctor.hpp).
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "plan/doctor.hpp"

namespace strata::cli {
namespace {

struct DoctorArgs {
  std::string out;
  std::string calibration;
  bool json = false;
};

void doctor(const DoctorArgs& args) {
  std::optional<plan::Calibration> calibration;
  if (!args.calibration.empty()) calibration = plan::Calibration::from_toml_file(args.calibration);
  const plan::DoctorReport report = plan::diagnose_run(args.out, calibration ? &*calibration : nullptr);
  if (args.json) fmt::print("{}\n", report.json.dump(2));
  else
    for (const std::string& line : report.lines) fmt::print("{}\n", line);
}

CommandRegistrar registrar(16, [](CLI::App& app) {
  auto args = std::make_shared<DoctorArgs>();
  CLI::App* cmd = app.add_subcommand(
      "doctor", "Say where a run hung or slowed: its flight recorder dumps (OUT/flight) against its plan");
  cmd->add_option("out", args->out, "the output folder of `strata train`")->required();
  cmd->add_option("--calibration", args->calibration, "price the plan with this calibration file (strata calibrate)");
  cmd->add_flag("--json", args->json, "one JSON document, for tools");
  cmd->callback([args] { doctor(*args); });
});

}  // namespace
}  // namespace strata::cli
