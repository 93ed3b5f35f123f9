#pragma once
// What one device (one rank) can do: peak dense bf16 FLOP/s, memory, memory bandwidth, and
// the fraction of peak the planner assumes a transformer's matmuls reach.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "plan/compute_shape.hpp"

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
  // --compute-anchor: the efficiency by shape, anchored on a held-out measurement
  // (plan/compute_shape.hpp), in place of compute_efficiency; --kernels: its software
  // generation, else the peer's.
  const ComputeAnchor* compute_anchor = nullptr;
  std::optional<KernelGeneration> kernels;

  void validate() const;  // throws Error naming the field (as its command-line flag)
  nlohmann::json to_json() const;
};

// A GPU's datasheet: the device one rank computes on, and its links inside a node.
struct GpuDatasheet {
  std::string_view key;       // as --cluster gpu= names it
  DeviceFacts device;         // one rank (one GCD of a package of dies)
  double link_GBps = 0;       // to the other packages of a node, per direction a package
  std::string_view link_source;
  int dies = 1;               // ranks a package (MI250X: 2 GCDs)
  double die_link_GBps = 0;   // between the dies of a package, per direction
  std::string_view die_link_source;
  // Thread blocks of one wave (plan/compute_shape.hpp): SMs (NVIDIA) or CUs (AMD) of one rank.
  int compute_units = 0;
  std::string_view compute_units_source;
  bool hopper = false;  // an H100 chip: FlashAttention-3's curves were measured on it
};
const GpuDatasheet& gpu_datasheet(std::string_view key);  // throws Error listing the known GPUs
std::vector<std::string> gpu_names();

// The device of a topology preset (frontier: mi250x, dgx-a100: a100-80, dgx-h100: h100-sxm); nullopt for
// other names.
std::optional<DeviceFacts> device_for_topology(std::string_view topology_name);

struct DeviceOverrides {  // from the command line; unset = the preset's figure
  std::optional<double> peak_tflops, memory_gb, hbm_GBps, compute_efficiency, tdp_watts, idle_watts;
};

// Facts of the preset device (a topology preset's or a --cluster's GPU) with the overrides
// applied; throws Error naming the missing flags when there is none (naming the topology), or
// a bad value's flag.
DeviceFacts resolve_device(const std::optional<DeviceFacts>& preset, std::string_view topology_name,
                           const DeviceOverrides& overrides);

}  // namespace strata::plan
