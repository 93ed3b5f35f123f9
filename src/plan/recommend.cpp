#include "plan/recommend.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace strata::plan {

namespace {

// What the runtime reserves besides the plan's own bytes (docs/planner.md "The recommendation").
// CUDA context and kernels: 781 MiB shown by nvidia-smi for a process that only initialised
// CUDA through PyTorch (pytorch/pytorch#34323).
constexpr double kCudaContextBytes = 781.0 * (1 << 20);
// NCCL: NCCL_BUFFSIZE's default of 4 MiB a buffer (NCCL's environment-variable docs), one a
// ring neighbour a channel; 16 channels a communicator is an assumption (NCCL picks the count).
constexpr double kNcclBufferBytes = 4.0 * (1 << 20);
constexpr int kNcclChannels = 16;
// The caching allocator's reserved-but-unallocated memory: 3.87 GiB of an 79.26 GiB H100 in a
// training run that ran out of memory (pytorch/pytorch#152135), about 5% of the device.
constexpr double kFragmentationShare = 0.05;

const char* const kReservedSources =
    "CUDA context 781 MiB (nvidia-smi of a process that only initialised CUDA through PyTorch, "
    "pytorch/pytorch#34323); NCCL 4 MiB a buffer (NCCL_BUFFSIZE's default, NCCL's environment-variable docs) x 2 "
    "ring neighbours x 16 channels (assumed) a communicator; allocator fragmentation 5% of the device (3.87 GiB "
    "reserved but unallocated of 79.26 GiB in pytorch/pytorch#152135)";

std::string gb(double bytes) { return fmt::format("{:.1f} GB", bytes / 1e9); }

int nodes_of(const topo::Topology& t) { return t.world_size() / t.ranks_per_outer_domain(); }

// A search, or one strategy, with the changes tried so far applied.
struct Trial {
  SearchRequest r;
  std::optional<NamedSpec> strategy;  // empty: the whole search
};

// One change applied to a trial: the flag that makes it and why it helps; none when it does
// not apply (already so, or impossible).
struct Step {
  std::string flag, why;
};
using Change = std::optional<Step> (*)(Trial&);

std::optional<Step> use_flash(Trial& t) {
  if (t.r.workload.flash_attention) return std::nullopt;
  t.r.workload.flash_attention = true;
  return Step{"--flash-attention", "no seq x seq attention probabilities kept"};
}

std::optional<Step> recompute_selective(Trial& t) {
  if (t.r.workload.recompute != Recompute::None || !t.r.workload.flash_attention) return std::nullopt;
  t.r.workload.recompute = Recompute::SelectiveOp;
  return Step{"--recompute selective-op",
              "each block keeps its saved matmul outputs only (torchtitan's per-op checkpointing)"};
}

std::optional<Step> recompute_full(Trial& t) {
  if (t.r.workload.recompute == Recompute::Full) return std::nullopt;
  t.r.workload.recompute = Recompute::Full;
  return Step{"--recompute full", "each block keeps its input only and reruns its forward in backward"};
}

std::optional<Step> micro_batch_one(Trial& t) {
  Workload& w = t.r.workload;
  if (w.micro_batch == 1) return std::nullopt;
  w.accumulation_steps *= w.micro_batch;
  w.micro_batch = 1;
  return Step{fmt::format("--micro-batch 1 --accum {}", w.accumulation_steps),
              "one sequence's activations at a time, the same global batch"};
}

// A strategy's weight shard held and gathered as int8 (a search tries it already).
std::optional<Step> int8_weights(Trial& t) {
  if (!t.strategy || t.strategy->spec.weights == "none" || t.strategy->spec.weight_wire == DType::I8)
    return std::nullopt;
  t.strategy->spec.weight_wire = DType::I8;
  return Step{"--weight-wire int8", "the weight shard held and gathered as int8 (ZeRO++'s qwZ)"};
}

// A strategy's tensor parallelism doubled (a search tries every split already).
std::optional<Step> more_tp(Trial& t) {
  if (!t.strategy) return std::nullopt;
  ModelParallel mp = t.strategy->mp;
  mp.tp *= 2;
  try {
    t.r.model.slice(mp.tp, 0, mp.pp);
    model_parallel_dims(t.r.topology, mp);
  } catch (const Error&) {
    return std::nullopt;  // the heads or the tier do not divide
  }
  t.strategy->mp = mp;
  return Step{fmt::format("--tp {}", mp.tp), "every block split over more ranks"};
}

std::optional<Step> double_nodes(Trial& t) {
  const int nodes = 2 * nodes_of(t.r.topology);
  try {
    t.r.topology.resolve(t.r.topology.world_size_for_nodes(nodes));
  } catch (const Error&) {
    return std::nullopt;  // the topology holds no more nodes
  }
  return Step{fmt::format("--nodes {}", nodes), "states sharded over twice the ranks"};
}

// The best plan that fits after the changes, or the one needing least memory.
std::optional<Estimate> evaluate(const Trial& t) {
  if (t.strategy) {
    try {
      return ModelParallelPlan(t.r.model, t.r.topology, t.r.device, t.r.workload, t.strategy->mp, t.r.leave_out,
                               t.r.calibration)
          .estimate(t.strategy->name, t.strategy->spec);
    } catch (const Error&) {
      return std::nullopt;  // the changed split refuses the spec
    }
  }
  const SearchResult result = run_search(t.r);
  if (!result.fitting.empty()) return result.fitting.front();
  const std::vector<Estimate> least = least_memory(result, 1);
  return least.empty() ? std::nullopt : std::optional<Estimate>(least.front());
}

// Each change on top of the ones before, until a plan fits; a flag of the same kind replaces
// the one before it (--nodes 32 after --nodes 16, --tp 4 after --tp 2).
std::vector<FitChange> ladder(Trial t) {
  static constexpr Change kLadder[] = {use_flash, recompute_selective, recompute_full, micro_batch_one,
                                       int8_weights, more_tp, more_tp, more_tp,
                                       double_nodes, double_nodes, double_nodes, double_nodes};
  std::vector<FitChange> out;
  std::vector<std::string> flags;
  for (Change change : kLadder) {
    const std::optional<Step> step = change(t);
    if (!step) continue;
    const std::string kind = step->flag.substr(0, 3);
    if (!flags.empty() && flags.back().substr(0, 3) == kind) flags.pop_back();
    flags.push_back(step->flag);
    const std::optional<Estimate> best = evaluate(t);
    out.push_back({flags, step->why, best && best->fits, best});
    if (out.back().fits) break;
  }
  return out;
}

}  // namespace

