#include "plan/model_parallel.hpp"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/text.hpp"
#include "comm/api/buffer.hpp"
#include "parallel/pipeline.hpp"
#include "plan/peer.hpp"
#include "shard/pipeline_engine.hpp"
#include "shard/runtime.hpp"

namespace strata::plan {

std::pair<std::string, ModelParallel> parse_strategy_variant(std::string_view text, const ModelParallel& defaults) {
  ModelParallel mp = defaults;
  // The name ends at the first '+', past a framework's name that holds '+' itself (zero++).
  std::size_t plus = text.find('+');
  for (const shard::ShardSpec::Alias& a : shard::ShardSpec::preset_aliases())
    if (a.name.find('+') != std::string_view::npos && text.starts_with(a.name)) plus = text.find('+', a.name.size());
  const std::string name(text.substr(0, plus));
  std::string_view rest = plus == std::string_view::npos ? std::string_view() : text.substr(plus + 1);
  while (!rest.empty()) {
    const std::size_t next = rest.find('+');
    const std::string_view part = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view() : rest.substr(next + 1);
    int* degree = part.starts_with("tp") ? &mp.tp : part.starts_with("pp") ? &mp.pp : nullptr;
    int v = 0;
    const std::string_view digits = part.size() > 2 ? part.substr(2) : std::string_view();
    if (!degree || !parse_whole(digits, v) || v <= 0)
      throw Error(fmt::format("--strategy '{}': '{}' is not a model-parallel degree (expected +tpN or +ppN, e.g. "
                              "zero3+tp2+pp4)",
                              text, part));
    *degree = v;
  }
  return {name, mp};
}

std::string variant_name(std::string_view strategy, const ModelParallel& mp) {
  std::string name(strategy);
  if (mp.tp > 1) name += fmt::format("+tp{}", mp.tp);
  if (mp.pp > 1) name += fmt::format("+pp{}", mp.pp);
  return name;
}

std::vector<NamedSpec> chosen_strategies(std::string_view strategies, const parallel::ShardOptions& options,
                                         const topo::Topology& physical, const Workload& workload) {
  std::vector<std::string> names;
  if (strategies == "all") names = strategy_names();
  else
    for (std::string_view item : split_list(strategies))
      if (!item.empty()) names.emplace_back(item);
  if (names.empty()) throw Error("--strategy: empty (give a strategy, a comma list, or all)");
  std::vector<NamedSpec> out;
  for (const std::string& variant : names) {
    const auto [given, mp] = parse_strategy_variant(
        variant, {options.tp, options.pp, options.tp_tier, options.pp_tier, options.pp_layers});
    const std::string name(shard::ShardSpec::canonical_preset(given));  // fsdp -> zero3, ...
    const topo::Topology topology = model_parallel_dims(physical, mp).data_parallel_topology(physical);
    const shard::ShardSpec spec = shard::apply_options(
        apply_peer(apply_precision(strategy_spec(name, topology), workload.precision), workload.peer, topology),
        options, topology);
    out.push_back({options.overrides_preset() ? name + "*" : name, spec, mp});
  }
  return out;
}

parallel::ParallelDims model_parallel_dims(const topo::Topology& topology, const ModelParallel& mp) {
  auto level = [&](const char* flag, const std::string& tier, int otherwise) {
    if (tier.empty()) return otherwise;
    if (auto t = topology.find_tier(tier)) return *t;
    std::vector<std::string> names;
    for (const topo::Tier& x : topology.tiers()) names.push_back(x.name);
    throw Error(fmt::format("{} '{}': unknown tier '{}' (tiers of '{}': {})", flag, tier, tier, topology.name(),
                            fmt::join(names, ", ")));
  };
  const int tp_level = level("--tp-tier", mp.tp_tier, 0);
  const int pp_level = level("--pp-tier", mp.pp_tier, topology.outermost());
  return parallel::ParallelDims::model_parallel(topology, mp.tp, tp_level, mp.pp, pp_level);
}

shard::ScheduledOp PipelineMessage::op() const {
  shard::ScheduledOp op{};
  op.when = when;
  op.purpose = shard::Purpose::GradReduce;  // not read by pricing: the kind is
  op.kind = all_reduce ? Collective::AllReduce : Collective::AllGather;
  op.level = level;
  op.wire = wire;
  op.group_size = 2;
  op.elements_in = op.elements_out = elements;
  // A ring of two sends and receives its half twice (comm's padding); a message is one
  // transfer of the whole buffer, which both ends wait for.
  op.messages = all_reduce ? 2 : 1;
  op.bytes_sent = op.bytes_received =
      data_bytes(wire, all_reduce ? 2 * comm::chunk_count(elements, 2, 1) : elements);
  return op;
}

void PipelineMessage::book(shard::TierTraffic& traffic) const {
  const shard::ScheduledOp o = op();
  // A message counts for the rank that sends it, and as bytes received for the other.
  if (all_reduce || sent) {
    traffic.bytes_sent += o.bytes_sent;
    traffic.messages += static_cast<std::uint64_t>(o.messages);
  }
  if (all_reduce || !sent) traffic.bytes_received += o.bytes_received;
}

std::vector<PipelineMessage> stage_messages(const ModelShape& slice, const parallel::ParallelDims& dims,
                                            const Workload& workload) {
  std::vector<PipelineMessage> out;
  if (dims.pipeline == 1) return out;
  const std::size_t activations = parallel::stage_message_elements(workload.micro_batch, workload.seq, slice.hidden,
                                                                    dims.tensor, workload.sequence_parallel);
  const DType wire = compute_dtype(workload.precision);
  for (const parallel::StageMessage& m : parallel::stage_messages(
           parallel::one_f_one_b(slice.stages, slice.stage, workload.accumulation_steps)))
    out.push_back({m.purpose(), m.gradient ? shard::When::Backward : shard::When::Forward, dims.pipeline_level,
                   activations, wire, m.sent, false});
  return out;
}

nlohmann::json model_parallel_assumptions() {
  return {
      {"tensor_parallel",
       "Megatron splits over --tp ranks of --tp-tier (innermost by default): qkv and MLP input column-parallel, "
       "attention and MLP output row-parallel, embeddings and LM head vocab-parallel; norms and row-parallel "
       "biases replicated; with --sequence-parallel (Megatron's) the residual stream and norms on 1/tp of the "
       "token rows, each all-reduce a reduce-scatter and each norm's output all-gathered. The TP collectives are "
       "ops of the stage's shard::Schedule, the very list the runtime runs (model::tensor_parallel_calls): per block 2 all-reduces of micro_batch x "
       "seq x hidden in forward and 2 in backward (2 more when recomputed), the embedding's output (first stage), "
       "and on the last stage the head input's gradient and one all-gather of the loss's (max, sum of "
       "exponentials, target logit) a row, 3 x micro_batch x seq fp32 from each rank; activations at --precision "
       "bytes. A ring all-reduce sends 2(tp-1) chunks of 1/tp, priced by price_op like every op (with a "
       "calibration: its all_reduce curve); all on the critical path. Weights, gradients, optimizer state "
       "and FLOPs of split matrices / tp; activations: the norms' inputs and outputs (4 x hidden) whole, the "
       "rest / tp (the norms' too under --sequence-parallel)"},
      {"pipeline",
       "1F1B over --pp stages across --pp-tier (outermost by default), layers / pp blocks a stage (or "
       "--pp-layers' counts), the embedding on the first and final norm + head on the last (a tied head: the "
       "last stage holds a copy of the "
       "embeddings and sums their gradient with the first stage's once a step, each rank its optimizer-state "
       "shard, fp32); m = --accum micro-batches; stage s holds min(p - s, m) micro-batches of activations; the "
       "messages are the runtime's, from each stage's 1F1B program (parallel::stage_messages): per micro-batch "
       "micro_batch x seq x hidden activations forward and their gradient back at --precision's width, each a "
       "transfer both ends wait for (on the critical path, a full copy from every TP rank, its 1/tp of the rows "
       "under --sequence-parallel); stages run in lockstep at the slowest one's pace: step = its data-parallel step + TP + its messages + every other "
       "stage's micro-batch without them (the bubble: fill and drain; equal stages (p-1)/(m+p-1) of the step); "
       "memory per stage (pipeline); gradients reduced once a step per stage over its "
       "data-parallel group: where strata's pipeline runtime runs the plan (a strata model) "
       "by the stage's own shard::Schedule that runtime runs (shard::PipelineSchedule::sharding), replayed per "
       "micro-batch, else by the stage's own schedule over the planner's slice"},
      {"data_parallel",
       "sharding runs over world / (tp x pp) ranks: a tier of size s holding a slice of t becomes a data-parallel "
       "tier of s/t; ports keep the share a physical rank gets"},
      {"energy",
       "device power = idle + (TDP - idle) x utilization, utilization = compute time / step time of the slowest "
       "stage; J/token = power x devices / tokens a second; devices only (no CPUs, NICs, switches, cooling)"}};
}

namespace {

// Device power = idle + (TDP - idle) x utilization, utilization = the share of the step the
// device computes; J/token = power x devices / tokens a second. Leaves zeros when the TDP is
// not known.
void add_energy(Estimate& e, const DeviceFacts& device) {
  if (device.tdp_watts <= 0 || e.step_time_s <= 0) return;
  e.utilization = std::min(1.0, e.compute_s / e.step_time_s);
  e.power_watts = device.idle_watts + (device.tdp_watts - device.idle_watts) * e.utilization;
  e.joules_per_token = e.power_watts * e.world_size / e.tokens_per_s;
  e.tokens_per_kwh = 3.6e6 / e.joules_per_token;
}

Workload split_workload(Workload w, const ModelParallel& mp) {
  if (w.batch_per_device) {
    w.micro_batch *= mp.tp;
    w.accumulation_steps *= mp.pp;
  }
  return w;
}

}  // namespace

ModelParallelPlan::ModelParallelPlan(const ModelShape& model, const topo::Topology& topology,
                                     const DeviceFacts& device, const Workload& workload, ModelParallel mp,
                                     const std::vector<LeaveOut>& leave_out,
                                     const std::optional<Calibration>& calibration)
    : model_(model.whole()),
      topology_(topology),
      device_(device),
      workload_(split_workload(workload, mp)),
      mp_(std::move(mp)),
      dims_(model_parallel_dims(topology_, mp_)) {
  const topo::Topology dp_topology = dims_.data_parallel_topology(topology_);
  for (int s = 0; s < dims_.pipeline; ++s)
    stages_.emplace_back(model.slice(dims_.tensor, s, dims_.pipeline, mp_.pp_layers), dp_topology, device, workload_,
                         leave_out, calibration, dims_.tensor_level);
  for (int s = 0; s < mp_.pp; ++s) {
    messages_.push_back(stage_messages(stages_[s].model(), dims_, workload_));
    double seconds = 0;
    for (const PipelineMessage& m : messages_.back()) seconds += price_op(m.op(), topology_, calibrated_()).seconds();
    message_seconds_.push_back(seconds);
  }
}

struct ModelParallelPlan::RankPipeline {
  shard::PipelineSchedule schedule;
  shard::PipelineGroups groups;
};

std::optional<PipelineMessage> ModelParallelPlan::tied_message(int s, const shard::ShardSpec& spec) const {
  const ModelShape& slice = stages_.at(s).model();
  if (!slice.tied_head || mp_.pp == 1 || (s != 0 && s != mp_.pp - 1)) return std::nullopt;
  if (runs_pipeline()) {
    // The runtime's own sum: its op on the stage's first replica (every replica's is alike).
    const RankPipeline p = rank_pipeline(first_rank(s), spec);
    for (const shard::PipelineOp& op : p.schedule.ops())
      if (op.group == shard::PipelineOp::Tied)
        return PipelineMessage{op.purpose, shard::When::Step, dims_.pipeline_level, op.bytes / sizeof(float),
                               DType::F32, true, true};
    return std::nullopt;
  }
  // Both stages hold the embeddings (the last its copy for the head) and sum their gradients,
  // each rank its optimizer-state shard of them, in fp32 (the runtime's master gradient).
  const shard::LevelSpec levels = shard::resolve(spec, data_parallel_topology());
  const std::size_t embeddings = slice.unit_plan().numel.front();
  const std::size_t mine = comm::chunk_count(embeddings, levels.degree(levels.optimizer), 1);
  return PipelineMessage{"tied embeddings", shard::When::Step, dims_.pipeline_level, mine, DType::F32, true, true};
}

shard::TierTraffic ModelParallelPlan::pipeline_tier_traffic(int s, const shard::ShardSpec& spec) const {
  shard::TierTraffic t{topology_.tier(dims_.pipeline_level).name};
  std::vector<PipelineMessage> all = messages_.at(s);
  if (auto tied = tied_message(s, spec)) all.push_back(*tied);
  for (const PipelineMessage& m : all) m.book(t);
  return t;
}

bool ModelParallelPlan::runs_pipeline() const {
  if (mp_.pp == 1 || !model_.gpt) return false;
  // A stage runs its shard::Schedule composed as the runtime composes it.
  return workload_.collectives == shard::Composition::Hierarchical;
}

ModelParallelPlan::RankPipeline ModelParallelPlan::rank_pipeline(int rank, const shard::ShardSpec& spec) const {
  shard::PipelineSchedule schedule =
      shard::pipeline_schedule_of(*model_.gpt, workload_.micro_batch, workload_.seq, workload_.accumulation_steps,
                                  dims_, topology_, rank, spec, mp_.pp_layers, static_cast<bool>(workload_.recompute),
                                  workload_.sequence_parallel && mp_.tp > 1);  // as the shapes: none without TP
  shard::PipelineGroups groups = shard::pipeline_groups(dims_, topology_, rank, schedule.tied());
  return {std::move(schedule), std::move(groups)};
}

int ModelParallelPlan::first_rank(int s) const {
  int rank = 0;
  while (parallel::pipeline_stage(dims_, topology_, rank) != s) ++rank;
  return rank;
}

Estimate ModelParallelPlan::stage_estimate(const std::string& strategy, const shard::ShardSpec& spec, int s) const {
  if (!runs_pipeline()) return stages_[s].estimate(strategy, spec);
  return stages_[s].estimate(strategy, *rank_pipeline(first_rank(s), spec).schedule.sharding());
}

using RunTraffic = ModelParallelPlan::RunTraffic;

std::vector<RunTraffic> ModelParallelPlan::run_traffic(const Estimate& e, const shard::ShardSpec& spec,
                                                       std::vector<std::string>& not_compared) const {
  std::vector<RunTraffic> out;
  if (mp_.pp == 1) {
    for (const TierCost& t : e.tiers) out.emplace_back(t.traffic.tier).add(t.traffic);
    return out;
  }
  if (runs_pipeline()) {
    for (const topo::Tier& t : topology_.tiers()) out.push_back({t.name});
    const int world = dims_.world_size();
    for (int rank = 0; rank < world; ++rank) {
      const RankPipeline p = rank_pipeline(rank, spec);
      const comm::CommStats traffic = shard::scheduled_traffic(p.schedule, p.groups, topology_, rank);
      for (std::size_t t = 0; t < out.size(); ++t) out[t].add(traffic.tiers[t]);
    }
    for (RunTraffic& t : out) t.bytes_sent /= world, t.bytes_received /= world, t.messages /= world;
    return out;
  }
  RunTraffic mean{topology_.tier(dims_.pipeline_level).name};
  for (int s = 0; s < mp_.pp; ++s) mean.add(pipeline_tier_traffic(s, spec), mp_.pp);
  for (const TierCost& t : e.tiers)
    if (t.traffic.tier != mean.tier) not_compared.push_back(t.traffic.tier);
  out.push_back(mean);
  return out;
}

namespace {

// A stage's share of the estimate: its blocks, parameters, memory with min(p - s, m)
// micro-batches of activations in flight (1F1B), and its micro-batch's compute and TP.
Estimate::PipelineStage pipeline_stage(Estimate& e, const ModelShape& slice, int micro_batches) {
  const int in_flight = parallel::micro_batches_in_flight(slice.stages, slice.stage, micro_batches);
  e.activation_bytes *= static_cast<std::uint64_t>(in_flight);
  e.total_memory_bytes = e.memory.weights + e.memory.secondary + e.memory.grads + e.memory.optimizer +
                         e.memory.gathered + e.activation_bytes;
  e.fits = e.total_memory_bytes <= e.device_memory_bytes;
  std::uint64_t params = 0;
  for (std::size_t n : slice.unit_plan().numel) params += n;
  return {slice.stage_split().layers, params, e.memory, e.activation_bytes, e.total_memory_bytes,
          (e.step_time_s - e.step_comm_s - e.optimizer_s) / micro_batches};
}

}  // namespace

Estimate ModelParallelPlan::estimate(std::string strategy, const shard::ShardSpec& spec) const {
  const int p = mp_.pp, m = workload_.accumulation_steps;
  std::vector<Estimate> per_stage;
  std::vector<Estimate::PipelineStage> stages;
  int slowest = 0, largest = 0;
  // The stage that sets the pace: its micro-batch with its share of its messages.
  std::vector<double> paced_s;
  for (int s = 0; s < p; ++s) {
    Estimate e = stage_estimate(strategy, spec, s);
    stages.push_back(pipeline_stage(e, stages_[s].model(), m));
    paced_s.push_back(stages[s].micro_batch_s + message_seconds_[s] / m);
    per_stage.push_back(std::move(e));
    if (paced_s[s] > paced_s[slowest]) slowest = s;
    if (stages[s].total_memory_bytes > stages[largest].total_memory_bytes) largest = s;
  }
  Estimate r = per_stage[slowest];
  r.pace_stage = slowest;
  r.strategy = variant_name(strategy, mp_);
  r.world_size = dims_.world_size();
  r.tensor_parallel = mp_.tp;
  r.pipeline_stages = p;
  r.memory = stages[largest].memory;
  r.activation_bytes = stages[largest].activation_bytes;
  r.total_memory_bytes = stages[largest].total_memory_bytes;
  r.fits = r.total_memory_bytes <= r.device_memory_bytes;

  // The messages sit on the critical path: every second of them is exposed on their tier.
  std::vector<PipelineMessage> messages = messages_[slowest];
  const std::optional<PipelineMessage> tied = tied_message(slowest, spec);
  if (tied) messages.push_back(*tied);
  r.pp_p2p_s = 0;
  for (const PipelineMessage& message : messages) {
    TierCost& tier = r.tiers[message.level];
    const OpPrice price = price_op(message.op(), topology_, calibrated_());
    tier.latency_s += price.latency_s;
    message.book(tier.traffic);
    tier.busy_s += price.seconds();
    tier.exposed_micro_s += price.seconds();
    r.pp_p2p_s += price.seconds();
  }
  // 1F1B at the slowest stage's pace: its m micro-batches, plus the fill and drain through
  // every other stage, one micro-batch each ((m - 1) x t_max + the sum of all t_s; equal
  // stages: (m + p - 1) x t). Their messages are already on the slowest stage's own timeline
  // (a message holds both ends), so the bubble is compute and TP.
  r.pp_bubble_s = 0;
  for (int s = 0; s < p; ++s)
    if (s != slowest) r.pp_bubble_s += stages[s].micro_batch_s;
  const double busy_s = m * stages[slowest].micro_batch_s;
  r.pp_bubble_fraction = busy_s + r.pp_bubble_s > 0 ? r.pp_bubble_s / (busy_s + r.pp_bubble_s) : 0;
  r.step_time_s = per_stage[slowest].step_time_s + r.pp_p2p_s + r.pp_bubble_s;
  if (p > 1) r.stages = std::move(stages);

  const double tokens = static_cast<double>(workload_.micro_batch) * workload_.seq;
  r.tokens_per_step = tokens * m * dims_.data_parallel_size();
  set_throughput(r, model_, workload_, device_);
  add_energy(r, device_);
  return r;
}

std::vector<ModelParallel> candidate_splits(const ModelShape& model, const topo::Topology& topology, int max_tp) {
  std::vector<ModelParallel> out;
  for (int tp = 1; tp <= std::min(max_tp, topology.tier(0).size); ++tp)
    for (int pp : {1, 2, 4, 8}) {
      const ModelParallel mp{tp, pp, "", ""};
      try {
        model_parallel_dims(topology, mp);
        model.slice(tp, 0, pp);
      } catch (const Error&) {
        continue;  // tp does not divide the tier or the heads, pp the layers or the tier
      }
      out.push_back(mp);
    }
  return out;
}

SearchResult search_model_parallel(const ModelShape& model, const topo::Topology& topology, const DeviceFacts& device,
                                   const Workload& workload, const std::vector<LeaveOut>& leave_out,
                                   const std::optional<Calibration>& calibration, const SearchSpace& space,
                                   const std::vector<ModelParallel>& splits) {
  // Every split trains the same global batch: --micro-batch and --accum are one device's.
  Workload same_batch = workload;
  same_batch.batch_per_device = true;
  SearchResult r;
  for (const ModelParallel& mp : splits) {
    SearchResult one =
        search(ModelParallelPlan(model, topology, device, same_batch, mp, leave_out, calibration), space);
    std::move(one.fitting.begin(), one.fitting.end(), std::back_inserter(r.fitting));
    std::move(one.not_fitting.begin(), one.not_fitting.end(), std::back_inserter(r.not_fitting));
  }
  std::stable_sort(r.fitting.begin(), r.fitting.end(), ranks_before);
  std::stable_sort(r.not_fitting.begin(), r.not_fitting.end(), ranks_before);
  return r;
}

}  // namespace strata::plan
