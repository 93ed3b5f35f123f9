#pragma once
// strata plan --emit FRAMEWORK FILE: the chosen plan as DeepSpeed, PyTorch FSDP2, torchtitan
// or Megatron-LM configure it (docs/planner.md "Your framework's config (--emit) and the
// recommendation"). Where the framework cannot run strata's plan as priced (weights sharded
// over a die pair, int8 gradients, a secondary copy torchtitan cannot name, ...) the file
// says so and carries the nearest plan the framework runs, priced as well.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plan/model_parallel.hpp"

namespace strata::plan {

enum class Framework { DeepSpeed, Fsdp2, Torchtitan, Megatron };
Framework parse_framework(std::string_view text);  // deepspeed | fsdp2 | torchtitan | megatron; Error names --emit
std::string_view framework_name(Framework f);      // "DeepSpeed", "PyTorch FSDP2", ...

// strata's plan as one framework runs it: the nearest spec and workload it can express, and
// in words what of strata's plan it cannot (empty: it runs the plan as priced).
struct FrameworkPlan {
  Framework framework = Framework::DeepSpeed;
  shard::ShardSpec spec;
  Workload workload;
  std::vector<std::string> gaps;
};
// `spec` resolved over `dp_topology` (the data-parallel topology of the split `mp`).
FrameworkPlan nearest_plan(Framework framework, const shard::ShardSpec& spec, const Workload& workload,
                           const ModelParallel& mp, const topo::Topology& dp_topology);

// One plan to write: the chosen strategy priced on the physical topology.
struct EmitRequest {
  Framework framework = Framework::DeepSpeed;
  ModelShape model;
  topo::Topology topology;  // physical, resolved
  DeviceFacts device;
  Workload workload;        // as the plan was priced (--search: one device's batch)
  std::vector<LeaveOut> leave_out;
  std::optional<Calibration> calibration;
  NamedSpec chosen;
};
struct Emitted {
  std::string text;       // the file's contents
  FrameworkPlan plan;     // what the file configures
  Estimate strata;        // strata's plan, priced
  Estimate framework;     // the file's plan, priced (strata's own when plan.gaps is empty)
};
Emitted emit(const EmitRequest& request);

}  // namespace strata::plan