std::vector<ModelParallel> search_splits(const SearchRequest& r) {
  std::vector<ModelParallel> splits;
  for (const ModelParallel& mp : candidate_splits(r.model, r.topology))
    if ((!r.tp || mp.tp == *r.tp) && (!r.pp || mp.pp == *r.pp)) splits.push_back(mp);
  if (r.tp || r.pp) {
    const ModelParallel given{r.tp.value_or(1), r.pp.value_or(1), r.tp_tier, r.pp_tier};
    r.model.slice(given.tp, 0, given.pp);
    model_parallel_dims(r.topology, given);
    if (!r.tp_tier.empty() || !r.pp_tier.empty()) splits = {given};
  }
  return splits;
}

SearchResult run_search(const SearchRequest& r) {
  return search_model_parallel(r.model, r.topology, r.device, r.workload, r.leave_out, r.calibration, r.space,
                               search_splits(r));
}

std::vector<StepShare> step_shares(const Estimate& e) {
  std::vector<StepShare> out{{"compute", e.compute_s + e.overlap_slowdown_s},
                             {"pipeline bubble", e.pp_bubble_s},
                             {"optimizer step (Adam)", e.optimizer_s}};
  for (const TierCost& t : e.tiers)
    out.push_back({fmt::format("exposed communication on '{}'", t.traffic.tier), t.exposed_micro_s + t.step_phase_s});
  std::stable_sort(out.begin(), out.end(), [](const StepShare& a, const StepShare& b) { return a.seconds > b.seconds; });
  return out;
}

Reserved runtime_reserved(const Estimate& e) {
  Reserved r;
  r.cuda_context_bytes = kCudaContextBytes;
  // One communicator a tier the plan sends over (the TP and pipeline groups are among them).
  for (const TierCost& t : e.tiers) r.communicators += t.traffic.bytes_sent > 0 ? 1 : 0;
  r.nccl_bytes = r.communicators * kNcclChannels * 2 * kNcclBufferBytes;
  r.fragmentation_bytes = kFragmentationShare * static_cast<double>(e.device_memory_bytes);
  return r;
}

std::string headroom_line(const Estimate& e) {
  const Reserved r = runtime_reserved(e);
  const double left = static_cast<double>(e.device_memory_bytes) - static_cast<double>(e.total_memory_bytes) - r.total();
  return fmt::format("{} - {} planned - {} CUDA context - {} NCCL buffers ({} communicator{}) - {} allocator "
                     "fragmentation = {} {}",
                     gb(static_cast<double>(e.device_memory_bytes)), gb(static_cast<double>(e.total_memory_bytes)),
                     gb(r.cuda_context_bytes), gb(r.nccl_bytes), r.communicators, r.communicators == 1 ? "" : "s",
                     gb(r.fragmentation_bytes), gb(std::abs(left)),
                     left >= 0 ? "headroom" : "short: the plan's count fits, the runtime's reservations do not");
}

