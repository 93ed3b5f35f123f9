#pragma once
// What one device (one rank) can do: peak dense bf16 FLOP/s, memory, memory bandwidth, and
// the fraction of peak the planner assumes a transformer's matmuls reach.
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace strata::plan {

struct DeviceFacts {
  std::string name;
  double peak_tflops = 0;          // dense bf16/fp16, per device (rank)
  double memory_gb = 0;            // 1e9 bytes
  double hbm_GBps = 0;             // memory bandwidth (the optimizer step is bound by it)
  double compute_efficiency = 0;   // achieved fraction of peak for the model's FLOPs
  // Power for the energy estimate (plan/model_parallel.hpp): datasheet board power (TDP) and
  // the draw of an idle device; 0 TDP: not known, no energy figure.
  double tdp_watts = 0;
  double idle_watts = 0;
  std::string source;

  void validate() const;  // throws Error naming the field (as its command-line flag)
  nlohmann::json to_json() const;
};

// The device of a topology preset (frontier, dgx-a100, dgx-h100); nullopt for other names.
std::optional<DeviceFacts> device_for_topology(std::string_view topology_name);

struct DeviceOverrides {  // from the command line; unset = the preset's figure
  std::optional<double> peak_tflops, memory_gb, hbm_GBps, compute_efficiency, tdp_watts, idle_watts;
};

// Facts of the topology's preset device with the overrides applied; throws Error naming the
// missing flags when the topology has no preset device, or a bad value's flag.
DeviceFacts resolve_device(std::string_view topology_name, const DeviceOverrides& overrides);

}  // namespace strata::plan
