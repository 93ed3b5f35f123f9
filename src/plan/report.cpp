// What `strata plan` prints (docs/planner.md): its tables as text and each mode's --json
// document.
#include "plan/report.hpp"

#include <algorithm>
#include <functional>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "base/plural.hpp"
#include "base/precision.hpp"
#include "topo/topology.hpp"

namespace strata::plan {

namespace {

// Appends to `out` what fmt::print would print (not an overload of it: a fmt::join argument
// would find that).
template <class... Args>
void put(std::string& out, fmt::format_string<Args...> format, Args&&... args) {
  fmt::format_to(std::back_inserter(out), format, std::forward<Args>(args)...);
}

// The mark of an estimate that does not fit in device memory, in every table.
constexpr const char* kDoesNotFit = "!";

std::string world_text(const topo::Topology& t) {
  return fmt::format("{} ({})", count_of(t.world_size(), "rank"), tier_sizes(t));
}

// J/token, or "-" where no TDP is known (no energy is estimated, docs/planner.md), never 0.
std::string joules_cell(const Estimate& e, const char* format) {
  return e.joules_per_token > 0 ? fmt::format(fmt::runtime(format), e.joules_per_token) : "-";
}

void print_memory_row(std::string& out, const std::string& label, const shard::StateMemory& m, std::uint64_t activation_bytes,
                      const std::string& verdict) {
  put(out, "  {:<18} {:>8.2f} {:>9.2f} {:>8.2f} {:>9.2f} {:>8.2f} {:>11.2f}  {}\n", label, m.weights / 1e9,
           m.secondary / 1e9, m.grads / 1e9, m.optimizer / 1e9, m.gathered / 1e9, activation_bytes / 1e9, verdict);
}

// One table of a sweep: a row per node count, a column per strategy.
void print_sweep_table(std::string& out, const std::vector<SweepSeries>& series, const std::string& title,
                       const std::function<std::string(const SweepPoint&)>& cell) {
  put(out, "\n{}\n", title);
  std::string head = fmt::format("{:>6} {:>8}", "nodes", "devices");
  for (const auto& s : series) head += fmt::format(" {:>18}", s.strategy);
  put(out, "{}\n", head);
  for (std::size_t i = 0; i < series.front().points.size(); ++i) {
    const auto& first = series.front().points[i];
    std::string row = fmt::format("{:>6} {:>8}", first.nodes, first.estimate.world_size);
    for (const auto& s : series) row += fmt::format(" {:>18}", cell(s.points[i]));
    put(out, "{}\n", row);
  }
}

}  // namespace

std::string tier_sizes(const topo::Topology& t) {
  std::vector<std::string> parts;
  for (const topo::Tier& tier : t.tiers()) parts.push_back(fmt::format("{} {}", tier.name, tier.size));
  return fmt::format("{}", fmt::join(parts, " x "));
}

std::string header_text(const PlanContext& c, const std::string& nodes_text, const topo::Topology* sweep_largest) {
  std::string out;
  const bool sweeping = sweep_largest != nullptr;
  const ModelShape& m = c.model();
  const Workload& w = c.workload();
  const DeviceFacts& d = c.device();
  put(out, "strata plan: {} ({:.2f} B parameters) on '{}', {}\n", m.name, static_cast<double>(m.num_params()) / 1e9,
           c.topology().name(), nodes_text);
  put(out, "model: {}{}\n", m.describe(), m.source.empty() ? "" : fmt::format("; from {}", m.source));
  for (const std::string& note : m.notes) put(out, "  note: {}\n", note);
  put(out, "device: {}, {:g} TFLOP/s peak bf16 x compute efficiency {:g}, {:g} GB, {:g} GB/s HBM{}\n", d.name,
           d.peak_tflops, d.compute_efficiency, d.memory_gb, d.hbm_GBps,
           c.calibration() && c.calibration()->compute ? " (times from the calibration below; the peak scales MFU)"
                                                       : "");
  if (const auto& shape = c.shape_efficiency()) {
    const KernelFacts& k = kernel_facts(shape->kernels);
    put(out, "compute by shape: anchor {} ({:g} at its shape), kernels {} (tile {}x{}, peak share {:g}): a layer's "
             "GEMMs and attention at {:.4f} of peak here, {:.4f} at the anchor's shape, so {:g} x {:.4f} / {:.4f} = "
             "{:.4f}; attention {} (a rank of the data-parallel model; under --tp or --pp each strategy's own "
             "slice: compute_shape in --json)\n",
             shape->anchor, shape->anchor_efficiency, kernel_generation_name(shape->kernels), k.tile_m,
             k.tile_n, k.peak_share, shape->here.efficiency, shape->at_anchor.efficiency, shape->anchor_efficiency,
             shape->here.efficiency, shape->at_anchor.efficiency, shape->efficiency,
             shape->here.attention_efficiency > 0
                 ? fmt::format("{:.3f} of peak (FlashAttention's published curve)", shape->here.attention_efficiency)
                 : std::string("as a whole-wave GEMM (no published curve for this chip)"));
  }
  put(out, "workload: micro-batch {} x {} tokens, {} a step; precision {}; recompute {}; attention {}; "
           "collectives {}, granularity {}{}\n",
           w.micro_batch, w.seq, count_of(w.accumulation_steps, "micro-batch", "micro-batches"),
           precision_name(w.precision), recompute_name(w.recompute),
           w.flash_attention ? "flash" : "dense (seq x seq kept)", shard::to_string(w.collectives),
           granularity_name(w.granularity),
           w.peer == Peer::Strata ? "" : fmt::format(", peer {}", peer_name(w.peer)));
  const topo::Topology& topology = c.topology();
  for (int i = 0; i < topology.num_tiers(); ++i) {
    const topo::Tier& t = topology.tier(i);
    const bool outer = i == topology.outermost();
    // The per-rank figure the model prices; with ports, what sharing them leaves a rank.
    const std::string ports =
        t.ports == 0 ? std::string()
                     : fmt::format(" a pair; {} x {:g} GB/s shared by {} -> {:g} GB/s a rank", count_of(t.ports, "port"),
                                   t.port_GBps, count_of(topology.domain_ranks(i - 1), "rank"),
                                   topology.rank_bandwidth_GBps(i));
    put(out, "tier {:<9} {:>6} x   {:g} GB/s{} x efficiency {:g}, latency {:g} us\n", t.name,
             sweeping && outer ? std::string("nodes") : std::to_string(t.size), t.bandwidth_GBps, ports, t.efficiency,
             t.latency_us);
    if (!c.calibration()) continue;
    // Measured curves replace the figures above: what each collective reaches, and where.
    const TierCalibration& cal = c.calibration()->tier(t.name);
    std::vector<std::string> curves;
    for (Collective k : {Collective::AllGather, Collective::ReduceScatter, Collective::AllToAll}) {
      const CollectiveCurve* curve = cal.find(k);
      if (cal.by_group_size)
        curves.push_back(fmt::format("{} at the rate of its ring's size (below)", collective_key(k)));
      else if (!curve)
        curves.push_back(fmt::format("{} the tier's figures above", collective_key(k)));
      else if (!curve->latency_known)
        curves.push_back(fmt::format("{} {:.4g} GB/s (latency the tier's)", collective_key(k), curve->bus_GBps));
      else
        curves.push_back(fmt::format(
            "{} {:.4g} GB/s, n1/2 {:.3g} KB (latency {:.3g} us{}){}", collective_key(k), curve->bus_GBps,
            curve->half_bytes / 1e3, curve->latency_s() * 1e6,
            curve->bytes.empty() ? std::string()
                                 : fmt::format("; priced at its {} measured sizes", curve->bytes.size()),
            curve->has_under_compute()
                ? fmt::format(", beside compute {:.4g} GB/s, latency {:.3g} us", curve->busy_GBps,
                              curve->busy_latency_s() * 1e6)
                : std::string()));
    }
    const std::string group = cal.group_size > 0 ? fmt::format("a group of {}, {} crossing at once", cal.group_size,
                                                               count_of(cal.ranks_sharing, "rank"))
                                                 : std::string("group not stated");
    const double timed_rate = c.calibration()->overlap_bytes_per_second(t.name);
    put(out, "  calibrated ({}): {}; compute beside its ops x{:.3g}{}\n", group, fmt::join(curves, "; "),
             c.calibration()->overlap_slowdown(t.name),
             timed_rate > 0 ? fmt::format(" at {:.3g} MB/s a rank (less beside an op moving fewer bytes a second)",
                                          timed_rate / 1e6)
                            : std::string());
  }
  for (const std::string& note :
       group_size_notes(c.calibration() ? &*c.calibration() : nullptr, sweeping ? *sweep_largest : topology))
    put(out, "  {}\n", note);
  if (const auto& cal = c.calibration(); cal && cal->compute)
    put(out, "calibrated compute: matmul {:.4g} GFLOP/s a rank, half of it at {:.3g} GFLOP; other kernels x{:.3g}; "
             "x{:.3g} slower beside the outermost tier's communication; Adam {:.3g} GB/s{} (ignoring the device's "
             "efficiency and HBM)\n",
             cal->compute->peak_gflops, cal->compute->half_gflop, cal->compute->kernel_overhead,
             cal->compute->overlap_slowdown, cal->compute->optimizer_GBps,
             cal->compute->int8_codec_GBps > 0
                 ? fmt::format("; int8/int4 wire coding {:.3g}/{:.3g} GB/s of fp32", cal->compute->int8_codec_GBps,
                               cal->compute->int4_codec_GBps)
                 : std::string());
  else if (cal && !cal->gemms.empty())
    put(out, "compute: efficiency {:.4g} from the calibration's {} measured GEMMs ({}, FLOP-weighted {:.4g} "
             "TFLOP/s of the {}'s {:g} peak; above, unless --compute-efficiency is given): one efficiency for every "
             "matmul, whatever its shape; the device's HBM rate\n",
             cal->compute_efficiency, cal->gemms.size(), cal->gemms.front().dtype,
             flop_weighted_tflops(cal->gemms), cal->gemm_device, cal->gemm_peak_tflops);
  else if (cal && cal->compute_efficiency > 0)
    put(out, "compute: the calibration's published efficiency {:g} a device (above, unless --compute-efficiency "
             "is given), the device's HBM rate\n",
             cal->compute_efficiency);
  else if (cal)
    put(out, "compute: the calibration has none; the device's peak x efficiency and HBM rate above\n");
  return out;
}

std::string estimates_text(const PlanContext& c, const SearchRequest& request, const std::vector<Estimate>& estimates,
                           const std::vector<NamedSpec>& chosen) {
  std::string out = header_text(c, world_text(c.topology()));
  const auto& tiers = c.topology().tiers();
  bool model_parallel = false;
  for (const Estimate& e : estimates) model_parallel = model_parallel || e.tensor_parallel > 1 || e.pipeline_stages > 1;
  std::string head = fmt::format("\n{:<14} {:>9} {:>11} {:>9} {:>6} {:>8} {:>9} {:>9} {:>9}", "strategy", "step s",
                                 "tokens/s", "TFLOP/s", "MFU", "J/token", "compute s", "exposed s", "step s*");
  if (model_parallel) head += fmt::format(" {:>9} {:>9} {:>9}", "tp s", "p2p s", "bubble s");
  for (const topo::Tier& t : tiers) head += fmt::format(" {:>10}", fmt::format("{} GB", t.name));
  put(out, "{}\n", head);
  for (const Estimate& e : estimates) {
    std::string row = fmt::format("{:<14} {:>9.4g} {:>11.5g} {:>9.1f} {:>5.1f}% {:>8} {:>9.4g} {:>9.4g} {:>9.4g}",
                                  e.strategy + (e.fits ? "" : kDoesNotFit), e.step_time_s, e.tokens_per_s, e.tflops_per_device, e.mfu * 100,
                                  joules_cell(e, "{:.3g}"), e.compute_s, e.exposed_micro_s, e.step_comm_s + e.optimizer_s);
    if (model_parallel) row += fmt::format(" {:>9.4g} {:>9.4g} {:>9.4g}", e.tp_allreduce_s, e.pp_p2p_s, e.pp_bubble_s);
    for (const TierCost& t : e.tiers)
      row += fmt::format(" {:>10.3f}", static_cast<double>(t.traffic.bytes_sent) / 1e9);
    put(out, "{}\n", row);
  }
  put(out, "  exposed s: micro-batch communication not hidden by compute; step s*: optimizer-step phase "
           "(communication + Adam), never hidden; GB: bytes a rank sends over each tier a step\n");
  if (c.workload().recompute) {
    put(out, "  recompute {}\n", c.recompute_means());
    for (const Estimate& e : estimates)
      put(out, "    {:<12} compute s includes {:.4g} s of rerun matmuls + {:.4g} s of rerun memory-bound ops\n",
               e.strategy, e.recompute_matmul_s, e.recompute_memory_bound_s);
  }
  if (model_parallel)
    put(out, "  tp s: the schedule's tensor-parallel collectives, p2p s: sends between pipeline stages (both on "
             "the critical path, in their tier's GB); bubble s: 1F1B fill and drain = (p-1) x the slowest "
             "stage's micro-batch; a strategy+tpN+ppM is its spec over the data-parallel ranks left "
             "(docs/planner.md)\n");
  if (c.device().tdp_watts > 0) {
    put(out, "  J/token: device power (idle {:g} W + ({:g} - {:g}) W x the share of the step spent computing) x "
             "devices / tokens a second; tokens/kWh:",
             c.device().idle_watts, c.device().tdp_watts, c.device().idle_watts);
    for (const Estimate& e : estimates) put(out, " {} {:.4g}", e.strategy, e.tokens_per_kwh);
    put(out, "\n");
  }
  if (c.calibration()) {
    // The calibrated terms: each tier's fixed costs against its bytes' time, and compute lost
    // to running beside communication.
    put(out, "  calibrated terms, s a step (tier: latency + bandwidth [+ wire coding] [+ slowed by compute beside "
             "it] busy time; overlap: compute slowed by communication beside it; step s = compute s + exposed s + "
             "overlap + step s*):\n");
    for (const Estimate& e : estimates) {
      std::vector<std::string> parts;
      for (const TierCost& t : e.tiers) {
        std::string part = fmt::format("{} {:.4g} + {:.4g}", t.traffic.tier, t.latency_s,
                                       t.busy_s - t.latency_s - t.codec_s - t.under_compute_s);
        if (t.codec_s > 0) part += fmt::format(" + coding {:.4g}", t.codec_s);
        if (t.under_compute_s > 0) part += fmt::format(" + beside compute {:.4g}", t.under_compute_s);
        parts.push_back(std::move(part));
      }
      put(out, "    {:<12} {}; overlap {:.4g}\n", e.strategy, fmt::join(parts, ", "), e.overlap_slowdown_s);
    }
  }
  for (const Estimate& e : estimates)
    if (!e.fits) put(out, "  {} {}: {}; its row assumes memory it does not have\n", kDoesNotFit, e.strategy,
                          e.memory_verdict());
  put(out, "\nmemory per rank (GB) {:>8} {:>9} {:>8} {:>9} {:>8} {:>11}  verdict\n", "weights", "secondary", "grads",
           "optimizer", "gathered", "activations");
  for (const Estimate& e : estimates) {
    print_memory_row(out, e.strategy, e.memory, e.activation_bytes, e.memory_verdict());
    // A pipeline's row is its largest stage's; each stage's below it.
    for (std::size_t s = 0; s < e.stages.size(); ++s)
      print_memory_row(out, fmt::format("  stage {}", s), e.stages[s].memory, e.stages[s].activation_bytes,
                       fmt::format("{}: {:.2f} GB, {:.4g} s a micro-batch", count_of(e.stages[s].blocks, "block"),
                                   e.stages[s].total_memory_bytes / 1e9, e.stages[s].micro_batch_s));
  }
  bool starred = false;
  for (const Estimate& e : estimates) starred = starred || e.strategy.find('*') != std::string::npos;
  if (starred) put(out, "  * preset changed by command-line overrides\n");
  for (const Estimate& e : estimates)
    if (!e.left_out.empty())
      put(out, "  {}: left out of the account: {}\n", e.strategy, fmt::join(e.left_out, ", "));
  if (const std::string hint = flash_attention_hint(c.model(), c.workload()); !hint.empty())
    put(out, "  note: {}\n", hint);
  put(out, "(assumptions in full: --json)\n");
  // A strategy that does not fit: the smallest change that makes it fit.
  for (std::size_t i = 0; i < estimates.size(); ++i)
    if (!estimates[i].fits)
      put(out, "  {} {}: {}\n", kDoesNotFit, estimates[i].strategy,
               smallest_change_line(changes_until_strategy_fits(request, chosen[i])));
  return out;
}

std::string search_text(const PlanContext& c, const SearchResult& r, int top, const std::string& recommendation) {
  std::string out = header_text(c, world_text(c.topology()));
  const std::string outer = c.topology().tiers().back().name;
  put(out, "\nsearched {} specs: {} fit in {:g} GB, {} do not; ranked by time a token, every split at the same "
           "global batch\n",
           r.fitting.size() + r.not_fitting.size(), r.fitting.size(), c.device().memory_gb, r.not_fitting.size());
  if (!r.fitting.empty()) {
    put(out, "\n{:>3}  {:>2} {:>2}  {:<60} {:>12} {:>10} {:>11} {:>8} {:>6} {:>9} {:>11}\n", "#", "tp", "pp", "spec",
             "name", "step s", "tok/s/dev", "TFLOP/s", "MFU", "memory GB", outer + " GB");
    for (int i = 0; i < std::min<int>(top, static_cast<int>(r.fitting.size())); ++i) {
      const Estimate& e = r.fitting[i];
      put(out, "{:>3}  {:>2} {:>2}  {:<60} {:>12} {:>10.4g} {:>11.0f} {:>8.1f} {:>5.1f}% {:>9.1f} {:>11.3f}\n", i + 1,
               e.tensor_parallel, e.pipeline_stages, spec_label(e.spec), e.strategy, e.step_time_s,
               e.tokens_per_s / e.world_size, e.tflops_per_device, e.mfu * 100, e.total_memory_bytes / 1e9,
               e.bytes_on(outer) / 1e9);
    }
    const int others = std::min<int>(top, static_cast<int>(r.fitting.size()) - top);
    if (others > 0) put(out, "\nnext {} and why they lost to #1:\n", others);
    for (int i = top; i < top + others; ++i)
      put(out, "{:>3}  {:<60} {:>9}  {}\n", i + 1, spec_label(r.fitting[i].spec), r.fitting[i].strategy,
               why_lost(r.fitting[i], r.fitting[0]));
    // The fastest specs that do not fit are the ones a user is most tempted by.
    const int shown = std::min<int>(top, static_cast<int>(r.not_fitting.size()));
    if (shown > 0) put(out, "\nfastest that do not fit:\n");
    for (int i = 0; i < shown; ++i)
      put(out, "     {:<60} {:>9}  {}\n", spec_label(r.not_fitting[i].spec), r.not_fitting[i].strategy,
               why_lost(r.not_fitting[i], r.fitting[0]));
  }
  std::vector<std::string> presets;
  for (const auto* list : {&r.fitting, &r.not_fitting})
    for (std::size_t i = 0; i < list->size(); ++i)
      if ((*list)[i].spec.preset != "custom")
        presets.push_back(list == &r.fitting ? fmt::format("{} #{}", (*list)[i].strategy, i + 1)
                                             : fmt::format("{} (does not fit)", (*list)[i].strategy));
  put(out, "\npresets among them: {}\n", fmt::join(presets, ", "));
  put(out, "spec: W, G, OS = the tier weights, gradients and Adam's state are sharded over (- = whole on every "
           "rank); S = the tier of ZeRO++'s secondary weight copy; w, g, s = the wire formats of weight gathers, "
           "per-micro-batch and once-a-step gradient reductions\n");
  put(out, "{}", recommendation);
  return out;
}

std::string sweep_text(const std::vector<SweepSeries>& series, const std::string& outer) {
  std::string out;
  if (series.empty()) return out;
  auto mark = [](const Estimate& e) { return e.fits ? " " : kDoesNotFit; };
  print_sweep_table(out, series, fmt::format("tokens/s per device (J/token; '{}' = does not fit)", kDoesNotFit),
                    [&](const SweepPoint& p) {
                      const Estimate& e = p.estimate;
                      return fmt::format("{:.0f} ({}){}", e.tokens_per_s / e.world_size, joules_cell(e, "{:.2g}"), mark(e));
                    });
  print_sweep_table(out, series,
                    fmt::format("TFLOP/s per device (E(n) = (throughput(n)/n) / (throughput(n0)/n0), n0 = {} devices; "
                                "'{}' = does not fit)",
                                series.front().points.front().estimate.world_size, kDoesNotFit),
                    [&](const SweepPoint& p) {
                      return fmt::format("{:.1f} E={:.2f}{}", p.estimate.tflops_per_device, p.scaling_efficiency,
                                         mark(p.estimate));
                    });
  print_sweep_table(out, series, fmt::format("GB a rank sends over '{}' per step", outer), [&](const SweepPoint& p) {
    return fmt::format("{:.3f}", p.estimate.bytes_on(outer) / 1e9);
  });
  return out;
}

std::vector<std::string> calibrated_override_notes(const std::vector<std::string>& specs,
                                                   const Calibration& calibration) {
  std::vector<std::string> notes;
  for (const std::string& spec : specs) {
    const topo::TierOverride o = topo::parse_tier_override(spec);
    const bool rate = o.field == "bandwidth_GBps" || o.field == "efficiency" || o.field == "ports" ||
                      o.field == "port_GBps";
    if (!rate && o.field != "latency_us") continue;
    const TierCalibration* tier = calibration.find_tier(o.tier);
    if (!tier) continue;
    std::vector<std::string_view> measured, moved;
    for (Collective k : kCollectives) {
      const CollectiveCurve* curve = tier->find(k);
      const bool as_measured = curve && (rate || curve->latency_known);
      (as_measured ? measured : moved).push_back(collective_key(k));
    }
    if (measured.empty()) continue;
    notes.push_back(fmt::format("--tier {}: the calibration prices the {} tier's {} {}; the override moves {}",
               spec, o.tier, fmt::join(measured, ", "), rate ? "at their measured rates" : "with their measured fixed cost",
               moved.empty() ? std::string("nothing") : fmt::format("only its {}", fmt::join(moved, ", "))));
  }
  return notes;
}

nlohmann::json plan_document(const PlanContext& c) {
  return {{"model", c.model().to_json()}, {"topology", c.topology().to_json()}, {"assumptions", c.assumptions()}};
}

nlohmann::json estimates_document(const PlanContext& c, const std::vector<Estimate>& estimates) {
  nlohmann::json strategies = nlohmann::json::object();
  for (const Estimate& e : estimates) strategies[e.strategy] = e.to_json();
  nlohmann::json doc = plan_document(c);
  doc["model_parallel_assumptions"] = model_parallel_assumptions();
  doc["strategies"] = strategies;
  return doc;
}

nlohmann::json search_document(const PlanContext& c, const SearchRequest& request, const SearchResult& result,
                               const std::vector<FitChange>& changes, int top) {
  nlohmann::json doc = plan_document(c);
  doc["model_parallel_assumptions"] = model_parallel_assumptions();
  doc["search"] = search_json(result, top);
  doc["recommendation"] = recommendation_json(request, result, changes);
  return doc;
}

nlohmann::json sweep_document(const PlanContext& first, const std::vector<SweepSeries>& series,
                              const std::string& outer) {
  nlohmann::json doc = plan_document(first);
  doc["outer_tier"] = outer;
  doc["sweep"] = sweep_json(series, outer);
  return doc;
}

}  // namespace strata::plan
