#include "plan/device.hpp"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace strata::plan {

namespace {
// The planner's one efficiency guess: dense transformer matmuls at half of peak. Published
// large runs report 30-40% of peak end to end (shared/reference/hardware.md), which also
// pays for communication; this is the compute part alone. --compute-efficiency overrides it.
constexpr double kDefaultComputeEfficiency = 0.5;
// Datasheets give board power (TDP), not idle draw. The planner assumes an idle device draws
// a tenth of it (an assumption, not a measurement; --idle-watts overrides it).
constexpr double kIdleFractionOfTdp = 0.1;
constexpr std::string_view kMemoryNote =
    "memory in GB of 1e9 bytes as marketed; the devices hold GiB, and the difference stands in for the "
    "runtime's own allocations";
constexpr std::string_view kIdleNote =
    "idle draw assumed a tenth of TDP (no datasheet figure; --idle-watts overrides it)";
}  // namespace

void DeviceFacts::validate() const {
  auto positive = [](const char* flag, double v) {
    if (!(v > 0) || !std::isfinite(v)) throw Error(fmt::format("{} = {}: must be positive", flag, v));
  };
  positive("--peak-tflops", peak_tflops);
  positive("--device-memory-gb", memory_gb);
  positive("--hbm-gbps", hbm_GBps);
  if (!(compute_efficiency > 0 && compute_efficiency <= 1))
    throw Error(fmt::format("--compute-efficiency = {}: must be in (0, 1]", compute_efficiency));
  if (!(tdp_watts >= 0) || !std::isfinite(tdp_watts))
    throw Error(fmt::format("--tdp-watts = {}: must not be negative", tdp_watts));
  if (!(idle_watts >= 0 && idle_watts <= tdp_watts))
    throw Error(fmt::format("--idle-watts = {}: must be between 0 and the TDP ({} W{})", idle_watts, tdp_watts,
                            tdp_watts == 0 ? "; give --tdp-watts" : ""));
}

std::optional<DeviceFacts> device_for_topology(std::string_view topology_name) {
  // Figures from shared/reference/hardware.md (vendor datasheets).
  if (topology_name == "frontier")
    return DeviceFacts{"AMD MI250X GCD", 191.5, 64, 1600, kDefaultComputeEfficiency, 280, 280 * kIdleFractionOfTdp,
                       fmt::format("MI250X datasheet: 383 TFLOP/s dense bf16, 128 GB HBM2e at 3.2 TB/s and 560 W "
                                   "peak board power per package of 2 GCDs (280 W a GCD); {}; {}",
                                   kMemoryNote, kIdleNote)};
  if (topology_name == "dgx-a100")
    return DeviceFacts{"NVIDIA A100 SXM4 80GB", 312, 80, 2000, kDefaultComputeEfficiency, 400,
                       400 * kIdleFractionOfTdp,
                       fmt::format("A100 datasheet: 312 TFLOP/s dense bf16, 80 GB HBM2e at ~2.0 TB/s, 400 W TDP; {}; {}",
                                   kMemoryNote, kIdleNote)};
  if (topology_name == "dgx-h100")
    return DeviceFacts{"NVIDIA H100 SXM5", 989, 80, 3350, kDefaultComputeEfficiency, 700, 700 * kIdleFractionOfTdp,
                       fmt::format("H100 datasheet: ~989 TFLOP/s dense bf16, 80 GB HBM3 at ~3.35 TB/s, up to 700 W "
                                   "TDP; {}; {}",
                                   kMemoryNote, kIdleNote)};
  return std::nullopt;
}

DeviceFacts resolve_device(std::string_view topology_name, const DeviceOverrides& o) {
  DeviceFacts d;
  if (auto preset = device_for_topology(topology_name)) {
    d = *preset;
    if (o.peak_tflops || o.memory_gb || o.hbm_GBps || o.compute_efficiency || o.tdp_watts || o.idle_watts)
      d.source += "; overridden on the command line";
  } else {
    std::vector<std::string> missing;
    if (!o.peak_tflops) missing.push_back("--peak-tflops");
    if (!o.memory_gb) missing.push_back("--device-memory-gb");
    if (!o.hbm_GBps) missing.push_back("--hbm-gbps");
    if (!missing.empty())
      throw Error(fmt::format("topology '{}' has no preset device (frontier, dgx-a100 and dgx-h100 have): give {}",
                              topology_name, fmt::join(missing, ", ")));
    d.name = "given";
    d.compute_efficiency = kDefaultComputeEfficiency;
    d.source = "command line";
  }
  d.peak_tflops = o.peak_tflops.value_or(d.peak_tflops);
  d.memory_gb = o.memory_gb.value_or(d.memory_gb);
  d.hbm_GBps = o.hbm_GBps.value_or(d.hbm_GBps);
  d.compute_efficiency = o.compute_efficiency.value_or(d.compute_efficiency);
  if (o.tdp_watts) {
    // A new TDP moves the assumed idle draw with it unless that is given too.
    d.tdp_watts = *o.tdp_watts;
    d.idle_watts = *o.tdp_watts * kIdleFractionOfTdp;
  }
  d.idle_watts = o.idle_watts.value_or(d.idle_watts);
  d.validate();
  return d;
}

nlohmann::json DeviceFacts::to_json() const {
  return {{"name", name},
          {"peak_tflops", peak_tflops},
          {"memory_gb", memory_gb},
          {"hbm_GBps", hbm_GBps},
          {"compute_efficiency", compute_efficiency},
          {"tdp_watts", tdp_watts},
          {"idle_watts", idle_watts},
          {"source", source}};
}

}  // namespace strata::plan
