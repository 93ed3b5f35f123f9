#pragma once
// What `strata plan` prices over, read from its flags (docs/planner.md): the model, the
// cluster, the device, the workload, what is left out and the calibration.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "parallel/options.hpp"
#include "plan/calibration.hpp"
#include "plan/cost_model.hpp"
#include "plan/device.hpp"
#include "plan/model_shapes.hpp"
#include "topo/topology.hpp"

namespace strata::plan {

// The flags as given; std::nullopt: not given.
struct PlanFlags {
  std::string model, topology, cluster;  // --topology or --cluster
  std::vector<std::string> shape_fields, tier_overrides, leave_out;
  std::optional<int> nodes;
  int micro_batch = 1, accum = 1;
  std::optional<int> seq;                // the model's
  std::optional<std::string> recompute;  // empty: a bare --recompute (full)
  bool flash_attention = false, batch_per_device = false, sequence_parallel = false;
  std::string precision = "bf16";
  std::string collectives = "hierarchical";
  std::string granularity = "unit";
  std::string peer;                     // empty: strata's own
  std::string compute_anchor, kernels;  // empty: one efficiency; the peer's generation
  DeviceOverrides device;
  std::string calibration;  // a calibration TOML file
};

// What every mode prices over: the model, the cluster (its topology not yet resolved for a node
// count), the device, the workload, what is left out and the calibration.
struct PlanInputs {
  ModelShape model;
  topo::Topology topology;
  bool nodes_given = false;  // by --nodes or --cluster nodes=
  int nodes = 0;
  DeviceFacts device;
  Workload workload;
  std::vector<LeaveOut> leave_out;
  std::optional<Calibration> calibration;
};

// Error names the flag at fault. A --tier override a calibration's curves make moot is noted on
// `notes` (calibrated_override_notes).
PlanInputs read_inputs(const PlanFlags& flags, std::FILE* notes);

// The sweep's title: the model, topology and workload, and every other option given that changes
// the figures (`shard`, from the sharding flags; tp_given, pp_given: --tp, --pp), so that two
// plots made with different settings never look like the same one.
std::string sweep_title(const PlanFlags& flags, const parallel::ShardOptions& shard, bool tp_given, bool pp_given,
                        const PlanInputs& in);

}  // namespace strata::plan