std::vector<FitChange> changes_until_it_fits(const SearchRequest& request) { return ladder({request, std::nullopt}); }

std::vector<FitChange> changes_until_strategy_fits(const SearchRequest& request, const NamedSpec& strategy) {
  return ladder({request, strategy});
}

std::string smallest_change_line(const std::vector<FitChange>& changes) {
  if (changes.empty() || !changes.back().fits)
    return "no change strata tries makes it fit (flash attention, recomputation, micro-batch 1, int8 weights, TP up "
           "to 8, up to 16x the nodes)";
  const FitChange& c = changes.back();
  return fmt::format("the smallest change that fits: {} ({}): {:.0f} tokens/s a device, {}",
                     fmt::join(c.flags, " "), c.why, c.best->tokens_per_s / c.best->world_size,
                     c.best->memory_verdict());
}

std::vector<Estimate> least_memory(const SearchResult& result, std::size_t n) {
  std::vector<Estimate> all = result.fitting;
  all.insert(all.end(), result.not_fitting.begin(), result.not_fitting.end());
  std::stable_sort(all.begin(), all.end(),
                   [](const Estimate& a, const Estimate& b) { return a.total_memory_bytes < b.total_memory_bytes; });
  all.resize(std::min(n, all.size()));
  return all;
}

std::string flash_attention_hint(const ModelShape& model, const Workload& workload) {
  // strata's own models run as its runtime runs them: dense attention.
  if (workload.precision != Precision::BF16 || workload.flash_attention || model.gpt) return {};
  const int e = compute_bytes(workload.precision);
  const double dense = static_cast<double>(
      model.activation_bytes(workload.micro_batch, workload.seq, e, workload.recompute, false));
  const double flash = static_cast<double>(
      model.activation_bytes(workload.micro_batch, workload.seq, e, workload.recompute, true));
  return fmt::format("attention is dense: {} of the whole model's {} of activations a micro-batch are heads x seq x "
                     "seq softmax probabilities; published systems train {} with flash attention (FlashAttention-2, "
                     "PyTorch's scaled_dot_product_attention, Megatron-LM's --use-flash-attn), which keeps none: "
                     "add --flash-attention",
                     gb(dense - flash), gb(dense), model.name);
}

namespace {

std::string described(const SearchRequest& request, const Estimate& e) {
  const ModelParallel mp{e.tensor_parallel, e.pipeline_stages, request.tp_tier, request.pp_tier};
  return e.spec.describe(model_parallel_dims(request.topology, mp).data_parallel_topology(request.topology));
}

std::string global_batch(const SearchRequest& request) {
  const Workload& w = request.workload;
  const double sequences = static_cast<double>(w.micro_batch) * w.accumulation_steps * request.topology.world_size();
  return fmt::format("{:.0f} sequences of {} tokens ({:.3g}M tokens) a step = micro-batch {} x {} a device x {} "
                     "devices; a TP group of t runs t x the micro-batch, a pipeline of p runs p x the micro-batches",
                     sequences, w.seq, sequences * w.seq / 1e6, w.micro_batch,
                     w.accumulation_steps, request.topology.world_size());
}

std::string bound_text(const Estimate& e) {
  const std::vector<StepShare> shares = step_shares(e);
  std::vector<std::string> parts;
  for (const StepShare& s : shares)
    if (s.seconds > 0.02 * e.step_time_s && parts.size() < 3)
      parts.push_back(fmt::format("{} {:.0f}% ({:.3g} s)", s.what, 100 * s.seconds / e.step_time_s, s.seconds));
  return fmt::format("bound by {}", fmt::join(parts, ", then "));
}

}  // namespace

