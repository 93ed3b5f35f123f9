// strata plan: what each sharding strategy costs on a cluster, priced from the schedule the
// runtime executes (docs/planner.md).
#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "cli/command.hpp"
#include "cli/format.hpp"
#include "cli/setting_flags.hpp"
#include "comm/runtime/mpi_session.hpp"
#include "plan/calibration.hpp"
#include "plan/cluster.hpp"
#include "plan/cost_model.hpp"
#include "plan/device.hpp"
#include "plan/emit.hpp"
#include "plan/gemm_bench.hpp"
#include "plan/model_parallel.hpp"
#include "plan/model_shapes.hpp"
#include "plan/recommend.hpp"
#include "plan/search.hpp"
#include "shard/runtime.hpp"
#include "shard/schedule.hpp"
#include "shard/spec.hpp"
#include "topo/topology.hpp"
#include "train/config.hpp"

namespace strata::cli {
namespace {

struct PlanOptions {
  std::string model, topology, cluster;
  std::vector<std::string> shape_fields, tier_overrides, leave_out;
  int nodes = 0;
  std::string strategy = "all";
  SettingFlags spec_flags;  // `strata train`'s flags that shape a spec
  parallel::ShardOptions shard;  // what they gave
  int micro_batch = 1, seq = 0, accum = 1;
  std::string recompute;  // empty: none unless --recompute is given bare (full)
  bool flash_attention = false, batch_per_device = false;
  std::string precision = "bf16";
  std::string collectives = "hierarchical";
  std::string granularity = "unit";
  std::string peer;  // empty: strata's own
  std::string compute_anchor, kernels;  // empty: one efficiency; the peer's generation
  double peak_tflops = 0, memory_gb = 0, hbm_GBps = 0, compute_efficiency = 0, tdp_watts = 0, idle_watts = 0;
  bool search = false;
  int top = 5;
  std::string sweep_nodes, svg;
  std::string compare_summary;
  std::string calibration;
  bool print_schedule = false;
  bool json = false;
  std::vector<std::string> emit;  // FRAMEWORK FILE
  // Which options were given (CLI11 counts), for overrides that must not apply by default.
  CLI::Option *nodes_opt = nullptr, *seq_opt = nullptr, *peak_opt = nullptr, *memory_opt = nullptr,
              *hbm_opt = nullptr, *efficiency_opt = nullptr, *tdp_opt = nullptr, *idle_opt = nullptr,
              *recompute_opt = nullptr;
  bool tp_given = false, pp_given = false;
};

// The sweep's title: the model, topology and workload, and every other option given that changes
// the figures, so that two plots made with different settings never look like the same one.
std::string sweep_title(const PlanOptions& o, const std::string& model, const std::string& topology,
                        const plan::Workload& w) {
  std::vector<std::string> parts{fmt::format("{} on {}, micro-batch {} x {}, {} a step, {}", model, topology,
                                             w.micro_batch, w.seq,
                                             count_of(w.accumulation_steps, "micro-batch", "micro-batches"),
                                             o.precision)};
  auto given = [&](bool is_given, const std::string& text) {
    if (is_given) parts.push_back(text);
  };
  given(o.recompute_opt->count() > 0, "recompute " + (o.recompute.empty() ? std::string("full") : o.recompute));
  given(o.flash_attention, "flash attention");
  given(o.batch_per_device, "batch per device");
  given(o.collectives != "hierarchical", "collectives " + o.collectives);
  given(o.granularity != "unit", "granularity " + o.granularity);
  given(!o.peer.empty(), "peer " + o.peer);
  given(!o.calibration.empty(), "calibration " + o.calibration);
  given(!o.compute_anchor.empty(), "compute anchor " + o.compute_anchor);
  given(!o.kernels.empty(), "kernels " + o.kernels);
  for (const std::string& t : o.tier_overrides) parts.push_back("tier " + t);
  for (const std::string& l : o.leave_out) parts.push_back("leave out " + l);
  const parallel::ShardOptions& s = o.shard;
  given(!s.shard.empty(), "shard " + s.shard);
  given(!s.secondary.empty(), "secondary " + s.secondary);
  given(!s.weight_wire.empty(), "weight wire " + s.weight_wire);
  given(!s.grad_wire.empty(), "grad wire " + s.grad_wire);
  given(!s.step_grad_wire.empty(), "step grad wire " + s.step_grad_wire);
  given(s.block_size != 0, fmt::format("block size {}", s.block_size));
  given(s.prefetch >= 0, fmt::format("prefetch {}", s.prefetch));
  given(s.bucket_bytes >= 0, fmt::format("bucket {} B", s.bucket_bytes));
  given(s.first_bucket_bytes >= 0, fmt::format("first bucket {} B", s.first_bucket_bytes));
  given(s.keep_weights_after_forward, "weights kept after forward");
  given(o.peak_opt->count() > 0, fmt::format("peak {:g} TFLOP/s", o.peak_tflops));
  given(o.memory_opt->count() > 0, fmt::format("{:g} GB a device", o.memory_gb));
  given(o.hbm_opt->count() > 0, fmt::format("HBM {:g} GB/s", o.hbm_GBps));
  given(o.efficiency_opt->count() > 0, fmt::format("compute efficiency {:g}", o.compute_efficiency));
  given(o.tdp_opt->count() > 0, fmt::format("TDP {:g} W", o.tdp_watts));
  given(o.idle_opt->count() > 0, fmt::format("idle {:g} W", o.idle_watts));
  given(o.tp_given, fmt::format("tp {}", s.tp));
  given(o.pp_given, fmt::format("pp {}", o.shard.pp));
  given(!s.tp_tier.empty(), "tp tier " + s.tp_tier);
  given(!o.shard.pp_tier.empty(), "pp tier " + o.shard.pp_tier);
  given(!o.shard.pp_layers.empty(), fmt::format("pp layers {}", fmt::join(o.shard.pp_layers, ",")));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// The mark of an estimate that does not fit in device memory, in every table.
constexpr const char* kDoesNotFit = "!";

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    if (comma > pos) out.push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

// The strategies asked for, each with its tensor and pipeline parallelism (--tp, --pp, or a
// +tpN+ppN suffix), with precision and command-line overrides applied; a name gets a '*'
// when an override changed its preset. Specs are checked against the data-parallel topology
// their split leaves. The workload gives the precision and the peer, read once.
std::vector<plan::NamedSpec> chosen_strategies(const PlanOptions& o, const topo::Topology& physical,
                                               const plan::Workload& workload) {
  std::vector<std::string> names = o.strategy == "all" ? plan::strategy_names() : split_commas(o.strategy);
  if (names.empty()) throw Error("--strategy: empty (give a strategy, a comma list, or all)");
  std::vector<plan::NamedSpec> out;
  for (const std::string& variant : names) {
    const auto [given, mp] =
        plan::parse_strategy_variant(variant, {o.shard.tp, o.shard.pp, o.shard.tp_tier, o.shard.pp_tier,
                                               o.shard.pp_layers});
    const std::string name(shard::ShardSpec::canonical_preset(given));  // fsdp -> zero3, ...
    const topo::Topology topology =
        plan::model_parallel_dims(physical, mp).data_parallel_topology(physical);
    const shard::ShardSpec spec = shard::apply_options(
        plan::apply_peer(plan::apply_precision(plan::strategy_spec(name, topology), workload.precision), workload.peer,
                         topology),
        o.shard, topology);
    out.push_back({o.shard.overrides_preset() ? name + "*" : name, spec, mp});
  }
  return out;
}

std::string tier_sizes(const topo::Topology& t) {
  std::vector<std::string> parts;
  for (const topo::Tier& tier : t.tiers()) parts.push_back(fmt::format("{} {}", tier.name, tier.size));
  return fmt::format("{}", fmt::join(parts, " x "));
}

// sweep_largest: in a sweep, the topology at its largest node count (the outermost tier's size
// changes with the node count, so it is not printed; the largest ring is checked against a
// curve by group size).
void print_header(const plan::PlanContext& c, const std::string& nodes_text,
                  const topo::Topology* sweep_largest = nullptr) {
  const bool sweeping = sweep_largest != nullptr;
  const plan::ModelShape& m = c.model();
  const plan::Workload& w = c.workload();
  const plan::DeviceFacts& d = c.device();
  fmt::print("strata plan: {} ({:.2f} B parameters) on '{}', {}\n", m.name, static_cast<double>(m.num_params()) / 1e9,
             c.topology().name(), nodes_text);
  fmt::print("model: {}{}\n", m.describe(), m.source.empty() ? "" : fmt::format("; from {}", m.source));
  for (const std::string& note : m.notes) fmt::print("  note: {}\n", note);
  fmt::print("device: {}, {:g} TFLOP/s peak bf16 x compute efficiency {:g}, {:g} GB, {:g} GB/s HBM{}\n", d.name,
             d.peak_tflops, d.compute_efficiency, d.memory_gb, d.hbm_GBps,
             c.calibration() && c.calibration()->compute ? " (times from the calibration below; the peak scales MFU)"
                                                         : "");
  if (const auto& shape = c.shape_efficiency()) {
    const plan::KernelFacts& k = plan::kernel_facts(shape->kernels);
    fmt::print("compute by shape: anchor {} ({:g} at its shape), kernels {} (tile {}x{}, peak share {:g}): a layer's "
               "GEMMs and attention at {:.4f} of peak here, {:.4f} at the anchor's shape, so {:g} x {:.4f} / {:.4f} = "
               "{:.4f}; attention {} (a rank of the data-parallel model; under --tp or --pp each strategy's own "
               "slice: compute_shape in --json)\n",
               shape->anchor, shape->anchor_efficiency, plan::kernel_generation_name(shape->kernels), k.tile_m,
               k.tile_n, k.peak_share, shape->here.efficiency, shape->at_anchor.efficiency, shape->anchor_efficiency,
               shape->here.efficiency, shape->at_anchor.efficiency, shape->efficiency,
               shape->here.attention_efficiency > 0
                   ? fmt::format("{:.3f} of peak (FlashAttention's published curve)", shape->here.attention_efficiency)
                   : std::string("as a whole-wave GEMM (no published curve for this chip)"));
  }
  fmt::print("workload: micro-batch {} x {} tokens, {} a step; precision {}; recompute {}; attention {}; "
             "collectives {}, granularity {}{}\n",
             w.micro_batch, w.seq, count_of(w.accumulation_steps, "micro-batch", "micro-batches"),
             precision_name(w.precision), plan::recompute_name(w.recompute),
             w.flash_attention ? "flash" : "dense (seq x seq kept)", shard::to_string(w.collectives),
             plan::granularity_name(w.granularity),
             w.peer == plan::Peer::Strata ? "" : fmt::format(", peer {}", plan::peer_name(w.peer)));
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
    fmt::print("tier {:<9} {:>6} x   {:g} GB/s{} x efficiency {:g}, latency {:g} us\n", t.name,
               sweeping && outer ? std::string("nodes") : std::to_string(t.size), t.bandwidth_GBps, ports, t.efficiency,
               t.latency_us);
    if (!c.calibration()) continue;
    // Measured curves replace the figures above: what each collective reaches, and where.
    const plan::TierCalibration& cal = c.calibration()->tier(t.name);
    std::vector<std::string> curves;
    for (Collective k : {Collective::AllGather, Collective::ReduceScatter, Collective::AllToAll}) {
      const plan::CollectiveCurve* curve = cal.find(k);
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
    fmt::print("  calibrated ({}): {}; compute beside its ops x{:.3g}{}\n", group, fmt::join(curves, "; "),
               c.calibration()->overlap_slowdown(t.name),
               timed_rate > 0 ? fmt::format(" at {:.3g} MB/s a rank (less beside an op moving fewer bytes a second)",
                                            timed_rate / 1e6)
                              : std::string());
  }
  for (const std::string& note :
       plan::group_size_notes(c.calibration() ? &*c.calibration() : nullptr, sweeping ? *sweep_largest : topology))
    fmt::print("  {}\n", note);
  if (const auto& cal = c.calibration(); cal && cal->compute)
    fmt::print("calibrated compute: matmul {:.4g} GFLOP/s a rank, half of it at {:.3g} GFLOP; other kernels x{:.3g}; "
               "x{:.3g} slower beside the outermost tier's communication; Adam {:.3g} GB/s{} (ignoring the device's "
               "efficiency and HBM)\n",
               cal->compute->peak_gflops, cal->compute->half_gflop, cal->compute->kernel_overhead,
               cal->compute->overlap_slowdown, cal->compute->optimizer_GBps,
               cal->compute->int8_codec_GBps > 0
                   ? fmt::format("; int8/int4 wire coding {:.3g}/{:.3g} GB/s of fp32", cal->compute->int8_codec_GBps,
                                 cal->compute->int4_codec_GBps)
                   : std::string());
  else if (cal && !cal->gemms.empty())
    fmt::print("compute: efficiency {:.4g} from the calibration's {} measured GEMMs ({}, FLOP-weighted {:.4g} "
               "TFLOP/s of the {}'s {:g} peak; above, unless --compute-efficiency is given): one efficiency for every "
               "matmul, whatever its shape; the device's HBM rate\n",
               cal->compute_efficiency, cal->gemms.size(), cal->gemms.front().dtype,
               plan::flop_weighted_tflops(cal->gemms), cal->gemm_device, cal->gemm_peak_tflops);
  else if (cal && cal->compute_efficiency > 0)
    fmt::print("compute: the calibration's published efficiency {:g} a device (above, unless --compute-efficiency "
               "is given), the device's HBM rate\n",
               cal->compute_efficiency);
  else if (cal)
    fmt::print("compute: the calibration has none; the device's peak x efficiency and HBM rate above\n");
}

// J/token, or "-" where no TDP is known (no energy is estimated, docs/planner.md), never 0.
std::string joules_cell(const plan::Estimate& e, const char* format) {
  return e.joules_per_token > 0 ? fmt::format(fmt::runtime(format), e.joules_per_token) : "-";
}

void print_memory_row(const std::string& label, const shard::StateMemory& m, std::uint64_t activation_bytes,
                      const std::string& verdict) {
  fmt::print("  {:<18} {:>8.2f} {:>9.2f} {:>8.2f} {:>9.2f} {:>8.2f} {:>11.2f}  {}\n", label, m.weights / 1e9,
             m.secondary / 1e9, m.grads / 1e9, m.optimizer / 1e9, m.gathered / 1e9, activation_bytes / 1e9, verdict);
}

void print_estimates(const plan::PlanContext& c, const std::vector<plan::Estimate>& estimates) {
  print_header(c, fmt::format("{} ({})", count_of(c.topology().world_size(), "rank"), tier_sizes(c.topology())));
  const auto& tiers = c.topology().tiers();
  bool model_parallel = false;
  for (const plan::Estimate& e : estimates) model_parallel = model_parallel || e.tensor_parallel > 1 || e.pipeline_stages > 1;
  std::string head = fmt::format("\n{:<14} {:>9} {:>11} {:>9} {:>6} {:>8} {:>9} {:>9} {:>9}", "strategy", "step s",
                                 "tokens/s", "TFLOP/s", "MFU", "J/token", "compute s", "exposed s", "step s*");
  if (model_parallel) head += fmt::format(" {:>9} {:>9} {:>9}", "tp s", "p2p s", "bubble s");
  for (const topo::Tier& t : tiers) head += fmt::format(" {:>10}", fmt::format("{} GB", t.name));
  fmt::print("{}\n", head);
  for (const plan::Estimate& e : estimates) {
    std::string row = fmt::format("{:<14} {:>9.4g} {:>11.5g} {:>9.1f} {:>5.1f}% {:>8} {:>9.4g} {:>9.4g} {:>9.4g}",
                                  e.strategy + (e.fits ? "" : kDoesNotFit), e.step_time_s, e.tokens_per_s, e.tflops_per_device, e.mfu * 100,
                                  joules_cell(e, "{:.3g}"), e.compute_s, e.exposed_micro_s, e.step_comm_s + e.optimizer_s);
    if (model_parallel) row += fmt::format(" {:>9.4g} {:>9.4g} {:>9.4g}", e.tp_allreduce_s, e.pp_p2p_s, e.pp_bubble_s);
    for (const plan::TierCost& t : e.tiers)
      row += fmt::format(" {:>10.3f}", static_cast<double>(t.traffic.bytes_sent) / 1e9);
    fmt::print("{}\n", row);
  }
  fmt::print("  exposed s: micro-batch communication not hidden by compute; step s*: optimizer-step phase "
             "(communication + Adam), never hidden; GB: bytes a rank sends over each tier a step\n");
  if (c.workload().recompute) {
    fmt::print("  recompute {}\n", c.recompute_means());
    for (const plan::Estimate& e : estimates)
      fmt::print("    {:<12} compute s includes {:.4g} s of rerun matmuls + {:.4g} s of rerun memory-bound ops\n",
                 e.strategy, e.recompute_matmul_s, e.recompute_memory_bound_s);
  }
  if (model_parallel)
    fmt::print("  tp s: the schedule's tensor-parallel collectives, p2p s: sends between pipeline stages (both on "
               "the critical path, in their tier's GB); bubble s: 1F1B fill and drain = (p-1) x the slowest "
               "stage's micro-batch; a strategy+tpN+ppM is its spec over the data-parallel ranks left "
               "(docs/planner.md)\n");
  if (c.device().tdp_watts > 0) {
    fmt::print("  J/token: device power (idle {:g} W + ({:g} - {:g}) W x the share of the step spent computing) x "
               "devices / tokens a second; tokens/kWh:",
               c.device().idle_watts, c.device().tdp_watts, c.device().idle_watts);
    for (const plan::Estimate& e : estimates) fmt::print(" {} {:.4g}", e.strategy, e.tokens_per_kwh);
    fmt::print("\n");
  }
  if (c.calibration()) {
    // The calibrated terms: each tier's fixed costs against its bytes' time, and compute lost
    // to running beside communication.
    fmt::print("  calibrated terms, s a step (tier: latency + bandwidth [+ wire coding] [+ slowed by compute beside "
               "it] busy time; overlap: compute slowed by communication beside it; step s = compute s + exposed s + "
               "overlap + step s*):\n");
    for (const plan::Estimate& e : estimates) {
      std::vector<std::string> parts;
      for (const plan::TierCost& t : e.tiers) {
        std::string part = fmt::format("{} {:.4g} + {:.4g}", t.traffic.tier, t.latency_s,
                                       t.busy_s - t.latency_s - t.codec_s - t.under_compute_s);
        if (t.codec_s > 0) part += fmt::format(" + coding {:.4g}", t.codec_s);
        if (t.under_compute_s > 0) part += fmt::format(" + beside compute {:.4g}", t.under_compute_s);
        parts.push_back(std::move(part));
      }
      fmt::print("    {:<12} {}; overlap {:.4g}\n", e.strategy, fmt::join(parts, ", "), e.overlap_slowdown_s);
    }
  }
  for (const plan::Estimate& e : estimates)
    if (!e.fits) fmt::print("  {} {}: {}; its row assumes memory it does not have\n", kDoesNotFit, e.strategy,
                            e.memory_verdict());
  fmt::print("\nmemory per rank (GB) {:>8} {:>9} {:>8} {:>9} {:>8} {:>11}  verdict\n", "weights", "secondary", "grads",
             "optimizer", "gathered", "activations");
  for (const plan::Estimate& e : estimates) {
    print_memory_row(e.strategy, e.memory, e.activation_bytes, e.memory_verdict());
    // A pipeline's row is its largest stage's; each stage's below it.
    for (std::size_t s = 0; s < e.stages.size(); ++s)
      print_memory_row(fmt::format("  stage {}", s), e.stages[s].memory, e.stages[s].activation_bytes,
                       fmt::format("{}: {:.2f} GB, {:.4g} s a micro-batch", count_of(e.stages[s].blocks, "block"),
                                   e.stages[s].total_memory_bytes / 1e9, e.stages[s].micro_batch_s));
  }
  bool starred = false;
  for (const plan::Estimate& e : estimates) starred = starred || e.strategy.find('*') != std::string::npos;
  if (starred) fmt::print("  * preset changed by command-line overrides\n");
  for (const plan::Estimate& e : estimates)
    if (!e.left_out.empty())
      fmt::print("  {}: left out of the account: {}\n", e.strategy, fmt::join(e.left_out, ", "));
  if (const std::string hint = plan::flash_attention_hint(c.model(), c.workload()); !hint.empty())
    fmt::print("  note: {}\n", hint);
  fmt::print("(assumptions in full: --json)\n");
}

void print_search(const plan::PlanContext& c, const plan::SearchResult& r, int top, const std::string& recommendation) {
  print_header(c, fmt::format("{} ({})", count_of(c.topology().world_size(), "rank"), tier_sizes(c.topology())));
  const std::string outer = c.topology().tiers().back().name;
  fmt::print("\nsearched {} specs: {} fit in {:g} GB, {} do not; ranked by time a token, every split at the same "
             "global batch\n",
             r.fitting.size() + r.not_fitting.size(), r.fitting.size(), c.device().memory_gb, r.not_fitting.size());
  if (!r.fitting.empty()) {
    fmt::print("\n{:>3}  {:>2} {:>2}  {:<60} {:>12} {:>10} {:>11} {:>8} {:>6} {:>9} {:>11}\n", "#", "tp", "pp", "spec",
               "name", "step s", "tok/s/dev", "TFLOP/s", "MFU", "memory GB", outer + " GB");
    for (int i = 0; i < std::min<int>(top, static_cast<int>(r.fitting.size())); ++i) {
      const plan::Estimate& e = r.fitting[i];
      fmt::print("{:>3}  {:>2} {:>2}  {:<60} {:>12} {:>10.4g} {:>11.0f} {:>8.1f} {:>5.1f}% {:>9.1f} {:>11.3f}\n", i + 1,
                 e.tensor_parallel, e.pipeline_stages, plan::spec_label(e.spec), e.strategy, e.step_time_s,
                 e.tokens_per_s / e.world_size, e.tflops_per_device, e.mfu * 100, e.total_memory_bytes / 1e9,
                 e.bytes_on(outer) / 1e9);
    }
    const int others = std::min<int>(top, static_cast<int>(r.fitting.size()) - top);
    if (others > 0) fmt::print("\nnext {} and why they lost to #1:\n", others);
    for (int i = top; i < top + others; ++i)
      fmt::print("{:>3}  {:<60} {:>9}  {}\n", i + 1, plan::spec_label(r.fitting[i].spec), r.fitting[i].strategy,
                 plan::why_lost(r.fitting[i], r.fitting[0]));
    // The fastest specs that do not fit are the ones a user is most tempted by.
    const int shown = std::min<int>(top, static_cast<int>(r.not_fitting.size()));
    if (shown > 0) fmt::print("\nfastest that do not fit:\n");
    for (int i = 0; i < shown; ++i)
      fmt::print("     {:<60} {:>9}  {}\n", plan::spec_label(r.not_fitting[i].spec), r.not_fitting[i].strategy,
                 plan::why_lost(r.not_fitting[i], r.fitting[0]));
  }
  std::vector<std::string> presets;
  for (const auto* list : {&r.fitting, &r.not_fitting})
    for (std::size_t i = 0; i < list->size(); ++i)
      if ((*list)[i].spec.preset != "custom")
        presets.push_back(list == &r.fitting ? fmt::format("{} #{}", (*list)[i].strategy, i + 1)
                                             : fmt::format("{} (does not fit)", (*list)[i].strategy));
  fmt::print("\npresets among them: {}\n", fmt::join(presets, ", "));
  fmt::print("spec: W, G, OS = the tier weights, gradients and Adam's state are sharded over (- = whole on every "
             "rank); S = the tier of ZeRO++'s secondary weight copy; w, g, s = the wire formats of weight gathers, "
             "per-micro-batch and once-a-step gradient reductions\n");
  fmt::print("{}", recommendation);
}

// One table of a sweep: a row per node count, a column per strategy.
void print_sweep_table(const std::vector<plan::SweepSeries>& series, const std::string& title,
                       const std::function<std::string(const plan::SweepPoint&)>& cell) {
  fmt::print("\n{}\n", title);
  std::string head = fmt::format("{:>6} {:>8}", "nodes", "devices");
  for (const auto& s : series) head += fmt::format(" {:>18}", s.strategy);
  fmt::print("{}\n", head);
  for (std::size_t i = 0; i < series.front().points.size(); ++i) {
    const auto& first = series.front().points[i];
    std::string row = fmt::format("{:>6} {:>8}", first.nodes, first.estimate.world_size);
    for (const auto& s : series) row += fmt::format(" {:>18}", cell(s.points[i]));
    fmt::print("{}\n", row);
  }
}

void print_sweep(const std::vector<plan::SweepSeries>& series, const std::string& outer) {
  if (series.empty()) return;
  auto mark = [](const plan::Estimate& e) { return e.fits ? " " : kDoesNotFit; };
  print_sweep_table(series, fmt::format("tokens/s per device (J/token; '{}' = does not fit)", kDoesNotFit),
                    [&](const plan::SweepPoint& p) {
                      const plan::Estimate& e = p.estimate;
                      return fmt::format("{:.0f} ({}){}", e.tokens_per_s / e.world_size, joules_cell(e, "{:.2g}"), mark(e));
                    });
  print_sweep_table(series,
                    fmt::format("TFLOP/s per device (E(n) = (throughput(n)/n) / (throughput(n0)/n0), n0 = {} devices; "
                                "'{}' = does not fit)",
                                series.front().points.front().estimate.world_size, kDoesNotFit),
                    [&](const plan::SweepPoint& p) {
                      return fmt::format("{:.1f} E={:.2f}{}", p.estimate.tflops_per_device, p.scaling_efficiency,
                                         mark(p.estimate));
                    });
  print_sweep_table(series, fmt::format("GB a rank sends over '{}' per step", outer), [&](const plan::SweepPoint& p) {
    return fmt::format("{:.3f}", p.estimate.bytes_on(outer) / 1e9);
  });
}

// A pipeline's blocks a stage: the run's (config.shard.pp_layers; none: equal stages) against
// the plan's, so that an uneven run is not compared with an even plan or the other way round.
template <class Differs>
void check_same_stages(const nlohmann::json* shard, const plan::Estimate& e, const Differs& differs) {
  std::vector<int> planned, run;
  for (const plan::Estimate::PipelineStage& s : e.stages) planned.push_back(s.blocks);
  if (shard && shard->is_object() && shard->contains("pp_layers") && (*shard)["pp_layers"].is_array())
    for (const nlohmann::json& n : (*shard)["pp_layers"]) run.push_back(n.is_number_integer() ? n.get<int>() : -1);
  const bool even = run.empty();
  if (even) {
    int blocks = 0;
    for (int b : planned) blocks += b;
    run.assign(planned.size(), blocks / static_cast<int>(planned.size()));
  }
  if (run != planned)
    throw differs("blocks a stage", fmt::format("{}", fmt::join(run, ",")), fmt::format("{}", fmt::join(planned, ",")),
                  even ? std::string("leave out --pp-layers") : fmt::format("give --pp-layers {}", fmt::join(run, ",")));
}

// The run's setup against the plan's, in the order a user would put it right: strategy,
// sequence parallelism, world size, topology, precision. The first that differs is named with both values, since
// no byte count can agree after it.
void check_same_setup(const std::string& path, const nlohmann::json& summary, const plan::Estimate& e,
                      const topo::Topology& topology, Precision precision, bool sequence_parallel) {
  auto differs = [&](const char* field, const std::string& run, const std::string& planned, const std::string& fix) {
    return Error(fmt::format("--compare-summary {}: {} differs: the run has {}, the plan {} ({})", path, field, run,
                             planned, fix));
  };
  if (!summary.contains("strategy") || !summary["strategy"].is_string())
    throw Error(fmt::format("--compare-summary {}: no strategy: a single-process run, whose bytes the planner does "
                            "not price (compare a run under mpirun with --strategy)",
                            path));
  // A preset changed by overrides: '*' in the plan, '+custom' in the run; a TP run's degree as
  // the plan names it (zero3+tp2).
  const plan::ModelParallel run_mp{summary.value("tensor_parallel", 1), summary.value("pipeline_stages", 1), "", ""};
  const std::string run_strategy = plan::variant_name(summary["strategy"].get<std::string>(), run_mp);
  std::string plan_strategy = e.strategy;
  if (const std::size_t star = plan_strategy.find('*'); star != std::string::npos)
    plan_strategy.replace(star, 1, "+custom");
  if (run_strategy != plan_strategy)
    throw differs("strategy", run_strategy, plan_strategy,
                  fmt::format("plan it with --strategy {}",
                              plan::variant_name(run_strategy.substr(0, run_strategy.find('+')), run_mp)));
  // The run's own setting (config.shard in summary.json); runs from before the flag had none.
  const nlohmann::json* shard = nullptr;
  if (summary.contains("config") && summary["config"].is_object() && summary["config"].contains("shard"))
    shard = &summary["config"]["shard"];
  const bool run_sp = shard && shard->is_object() && shard->contains("sequence_parallel") &&
                      (*shard)["sequence_parallel"].is_boolean() && (*shard)["sequence_parallel"].get<bool>();
  if (run_sp != sequence_parallel)
    throw differs("sequence parallelism", run_sp ? "on" : "off", sequence_parallel ? "on" : "off",
                  run_sp ? "give --sequence-parallel" : "leave out --sequence-parallel");
  if (!e.stages.empty()) check_same_stages(shard, e, differs);
  if (summary.contains("world_size") && summary["world_size"] != e.world_size)
    throw differs("world size", fmt::format("{} ranks", summary["world_size"].dump()),
                  fmt::format("{} ranks", e.world_size), "choose --nodes to match");
  if (summary.contains("topology") && summary["topology"].is_object()) {
    const nlohmann::json& t = summary["topology"];
    std::vector<std::string> tiers;
    if (t.contains("tiers") && t["tiers"].is_array())
      for (const nlohmann::json& tier : t["tiers"])
        tiers.push_back(fmt::format("{} {}", tier.value("name", std::string("?")), tier.value("size", nlohmann::json()).dump()));
    const std::string run_topology = fmt::format("'{}' ({})", t.value("name", std::string("?")), fmt::join(tiers, " x "));
    const std::string plan_topology = fmt::format("'{}' ({})", topology.name(), tier_sizes(topology));
    if (run_topology != plan_topology) throw differs("topology", run_topology, plan_topology, "give the run's --topology");
  }
  // strata's runtime computes, keeps and sends every state in fp32 unless a wire says otherwise.
  if (precision != Precision::F32)
    throw differs("precision", "fp32 (strata's runtime)", std::string(precision_name(precision)),
                  "give --precision fp32");
}

// Planner bytes per tier (plan::ModelParallelPlan::run_traffic) against a training run's
// summary.json (comm.scheduled_per_step and, when present, the measured comm.per_step): equal,
// or an Error naming the first difference.
void compare_summary(const std::string& path, const plan::Estimate& e, const topo::Topology& topology,
                     Precision precision, bool sequence_parallel,
                     const std::vector<plan::ModelParallelPlan::RunTraffic>& planned,
                     const std::vector<std::string>& not_compared) {
  nlohmann::json summary;
  try {
    summary = nlohmann::json::parse(read_file_text(path));
  } catch (const nlohmann::json::exception& ex) {
    throw Error(fmt::format("--compare-summary {}: not JSON ({})", path, ex.what()));
  }
  if (!summary.is_object()) throw Error(fmt::format("--compare-summary {}: not a summary.json (a JSON object)", path));
  check_same_setup(path, summary, e, topology, precision, sequence_parallel);
  if (!summary.contains("comm") || !summary["comm"].contains("scheduled_per_step"))
    throw Error(fmt::format("--compare-summary {}: no comm.scheduled_per_step", path));
  std::vector<std::string> sections{"scheduled_per_step"};
  if (summary["comm"].contains("per_step")) sections.push_back("per_step");
  fmt::print("\nbytes a rank a step, planner vs {} ({}):\n", path, fmt::join(sections, ", "));
  for (const plan::ModelParallelPlan::RunTraffic& t : planned) {
    const std::pair<const char*, double> fields[] = {
        {"bytes_sent", t.bytes_sent}, {"bytes_received", t.bytes_received}, {"messages", t.messages}};
    for (const std::string& section : sections) {
      const nlohmann::json& per_tier = summary["comm"][section];
      if (!per_tier.contains(t.tier))
        throw Error(fmt::format("--compare-summary {}: comm.{} has no tier '{}'", path, section, t.tier));
      for (auto [field, want] : fields) {
        const nlohmann::json& v = per_tier[t.tier][field];
        if (!v.is_number())
          throw Error(
              fmt::format("--compare-summary {}: comm.{}.{}.{} is not a number", path, section, t.tier, field));
        const double got = v.get<double>();
        fmt::print("  {:<10} {:<15} {:<19} planner {:>14.1f}  summary {:>16.1f}  {}\n", t.tier, field, section, want,
                   got, got == want ? "equal" : "DIFFERENT");
        if (got != want)
          throw Error(fmt::format("--compare-summary {}: comm.{}.{}.{} = {} but the planner prices {}", path, section,
                                  t.tier, field, v.dump(), want));
      }
    }
  }
  if (!not_compared.empty())
    fmt::print("not compared: {} (the pipeline stages reduce their gradients outside the stage schedule the "
               "planner prices)\n",
               fmt::join(not_compared, ", "));
  fmt::print("all equal\n");
}

// A calibrated collective is priced as measured, so a --tier override of the rate its curve
// replaces (bandwidth_GBps, efficiency, ports, port_GBps) moves only the tier's other collectives,
// and one of latency_us only those without a fixed cost of their own. Say so, rather than let the
// override look applied.
void note_overrides_under_calibration(const std::vector<std::string>& specs, const plan::Calibration& calibration) {
  for (const std::string& spec : specs) {
    const topo::TierOverride o = topo::parse_tier_override(spec);
    const bool rate = o.field == "bandwidth_GBps" || o.field == "efficiency" || o.field == "ports" ||
                      o.field == "port_GBps";
    if (!rate && o.field != "latency_us") continue;
    const auto tier = std::find_if(calibration.tiers.begin(), calibration.tiers.end(),
                                   [&](const plan::TierCalibration& t) { return t.name == o.tier; });
    if (tier == calibration.tiers.end()) continue;
    std::vector<std::string_view> measured, moved;
    for (Collective k : kCollectives) {
      const plan::CollectiveCurve* curve = tier->find(k);
      const bool as_measured = curve && (rate || curve->latency_known);
      (as_measured ? measured : moved).push_back(collective_key(k));
    }
    if (measured.empty()) continue;
    fmt::print(stderr, "strata plan: note: --tier {}: the calibration prices the {} tier's {} {}; the override moves {}\n",
               spec, o.tier, fmt::join(measured, ", "), rate ? "at their measured rates" : "with their measured fixed cost",
               moved.empty() ? std::string("nothing") : fmt::format("only its {}", fmt::join(moved, ", ")));
  }
}

// --emit FRAMEWORK FILE: the chosen plan as the framework's configuration, written whole or not
// at all; what it configures is said on stderr, so --json stays one document.
void write_emitted(const PlanOptions& o, plan::EmitRequest request) {
  request.framework = plan::parse_framework(o.emit.at(0));
  const plan::Emitted e = plan::emit(request);
  atomic_write_file(o.emit.at(1), e.text);
  fmt::print(stderr, "strata plan: wrote {} ({} config of {}{})\n", o.emit.at(1), plan::framework_name(request.framework),
             e.strata.strategy,
             e.plan.gaps.empty()
                 ? std::string(", run as priced")
                 : fmt::format("; it cannot run it as priced, so the file holds the nearest it runs: {} {:.0f} tokens/s "
                               "a device against {:.0f}, {}; the file's comment says why",
                               plan::spec_label(e.framework.spec), e.framework.tokens_per_s / e.framework.world_size,
                               e.strata.tokens_per_s / e.strata.world_size, e.framework.memory_verdict()));
}

// What every mode prices over: the model, the cluster (its topology not yet resolved for a node
// count), the device, the workload, what is left out and the calibration.
struct PlanInputs {
  plan::ModelShape model;
  topo::Topology topology;
  bool nodes_given = false;
  int nodes = 0;
  plan::DeviceFacts device;
  plan::Workload workload;
  std::vector<plan::LeaveOut> leave_out;
  std::optional<plan::Calibration> calibration;
};

plan::DeviceFacts read_device(const PlanOptions& o, const std::optional<plan::DeviceFacts>& preset_device,
                              const topo::Topology& topology, const std::optional<plan::Calibration>& calibration) {
  plan::DeviceOverrides overrides;
  if (o.peak_opt->count()) overrides.peak_tflops = o.peak_tflops;
  if (o.memory_opt->count()) overrides.memory_gb = o.memory_gb;
  if (o.hbm_opt->count()) overrides.hbm_GBps = o.hbm_GBps;
  // A device without a preset takes its peak (for MFU) and memory rate from what was measured.
  if (calibration && calibration->compute && !preset_device) {
    if (!overrides.peak_tflops) overrides.peak_tflops = calibration->compute->peak_gflops / 1e3;
    if (!overrides.hbm_GBps) overrides.hbm_GBps = calibration->compute->optimizer_GBps;
  }
  if (o.efficiency_opt->count()) overrides.compute_efficiency = o.compute_efficiency;
  if (o.tdp_opt->count()) overrides.tdp_watts = o.tdp_watts;
  if (o.idle_opt->count()) overrides.idle_watts = o.idle_watts;
  plan::DeviceFacts device = plan::resolve_device(preset_device, topology.name(), overrides);
  // A shipped calibration's published efficiency replaces the device's assumed one; the command
  // line's still wins.
  if (calibration && calibration->compute_efficiency > 0 && !o.efficiency_opt->count()) {
    device.compute_efficiency = calibration->compute_efficiency;
    device.source += fmt::format("; compute efficiency {:g} from the calibration {}", device.compute_efficiency,
                                 o.calibration);
  }
  // The efficiency by shape replaces one efficiency, the calibration's too; --compute-efficiency
  // still wins over it.
  if (!o.kernels.empty()) device.kernels = plan::parse_kernel_generation(o.kernels);
  if (!o.compute_anchor.empty()) {
    const plan::ComputeAnchor& anchor = plan::compute_anchor(o.compute_anchor);
    if (!o.efficiency_opt->count()) device.compute_anchor = &anchor;
  }
  return device;
}

plan::Workload read_workload(const PlanOptions& o, const plan::ModelShape& model) {
  plan::Workload workload;
  workload.micro_batch = o.micro_batch;
  workload.seq = o.seq_opt->count() ? o.seq : model.seq;
  workload.accumulation_steps = o.accum;
  workload.recompute = !o.recompute_opt->count() ? plan::Recompute::None
                       : o.recompute.empty()      ? plan::Recompute::Full
                                                  : plan::parse_recompute(o.recompute);
  workload.flash_attention = o.flash_attention;
  workload.sequence_parallel = o.spec_flags.sequence_parallel;
  workload.batch_per_device = o.batch_per_device;
  workload.precision = precision_named(o.precision, "--precision");
  workload.collectives = shard::parse_composition(o.collectives);
  workload.granularity = plan::parse_granularity(o.granularity);
  if (!o.peer.empty()) {
    workload.peer = plan::parse_peer(o.peer);
    if (o.granularity != "unit")
      throw Error(fmt::format("--granularity {}: --peer {} sets the granularity; give one of them", o.granularity,
                              o.peer));
    workload.granularity = plan::peer_granularity(workload.peer, workload.granularity);
  }
  workload.validate(model);
  return workload;
}

PlanInputs read_inputs(const PlanOptions& o) {
  if (o.model.empty())
    throw Error("--model: required (a preset, custom with --shape FIELD=VALUE, or a Hugging Face config.json)");
  if (o.topology.empty() == o.cluster.empty())
    throw Error("--topology or --cluster: give one (a topology preset or TOML file of [[tiers]]; or "
                "--cluster nodes=N,gpus=G,gpu=KIND,nics=COUNTxGBITS)");
  PlanInputs in;
  in.model = plan::ModelShape::from_name_and_fields(o.model, o.shape_fields);
  if (o.topology == "host") comm::mpi_session();  // detecting the host needs MPI
  const std::optional<plan::ClusterSpec> cluster =
      o.cluster.empty() ? std::nullopt : std::optional(plan::ClusterSpec::parse(o.cluster));
  in.topology = cluster ? cluster->topology() : topo::Topology::load(o.topology);
  if (cluster && cluster->nodes > 0 && o.nodes_opt->count() && o.nodes != cluster->nodes)
    throw Error(fmt::format("--nodes {}: --cluster says nodes={}", o.nodes, cluster->nodes));
  in.nodes_given = o.nodes_opt->count() > 0 || (cluster && cluster->nodes > 0);
  in.nodes = o.nodes_opt->count() ? o.nodes : cluster ? cluster->nodes : 0;
  const std::optional<plan::DeviceFacts> preset_device =
      cluster ? std::optional(cluster->device()) : plan::device_for_topology(o.topology);
  for (const auto& spec : o.tier_overrides) in.topology.apply_override(topo::parse_tier_override(spec));

  if (!o.calibration.empty()) in.calibration = plan::Calibration::from_toml_file(o.calibration);
  if (in.calibration) note_overrides_under_calibration(o.tier_overrides, *in.calibration);
  in.device = read_device(o, preset_device, in.topology, in.calibration);
  in.workload = read_workload(o, in.model);
  if (in.calibration && !o.efficiency_opt->count())
    plan::check_gemm_calibration(*in.calibration, in.device, in.workload.precision, "--calibration " + o.calibration);
  if (o.top <= 0) throw Error(fmt::format("--top {}: must be positive", o.top));
  for (const auto& l : o.leave_out) in.leave_out.push_back(plan::parse_leave_out(l, in.topology));
  return in;
}

// The modes' exclusions, refused before anything is priced: --sweep-nodes, --search,
// --print-schedule and --compare-summary each take the flags that make sense for it.
void check_modes(const PlanOptions& o, const PlanInputs& in) {
  if (!o.emit.empty()) {
    plan::parse_framework(o.emit.at(0));  // refuse an unknown framework before pricing anything
    if (!o.sweep_nodes.empty() || o.print_schedule)
      throw Error("--emit: writes one plan: not with --sweep-nodes or --print-schedule");
  }
  if (!o.sweep_nodes.empty()) {
    if (in.nodes_given)
      throw Error("--nodes (or --cluster nodes=): not with --sweep-nodes (the sweep sets the node count)");
    if (o.search) throw Error("--search: not with --sweep-nodes");
    if (!o.compare_summary.empty()) throw Error("--compare-summary: not with --sweep-nodes");
    return;
  }
  if (o.print_schedule && (o.search || !o.compare_summary.empty()))
    throw Error("--print-schedule: prints the chosen strategies' schedules; not with --sweep-nodes, --search or "
                "--compare-summary");
  if (!o.svg.empty()) throw Error("--svg: only with --sweep-nodes");
  if (o.search && !o.shard.pp_layers.empty())
    throw Error("--pp-layers: splits the stages of one --pp; --search tries equal stages of every pp it ranks");
  if (o.print_schedule && (o.pp_given || o.strategy.find("+pp") != std::string::npos))
    throw Error("--print-schedule: a pipeline's messages are priced beside the stages' schedules, not in one; "
                "leave out --pp and +ppN");
  if (!in.nodes_given)
    throw Error("--nodes: required (how many nodes of the topology; world = nodes x ranks per node)");
  const parallel::ShardOptions& s = o.shard;
  if (o.search && (!s.shard.empty() || !s.secondary.empty() || !s.weight_wire.empty() || !s.grad_wire.empty() ||
                   !s.step_grad_wire.empty() || o.strategy != "all" || !o.compare_summary.empty()))
    throw Error("--search: varies tiers and wires itself; give none of --strategy, --shard, --secondary, "
                "--weight-wire, --grad-wire, --step-grad-wire, --compare-summary with it");
}

nlohmann::json plan_json(const PlanInputs& in, const topo::Topology& topology, const plan::PlanContext& context) {
  return {{"model", in.model.to_json()}, {"topology", topology.to_json()}, {"assumptions", context.assumptions()}};
}

// --sweep-nodes: the chosen strategies at each node count.
void run_sweep(const PlanOptions& o, const PlanInputs& in) {
  const std::string outer = in.topology.tiers().back().name;
  const std::vector<int> nodes = plan::parse_node_list(o.sweep_nodes);
  in.topology.world_size_for_nodes(nodes.back());  // refuses a topology without nodes, or too many ranks
  topo::Topology first = in.topology;
  first.resolve(first.world_size_for_nodes(nodes.front()));
  const auto strategies = chosen_strategies(o, first, in.workload);
  const auto series =
      plan::sweep(in.model, in.topology, in.device, in.workload, in.leave_out, strategies, nodes, in.calibration);
  const std::string title = sweep_title(o, in.model.name, in.topology.name(), in.workload);
  if (!o.svg.empty()) atomic_write_file(o.svg, plan::sweep_svg(series, title, outer));
  const plan::PlanContext context(in.model, first, in.device, in.workload, in.leave_out, in.calibration);
  if (o.json) {
    nlohmann::json doc = plan_json(in, first, context);
    doc["outer_tier"] = outer;
    doc["sweep"] = plan::sweep_json(series, outer);
    fmt::print("{}\n", doc.dump(2));
  } else {
    topo::Topology largest = in.topology;
    largest.resolve(largest.world_size_for_nodes(nodes.back()));
    print_header(context, fmt::format("nodes {}", o.sweep_nodes), &largest);
    print_sweep(series, outer);
    if (!o.svg.empty()) fmt::print("\nwrote {}\n", o.svg);
  }
}

// --search: every valid (tp, pp, spec), ranked; --emit writes the best.
void run_search(const PlanOptions& o, const PlanInputs& in, const topo::Topology& topology,
                const plan::PlanContext& context) {
  const parallel::ShardOptions& s = o.shard;
  plan::SearchRequest request{in.model, topology, in.device, in.workload, in.leave_out, in.calibration, {}, {}, {},
                              s.tp_tier, o.shard.pp_tier};
  if (s.block_size != 0) request.space.block_size = s.block_size;
  if (s.prefetch >= 0) request.space.prefetch = s.prefetch;
  if (s.bucket_bytes >= 0) request.space.bucket_bytes = static_cast<std::uint64_t>(s.bucket_bytes);
  if (s.first_bucket_bytes >= 0) request.space.first_bucket_bytes = static_cast<std::uint64_t>(s.first_bucket_bytes);
  if (o.tp_given) request.tp = s.tp;
  if (o.pp_given) request.pp = o.shard.pp;
  const plan::SearchResult result = plan::run_search(request);
  // Nothing fits: try the changes a user would make, in order, until one does.
  const std::vector<plan::FitChange> changes =
      result.fitting.empty() ? plan::changes_until_it_fits(request) : std::vector<plan::FitChange>{};
  if (o.json) {
    nlohmann::json doc = plan_json(in, topology, context);
    doc["model_parallel_assumptions"] = plan::model_parallel_assumptions();
    doc["search"] = plan::search_json(result, o.top);
    doc["recommendation"] = plan::recommendation_json(request, result, changes);
    fmt::print("{}\n", doc.dump(2));
  } else {
    print_search(context, result, o.top, plan::recommendation_text(request, result, changes));
  }
  std::fflush(stdout);
  if (!o.emit.empty() && !result.fitting.empty()) {
    const plan::Estimate& best = result.fitting.front();
    plan::Workload same_batch = in.workload;  // the search's: every split at the same global batch
    same_batch.batch_per_device = true;
    write_emitted(o, {plan::Framework::DeepSpeed, in.model, topology, in.device, same_batch, in.leave_out,
                      in.calibration,
                      {best.spec.preset, best.spec, {best.tensor_parallel, best.pipeline_stages, s.tp_tier, s.pp_tier}}});
  }
  if (result.fitting.empty())
    throw Error(fmt::format("--search: no plan fits in {:g} GB a device{}", in.device.memory_gb,
                            !changes.empty() && changes.back().fits
                                ? fmt::format("; the smallest change that fits: {}", fmt::join(changes.back().flags, " "))
                                : std::string()));
}

// --print-schedule: the very schedules the estimates price (TP ops included).
void run_print_schedule(const PlanOptions& o, const PlanInputs& in, const topo::Topology& topology,
                        const std::vector<plan::NamedSpec>& chosen) {
  nlohmann::json schedules = nlohmann::json::object();
  for (const plan::NamedSpec& s : chosen) {
    const shard::Schedule schedule =
        plan::ModelParallelPlan(in.model, topology, in.device, in.workload, s.mp, in.leave_out, in.calibration)
            .stage(0)
            .schedule(s.spec);
    if (o.json) schedules[plan::variant_name(s.name, s.mp)] = schedule.to_json();
    else fmt::print("{}\n", schedule.table());
  }
  if (o.json) fmt::print("{}\n", nlohmann::json{{"model", in.model.to_json()}, {"schedules", schedules}}.dump(2));
}

// The default mode: each chosen strategy's estimate; --emit writes the one, --compare-summary
// checks it against a run.
void run_estimates(const PlanOptions& o, const PlanInputs& in, const topo::Topology& topology,
                   const plan::PlanContext& context, const std::vector<plan::NamedSpec>& chosen) {
  if (!o.emit.empty()) {
    if (chosen.size() != 1 || !o.compare_summary.empty())
      throw Error("--emit: writes one plan: give one --strategy (or --search for the best)");
    write_emitted(o, {plan::Framework::DeepSpeed, in.model, topology, in.device, in.workload, in.leave_out,
                      in.calibration, chosen.front()});
  }
  std::vector<plan::Estimate> estimates;
  std::vector<plan::ModelParallelPlan::RunTraffic> run_traffic;
  std::vector<std::string> not_compared;
  for (const plan::NamedSpec& s : chosen) {
    const plan::ModelParallelPlan p(in.model, topology, in.device, in.workload, s.mp, in.leave_out, in.calibration);
    estimates.push_back(p.estimate(s.name, s.spec));
    if (!o.compare_summary.empty()) run_traffic = p.run_traffic(estimates.back(), s.spec, not_compared);
  }
  if (!o.compare_summary.empty() && in.workload.collectives != shard::Composition::Hierarchical)
    throw Error("--compare-summary: strata's runtime runs hierarchical collectives; not with --collectives nccl");
  if (!o.compare_summary.empty() && estimates.size() != 1)
    throw Error("--compare-summary: give one --strategy (the one the run trained with)");
  if (o.json) {
    nlohmann::json strategies = nlohmann::json::object();
    for (const plan::Estimate& e : estimates) strategies[e.strategy] = e.to_json();
    nlohmann::json doc = plan_json(in, topology, context);
    doc["model_parallel_assumptions"] = plan::model_parallel_assumptions();
    doc["strategies"] = strategies;
    fmt::print("{}\n", doc.dump(2));
  } else {
    print_estimates(context, estimates);
    // A strategy that does not fit: the smallest change that makes it fit.
    const plan::SearchRequest request{in.model, topology, in.device, in.workload, in.leave_out, in.calibration,
                                      {}, {}, {}, "", ""};
    for (std::size_t i = 0; i < estimates.size(); ++i)
      if (!estimates[i].fits)
        fmt::print("  {} {}: {}\n", kDoesNotFit, estimates[i].strategy,
                   plan::smallest_change_line(plan::changes_until_strategy_fits(request, chosen[i])));
  }
  std::fflush(stdout);
  if (!o.compare_summary.empty())
    compare_summary(o.compare_summary, estimates.front(),
                    plan::model_parallel_dims(topology, chosen.front().mp).data_parallel_topology(topology),
                    in.workload.precision, in.workload.sequence_parallel, run_traffic, not_compared);
}

void run_plan(const PlanOptions& o) {
  const PlanInputs in = read_inputs(o);
  check_modes(o, in);
  if (!o.sweep_nodes.empty()) {
    run_sweep(o, in);
    std::fflush(stdout);
    return;
  }
  topo::Topology topology = in.topology;
  topology.resolve(topology.world_size_for_nodes(in.nodes));
  const plan::PlanContext context(in.model, topology, in.device, in.workload, in.leave_out, in.calibration);
  if (o.search) return run_search(o, in, topology, context);
  const std::vector<plan::NamedSpec> chosen = chosen_strategies(o, topology, in.workload);
  if (o.print_schedule) run_print_schedule(o, in, topology, chosen);
  else run_estimates(o, in, topology, context, chosen);
  std::fflush(stdout);
}

const CommandRegistrar kRegisterPlan(60, [](CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Predict step time, throughput, traffic per tier and memory of sharding strategies on a cluster");
  cmd->add_option("--model", o->model, "gpt-neox-20b, gpt-neox-10b, llama2-7b, llama2-13b, llama2-70b, tinyllama-1.1b, "
                                       "gpt2-124m, tiny, small, custom, or a Hugging Face config.json (or its folder): "
                                       "Llama, Mistral, Qwen2, GPT-NeoX, GPT-2");
  cmd->add_option("--shape", o->shape_fields,
                  "model field override FIELD=VALUE (repeatable): layers hidden heads kv_heads ffn vocab seq "
                  "learned_positions mlp norm biases tied_head")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--topology", o->topology, "frontier, dgx-a100, dgx-h100, host, or a TOML file of [[tiers]]");
  cmd->add_option("--cluster", o->cluster,
                  fmt::format("instead of --topology: nodes=N,gpus=G,gpu=KIND,nvlink=GBps,nics=COUNTxGBITS (or a TOML "
                              "file of those keys under [cluster]); KIND: {} (datasheet figures; nvlink defaults to "
                              "the GPU's) (docs/planner-quickstart.md)",
                              fmt::join(plan::gpu_names(), ", ")));
  o->nodes_opt = cmd->add_option("--nodes", o->nodes, "nodes (domains of the tier inside the outermost one)");
  cmd->add_option("--tier", o->tier_overrides, "override a tier field: NAME.FIELD=VALUE (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--strategy", o->strategy,
                  "a strategy, a comma list, or all (presets and topo-paper); NAME+tpN+ppM: with N-way tensor and "
                  "M-stage pipeline parallelism")
      ->capture_default_str();
  add_spec_flags(cmd, o->spec_flags);
  cmd->add_option("--micro-batch", o->micro_batch, "sequences a rank runs per micro-batch")->capture_default_str();
  o->seq_opt = cmd->add_option("--seq", o->seq, "tokens a sequence (default: the model's)");
  cmd->add_option("--accum", o->accum, "micro-batches per optimizer step")->capture_default_str();
  o->recompute_opt = cmd->add_option("--recompute", o->recompute,
                                     "activation recomputation: full (also a bare --recompute: every block's forward "
                                     "rerun in backward), selective-op (torchtitan's per-op selective checkpointing: "
                                     "every second matmul and the non-matmul ops rerun, never attention; needs "
                                     "--flash-attention) or none (the default) (docs/planner.md \"Recomputation\")")
                         ->expected(0, 1);
  cmd->add_flag("--flash-attention", o->flash_attention, "attention keeps no seq x seq probabilities");
  cmd->add_flag("--batch-per-device", o->batch_per_device,
                "--micro-batch and --accum are one device's: a TP group of t runs t x the micro-batch, a pipeline of "
                "p runs p x the micro-batches (the same global batch for every split)");
  cmd->add_option("--precision", o->precision, "bf16 (published systems) or fp32 (strata's runtime)")
      ->capture_default_str();
  cmd->add_option("--collectives", o->collectives,
                  "hierarchical: strata's own, one op per tier; nccl (alias flat-ring): one NCCL call over the whole "
                  "group, as PyTorch FSDP and DeepSpeed ZeRO run their collectives, priced by NCCL's own model "
                  "(docs/planner.md)")
      ->capture_default_str();
  cmd->add_option("--granularity", o->granularity,
                  "collective calls an op of a unit makes: unit (strata's, and PyTorch FSDP's one a wrapped block; "
                  "fsdp is the same), deepspeed (DeepSpeed ZeRO's default buckets: 5e7-element parameter gathers, "
                  "5e8-element reductions; each call pays the fixed cost) (docs/planner.md \"Granularity\")")
      ->capture_default_str();
  cmd->add_option("--peer", o->peer,
                  "price a published run's software as it ran: " + fmt::format("{}", fmt::join(plan::peer_names(), ", ")) +
                      " (its collective calls, overlap and copies, each from the framework's code; docs/planner.md "
                      "\"Peers\"); default: strata's own runtime");
  o->peak_opt = cmd->add_option("--peak-tflops", o->peak_tflops, "peak dense bf16 TFLOP/s a device");
  o->memory_opt = cmd->add_option("--device-memory-gb", o->memory_gb, "memory a device, GB (1e9 bytes)");
  o->hbm_opt = cmd->add_option("--hbm-gbps", o->hbm_GBps, "memory bandwidth a device, GB/s");
  o->efficiency_opt =
      cmd->add_option("--compute-efficiency", o->compute_efficiency,
                      "achieved fraction of peak for compute (wins over a calibration's published efficiency)");
  cmd->add_option("--compute-anchor", o->compute_anchor,
                  "price compute by shape (docs/planner.md \"Compute by shape\"), anchored on a held-out measurement: " +
                      fmt::format("{}", fmt::join(plan::compute_anchor_names(), ", ")) +
                      " (--compute-efficiency still wins)");
  cmd->add_option("--kernels", o->kernels,
                  "the software generation of the kernels the shape model prices: 2021 or 2024 (default: the "
                  "peer's)");
  cmd->add_option("--leave-out", o->leave_out,
                  "leave a collective out of the account, PURPOSE[@TIER] (repeatable), e.g. weight-gather-step")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  o->tdp_opt = cmd->add_option("--tdp-watts", o->tdp_watts, "board power (TDP) a device, W, for J/token");
  o->idle_opt = cmd->add_option("--idle-watts", o->idle_watts, "idle power a device, W (default: a tenth of TDP)");
  cmd->add_flag("--search", o->search, "rank every valid (tp, pp, spec) of the topology");
  cmd->add_option("--top", o->top, "specs shown by --search (and as many runners-up)")->capture_default_str();
  cmd->add_option("--sweep-nodes", o->sweep_nodes, "node counts, e.g. 1,2,4,8");
  cmd->add_option("--svg", o->svg, "write the sweep's plots to this SVG file");
  cmd->add_option("--compare-summary", o->compare_summary,
                  "check the planner's bytes per tier against a run's summary.json (comm.scheduled_per_step, "
                  "comm.per_step)");
  cmd->add_option("--calibration", o->calibration,
                  "price with what `strata calibrate` measured (a calibration TOML file): collective curves per "
                  "tier, compute curve, Adam rate, overlap slowdown; or a shipped one (configs/calibration/): "
                  "published link rates and compute efficiency");
  cmd->add_flag("--print-schedule", o->print_schedule,
                "print each chosen strategy's schedule of collectives instead of its estimate (--json: each op's "
                "issue points, slots and algorithm, the program's prefetch depth and reductions in flight)");
  cmd->add_flag("--json", o->json, "print one JSON document");
  cmd->add_option("--emit", o->emit,
                  "FRAMEWORK FILE: write the plan (one --strategy, or the best of --search) as deepspeed (config JSON), "
                  "fsdp2 (Python), torchtitan (job TOML) or megatron (arguments); where the framework cannot run the "
                  "plan the file says so and holds the nearest it runs, priced (docs/planner.md)")
      ->expected(2);
  cmd->callback([o] {
    const train::Settings given = o->spec_flags.given();
    o->shard = train::build_shard_options(given);
    o->shard.keep_weights_after_forward = o->spec_flags.keep_weights_after_forward;
    o->tp_given = given.contains("shard.tp");
    o->pp_given = given.contains("shard.pp");
    run_plan(*o);
  });
});

}  // namespace
}  // namespace strata::cli
