#include "plan/inputs.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/plural.hpp"
#include "base/precision.hpp"
#include "comm/runtime/mpi_session.hpp"
#include "plan/cluster.hpp"
#include "plan/gemm_bench.hpp"
#include "plan/report.hpp"

namespace strata::plan {

namespace {

DeviceFacts read_device(const PlanFlags& o, const std::optional<DeviceFacts>& preset_device,
                        const topo::Topology& topology, const std::optional<Calibration>& calibration) {
  DeviceOverrides overrides = o.device;
  // A device without a preset takes its peak (for MFU) and memory rate from what was measured.
  if (calibration && calibration->compute && !preset_device) {
    if (!overrides.peak_tflops) overrides.peak_tflops = calibration->compute->peak_gflops / 1e3;
    if (!overrides.hbm_GBps) overrides.hbm_GBps = calibration->compute->optimizer_GBps;
  }
  DeviceFacts device = resolve_device(preset_device, topology.name(), overrides);
  // A shipped calibration's published efficiency replaces the device's assumed one; the command
  // line's still wins.
  if (calibration && calibration->compute_efficiency > 0 && !o.device.compute_efficiency) {
    device.compute_efficiency = calibration->compute_efficiency;
    device.source +=
        fmt::format("; compute efficiency {:g} from the calibration {}", device.compute_efficiency, o.calibration);
  }
  // The efficiency by shape replaces one efficiency, the calibration's too; --compute-efficiency
  // still wins over it.
  if (!o.kernels.empty()) device.kernels = parse_kernel_generation(o.kernels);
  if (!o.compute_anchor.empty()) {
    const ComputeAnchor& anchor = compute_anchor(o.compute_anchor);
    if (!o.device.compute_efficiency) device.compute_anchor = &anchor;
  }
  return device;
}

Workload read_workload(const PlanFlags& o, const ModelShape& model) {
  Workload workload{.micro_batch = o.micro_batch, .seq = o.seq.value_or(model.seq), .accumulation_steps = o.accum,
                    .recompute = !o.recompute           ? Recompute::None
                                 : o.recompute->empty() ? Recompute::Full
                                                        : parse_recompute(*o.recompute),
                    .flash_attention = o.flash_attention, .sequence_parallel = o.sequence_parallel,
                    .precision = precision_named(o.precision, "--precision"), .batch_per_device = o.batch_per_device,
                    .collectives = shard::parse_composition(o.collectives),
                    .granularity = parse_granularity(o.granularity)};
  if (!o.peer.empty()) {
    workload.peer = parse_peer(o.peer);
    if (o.granularity != "unit")
      throw Error(
          fmt::format("--granularity {}: --peer {} sets the granularity; give one of them", o.granularity, o.peer));
    workload.granularity = peer_granularity(workload.peer, workload.granularity);
  }
  workload.validate(model);
  return workload;
}

}  // namespace

PlanInputs read_inputs(const PlanFlags& o, std::FILE* notes) {
  if (o.model.empty())
    throw Error("--model: required (a preset, custom with --shape FIELD=VALUE, or a Hugging Face config.json)");
  if (o.topology.empty() == o.cluster.empty())
    throw Error(
        "--topology or --cluster: give one (a topology preset or TOML file of [[tiers]]; or "
        "--cluster nodes=N,gpus=G,gpu=KIND,nics=COUNTxGBITS)");
  PlanInputs in;
  in.model = ModelShape::from_name_and_fields(o.model, o.shape_fields);
  if (o.topology == "host") comm::mpi_session();  // detecting the host needs MPI
  const std::optional<ClusterSpec> cluster =
      o.cluster.empty() ? std::nullopt : std::optional(ClusterSpec::parse(o.cluster));
  in.topology = cluster ? cluster->topology() : topo::Topology::load(o.topology);
  if (cluster && cluster->nodes > 0 && o.nodes && *o.nodes != cluster->nodes)
    throw Error(fmt::format("--nodes {}: --cluster says nodes={}", *o.nodes, cluster->nodes));
  in.nodes_given = o.nodes || (cluster && cluster->nodes > 0);
  in.nodes = o.nodes ? *o.nodes : cluster ? cluster->nodes : 0;
  const std::optional<DeviceFacts> preset_device =
      cluster ? std::optional(cluster->device()) : device_for_topology(o.topology);
  for (const auto& spec : o.tier_overrides) in.topology.apply_override(topo::parse_tier_override(spec));

  if (!o.calibration.empty()) in.calibration = Calibration::from_toml_file(o.calibration);
  if (in.calibration)
    for (const std::string& note : calibrated_override_notes(o.tier_overrides, *in.calibration))
      fmt::print(notes, "strata plan: note: {}\n", note);
  in.device = read_device(o, preset_device, in.topology, in.calibration);
  in.workload = read_workload(o, in.model);
  if (in.calibration && !o.device.compute_efficiency)
    check_gemm_calibration(*in.calibration, in.device, in.workload.precision, "--calibration " + o.calibration);
  for (const auto& l : o.leave_out) in.leave_out.push_back(parse_leave_out(l, in.topology));
  return in;
}

std::string sweep_title(const PlanFlags& o, const parallel::ShardOptions& s, bool tp_given, bool pp_given,
                        const PlanInputs& in) {
  const Workload& w = in.workload;
  std::vector<std::string> parts{
      fmt::format("{} on {}, micro-batch {} x {}, {} a step, {}", in.model.name, in.topology.name(), w.micro_batch,
                  w.seq, count_of(w.accumulation_steps, "micro-batch", "micro-batches"), o.precision)};
  auto given = [&](bool is_given, const std::string& text) {
    if (is_given) parts.push_back(text);
  };
  given(o.recompute.has_value(),
        "recompute " + (o.recompute.value_or("").empty() ? std::string("full") : *o.recompute));
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
  given(o.device.peak_tflops.has_value(), fmt::format("peak {:g} TFLOP/s", o.device.peak_tflops.value_or(0)));
  given(o.device.memory_gb.has_value(), fmt::format("{:g} GB a device", o.device.memory_gb.value_or(0)));
  given(o.device.hbm_GBps.has_value(), fmt::format("HBM {:g} GB/s", o.device.hbm_GBps.value_or(0)));
  given(o.device.compute_efficiency.has_value(),
        fmt::format("compute efficiency {:g}", o.device.compute_efficiency.value_or(0)));
  given(o.device.tdp_watts.has_value(), fmt::format("TDP {:g} W", o.device.tdp_watts.value_or(0)));
  given(o.device.idle_watts.has_value(), fmt::format("idle {:g} W", o.device.idle_watts.value_or(0)));
  given(tp_given, fmt::format("tp {}", s.tp));
  given(pp_given, fmt::format("pp {}", s.pp));
  given(!s.tp_tier.empty(), "tp tier " + s.tp_tier);
  given(!s.pp_tier.empty(), "pp tier " + s.pp_tier);
  given(!s.pp_layers.empty(), fmt::format("pp layers {}", fmt::join(s.pp_layers, ",")));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace strata::plan