std::string recommendation_text(const SearchRequest& request, const SearchResult& result,
                                const std::vector<FitChange>& changes) {
  std::string out;
  auto line = [&out](const std::string& text) { out += text + "\n"; };
  const std::string hint = flash_attention_hint(request.model, request.workload);
  if (result.fitting.empty()) {
    line(fmt::format("\nnothing fits in {:g} GB a device. The least memory needed:", request.device.memory_gb));
    for (const Estimate& e : least_memory(result, 3))
      line(fmt::format("  {:<16} {:<60} {}", e.strategy, spec_label(e.spec), e.memory_verdict()));
    if (!hint.empty()) line("  " + hint);
    if (changes.empty()) {
      line("no change strata tries makes a plan fit (flash attention, recomputation, micro-batch 1, up to 16x the "
           "nodes)");
      return out;
    }
    for (const FitChange& c : changes) {
      const std::string flags = fmt::format("{}", fmt::join(c.flags, " "));
      if (!c.fits) {
        line(fmt::format("  with {}: still does not fit (least {})", flags,
                         c.best ? gb(static_cast<double>(c.best->total_memory_bytes)) : std::string("?")));
        continue;
      }
      line(fmt::format("the smallest change that fits: {} ({}): best then {} {}, {:.0f} tokens/s a device, {}",
                       flags, c.why, c.best->strategy, spec_label(c.best->spec),
                       c.best->tokens_per_s / c.best->world_size, c.best->memory_verdict()));
    }
    if (!changes.back().fits)
      line("none of these makes a plan fit (flash attention, recomputation, micro-batch 1, up to 16x the nodes)");
    return out;
  }
  const Estimate& best = result.fitting.front();
  line(fmt::format("\nrecommendation (ranked by time a token; every split trains the same global batch: {}):",
                   global_batch(request)));
  line(fmt::format("  best: {}  {}", best.strategy, spec_label(best.spec)));
  line(fmt::format("    that is: {}", described(request, best)));
  line(fmt::format("    {:.0f} tokens/s, {:.0f} a device, {:.1f} model TFLOP/s a device (MFU {:.1f}%), step {:.4g} s",
                   best.tokens_per_s, best.tokens_per_s / best.world_size, best.tflops_per_device, best.mfu * 100,
                   best.step_time_s));
  line(fmt::format("    {}", bound_text(best)));
  // Memory bounds the choice when a faster plan is set aside for not fitting.
  if (!result.not_fitting.empty() && ranks_before(result.not_fitting.front(), best))
    line(fmt::format("    and by memory: {} {} {}", result.not_fitting.front().strategy,
                     spec_label(result.not_fitting.front().spec), why_lost(result.not_fitting.front(), best)));
  line(fmt::format("    memory a device: {}", headroom_line(best)));
  for (std::size_t i = 1; i < std::min<std::size_t>(3, result.fitting.size()); ++i)
    line(fmt::format("  runner-up #{}: {}  {}: {}", i + 1, result.fitting[i].strategy,
                     spec_label(result.fitting[i].spec), why_lost(result.fitting[i], best)));
  if (!hint.empty()) line("  note: " + hint);
  line(fmt::format("  reserved figures: {}", kReservedSources));
  return out;
}

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StepShare, what, seconds)

nlohmann::json recommendation_json(const SearchRequest& request, const SearchResult& result,
                                   const std::vector<FitChange>& changes) {
  nlohmann::json j = {{"ranked_by", "time a token, every split at the same global batch"},
                      {"global_batch", global_batch(request)}};
  const std::string hint = flash_attention_hint(request.model, request.workload);
  if (!hint.empty()) j["flash_attention_hint"] = hint;
  if (result.fitting.empty()) {
    j["fits"] = false;
    nlohmann::json least = nlohmann::json::array();
    for (const Estimate& e : least_memory(result, 3))
      least.push_back({{"strategy", e.strategy}, {"label", spec_label(e.spec)}, {"memory_bytes_total", e.total_memory_bytes},
                       {"memory_verdict", e.memory_verdict()}});
    j["least_memory"] = least;
    nlohmann::json tried = nlohmann::json::array();
    for (const FitChange& c : changes)
      tried.push_back({{"flags", c.flags},
                       {"why", c.why},
                       {"fits", c.fits},
                       {"strategy", c.best ? c.best->strategy : ""},
                       {"memory_bytes_total", c.best ? c.best->total_memory_bytes : 0}});
    j["changes_tried"] = tried;
    if (!changes.empty() && changes.back().fits) j["smallest_change"] = changes.back().flags;
    return j;
  }
  const Estimate& best = result.fitting.front();
  const Reserved r = runtime_reserved(best);
  nlohmann::json runners = nlohmann::json::array();
  for (std::size_t i = 1; i < std::min<std::size_t>(3, result.fitting.size()); ++i)
    runners.push_back({{"strategy", result.fitting[i].strategy},
                       {"label", spec_label(result.fitting[i].spec)},
                       {"why_lost", why_lost(result.fitting[i], best)}});
  j["fits"] = true;
  j["best"] = {{"strategy", best.strategy},
               {"label", spec_label(best.spec)},
               {"means", described(request, best)},
               {"tokens_per_s", best.tokens_per_s},
               {"tokens_per_s_per_device", best.tokens_per_s / best.world_size},
               {"bound_by", step_shares(best)}};
  j["runners_up"] = runners;
  j["memory"] = {{"device_bytes", best.device_memory_bytes},
                 {"planned_bytes", best.total_memory_bytes},
                 {"cuda_context_bytes", r.cuda_context_bytes},
                 {"nccl_bytes", r.nccl_bytes},
                 {"nccl_communicators", r.communicators},
                 {"fragmentation_bytes", r.fragmentation_bytes},
                 {"headroom_bytes", static_cast<double>(best.device_memory_bytes) -
                                        static_cast<double>(best.total_memory_bytes) - r.total()},
                 {"sources", kReservedSources}};
  return j;
}

}  // namespace strata::plan
