#pragma once
// What `strata plan` prints (docs/planner.md): the inputs' header, the estimates' table, the
// search's ranking and the sweep's tables as text, the notes it gives, and each mode's --json
// document.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/calibration.hpp"
#include "plan/cost_model.hpp"
#include "plan/model_parallel.hpp"
#include "plan/recommend.hpp"
#include "plan/search.hpp"

namespace strata::plan {

std::string tier_sizes(const topo::Topology& t);  // "gpu 8 x node 2"

// The model, device, workload and tiers `c` prices over (calibrated curves included).
// sweep_largest: in a sweep, the topology at its largest node count (the outermost tier's size
// changes with the node count, so it is not printed; the largest ring is checked against a
// curve by group size).
std::string header_text(const PlanContext& c, const std::string& nodes_text,
                        const topo::Topology* sweep_largest = nullptr);
// The header, a row per estimate, what the columns mean, and each estimate's memory; a
// strategy of `chosen` (the estimates' own, in order) that does not fit ends with the
// smallest change that makes it fit, searched over `request`.
std::string estimates_text(const PlanContext& c, const SearchRequest& request, const std::vector<Estimate>& estimates,
                           const std::vector<NamedSpec>& chosen);
// The header, the `top` fitting specs, as many runners-up and why they lost, the fastest
// that do not fit, then `recommendation`.
std::string search_text(const PlanContext& c, const SearchResult& r, int top, const std::string& recommendation);
// The sweep's tables: tokens/s, TFLOP/s and the outer tier's bytes, a row per node count.
std::string sweep_text(const std::vector<SweepSeries>& series, const std::string& outer);

// A calibrated collective is priced as measured, so a --tier override (`specs`) of the rate its
// curve replaces (bandwidth_GBps, efficiency, ports, port_GBps) moves only the tier's other
// collectives, and one of latency_us only those without a fixed cost of their own: a note
// for each such override, rather than let it look applied.
std::vector<std::string> calibrated_override_notes(const std::vector<std::string>& specs,
                                                   const Calibration& calibration);

// --json: the model, topology and assumptions every mode's document starts from.
nlohmann::json plan_document(const PlanContext& c);
nlohmann::json estimates_document(const PlanContext& c, const std::vector<Estimate>& estimates);
nlohmann::json search_document(const PlanContext& c, const SearchRequest& request, const SearchResult& result,
                               const std::vector<FitChange>& changes, int top);
// `first`: the context at the sweep's first node count.
nlohmann::json sweep_document(const PlanContext& first, const std::vector<SweepSeries>& series,
                              const std::string& outer);

}  // namespace strata::plan
