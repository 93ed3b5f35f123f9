// strata plan: what each sharding strategy costs on a cluster, priced from the schedule the
// runtime executes (docs/planner.md).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "cli/command.hpp"
#include "cli/format.hpp"
#include "cli/setting_flags.hpp"
#include "plan/compare_summary.hpp"
#include "plan/cost_model.hpp"
#include "plan/device.hpp"
#include "plan/emit.hpp"
#include "plan/inputs.hpp"
#include "plan/model_parallel.hpp"
#include "plan/model_shapes.hpp"
#include "plan/recommend.hpp"
#include "plan/report.hpp"
#include "plan/search.hpp"
#include "shard/schedule.hpp"
#include "topo/topology.hpp"
#include "train/config.hpp"

namespace strata::cli {
namespace {

struct PlanOptions {
  plan::PlanFlags in;  // what to price over
  std::string strategy = "all";
  SettingFlags spec_flags;  // `strata train`'s flags that shape a spec
  parallel::ShardOptions shard;  // what they gave
  bool tp_given = false, pp_given = false;
  bool search = false;
  int top = 5;
  std::string sweep_nodes, svg;
  std::string compare_summary;
  bool print_schedule = false;
  bool json = false;
  std::vector<std::string> emit;  // FRAMEWORK FILE
};

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

// The modes' exclusions, refused before anything is priced: --sweep-nodes, --search,
// --print-schedule and --compare-summary each take the flags that make sense for it.
void check_modes(const PlanOptions& o, const plan::PlanInputs& in) {
  if (o.top <= 0) throw Error(fmt::format("--top {}: must be positive", o.top));
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

// --sweep-nodes: the chosen strategies at each node count.
void run_sweep(const PlanOptions& o, const plan::PlanInputs& in) {
  const std::string outer = in.topology.tiers().back().name;
  const std::vector<int> nodes = plan::parse_node_list(o.sweep_nodes);
  in.topology.world_size_for_nodes(nodes.back());  // refuses a topology without nodes, or too many ranks
  topo::Topology first = in.topology;
  first.resolve(first.world_size_for_nodes(nodes.front()));
  const auto strategies = plan::chosen_strategies(o.strategy, o.shard, first, in.workload);
  const auto series =
      plan::sweep(in.model, in.topology, in.device, in.workload, in.leave_out, strategies, nodes, in.calibration);
  const std::string title = plan::sweep_title(o.in, o.shard, o.tp_given, o.pp_given, in);
  if (!o.svg.empty()) atomic_write_file(o.svg, plan::sweep_svg(series, title, outer));
  const plan::PlanContext context(in.model, first, in.device, in.workload, in.leave_out, in.calibration);
  if (o.json) {
    fmt::print("{}\n", plan::sweep_document(context, series, outer).dump(2));
  } else {
    topo::Topology largest = in.topology;
    largest.resolve(largest.world_size_for_nodes(nodes.back()));
    fmt::print("{}{}", plan::header_text(context, fmt::format("nodes {}", o.sweep_nodes), &largest),
               plan::sweep_text(series, outer));
    if (!o.svg.empty()) fmt::print("\nwrote {}\n", o.svg);
  }
}

// --search: every valid (tp, pp, spec), ranked; --emit writes the best.
void run_search(const PlanOptions& o, const plan::PlanInputs& in, const topo::Topology& topology,
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
  if (o.json)
    fmt::print("{}\n", plan::search_document(context, request, result, changes, o.top).dump(2));
  else
    fmt::print("{}", plan::search_text(context, result, o.top, plan::recommendation_text(request, result, changes)));
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
void run_print_schedule(const PlanOptions& o, const plan::PlanInputs& in, const topo::Topology& topology,
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
void run_estimates(const PlanOptions& o, const plan::PlanInputs& in, const topo::Topology& topology,
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
    fmt::print("{}\n", plan::estimates_document(context, estimates).dump(2));
  } else {
    const plan::SearchRequest request{in.model, topology, in.device, in.workload, in.leave_out, in.calibration,
                                      {}, {}, {}, "", ""};
    fmt::print("{}", plan::estimates_text(context, request, estimates, chosen));
  }
  std::fflush(stdout);
  if (!o.compare_summary.empty())
    plan::compare_summary(stdout, o.compare_summary, estimates.front(),
                          plan::model_parallel_dims(topology, chosen.front().mp).data_parallel_topology(topology),
                          in.workload.precision, in.workload.sequence_parallel, run_traffic, not_compared);
}

void run_plan(const PlanOptions& o) {
  const plan::PlanInputs in = plan::read_inputs(o.in, stderr);
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
  const std::vector<plan::NamedSpec> chosen = plan::chosen_strategies(o.strategy, o.shard, topology, in.workload);
  if (o.print_schedule) run_print_schedule(o, in, topology, chosen);
  else run_estimates(o, in, topology, context, chosen);
  std::fflush(stdout);
}

const CommandRegistrar kRegisterPlan(60, [](CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Predict step time, throughput, traffic per tier and memory of sharding strategies on a cluster");
  cmd->add_option("--model", o->in.model,
                  "gpt-neox-20b, gpt-neox-10b, llama2-7b, llama2-13b, llama2-70b, tinyllama-1.1b, gpt2-124m, tiny, "
                  "small, custom, or a Hugging Face config.json (or its folder): Llama, Mistral, Qwen2, GPT-NeoX, "
                  "GPT-2");
  cmd->add_option("--shape", o->in.shape_fields,
                  "model field override FIELD=VALUE (repeatable): layers hidden heads kv_heads ffn vocab seq "
                  "learned_positions mlp norm biases tied_head")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--topology", o->in.topology, "frontier, dgx-a100, dgx-h100, host, or a TOML file of [[tiers]]");
  cmd->add_option("--cluster", o->in.cluster,
                  fmt::format("instead of --topology: nodes=N,gpus=G,gpu=KIND,nvlink=GBps,nics=COUNTxGBITS (or a TOML "
                              "file of those keys under [cluster]); KIND: {} (datasheet figures; nvlink defaults to "
                              "the GPU's) (docs/planner-quickstart.md)",
                              fmt::join(plan::gpu_names(), ", ")));
  cmd->add_option("--nodes", o->in.nodes, "nodes (domains of the tier inside the outermost one)");
  cmd->add_option("--tier", o->in.tier_overrides, "override a tier field: NAME.FIELD=VALUE (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--strategy", o->strategy,
                  "a strategy, a comma list, or all (presets and topo-paper); NAME+tpN+ppM: with N-way tensor and "
                  "M-stage pipeline parallelism")
      ->capture_default_str();
  add_spec_flags(cmd, o->spec_flags);
  cmd->add_option("--micro-batch", o->in.micro_batch, "sequences a rank runs per micro-batch")->capture_default_str();
  cmd->add_option("--seq", o->in.seq, "tokens a sequence (default: the model's)");
  cmd->add_option("--accum", o->in.accum, "micro-batches per optimizer step")->capture_default_str();
  cmd->add_option("--recompute", o->in.recompute,
                  "activation recomputation: full (also a bare --recompute: every block's forward rerun in "
                  "backward), selective-op (torchtitan's per-op selective checkpointing: every second matmul and the "
                  "non-matmul ops rerun, never attention; needs --flash-attention) or none (the default) "
                  "(docs/planner.md \"Recomputation\")")
      ->expected(0, 1);
  cmd->add_flag("--flash-attention", o->in.flash_attention, "attention keeps no seq x seq probabilities");
  cmd->add_flag("--batch-per-device", o->in.batch_per_device,
                "--micro-batch and --accum are one device's: a TP group of t runs t x the micro-batch, a pipeline of "
                "p runs p x the micro-batches (the same global batch for every split)");
  cmd->add_option("--precision", o->in.precision, "bf16 (published systems) or fp32 (strata's runtime)")
      ->capture_default_str();
  cmd->add_option("--collectives", o->in.collectives,
                  "hierarchical: strata's own, one op per tier; nccl (alias flat-ring): one NCCL call over the whole "
                  "group, as PyTorch FSDP and DeepSpeed ZeRO run their collectives, priced by NCCL's own model "
                  "(docs/planner.md)")
      ->capture_default_str();
  cmd->add_option("--granularity", o->in.granularity,
                  "collective calls an op of a unit makes: unit (strata's, and PyTorch FSDP's one a wrapped block; "
                  "fsdp is the same), deepspeed (DeepSpeed ZeRO's default buckets: 5e7-element parameter gathers, "
                  "5e8-element reductions; each call pays the fixed cost) (docs/planner.md \"Granularity\")")
      ->capture_default_str();
  cmd->add_option("--peer", o->in.peer,
                  "price a published run's software as it ran: " + fmt::format("{}", fmt::join(plan::peer_names(), ", ")) +
                      " (its collective calls, overlap and copies, each from the framework's code; docs/planner.md "
                      "\"Peers\"); default: strata's own runtime");
  cmd->add_option("--peak-tflops", o->in.device.peak_tflops, "peak dense bf16 TFLOP/s a device");
  cmd->add_option("--device-memory-gb", o->in.device.memory_gb, "memory a device, GB (1e9 bytes)");
  cmd->add_option("--hbm-gbps", o->in.device.hbm_GBps, "memory bandwidth a device, GB/s");
  cmd->add_option("--compute-efficiency", o->in.device.compute_efficiency,
                  "achieved fraction of peak for compute (wins over a calibration's published efficiency)");
  cmd->add_option("--compute-anchor", o->in.compute_anchor,
                  "price compute by shape (docs/planner.md \"Compute by shape\"), anchored on a held-out measurement: " +
                      fmt::format("{}", fmt::join(plan::compute_anchor_names(), ", ")) +
                      " (--compute-efficiency still wins)");
  cmd->add_option("--kernels", o->in.kernels,
                  "the software generation of the kernels the shape model prices: 2021 or 2024 (default: the "
                  "peer's)");
  cmd->add_option("--leave-out", o->in.leave_out,
                  "leave a collective out of the account, PURPOSE[@TIER] (repeatable), e.g. weight-gather-step")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--tdp-watts", o->in.device.tdp_watts, "board power (TDP) a device, W, for J/token");
  cmd->add_option("--idle-watts", o->in.device.idle_watts, "idle power a device, W (default: a tenth of TDP)");
  cmd->add_flag("--search", o->search, "rank every valid (tp, pp, spec) of the topology");
  cmd->add_option("--top", o->top, "specs shown by --search (and as many runners-up)")->capture_default_str();
  cmd->add_option("--sweep-nodes", o->sweep_nodes, "node counts, e.g. 1,2,4,8");
  cmd->add_option("--svg", o->svg, "write the sweep's plots to this SVG file");
  cmd->add_option("--compare-summary", o->compare_summary,
                  "check the planner's bytes per tier against a run's summary.json (comm.scheduled_per_step, "
                  "comm.per_step)");
  cmd->add_option("--calibration", o->in.calibration,
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
    o->in.sequence_parallel = o->spec_flags.sequence_parallel;
    o->tp_given = given.contains("shard.tp");
    o->pp_given = given.contains("shard.pp");
    run_plan(*o);
  });
});

}  // namespace
}  // namespace strata::cli
