#include "plan/search.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/text.hpp"
#include "plan/model_parallel.hpp"
#include "plan/svg.hpp"

namespace strata::plan {

using shard::ShardSpec;

namespace {

bool same_spec(const ShardSpec& a, const ShardSpec& b) {
  return a.weights == b.weights && a.grads == b.grads && a.optimizer == b.optimizer && a.secondary == b.secondary &&
         a.weight_wire == b.weight_wire && a.grad_wire == b.grad_wire && a.step_grad_wire == b.step_grad_wire &&
         a.block_size == b.block_size && a.prefetch == b.prefetch &&
         a.reductions_in_flight == b.reductions_in_flight && a.free_after_forward == b.free_after_forward &&
         a.bucket_bytes == b.bucket_bytes && a.first_bucket_bytes == b.first_bucket_bytes &&
         a.step_grad_allreduce == b.step_grad_allreduce;
}

// The search space's fixed settings.
void apply_space(ShardSpec& spec, const SearchSpace& space) {
  spec.prefetch = space.prefetch;
  spec.block_size = space.block_size;
  spec.free_after_forward = space.free_after_forward;
  spec.bucket_bytes = space.bucket_bytes;
  spec.first_bucket_bytes = space.first_bucket_bytes;
}

}  // namespace

double seconds_per_token(const Estimate& e) { return e.step_time_s / e.tokens_per_step; }

bool ranks_before(const Estimate& a, const Estimate& b) {
  if (seconds_per_token(a) != seconds_per_token(b)) return seconds_per_token(a) < seconds_per_token(b);
  if (a.total_memory_bytes != b.total_memory_bytes) return a.total_memory_bytes < b.total_memory_bytes;
  return a.tiers.back().traffic.bytes_sent < b.tiers.back().traffic.bytes_sent;
}

std::string spec_label(const ShardSpec& spec) {
  auto tier = [](const std::string& t) { return t == "none" ? std::string("-") : t; };
  return fmt::format("W={} G={} OS={} S={} w:{} g:{} s:{}{}", tier(spec.weights), tier(spec.grads),
                     tier(spec.optimizer), tier(spec.secondary), dtype_name(spec.weight_wire),
                     dtype_name(spec.grad_wire), dtype_name(spec.step_grad_wire),
                     spec.step_grad_allreduce ? " step-allreduce" : "");
}

std::vector<NamedSpec> enumerate_specs(const topo::Topology& topology, Precision precision, const SearchSpace& space) {
  const int n = topology.num_tiers();
  const DType base = compute_dtype(precision);
  std::vector<NamedSpec> presets;
  for (const std::string& name : strategy_names()) {
    try {
      ShardSpec p = apply_precision(strategy_spec(name, topology), precision);
      apply_space(p, space);
      presets.push_back({name, p});
    } catch (const Error&) {
      // A preset this topology cannot hold (e.g. hsdp on one tier) names nothing here.
    }
  }
  auto tier_name = [&](int levels) { return levels == 0 ? std::string("none") : topology.tier(levels - 1).name; };

  std::vector<NamedSpec> out;
  for (int w = 0; w <= n; ++w)
    for (int g = w; g <= n; ++g)
      for (int o = g; o <= n; ++o)
        for (int s = 0; s < std::max(1, w); ++s) {
          // Weights travel in gathers when sharded or regathered after the step.
          const bool weight_gathers = w > 0 || o > w;
          std::vector<DType> weight_wires{base};
          if (weight_gathers) weight_wires.push_back(DType::I8);
          std::vector<DType> grad_wires{base};
          if (g > 0) grad_wires.insert(grad_wires.end(), {DType::I8, DType::I4});
          for (DType ww : weight_wires)
            for (DType gw : grad_wires) {
              ShardSpec spec{.preset = "custom", .weights = tier_name(w), .grads = tier_name(g),
                             .optimizer = tier_name(o), .secondary = tier_name(s), .weight_wire = ww,
                             .grad_wire = gw, .step_grad_wire = base};
              apply_space(spec, space);
              std::string name = "custom";
              for (const NamedSpec& p : presets)
                if (same_spec(p.spec, spec)) {
                  name = p.name;
                  spec.preset = p.name;
                }
              shard::resolve(spec, topology);  // every spec built here must be valid
              out.push_back({name, spec});
            }
        }
  return out;
}

SearchResult search(const ModelParallelPlan& plan, const SearchSpace& space) {
  SearchResult r;
  const Precision precision = plan.stage(0).workload().precision;
  for (const NamedSpec& s : enumerate_specs(plan.data_parallel_topology(), precision, space)) {
    Estimate e = plan.estimate(s.name, s.spec);
    (e.fits ? r.fitting : r.not_fitting).push_back(std::move(e));
  }
  std::stable_sort(r.fitting.begin(), r.fitting.end(), ranks_before);
  std::stable_sort(r.not_fitting.begin(), r.not_fitting.end(), ranks_before);
  return r;
}

std::string why_lost(const Estimate& loser, const Estimate& best) {
  // Tokens a second of the loser against the best's: above 1, the loser is faster.
  const double speedup = seconds_per_token(best) / seconds_per_token(loser);
  if (!loser.fits)
    return fmt::format("does not fit: needs {:.1f} GB of {:g} GB ({})",
                       static_cast<double>(loser.total_memory_bytes) / 1e9,
                       static_cast<double>(loser.device_memory_bytes) / 1e9,
                       speedup > 1 ? fmt::format("would be {:.1f}% faster", (speedup - 1) * 100)
                                   : fmt::format("would be {:.1f}% slower anyway", (1 - speedup) * 100));
  // In seconds a step at the best's global batch, so the parts below add up to it.
  const double delta = seconds_per_token(loser) * best.tokens_per_step - best.step_time_s;
  if (delta <= 0) {
    return fmt::format("same predicted step time; holds {:.2f} GB more a rank",
                       (static_cast<double>(loser.total_memory_bytes) - static_cast<double>(best.total_memory_bytes)) /
                           1e9);
  }
  // Where the extra time comes from: compute, optimizer, and each tier's unhidden communication.
  std::vector<std::pair<double, std::string>> parts{{loser.compute_s - best.compute_s, "compute"},
                                                    {loser.optimizer_s - best.optimizer_s, "optimizer step"},
                                                    {loser.pp_bubble_s - best.pp_bubble_s, "pipeline bubble"}};
  for (std::size_t t = 0; t < loser.tiers.size(); ++t) {
    const TierCost& a = loser.tiers[t];
    const TierCost& b = best.tiers[t];
    parts.push_back({a.exposed_micro_s + a.step_phase_s - b.exposed_micro_s - b.step_phase_s,
                     fmt::format("{} comm", a.traffic.tier)});
  }
  std::sort(parts.begin(), parts.end(), [](auto& x, auto& y) { return x.first > y.first; });
  std::vector<std::string> named;
  for (auto& [seconds, what] : parts)
    if (seconds > 0.05 * delta && named.size() < 2) named.push_back(fmt::format("{} +{:.3g} s", what, seconds));
  return fmt::format("+{:.1f}% time a token (+{:.3g} s a step): {}", delta / best.step_time_s * 100, delta,
                     fmt::join(named, ", "));
}

nlohmann::json search_json(const SearchResult& result, int top) {
  nlohmann::json ranked = nlohmann::json::array(), lost = nlohmann::json::array();
  for (std::size_t i = 0; i < result.fitting.size(); ++i) {
    nlohmann::json j = result.fitting[i].to_json();
    j["rank"] = i + 1;
    j["label"] = spec_label(result.fitting[i].spec);
    j["seconds_per_token"] = seconds_per_token(result.fitting[i]);
    j["tokens_per_s_per_device"] = result.fitting[i].tokens_per_s / result.fitting[i].world_size;
    if (i > 0) j["why_lost"] = why_lost(result.fitting[i], result.fitting[0]);
    (static_cast<int>(i) < top ? ranked : lost).push_back(std::move(j));
  }
  nlohmann::json unfit = nlohmann::json::array();
  for (const Estimate& e : result.not_fitting) {
    nlohmann::json j = {{"label", spec_label(e.spec)},
                        {"strategy", e.strategy},
                        {"step_time_s", e.step_time_s},
                        {"tensor_parallel", e.tensor_parallel},
                        {"pipeline_stages", e.pipeline_stages},
                        {"tokens_per_s_per_device", e.tokens_per_s / e.world_size},
                        {"memory_bytes_total", e.total_memory_bytes},
                        {"device_memory_bytes", e.device_memory_bytes}};
    if (!result.fitting.empty()) j["why_lost"] = why_lost(e, result.fitting[0]);
    unfit.push_back(std::move(j));
  }
  return {{"ranked_by", "time a token (step time / tokens a step), every split at the same global batch"},
          {"evaluated", result.fitting.size() + result.not_fitting.size()},
          {"fitting", result.fitting.size()},
          {"best", ranked},
          {"others", lost},
          {"not_fitting", unfit}};
}

std::vector<int> parse_node_list(std::string_view text) {
  std::vector<int> nodes;
  for (std::string_view item : split_list(text)) {
    int v = 0;
    if (!parse_whole(item, v) || v <= 0)
      throw Error(fmt::format("--sweep-nodes '{}': '{}' is not a positive node count", text, item));
    if (!nodes.empty() && v <= nodes.back())
      throw Error(fmt::format("--sweep-nodes '{}': node counts must increase ({} after {})", text, v, nodes.back()));
    nodes.push_back(v);
  }
  return nodes;
}

std::vector<SweepSeries> sweep(const ModelShape& model, const topo::Topology& topology, const DeviceFacts& device,
                               const Workload& workload, const std::vector<LeaveOut>& leave_out,
                               const std::vector<NamedSpec>& strategies, const std::vector<int>& nodes,
                               const std::optional<Calibration>& calibration) {
  std::vector<SweepSeries> out;
  for (const NamedSpec& s : strategies) out.push_back({variant_name(s.name, s.mp), {}});
  for (int n : nodes) {
    topo::Topology t = topology;
    t.resolve(t.world_size_for_nodes(n));
    for (std::size_t k = 0; k < strategies.size(); ++k) {
      const ModelParallelPlan plan(model, t, device, workload, strategies[k].mp, leave_out, calibration);
      SweepPoint p{n, plan.estimate(strategies[k].name, strategies[k].spec)};
      const SweepPoint& first = out[k].points.empty() ? p : out[k].points.front();
      p.scaling_efficiency = (p.estimate.tokens_per_s / p.estimate.world_size) /
                             (first.estimate.tokens_per_s / first.estimate.world_size);
      out[k].points.push_back(std::move(p));
    }
  }
  return out;
}

std::string sweep_svg(const std::vector<SweepSeries>& series, const std::string& title, const std::string& outer_tier) {
  Chart tokens{"Training tokens/s per device\n" + title, "devices", "tokens/s per device", true, {}};
  Chart speed{"TFLOP/s per device\n" + title, "devices", "model TFLOP/s per device", true, {}};
  Chart bytes{"Bytes a rank sends over '" + outer_tier + "' per optimizer step\n" + title, "devices", "GB per rank per step",
              true, {}};
  // A strategy's line on `chart`: `y` of each point against its devices, hollow where it does not fit.
  auto add = [](Chart& chart, const SweepSeries& s, auto y) {
    Series line{s.strategy, {}, {}, {}};
    for (const SweepPoint& p : s.points) {
      line.x.push_back(p.estimate.world_size);
      line.y.push_back(y(p.estimate));
      line.hollow.push_back(!p.estimate.fits);
    }
    chart.series.push_back(std::move(line));
  };
  for (const SweepSeries& s : series) {
    add(tokens, s, [](const Estimate& e) { return e.tokens_per_s / e.world_size; });
    add(speed, s, [](const Estimate& e) { return e.tflops_per_device; });
    add(bytes, s, [&](const Estimate& e) { return static_cast<double>(e.bytes_on(outer_tier)) / 1e9; });
  }
  return svg_document({tokens, speed, bytes}, "open markers: does not fit in device memory; strata plan (cost model of "
                                      "the runtime's schedule, docs/planner.md)");
}

nlohmann::json sweep_json(const std::vector<SweepSeries>& series, const std::string& outer_tier) {
  nlohmann::json out = nlohmann::json::array();
  for (const SweepSeries& s : series) {
    nlohmann::json points = nlohmann::json::array();
    for (const SweepPoint& p : s.points)
      points.push_back({{"nodes", p.nodes},
                        {"devices", p.estimate.world_size},
                        {"step_time_s", p.estimate.step_time_s},
                        {"tokens_per_s", p.estimate.tokens_per_s},
                        {"tokens_per_s_per_device", p.estimate.tokens_per_s / p.estimate.world_size},
                        {"tflops_per_device", p.estimate.tflops_per_device},
                        {"mfu", p.estimate.mfu},
                        {"exposed_comm_s", p.estimate.exposed_micro_s + p.estimate.step_comm_s +
                                               p.estimate.tp_allreduce_s + p.estimate.pp_p2p_s},
                        {"tp_allreduce_s", p.estimate.tp_allreduce_s},
                        {"pp_bubble_s", p.estimate.pp_bubble_s},
                        {"pp_p2p_s", p.estimate.pp_p2p_s},
                        {"joules_per_token", p.estimate.joules_per_token},
                        {"scaling_efficiency", p.scaling_efficiency},
                        {"outer_tier_bytes_per_step", p.estimate.bytes_on(outer_tier)},
                        {"fits", p.estimate.fits},
                        {"memory_verdict", p.estimate.memory_verdict()}});
    out.push_back({{"strategy", s.strategy},
                   {"n0_devices", s.points.empty() ? 0 : s.points.front().estimate.world_size},
                   {"points", points}});
  }
  return out;
}

}  // namespace strata::plan
