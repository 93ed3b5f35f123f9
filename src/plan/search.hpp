#pragma once
// strata plan --search: every valid shard spec of a topology, priced and ranked.
// strata plan --sweep-nodes: chosen strategies priced over a range of node counts.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "plan/cost_model.hpp"

namespace strata::plan {

// What the search varies besides tiers, and what it keeps from the command line.
struct SearchSpace {
  int prefetch = 1;
  int block_size = 256;
  bool free_after_forward = true;
  std::uint64_t bucket_bytes = shard::ShardSpec{}.bucket_bytes;
  std::uint64_t first_bucket_bytes = shard::ShardSpec{}.first_bucket_bytes;
};

// Every spec that resolve() accepts on `topology`: W, G and OS tiers (none or any tier, with
// degree(OS) >= degree(G) >= degree(W)), a secondary tier inside W's, and wires from
// {precision's, int8} for weight gathers (where weights are gathered), {precision's, int8,
// int4} for per-micro-batch gradient reductions (where gradients are sharded), the
// precision's for the once-a-step reduction. A spec equal to a strategy preset is named so.
// Tensor and pipeline parallelism beside the spec (plan/model_parallel.hpp).
struct ModelParallel {
  int tp = 1, pp = 1;
  std::string tp_tier;  // empty: the innermost tier
  std::string pp_tier;  // empty: the outermost tier
  std::vector<int> pp_layers = {};  // blocks of each stage (--pp-layers); empty: equal stages
  bool operator==(const ModelParallel&) const = default;
};
struct NamedSpec {
  std::string name;  // preset name or "custom"
  shard::ShardSpec spec;
  ModelParallel mp = {};
};
std::vector<NamedSpec> enumerate_specs(const topo::Topology& topology, Precision precision, const SearchSpace& space);

// "W=gpu G=node OS=cluster S=- w:int8 g:int4 s:bf16"
std::string spec_label(const shard::ShardSpec& spec);

// Step time over the tokens the step trains (all ranks): what --search ranks by, so splits
// that train different global batches still compare fairly.
double seconds_per_token(const Estimate& e);
// Less time a token first; ties go to less memory, then to fewer bytes over the outermost tier.
bool ranks_before(const Estimate& a, const Estimate& b);

struct SearchResult {
  std::vector<Estimate> fitting;      // least time a token first (ties: less memory, then fewer outer-tier bytes)
  std::vector<Estimate> not_fitting;  // least time a token first
};
class ModelParallelPlan;
// Every spec of the plan's data-parallel topology, priced at its (tp, pp) split.
SearchResult search(const ModelParallelPlan& plan, const SearchSpace& space);

// Why `loser` ranks below `best`: the difference in time a token and what it comes from (per
// step, at the same global batch), e.g. "+12.3% time a token (+0.41 s a step): cluster comm
// +0.38 s, compute +0.03 s"; for a spec that does not fit: "does not fit: needs 71.2 GB of
// 64 GB (would be 5.0% faster)", faster meaning more tokens a second than `best`.
std::string why_lost(const Estimate& loser, const Estimate& best);

nlohmann::json search_json(const SearchResult& result, int top);

// One strategy at one node count.
struct SweepPoint {
  int nodes = 0;
  Estimate estimate;
  double scaling_efficiency = 0;  // (throughput(n)/n) / (throughput(n0)/n0), n0 = first node count
};
struct SweepSeries {
  std::string strategy;
  std::vector<SweepPoint> points;
};
// Each node count resolves its own copy of `topology` (unresolved or not) and prices every
// strategy there, with its tensor and pipeline parallelism.
std::vector<SweepSeries> sweep(const ModelShape& model, const topo::Topology& topology, const DeviceFacts& device,
                               const Workload& workload, const std::vector<LeaveOut>& leave_out,
                               const std::vector<NamedSpec>& strategies, const std::vector<int>& nodes,
                               const std::optional<Calibration>& calibration = std::nullopt);
std::vector<int> parse_node_list(std::string_view text);  // "1,2,4" -> {1,2,4}; Error names --sweep-nodes
// Tokens/s and TFLOP/s per device against devices (log x) and outer-tier bytes a rank a
// step: three charts.
std::string sweep_svg(const std::vector<SweepSeries>& series, const std::string& title, const std::string& outer_tier);
nlohmann::json sweep_json(const std::vector<SweepSeries>& series, const std::string& outer_tier);

}  // namespace strata::plan
