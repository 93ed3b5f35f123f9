#pragma once
// strata plan --search as a recommendation (docs/planner.md "Your framework's config (--emit)
// and the recommendation"): the best plan that fits, what bounds it, the runners-up and why
// they lose, the memory headroom once the runtime's own reservations are counted; and when
// nothing fits, the least-memory plans and the smallest change that makes one fit.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "plan/model_parallel.hpp"

namespace strata::plan {

// One --search as the command line asked for it: the (tp, pp) splits are every candidate
// split, or the ones --tp/--pp fix.
struct SearchRequest {
  ModelShape model;
  topo::Topology topology;  // resolved
  DeviceFacts device;
  Workload workload;
  std::vector<LeaveOut> leave_out;
  std::optional<Calibration> calibration;
  SearchSpace space;
  std::optional<int> tp, pp;  // fixed by --tp / --pp
  std::string tp_tier, pp_tier;
};
// The splits the request searches; a split given on the command line must be valid (Error
// naming --tp/--pp), not silently skipped.
std::vector<ModelParallel> search_splits(const SearchRequest& request);
SearchResult run_search(const SearchRequest& request);

// What the step's time goes to, largest first: "compute", "exposed communication on 'cluster'",
// "pipeline bubble", "optimizer step", each with its seconds a step.
struct StepShare {
  std::string what;
  double seconds = 0;
};
std::vector<StepShare> step_shares(const Estimate& e);

// Device memory the runtime takes besides the plan's states, buffers and activations: stated
// figures with their sources (docs/planner.md).
struct Reserved {
  double cuda_context_bytes = 0;
  double nccl_bytes = 0;
  int communicators = 0;
  double fragmentation_bytes = 0;
  double total() const { return cuda_context_bytes + nccl_bytes + fragmentation_bytes; }
};
Reserved runtime_reserved(const Estimate& e);
// "80 GB - 61.2 GB planned - 0.78 GB CUDA context - ... = 13.9 GB headroom"
std::string headroom_line(const Estimate& e);

// Changes tried in order, each on top of the ones before, until some plan fits: flash
// attention, selective then full recomputation, micro-batch 1 (the same global batch), then
// twice, four, eight and sixteen times the nodes. TP, pipelines and quantized wires are part
// of every search already.
struct FitChange {
  std::vector<std::string> flags;  // cumulative: "--flash-attention", "--recompute full", "--nodes 32"
  std::string why;                 // what the last flag saves
  bool fits = false;
  std::optional<Estimate> best;    // the best plan that fits after the change, or the least memory
};
std::vector<FitChange> changes_until_it_fits(const SearchRequest& request);
// The same for one strategy that does not fit (its spec and split kept), with two more changes a
// search tries already: int8 weights where they are sharded, then TP doubled up to 8.
std::vector<FitChange> changes_until_strategy_fits(const SearchRequest& request, const NamedSpec& strategy);
// "the smallest change that fits: --recompute full (...): 812 tokens/s a device, fits: ..."
std::string smallest_change_line(const std::vector<FitChange>& changes);

// The n plans needing the least memory, least first.
std::vector<Estimate> least_memory(const SearchResult& result, std::size_t n);

// A bf16 plan with dense attention of a model published systems train with flash attention:
// what the seq x seq probabilities cost and the flag that drops them; empty otherwise.
std::string flash_attention_hint(const ModelShape& model, const Workload& workload);

// The closing recommendation of --search (the best that fits, its bound, two runners-up,
// headroom), or when nothing fits the least-memory plans and the smallest change; text and JSON.
std::string recommendation_text(const SearchRequest& request, const SearchResult& result,
                                const std::vector<FitChange>& changes);
nlohmann::json recommendation_json(const SearchRequest& request, const SearchResult& result,
                                   const std::vector<FitChange>& changes);

}  // namespace strata::plan
