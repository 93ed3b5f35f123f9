#include "plan/cost_model.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "plan/names.hpp"

namespace strata::plan {

using shard::Purpose;
using shard::ScheduledOp;

int compute_bytes(Precision p) { return static_cast<int>(data_bytes(compute_dtype(p), 1)); }

shard::ShardSpec apply_precision(shard::ShardSpec spec, Precision precision) {
  for (DType* w : {&spec.weight_wire, &spec.grad_wire, &spec.step_grad_wire})
    if (*w == DType::F32) *w = compute_dtype(precision);
  return spec;
}

std::vector<std::string> strategy_names() {
  std::vector<std::string> names = shard::ShardSpec::preset_names();
  names.push_back("topo-paper");
  return names;
}

shard::ShardSpec strategy_spec(std::string_view given, const topo::Topology& topology) {
  const std::string_view name = shard::ShardSpec::canonical_preset(given);
  const std::vector<std::string> known = strategy_names();
  if (std::find(known.begin(), known.end(), name) == known.end())
    throw Error(fmt::format("--strategy '{}': unknown (known: {}, all; the frameworks' names: {})", given,
                            fmt::join(known, ", "), shard::ShardSpec::alias_list()));
  if (name != "topo-paper") return shard::ShardSpec::preset_for(name, topology);
  shard::ShardSpec spec = shard::ShardSpec::preset_for("topo", topology);
  spec.preset = "topo-paper";
  spec.step_grad_allreduce = true;
  return spec;
}

namespace {

// Each granularity: its --granularity name and what it means (for the plan's assumptions).
struct GranularityRow {
  Granularity value;
  std::string_view name, means;
};
constexpr GranularityRow kGranularities[] = {
    {Granularity::Unit, "unit",
     "one collective call an op of a unit, as strata runs and PyTorch FSDP's default auto-wrap of each "
     "transformer block"},
    {Granularity::DeepSpeed, "deepspeed",
     "as DeepSpeed ZeRO calls them, with its documented defaults (deepspeed/runtime/zero/config.py): "
     "parameter gathers in buckets of stage3_prefetch_bucket_size = 5e7 elements, gradient reductions "
     "of reduce_bucket_size = 5e8, post-step gathers of allgather_bucket_size = 5e8; a unit's op pays its "
     "fixed cost (latency, launch) unit elements / bucket times (amortized), its bytes once"},
    {Granularity::DeepSpeedTensors, "deepspeed-tensors",
     "DeepSpeed v0.5's ZeRO-3: a unit's weight gather is one all-gather a parameter tensor of at least "
     "stage3_param_persistence_threshold = 1e5 elements (partition_parameters.py "
     "_allgather_params_coalesced and _allgather_param launch one per parameter); reductions in "
     "reduce_bucket_size = 5e8 buckets, post-step gathers of allgather_bucket_size = 5e8 (amortized)"},
    {Granularity::DeepSpeedModules, "deepspeed-modules",
     "DeepSpeed v0.14's ZeRO-3: a unit's weight gather is one coalesced all-gather a module holding a "
     "parameter of at least stage3_param_persistence_threshold = 1e5 elements "
     "(partitioned_param_coordinator.py fetch_sub_module: each fetch's parameters in one "
     "all_gather_coalesced; the prefetch bucket bounds what is in flight, not a call's size); reductions "
     "in reduce_bucket_size = 5e8 buckets, post-step gathers of allgather_bucket_size = 5e8 (amortized)"},
    {Granularity::MegatronBuckets, "megatron-buckets",
     "Megatron-Core's distributed optimizer: gradient reduce-scatters and parameter all-gathers in "
     "buckets of max(4e7, 1e6 x data-parallel size) elements (amortized), other ops one a unit"},
};

}  // namespace

Granularity parse_granularity(std::string_view text) {
  if (text == "fsdp") return Granularity::Unit;
  if (const Granularity* g = value_of(kGranularities, text)) return *g;
  throw Error(fmt::format("--granularity '{}': expected {} (fsdp is unit: one collective a wrapped block)", text,
                          fmt::join(names_of(kGranularities), ", ")));
}

std::string_view granularity_name(Granularity g) { return name_of(kGranularities, g); }

std::string_view granularity_means(Granularity g) { return row_of(kGranularities, g).means; }

namespace {

bool is_reduction(Purpose p) {
  return p == Purpose::GradReduce || p == Purpose::StepGradReduce || p == Purpose::ReplicaReduce;
}
bool is_step_gather(Purpose p) {
  return p == Purpose::StepGradGather || p == Purpose::ReplicaGather || p == Purpose::WeightGatherStep;
}
bool is_weight_gather(Purpose p) { return p == Purpose::WeightGatherForward || p == Purpose::WeightGatherBackward; }

// DeepSpeed's buckets, amortized (--granularity deepspeed).
double deepspeed_bucket_calls(Purpose p, double elements) {
  if (is_weight_gather(p)) return elements / kDeepSpeedPrefetchBucket;
  if (is_reduction(p)) return elements / kDeepSpeedReduceBucket;
  if (is_step_gather(p)) return elements / kDeepSpeedAllgatherBucket;
  return 1.0;
}

}  // namespace

double collective_launches(const ScheduledOp& op, const shard::UnitPlan& units, Granularity granularity,
                           const std::vector<GatheredParams>& gathered) {
  if (granularity == Granularity::Unit || op.unit < 0) return 1.0;
  const double elements = static_cast<double>(units.numel.at(op.unit));
  switch (granularity) {
    case Granularity::Unit: return 1.0;
    case Granularity::DeepSpeed: return deepspeed_bucket_calls(op.purpose, elements);
    case Granularity::DeepSpeedTensors:
    case Granularity::DeepSpeedModules: {
      if (!is_weight_gather(op.purpose)) return deepspeed_bucket_calls(op.purpose, elements);
      const GatheredParams& g = gathered.at(op.unit);
      return std::max(1, granularity == Granularity::DeepSpeedTensors ? g.tensors : g.modules);
    }
    case Granularity::MegatronBuckets:
      return is_reduction(op.purpose) || is_step_gather(op.purpose)
                 ? elements / megatron_bucket_elements(op.group_size)
                 : 1.0;
  }
  return 1.0;
}

void Workload::validate(const ModelShape& model) const {
  if (micro_batch <= 0) throw Error(fmt::format("--micro-batch {}: must be positive", micro_batch));
  if (seq <= 0) throw Error(fmt::format("--seq {}: must be positive", seq));
  if (accumulation_steps <= 0) throw Error(fmt::format("--accum {}: must be positive", accumulation_steps));
  if (recompute == Recompute::SelectiveOp && !flash_attention)
    throw Error("--recompute selective-op: prices torchtitan's per-op policy, which saves the fused attention "
                "kernel's output (PyTorch's scaled-dot-product flash/efficient/cuDNN kernels); give --flash-attention "
                "too");
  if (model.learned_positions > 0 && seq > model.learned_positions)
    throw Error(fmt::format("--seq {}: model '{}' has {} learned positions", seq, model.name,
                            model.learned_positions));
}

namespace {

constexpr Named<Purpose> kPurposeFlags[] = {
    {Purpose::WeightGatherForward, "weight-gather-forward"},
    {Purpose::WeightGatherBackward, "weight-gather-backward"},
    {Purpose::GradReduce, "grad-reduce"},
    {Purpose::StepGradReduce, "step-grad-reduce"},
    {Purpose::StepGradGather, "step-grad-gather"},
    {Purpose::ReplicaReduce, "replica-reduce"},
    {Purpose::ReplicaGather, "replica-gather"},
    {Purpose::WeightGatherStep, "weight-gather-step"},
    {Purpose::GradNormAllReduce, "grad-norm"},
    {Purpose::LossAllReduce, "loss"},
};

}  // namespace

std::string_view purpose_flag(Purpose p) { return name_of(kPurposeFlags, p); }

LeaveOut parse_leave_out(std::string_view text, const topo::Topology& topology) {
  const std::size_t at = text.find('@');
  const std::string_view name = text.substr(0, at);
  const Purpose* purpose = value_of(kPurposeFlags, name);
  if (!purpose)
    throw Error(fmt::format("--leave-out '{}': unknown collective '{}' (known: {})", text, name,
                            fmt::join(names_of(kPurposeFlags), ", ")));
  LeaveOut out{*purpose, {}};
  if (at != std::string_view::npos) {
    out.tier = std::string(text.substr(at + 1));
    if (!topology.find_tier(out.tier))
      throw Error(fmt::format("--leave-out '{}': topology '{}' has no tier '{}'", text, topology.name(), out.tier));
  }
  return out;
}

double op_time_s(const ScheduledOp& op, const topo::Topology& topology) {
  return price_op(op, topology, nullptr).seconds();
}

namespace {

// An op at its curve: the bytes at the fitted bandwidth, the rest its fixed cost (a measured
// point below the line leaves no fixed cost and a shorter bandwidth term).
OpPrice curve_price(const CollectiveCurve& curve, double bytes_sent, int sends) {
  const double total = curve.seconds_for(bytes_sent, sends);
  const double at_bandwidth = std::min(total, bytes_sent / (curve.bus_GBps * 1e9));
  return {.latency_s = total - at_bandwidth, .bandwidth_s = at_bandwidth,
          .under_compute = curve.under_compute_factor(bytes_sent, sends)};
}

// The rate of a ring over the tiers an op spans, as NCCL lays it out: one ring a channel, each
// crossing every domain boundary once, channels spread over a domain's links. A tier-(t-1)
// domain's rings together carry one ring member's bytes onto tier t, over all its links there:
// the domain's ranks x the rank rate (its ports' total, or its ranks' own links), shared by
// the parallel rings of the other positions when the ring starts above level 0. The ring runs
// at the slowest tier it spans by that rate. A tier's rank rate is its calibrated bus bandwidth
// where the calibration has a curve for the collective (measured with every rank of the inner
// domain crossing at once), else its rank bandwidth x efficiency.
struct RingRate {
  double bytes_per_s = 0;
  double bound_ranks = 1;                       // ranks a ring member stands for on the bounding tier
  const CollectiveCurve* bound_curve = nullptr; // the bounding tier's curve, if calibrated
  double max_latency_us = 0;                    // the largest latency of the tiers spanned
};

RingRate ring_rate(const ScheduledOp& op, const topo::Topology& topology, const Calibration* calibration) {
  const int inner = op.level - op.levels_spanned + 1;
  RingRate r;
  for (int t = inner; t <= op.level; ++t) {
    const double ranks_per_ring = static_cast<double>(topology.domain_ranks(t - 1)) / topology.domain_ranks(inner - 1);
    const TierCalibration* tier = calibration ? &calibration->tier(topology.tier(t).name) : nullptr;
    const CollectiveCurve* curve = tier ? tier->find(op.kind) : nullptr;
    double rank_rate = curve ? curve->bus_GBps * 1e9 : topology.rank_bandwidth_GBps(t) * topology.tier(t).efficiency * 1e9;
    if (tier && tier->by_group_size) {
      // The ring's own size on this tier: the tier-(t-1) domains it crosses, or its ranks.
      const double size = tier->by_group_size->key == GroupSizeCurve::Key::Nodes ? op.group_size / ranks_per_ring
                                                                                 : op.group_size;
      rank_rate = tier->by_group_size->bus_GBps_at(size) * 1e9;
    }
    const double rate = ranks_per_ring * rank_rate;
    if (t == inner || rate < r.bytes_per_s) r.bytes_per_s = rate, r.bound_ranks = ranks_per_ring, r.bound_curve = curve;
    r.max_latency_us = std::max(r.max_latency_us, topology.tier(t).latency_us);
  }
  return r;
}

// A flat all-to-all: messages x the largest latency of its tiers, its bytes at the ring's rate.
OpPrice flat_all_to_all(const ScheduledOp& op, const RingRate& r) {
  return {.latency_s = op.messages * r.max_latency_us * 1e-6,
          .bandwidth_s = static_cast<double>(op.bytes_sent) / r.bytes_per_s};
}

// The whole buffer of one NCCL call (its nBytes): a ring rank sends (d-1)/d of it in an
// all-gather or reduce-scatter, 2(d-1)/d in an all-reduce.
double nccl_total_bytes(const ScheduledOp& op) {
  const double d = op.group_size;
  return static_cast<double>(op.bytes_sent) * d / ((op.kind == Collective::AllReduce ? 2 : 1) * (d - 1));
}

// `launches` calls of NCCL's choice for a call's share of the op's bytes.
OpPrice nccl_price(const ScheduledOp& op, const topo::Topology& topology, const RingRate& rate,
                   const NcclSystem& system, double launches) {
  const NcclGroup group{op.group_size, nodes_of(op, topology), rate.bytes_per_s / 1e9};
  const NcclCall call = nccl_call(op.kind, nccl_total_bytes(op) / launches, group, system);
  return {.latency_s = launches * call.latency_us * 1e-6,
          .bandwidth_s = launches * (call.seconds - call.latency_us * 1e-6),
          .nccl = call};
}

// One op's price before coding: NCCL's model, a calibrated curve, the flat all-to-all rule, or
// the tier's α-β; the fixed cost paid `launches` times.
OpPrice priced(const ScheduledOp& op, const topo::Topology& topology, const Calibration* calibration, double launches,
               const NcclSystem* nccl) {
  if (op.group_size < 2) return {};
  if (op.levels_spanned > 1 && !nccl)
    throw Error(fmt::format("plan: a flat op over {} tiers is priced by NCCL's model (--collectives nccl)",
                            op.levels_spanned));
  const RingRate rate = ring_rate(op, topology, calibration);
  const CollectiveCurve* curve = rate.bound_curve;
  const double bytes = static_cast<double>(op.bytes_sent);
  OpPrice price;
  if (curve && curve->latency_known)
    price = curve_price(*curve, bytes / rate.bound_ranks, op.messages);
  else if (nccl && op.kind != Collective::AllToAll)
    return nccl_price(op, topology, rate, *nccl, launches);
  else if (op.levels_spanned > 1)
    price = flat_all_to_all(op, rate);
  else
    price = {.latency_s = op.messages * topology.tier(op.level).latency_us * 1e-6,
             .bandwidth_s = bytes / rate.bytes_per_s};
  price.latency_s *= launches;
  return price;
}

}  // namespace

double codec_elements(const ScheduledOp& op) {
  if (!is_quantized(op.wire)) return 0;
  // A gather chain moves weights already in their wire format (encoded once, after the step)
  // and decodes the unit when it is whole: each gather of the chain is charged what it brought
  // in, so the chain pays the unit less the rank's own shard.
  if (op.kind == Collective::AllGather) return static_cast<double>(op.elements_out - op.elements_in);
  return static_cast<double>(op.elements_in) + static_cast<double>(op.elements_out) * op.group_size;
}

int nodes_of(const ScheduledOp& op, const topo::Topology& topology) {
  if (op.level != topology.outermost()) return 1;
  const int inner = op.level - op.levels_spanned + 1;
  return op.group_size * topology.domain_ranks(inner - 1) / topology.domain_ranks(op.level - 1);
}

OpPrice price_op(const ScheduledOp& op, const topo::Topology& topology, const Calibration* calibration,
                 double launches, const NcclSystem* nccl) {
  OpPrice price = priced(op, topology, calibration, launches, nccl);
  if (calibration && calibration->compute) {
    const ComputeCalibration& c = *calibration->compute;
    const double GBps = op.wire == DType::I8 ? c.int8_codec_GBps : op.wire == DType::I4 ? c.int4_codec_GBps : 0;
    if (GBps > 0) price.codec_s = 4 * codec_elements(op) / (GBps * 1e9);
  }
  return price;
}

namespace {

// replay_micro_batch's two streams, one method a moment: run() walks the program's events:
// at each, issue, then wait, then compute; after the last, drain the stream and attribute
// each op's time to its tier. The communication stream serves ops one at a time in the order
// the program issues them (the runtime's communication thread is a FIFO), each starting once
// issued and the stream is free. Compute issues at each event, then waits for what the
// program says must be complete before the event's compute. The two streams advance
// together: while both run, compute goes at 1/slows_compute of the op on the stream and the
// op at 1/under_compute; alone, each at full speed.
class MicroBatchReplay {
 public:
  MicroBatchReplay(const shard::Schedule& schedule, const std::vector<double>& forward_s,
                   const std::vector<double>& backward_s, const std::vector<double>& op_seconds, bool last_of_step,
                   const OverlapFactors& factors)
      : events_(schedule.units().events),
        forward_s_(forward_s),
        backward_s_(backward_s),
        op_seconds_(op_seconds),
        factors_(factors),
        program_(last_of_step ? schedule.last_micro_batch_program() : schedule.training_program()),
        ops_(schedule.micro_batch_ops()) {
    const std::size_t micro_ops = ops_.size();
    if (last_of_step) ops_.insert(ops_.end(), schedule.bucket_ops().begin(), schedule.bucket_ops().end());
    if (op_seconds.size() != ops_.size() || forward_s.size() != schedule.units().numel.size() ||
        backward_s.size() != forward_s.size())
      throw Error(fmt::format("replay: {} op times for {} ops, {}/{} unit times for {} units", op_seconds.size(),
                              ops_.size(), forward_s.size(), backward_s.size(), schedule.units().numel.size()));
    ops_of_event_.resize(events_.size());
    ops_of_bucket_.resize(schedule.buckets().size());
    for (int i = 0; i < static_cast<int>(micro_ops); ++i) {
      if (ops_[i].event < 0 || ops_[i].event >= static_cast<int>(events_.size()))
        throw Error(fmt::format("schedule: micro-batch op {} names no event", i));
      ops_of_event_[ops_[i].event].push_back(i);
    }
    for (int i = static_cast<int>(micro_ops); i < static_cast<int>(ops_.size()); ++i)
      ops_of_bucket_[ops_[i].bucket].push_back(i);
    for (auto [list, what] :
         {std::pair{&factors.under_compute, "under-compute"}, {&factors.slows_compute, "compute slowdown"}})
      if (!list->empty() && list->size() != ops_.size())
        throw Error(fmt::format("replay: {} {} factors for {} ops", list->size(), what, ops_.size()));
    const int levels = schedule.topology().num_tiers();
    t_.busy_by_level.assign(levels, 0);
    t_.stretch_by_level.assign(levels, 0);
    t_.exposed_by_level.assign(levels, 0);
    start_.assign(ops_.size(), 0);
    end_.assign(ops_.size(), 0);
    done_.assign(ops_.size(), 0);
    chain_last_.assign(events_.size(), -1);
    bucket_last_.assign(ops_of_bucket_.size(), -1);
  }

  Timeline run() && {
    for (std::size_t e = 0; e <= events_.size(); ++e) {
      issue(program_.steps[e]);
      wait(program_.steps[e]);
      if (e < events_.size()) compute(e);
    }
    drain();
    attribute();
    return std::move(t_);
  }

 private:
  // Queues on the stream the chains and buckets the program issues at `step`.
  void issue(const shard::EventStep& step) {
    for (int c : step.issue) chain_last_[c] = enqueue(ops_of_event_[c]);
    for (int b : step.bucket_issue) bucket_last_[b] = enqueue(ops_of_bucket_[b]);
  }

  // Compute waits, the stream alone, for the chains and buckets that must be done at `step`.
  void wait(const shard::EventStep& step) {
    for (int c : step.complete)
      if (chain_last_[c] >= 0) wait_for(chain_last_[c]);
    for (int b : step.bucket_complete)
      if (bucket_last_[b] >= 0) wait_for(bucket_last_[b]);
  }

  // An acquire adds its unit's forward or backward to the run of compute that needs these
  // weights, which runs once the last of a run of acquires is in.
  void compute(std::size_t event) {
    const model::UnitEvent& ev = events_[event];
    if (ev.kind != model::UnitEvent::Acquire) return;
    run_ += ev.phase == model::Phase::Forward ? forward_s_[ev.unit] : backward_s_[ev.unit];
    const bool run_ends = event + 1 == events_.size() || events_[event + 1].kind != model::UnitEvent::Acquire;
    if (!run_ends) return;
    run_compute(run_);
    t_.compute_s += run_;
    run_ = 0;
  }

  // The micro-batch ends when the stream is idle.
  void drain() {
    if (!t_.order.empty()) wait_for(t_.order.back());
    t_.makespan_s = clock_;
  }

  // The stream is busy through every wait (compute waits only on an issued op, and the
  // tail only on queued reductions), so each wait splits exactly over the ops it overlaps.
  void attribute() {
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      const double stretch = under_compute(i) == 1.0 ? 0.0 : std::max(0.0, end_[i] - start_[i] - op_seconds_[i]);
      t_.busy_by_level[ops_[i].level] += op_seconds_[i] + stretch;
      t_.stretch_by_level[ops_[i].level] += stretch;
      for (auto [from, to] : waits_)
        t_.exposed_by_level[ops_[i].level] += std::max(0.0, std::min(to, end_[i]) - std::max(from, start_[i]));
    }
  }

  double under_compute(std::size_t i) const {
    return factors_.under_compute.empty() ? 1.0 : factors_.under_compute[i];
  }
  double slows_compute(std::size_t i) const {
    return factors_.slows_compute.empty() ? 1.0 : factors_.slows_compute[i];
  }

  // Queues a chain on the stream; returns its last op.
  int enqueue(const std::vector<int>& chain) {
    for (int i : chain) {
      t_.order.push_back(i);
      if (head_ == t_.order.size() - 1) start_[i] = clock_, left_ = op_seconds_[i];
    }
    return chain.empty() ? -1 : chain.back();
  }

  void finish_head() {
    const int i = t_.order[head_];
    end_[i] = clock_, done_[i] = 1;
    if (++head_ < t_.order.size()) start_[t_.order[head_]] = clock_, left_ = op_seconds_[t_.order[head_]];
  }

  void settle() {  // ops of no time end where they start
    while (head_ < t_.order.size() && left_ <= 0) finish_head();
  }

  // Compute waits, the stream alone, until op i is done.
  void wait_for(int i) {
    const double from = clock_;
    while (!done_[i]) {
      settle();
      if (done_[i]) break;
      clock_ += left_, left_ = 0;
      finish_head();
    }
    if (clock_ > from) waits_.emplace_back(from, clock_);
  }

  // Runs `work` seconds of compute from clock_, both streams slowed while they overlap.
  void run_compute(double work) {
    while (work > 0) {
      settle();
      if (head_ == t_.order.size()) {
        clock_ += work;
        return;
      }
      const double f = under_compute(t_.order[head_]), slowdown = slows_compute(t_.order[head_]);
      const double compute_wall = work * slowdown, op_wall = left_ * f;
      if (compute_wall <= op_wall) {
        clock_ += compute_wall, left_ -= compute_wall / f;
        t_.slowdown_s += compute_wall - work;
        return;
      }
      clock_ += op_wall, left_ = 0;
      work -= op_wall / slowdown;
      t_.slowdown_s += op_wall - op_wall / slowdown;
      finish_head();
    }
  }

  const std::vector<model::UnitEvent>& events_;
  const std::vector<double>& forward_s_;
  const std::vector<double>& backward_s_;
  const std::vector<double>& op_seconds_;
  const OverlapFactors& factors_;
  const shard::MicroBatchProgram& program_;
  std::vector<ScheduledOp> ops_;  // micro-batch ops, then (last_of_step) bucket ops
  std::vector<std::vector<int>> ops_of_event_, ops_of_bucket_;
  Timeline t_;
  std::vector<double> start_, end_;
  std::vector<char> done_;
  std::vector<int> chain_last_, bucket_last_;
  std::vector<std::pair<double, double>> waits_;
  double clock_ = 0, run_ = 0;
  // The stream, simulated up to clock_: t_.order[head_] is on it with left_ seconds of its
  // own (alone) time to go; the ops before it are done.
  std::size_t head_ = 0;
  double left_ = 0;
};

}  // namespace

Timeline replay_micro_batch(const shard::Schedule& schedule, const std::vector<double>& forward_s,
                            const std::vector<double>& backward_s, const std::vector<double>& op_seconds,
                            bool last_of_step, const OverlapFactors& factors) {
  return MicroBatchReplay(schedule, forward_s, backward_s, op_seconds, last_of_step, factors).run();
}

std::uint64_t Estimate::bytes_on(std::string_view tier) const {
  for (const TierCost& t : tiers)
    if (t.traffic.tier == tier) return t.traffic.bytes_sent;
  throw Error(fmt::format("estimate: no tier '{}'", tier));
}

std::string Estimate::memory_verdict() const {
  const double have = static_cast<double>(device_memory_bytes) / 1e9;
  if (fits) return fmt::format("fits: {:.1f} of {:g} GB", static_cast<double>(total_memory_bytes) / 1e9, have);
  return fmt::format("does not fit: needs {:.1f} GB of {:g} GB ({:.1f} GB over)",
                     static_cast<double>(total_memory_bytes) / 1e9, have,
                     static_cast<double>(total_memory_bytes - device_memory_bytes) / 1e9);
}

namespace {

nlohmann::json memory_json(const shard::StateMemory& memory, std::uint64_t activation_bytes, std::uint64_t total) {
  return {{"weights", memory.weights},     {"secondary", memory.secondary},
          {"grads", memory.grads},         {"optimizer", memory.optimizer},
          {"gathered", memory.gathered},   {"communication", memory.communication},
          {"activations", activation_bytes}, {"total", total}};
}

}  // namespace

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Workload, micro_batch, seq, accumulation_steps, flash_attention)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TierCost, busy_s, latency_s, codec_s, under_compute_s, step_phase_s)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Estimate::NcclOp, purpose, tier, collective, group_size, nodes, bytes_a_call,
                                   calls_a_step, achieved_bus_GBps)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Estimate, strategy, world_size, device_memory_bytes, fits, tokens_per_step,
                                   compute_s, recompute_matmul_s, recompute_memory_bound_s, overlap_slowdown_s,
                                   optimizer_s, step_time_s, tokens_per_s, tflops_per_device, mfu, hfu, left_out,
                                   tensor_parallel, pipeline_stages, tp_allreduce_s, pp_p2p_s, pp_bubble_s,
                                   pp_bubble_fraction)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Estimate::PeerTerms, peer, serial_reduction_s, hidden_param_gather_s, tp_hidden_s,
                                   copy_s)

nlohmann::json Estimate::to_json() const {
  nlohmann::json bytes = nlohmann::json::object(), time = nlohmann::json::object();
  for (const TierCost& t : tiers) {
    bytes[t.traffic.tier] = {{"bytes_sent", t.traffic.bytes_sent},
                             {"bytes_received", t.traffic.bytes_received},
                             {"messages", t.traffic.messages}};
    time[t.traffic.tier] = t;
    time[t.traffic.tier].update({{"bandwidth_s", t.busy_s - t.latency_s - t.codec_s - t.under_compute_s},
                                 {"exposed_micro_batch_s", t.exposed_micro_s}});
  }
  nlohmann::json nccl = nlohmann::json::array();
  for (const NcclOp& n : nccl_ops) {
    nlohmann::json call = n.call.to_json();
    call.update(nlohmann::json(n));
    nccl.push_back(std::move(call));
  }
  nlohmann::json out = *this;  // the scalars under their own names, then the rest
  out.update({{"spec", spec.to_json()},
              {"nccl_calls", nccl},
              {"bytes_per_step", bytes},
              {"comm_time_per_step", time},
              {"memory_bytes", memory_json(memory, activation_bytes, total_memory_bytes)},
              {"memory_verdict", memory_verdict()},
              {"exposed_micro_batch_comm_s", exposed_micro_s},
              {"step_phase_comm_s", step_comm_s},
              {"energy",
               {{"utilization", utilization},
                {"power_watts", power_watts},
                {"joules_per_token", joules_per_token},
                {"tokens_per_kwh", tokens_per_kwh}}}});
  if (compute_shape) out["compute_shape"] = compute_shape->to_json();
  if (!stages.empty()) {
    nlohmann::json per_stage = nlohmann::json::array();
    for (const PipelineStage& s : stages)
      per_stage.push_back({{"blocks", s.blocks},
                           {"params", s.params},
                           {"memory_bytes", memory_json(s.memory, s.activation_bytes, s.total_memory_bytes)},
                           {"micro_batch_s", s.micro_batch_s}});
    out["pipeline"] = per_stage;
  }
  if (peer) {
    nlohmann::json calls = nlohmann::json::object();
    for (const auto& [purpose, n] : peer->calls_a_step) calls[purpose] = n;
    out["peer"] = *peer;
    out["peer"]["calls_a_step"] = calls;
  }
  return out;
}

double forward_wait_for_gathers(const shard::UnitPlan& units, const std::vector<double>& gather_s,
                                const std::vector<double>& forward_s) {
  std::vector<bool> seen(units.numel.size(), false);
  double comm_end = 0, compute_start = 0, compute_end = 0, forward = 0;
  for (const model::UnitEvent& ev : units.events) {
    if (ev.kind != model::UnitEvent::Acquire || ev.phase != model::Phase::Forward) continue;
    const double g = seen[ev.unit] ? 0 : gather_s[ev.unit];
    seen[ev.unit] = true;
    // Issued when forward reaches the unit before (its pre-hook), after the one before it.
    comm_end = std::max(comm_end, compute_start) + g;
    compute_start = std::max(compute_end, comm_end);
    compute_end = compute_start + forward_s[ev.unit];
    forward += forward_s[ev.unit];
  }
  return compute_end - forward;
}

void set_throughput(Estimate& e, const ModelShape& model, const Workload& workload, const DeviceFacts& device) {
  e.tokens_per_s = e.tokens_per_step / e.step_time_s;
  const double per_device_tokens = e.tokens_per_s / e.world_size;
  e.tflops_per_device = model.model_flops_per_token(workload.seq) * per_device_tokens / 1e12;
  e.mfu = e.tflops_per_device / device.peak_tflops;
  e.hfu = model.hardware_flops_per_token(workload.seq, workload.recompute) * per_device_tokens / 1e12 /
          device.peak_tflops;
}

PlanContext::PlanContext(ModelShape model, topo::Topology topology, DeviceFacts device, Workload workload,
                         std::vector<LeaveOut> leave_out, std::optional<Calibration> calibration,
                         int tensor_parallel_level)
    : model_(std::move(model)),
      topology_(std::move(topology)),
      device_(std::move(device)),
      workload_(workload),
      leave_out_(std::move(leave_out)),
      calibration_(std::move(calibration)),
      units_(model_.unit_plan()) {
  if (!topology_.resolved()) throw Error("plan: the topology must be resolved for a world size (--nodes)");
  model_.validate();
  device_.validate();
  workload_.validate(model_);
  if (model_.tensor_parallel > 1)
    tensor_parallel_ = {model_.tensor_parallel, tensor_parallel_level,
                        model::tensor_parallel_calls(model_.tensor_parallel_walk(
                            workload_.micro_batch, workload_.seq, static_cast<bool>(workload_.recompute),
                            compute_dtype(workload_.precision), workload_.sequence_parallel))};
  if (calibration_) calibration_->check_covers(topology_, "--calibration");
  if (workload_.collectives == shard::Composition::Nccl) nccl_ = nccl_system(device_.name, topology_);
  if (workload_.granularity == Granularity::DeepSpeedTensors || workload_.granularity == Granularity::DeepSpeedModules)
    gathered_ = deepspeed_gathered_params(model_);
  const ComputeCalibration* measured = calibration_ && calibration_->compute ? &*calibration_->compute : nullptr;
  if (device_.compute_anchor && !measured) {
    shape_ = anchored_efficiency(model_, workload_.micro_batch, workload_.seq,
                                 device_.kernels.value_or(peer_kernel_generation(workload_.peer)),
                                 *device_.compute_anchor, device_.peak_tflops, device_.hbm_GBps,
                                 compute_bytes(workload_.precision));
    device_.compute_efficiency = std::min(1.0, shape_->efficiency);
  }
  const double flops_per_s = device_.peak_tflops * 1e12 * device_.compute_efficiency;
  const double tokens = static_cast<double>(workload_.micro_batch) * workload_.seq;
  const std::vector<double> flops = model_.forward_flops_per_token(workload_.seq);
  const std::vector<int> matmuls = model_.forward_matmuls();
  const std::vector<Rerun> rerun = model_.rerun_per_token(workload_.seq, workload_.recompute,
                                                          compute_bytes(workload_.precision));
  // Memory-bound work is priced as Adam is: at the HBM rate, or the calibration's measured one.
  memory_GBps_ = measured ? measured->optimizer_GBps : device_.hbm_GBps;
  for (std::size_t u = 0; u < flops.size(); ++u) {
    forward_s_.push_back(measured ? measured->kernel_overhead * measured->matmul_seconds(flops[u] * tokens, matmuls[u])
                                  : flops[u] * tokens / flops_per_s);
    // Full recomputation reruns the whole forward, its other kernels included; selective-op's
    // rerun matmuls are bare (its non-matmul ops are the memory-bound term).
    double rerun_matmul_s = 0;
    if (workload_.recompute == Recompute::Full) rerun_matmul_s = rerun[u].matmuls > 0 ? forward_s_.back() : 0;
    else if (rerun[u].matmuls > 0)
      rerun_matmul_s = measured ? measured->matmul_seconds(rerun[u].matmul_flops * tokens, rerun[u].matmuls)
                                : rerun[u].matmul_flops * tokens / flops_per_s;
    const double rerun_memory_bound_s = rerun[u].memory_bound_bytes * tokens / (memory_GBps_ * 1e9);
    rerun_matmul_s_ += rerun_matmul_s;
    rerun_memory_bound_s_ += rerun_memory_bound_s;
    backward_s_.push_back(2 * forward_s_.back() + rerun_matmul_s + rerun_memory_bound_s);
  }
}

bool PlanContext::left_out(const ScheduledOp& op) const {
  for (const LeaveOut& l : leave_out_)
    if (l.purpose == op.purpose && (l.tier.empty() || l.tier == topology_.tier(op.level).name)) return true;
  return false;
}

shard::Schedule PlanContext::schedule(const shard::ShardSpec& spec) const {
  return shard::Schedule(units_, topology_, spec, workload_.accumulation_steps, workload_.collectives,
                         tensor_parallel_);
}

// One estimate, step by step: PlanContext::estimate runs them in the order they are written,
// the order in which each tier's sums are added.
class PlanContext::EstimateSteps {
 public:
  EstimateSteps(const PlanContext& context, const shard::Schedule& schedule, Estimate& e)
      : c_(context),
        schedule_(schedule),
        e_(e),
        K_(context.workload_.accumulation_steps),
        calibrated_(context.calibration_ ? &*context.calibration_ : nullptr),
        traits_(peer_traits(context.workload_.peer)),
        forward_s_(context.forward_s_),
        backward_s_(context.backward_s_) {
    if (context.workload_.peer != Peer::Strata) {
      e_.peer.emplace();
      e_.peer->peer = peer_name(context.workload_.peer);
    }
  }

  // FSDP2's copies on the compute stream: where weights are gathered, each all-gather's copy-out
  // reads and writes the unit (forward, and backward's re-gather); where gradients are
  // reduce-scattered, each copy-in the unit's gradient; at the rate memory-bound work runs (as Adam).
  void peer_copies() {
    if (!traits_.copies_on_compute_stream) return;
    const bool gathered = e_.spec.weights != "none", reduced = e_.spec.grads != "none";
    const int cb = compute_bytes(c_.workload_.precision);
    for (std::size_t u = 0; u < forward_s_.size(); ++u) {
      const double one = 2.0 * static_cast<double>(c_.units_.numel[u]) * cb / (c_.memory_GBps_ * 1e9);
      const double forward = gathered ? one : 0;
      const double backward = (gathered && e_.spec.free_after_forward ? one : 0) + (reduced ? one : 0);
      forward_s_[u] += forward;
      backward_s_[u] += backward;
      e_.peer->copy_s += K_ * (forward + backward);
    }
  }

  // Bytes: the schedule's own totals, less any op the account is told to leave out; the
  // micro-batch and bucket ops priced and replayed against compute.
  void replay_micro_batches() {
    for (const shard::TierTraffic& t : schedule_.traffic_per_step()) e_.tiers.push_back({t});
    for (const ScheduledOp& op : schedule_.micro_batch_ops()) replayed(op, K_);
    mb_ = replay_micro_batch(schedule_, forward_s_, backward_s_, op_seconds_, false, factors_);
    // The step's last micro-batch also runs the buckets' step reductions (once a step).
    for (const ScheduledOp& op : schedule_.bucket_ops()) replayed(op, 1);
    last_ = schedule_.buckets().empty()
                ? mb_
                : replay_micro_batch(schedule_, forward_s_, backward_s_, op_seconds_, true, factors_);
  }

  // The optimizer step's ops, never hidden.
  void step_phase() {
    std::vector<double> behind_forward(c_.units_.numel.size(), 0.0);
    int gather_level = 0;
    for (const ScheduledOp& op : schedule_.step_ops()) {
      if (c_.left_out(op)) {
        drop(op, 1), note(op);
        continue;
      }
      const OpPrice p = price(op);
      const double s = p.seconds();
      book(op, p, 1);
      e_.tiers[op.level].busy_s += s;
      if (traits_.param_gather_overlaps_forward && op.purpose == Purpose::WeightGatherStep && op.unit >= 0) {
        behind_forward[op.unit] += s;
        gather_level = std::max(gather_level, op.level);
        continue;
      }
      e_.tiers[op.level].step_phase_s += s;
      e_.step_comm_s += s;
    }
    gathers_behind_forward(behind_forward, gather_level);
  }

  // The K micro-batches' time on each tier: busy, stretched by compute beside it, exposed.
  void micro_batch_communication() {
    for (std::size_t t = 0; t < e_.tiers.size(); ++t) {
      e_.tiers[t].busy_s += (K_ - 1) * mb_.busy_by_level[t] + last_.busy_by_level[t];
      e_.tiers[t].under_compute_s = (K_ - 1) * mb_.stretch_by_level[t] + last_.stretch_by_level[t];
      e_.tiers[t].exposed_micro_s = (K_ - 1) * mb_.exposed_by_level[t] + last_.exposed_by_level[t];
    }
  }

  // Tensor parallelism's collectives sit inside the model's compute, which waits for each
  // (the runtime issues them on the communication stream and blocks on them): all their time
  // is on the critical path and exposed on their tier, K times a step.
  void tensor_parallel() {
    double tp_s = 0;
    std::vector<std::pair<int, double>> by_op;
    for (const ScheduledOp& op : schedule_.tensor_parallel_ops()) {
      const OpPrice p = price(op);
      tp_s += p.seconds();
      book(op, p, K_);
      e_.tiers[op.level].busy_s += K_ * p.seconds();
      by_op.emplace_back(op.level, p.seconds());
    }
    // Under --tp-comm-overlap the GEMMs the ops sit beside hide them, up to the micro-batch's
    // compute; what is left is exposed, each op its share.
    const double exposed = traits_.tp_comm_overlaps_gemm ? std::max(0.0, tp_s - mb_.compute_s) : tp_s;
    for (const auto& [level, seconds] : by_op) e_.tiers[level].exposed_micro_s += K_ * seconds * (tp_s > 0 ? exposed / tp_s : 0);
    if (traits_.tp_comm_overlaps_gemm) e_.peer->tp_hidden_s = K_ * (tp_s - exposed);
    e_.tp_allreduce_s = K_ * exposed;
  }

  // Adam on the OS shard streams master weight, m and v in and out (24 bytes), reads the
  // gradient and writes the new weight (an element each in compute precision).
  void compute() {
    const int cb = compute_bytes(c_.workload_.precision);
    const double os_elements =
        static_cast<double>(schedule_.total_padded()) / schedule_.levels().degree(schedule_.levels().optimizer);
    e_.optimizer_s = os_elements * (24.0 + 2.0 * cb) / (c_.memory_GBps_ * 1e9);

    e_.compute_s = K_ * mb_.compute_s;
    e_.recompute_matmul_s = K_ * c_.rerun_matmul_s_;
    e_.recompute_memory_bound_s = K_ * c_.rerun_memory_bound_s_;
    e_.overlap_slowdown_s = (K_ - 1) * mb_.slowdown_s + last_.slowdown_s;
    e_.exposed_micro_s = (K_ - 1) * (mb_.makespan_s - mb_.compute_s - mb_.slowdown_s) +
                         (last_.makespan_s - last_.compute_s - last_.slowdown_s);
    e_.step_time_s =
        (K_ - 1) * mb_.makespan_s + last_.makespan_s + e_.tp_allreduce_s + e_.step_comm_s + e_.optimizer_s;
  }

  void throughput() {
    e_.tokens_per_step = static_cast<double>(c_.workload_.micro_batch) * c_.workload_.seq * K_ * e_.world_size;
    set_throughput(e_, c_.model_, c_.workload_, c_.device_);
  }

  void memory() {
    const int cb = compute_bytes(c_.workload_.precision);
    e_.memory = schedule_.memory_per_rank(cb);
    e_.activation_bytes = c_.model_.activation_bytes(c_.workload_.micro_batch, c_.workload_.seq, cb,
                                                     c_.workload_.recompute, c_.workload_.flash_attention,
                                                     c_.workload_.sequence_parallel);
    e_.total_memory_bytes = e_.memory.weights + e_.memory.secondary + e_.memory.grads + e_.memory.optimizer +
                            e_.memory.gathered + e_.activation_bytes;
    e_.device_memory_bytes = static_cast<std::uint64_t>(c_.device_.memory_gb * 1e9);
    e_.fits = e_.total_memory_bytes <= e_.device_memory_bytes;
  }

 private:
  OpPrice price(const ScheduledOp& op) const {
    return price_op(op, c_.topology_, calibrated_, calls(op), c_.nccl_ ? &*c_.nccl_ : nullptr);
  }

  double calls(const ScheduledOp& op) const {
    return collective_launches(op, c_.units_, c_.workload_.granularity, c_.gathered_);
  }

  // An op's fixed costs and coding, `times` a step, on its tier.
  void book(const ScheduledOp& op, const OpPrice& p, int times) {
    e_.tiers[op.level].latency_s += times * p.latency_s;
    e_.tiers[op.level].codec_s += times * p.codec_s;
    if (p.nccl) book_nccl(op, p, times);
    if (e_.peer) book_peer_calls(op, times);
  }

  void book_peer_calls(const ScheduledOp& op, int times) {
    // Purposes --leave-out has no flag for (tensor parallelism's) go by the schedule's name.
    const std::string purpose(purpose_flag(op.purpose) == "?" ? shard::to_string(op.purpose) : purpose_flag(op.purpose));
    auto& booked = e_.peer->calls_a_step;
    auto seen = std::find_if(booked.begin(), booked.end(), [&](const auto& b) { return b.first == purpose; });
    if (seen == booked.end()) seen = booked.emplace(booked.end(), purpose, 0.0);
    seen->second += times * calls(op);
  }

  // Post-step gathers issued at the next forward (Megatron's --overlap-param-gather): what
  // forward waits for them is exposed, the rest hidden.
  void gathers_behind_forward(const std::vector<double>& gather_s, int level) {
    double total = 0;
    for (double g : gather_s) total += g;
    if (total == 0) return;
    const double wait = forward_wait_for_gathers(c_.units_, gather_s, forward_s_);
    e_.step_comm_s += wait;
    e_.tiers[level].step_phase_s += wait;
    e_.peer->hidden_param_gather_s = total - wait;
  }

  // The NCCL call of an op, once per distinct purpose, tier, group and size.
  void book_nccl(const ScheduledOp& op, const OpPrice& p, int times) {
    const double calls = this->calls(op);
    Estimate::NcclOp n{std::string(purpose_flag(op.purpose)),
                       c_.topology_.tier(op.level).name,
                       std::string(collective_key(op.kind)),
                       op.group_size,
                       nodes_of(op, c_.topology_),
                       nccl_total_bytes(op) / calls,
                       0,
                       static_cast<double>(op.bytes_sent) / (p.latency_s + p.bandwidth_s) / 1e9,
                       *p.nccl};
    auto seen = std::find_if(e_.nccl_ops.begin(), e_.nccl_ops.end(), [&](const Estimate::NcclOp& s) {
      return s.purpose == n.purpose && s.tier == n.tier && s.group_size == n.group_size &&
             s.bytes_a_call == n.bytes_a_call;
    });
    if (seen == e_.nccl_ops.end()) seen = e_.nccl_ops.insert(seen, std::move(n));
    seen->calls_a_step += times * calls;
  }

  void drop(const ScheduledOp& op, std::uint64_t times) {
    shard::TierTraffic& t = e_.tiers[op.level].traffic;
    t.bytes_sent -= times * op.bytes_sent;
    t.bytes_received -= times * op.bytes_received;
    t.messages -= times * op.messages;
  }

  void note(const ScheduledOp& op) {
    std::string what = fmt::format("{}@{}", purpose_flag(op.purpose), c_.topology_.tier(op.level).name);
    if (std::find(e_.left_out.begin(), e_.left_out.end(), what) == e_.left_out.end()) e_.left_out.push_back(what);
  }

  // DeepSpeed stages 1 and 2 with overlap_comm at its default (off): a gradient reduction runs
  // on the compute stream.
  bool reduces_on_compute_stream(const ScheduledOp& op) const {
    return traits_.reductions_overlap_only_if_weights_sharded && e_.spec.weights == "none" && is_reduction(op.purpose);
  }

  // An op the replay times: priced (nothing if left out), its time and overlap factors queued.
  void replayed(const ScheduledOp& op, int times) {
    const bool out = c_.left_out(op);
    if (out) drop(op, times), note(op);
    const OpPrice p = out ? OpPrice{} : price(op);
    if (!out && reduces_on_compute_stream(op)) {
      // Run in line with compute: the replay's stream skips it, the step pays it whole.
      op_seconds_.push_back(0);
      factors_.under_compute.push_back(1);
      factors_.slows_compute.push_back(1);
      book(op, p, times);
      e_.tiers[op.level].busy_s += times * p.seconds();
      e_.tiers[op.level].step_phase_s += times * p.seconds();
      e_.step_comm_s += times * p.seconds();
      e_.peer->serial_reduction_s += times * p.seconds();
      return;
    }
    op_seconds_.push_back(p.seconds());
    factors_.under_compute.push_back(p.under_compute);
    // Compute beside the op slows by the bytes a second the op moves while compute runs (a flat
    // op's: on its outermost tier).
    const double wall = p.seconds() * p.under_compute;
    const double rate = wall > 0 ? op.bytes_sent / wall : 0;
    factors_.slows_compute.push_back(
        calibrated_ ? calibrated_->compute_slowdown(c_.topology_.tier(op.level).name, rate) : 1.0);
    book(op, p, times);
  }

  const PlanContext& c_;
  const shard::Schedule& schedule_;
  Estimate& e_;
  const int K_;
  const Calibration* calibrated_;
  const PeerTraits traits_;
  std::vector<double> forward_s_, backward_s_;  // per unit, one micro-batch, with the peer's copies
  // The replay's op times and overlap factors, in its order (micro-batch ops, then bucket ops).
  std::vector<double> op_seconds_;
  OverlapFactors factors_;
  Timeline mb_, last_;
};

Estimate PlanContext::estimate(std::string strategy, const shard::ShardSpec& spec) const {
  return priced(std::move(strategy), schedule(spec));
}

Estimate PlanContext::estimate(std::string strategy, const shard::Schedule& schedule) const {
  // This context with its per-unit terms in the schedule's unit order.
  const shard::UnitPlan& given = schedule.units();
  PlanContext c = *this;
  c.units_ = given;
  c.forward_s_.clear();
  c.backward_s_.clear();
  c.gathered_.clear();
  for (int i = 0; i < static_cast<int>(given.numel.size()); ++i) {
    int j = 0;
    const int n = static_cast<int>(units_.numel.size());
    while (j < n && units_.layout_unit_of(j) != given.layout_unit_of(i)) ++j;
    if (j == n || units_.numel[j] != given.numel[i])
      throw Error(fmt::format("plan: unit '{}' of the schedule ({} elements) is not a unit of '{}' as planned",
                              given.names[i], given.numel[i], model_.name));
    c.forward_s_.push_back(forward_s_[j]);
    c.backward_s_.push_back(backward_s_[j]);
    if (!gathered_.empty()) c.gathered_.push_back(gathered_[j]);
  }
  return c.priced(std::move(strategy), schedule);
}

Estimate PlanContext::priced(std::string strategy, const shard::Schedule& schedule) const {
  Estimate e;
  e.strategy = std::move(strategy);
  e.spec = schedule.spec();
  e.world_size = schedule.world_size();
  e.compute_shape = shape_;
  EstimateSteps steps(*this, schedule, e);
  steps.peer_copies();
  steps.replay_micro_batches();
  steps.step_phase();
  steps.micro_batch_communication();
  steps.tensor_parallel();
  steps.compute();
  steps.throughput();
  steps.memory();
  return e;
}

std::string PlanContext::recompute_means() const {
  switch (workload_.recompute.mode()) {
    case Recompute::None: return "none: every activation backward needs is kept";
    case Recompute::Full:
      return "full: each block keeps its input and backward reruns its whole forward (recompute_matmul_s: one more "
             "forward of every block)";
    case Recompute::SelectiveOp: break;
  }
  std::vector<std::string> again, kept;
  double flops = 0;
  for (const BlockLinear& l : model_.selective_op_recomputed()) again.push_back(l.name), flops += 2.0 * l.in * l.out;
  for (const BlockLinear& l : model_.block_linears())
    if (std::find(again.begin(), again.end(), l.name) == again.end()) kept.push_back(l.name);
  double block_bytes = 0;
  for (const Rerun& r : model_.rerun_per_token(workload_.seq, workload_.recompute, compute_bytes(workload_.precision)))
    block_bytes = std::max(block_bytes, r.memory_bound_bytes);
  const bool measured = calibration_ && calibration_->compute;
  return fmt::format(
      "selective-op: torchtitan's per-op selective activation checkpointing (activation_checkpoint mode selective, "
      "selective_ac_option op): each block keeps its input, the outputs of its odd-numbered aten.mm calls ({}{}) and "
      "the attention kernel's output and log-sum-exp; backward reruns the other projections ({}: {:.4g} GFLOP a token "
      "a block, at {}: recompute_matmul_s) and the non-matmul ops it needs (both norms, the residual sum, rotary "
      "positions, the MLP activation: {:.4g} KB a token a block read and written once, at {}: "
      "recompute_memory_bound_s), never the attention core; a tensor-parallel block's all-reduces are rerun as under "
      "full",
      kept.empty() ? "none" : fmt::format("{}", fmt::join(kept, ", ")),
      model_.biases ? "; with biases every projection is an aten.addmm, which the policy does not save" : "",
      fmt::join(again, ", "), flops / 1e9 / model_.tensor_parallel,
      measured ? "the calibration's matmul curve" : "peak x compute_efficiency",
      block_bytes / 1e3,
      measured ? "the calibration's optimizer_GBps (as Adam)" : "the HBM rate (as Adam)");
}

nlohmann::json PlanContext::assumptions() const {
  nlohmann::json tiers = nlohmann::json::array();
  for (int i = 0; i < topology_.num_tiers(); ++i) {
    const topo::Tier& t = topology_.tier(i);
    tiers.push_back({{"tier", t.name},
                     {"size", t.size},
                     {"bandwidth_GBps", t.bandwidth_GBps},
                     {"ports", t.ports},
                     {"port_GBps", t.port_GBps},
                     {"ranks_sharing_ports", topology_.domain_ranks(i - 1)},
                     {"rank_bandwidth_GBps", topology_.rank_bandwidth_GBps(i)},
                     {"efficiency", t.efficiency},
                     {"latency_us", t.latency_us},
                     {"source", t.source}});
  }
  std::vector<std::string> left;
  for (const LeaveOut& l : leave_out_)
    left.push_back(l.tier.empty() ? std::string(purpose_flag(l.purpose))
                                  : fmt::format("{}@{}", purpose_flag(l.purpose), l.tier));
  const bool bf16 = workload_.precision == Precision::BF16;
  const bool calibrated = calibration_.has_value();
  const bool calibrated_compute = calibrated && calibration_->compute.has_value();
  nlohmann::json out = {
      {"precision", precision_name(workload_.precision)},
      {"precision_means",
       bf16 ? "bf16 mixed precision as published systems run it: the presets' fp32 wires become bf16 (int8/int4 "
              "stay), weights, gradients, gathered buffers and activations take 2 bytes; optimizer state is fp32 "
              "master weight + Adam m and v + the gradient the optimizer reads (16 bytes)"
            : "fp32 as strata's runtime runs: wires as the presets say, 4-byte weights, gradients and "
              "activations; optimizer state 16 bytes"},
      {"device", device_.to_json()},
      {"tiers", tiers},
      {"collectives", shard::to_string(workload_.collectives)},
      {"collectives_means",
       workload_.collectives == shard::Composition::Hierarchical
           ? "strata's own: a collective over several tiers is one op per tier, each over that tier's "
             "across-group at its own latency and rate, run one after the other"
           : "nccl (flat-ring is its earlier name), as NCCL/RCCL run PyTorch FSDP and DeepSpeed ZeRO: a "
             "collective over several tiers is one call over every rank of the group, booked on the outermost "
             "tier it crosses; every all-gather, reduce-scatter and all-reduce call is priced by NCCL's model "
             "(src/graph/tuning.cc, v2.30): the algorithm (ring, tree for all-reduce, PAT with one rank a node) and "
             "protocol (LL, LL128, Simple) of least time, each a base latency + hops x its per-hop latency by hop "
             "type (NVLink inside a node, network between nodes: a ring over N nodes takes N-1 network steps of "
             "its d-1) + bytes / its bus bandwidth; the ring's bus bandwidth = the slowest over its tiers of (ranks "
             "of a domain inside the tier / ranks of a domain inside the ring's innermost tier) x rank_bandwidth x "
             "efficiency, cut and capped per protocol; NVLS and CollNet not modelled; an all-to-all keeps "
             "messages x the largest latency_us of its tiers"},
      {"nccl", nccl_ ? nccl_->to_json() : nlohmann::json(nullptr)},
      {"compute_shape", shape_ ? shape_->to_json() : nlohmann::json(nullptr)},
      {"network_by_group_size", group_size_notes(calibrated ? &*calibration_ : nullptr, topology_)},
      {"peer", peer_name(workload_.peer)},
      {"granularity", granularity_name(workload_.granularity)},
      {"granularity_means", granularity_means(workload_.granularity)},
      {"peer_means", peer_means(workload_.peer)},
      {"comm_time",
       calibrated ? "per op, the calibration's curve of its tier and collective (ring all-gather: all_gather, ring "
                    "reduce-scatter: reduce_scatter, quantized reduction: all_to_all): latency x messages / "
                    "calibrated messages + bytes_sent / bus_GBps, latency = half_bytes / bus_GBps (measured with "
                    "every rank sending at once: shared ports included); a collective the calibration has no "
                    "curve for keeps the topology's figures, a curve without half_bytes keeps messages x "
                    "latency_us; tiers' latency_s and bandwidth_s split each tier's busy time so"
                  : "per op: messages x latency + bytes_sent / (rank_bandwidth x efficiency); rank_bandwidth = "
                    "the pair rate bandwidth_GBps, or less where the ranks of one inner domain share the tier's "
                    "ports (ports x port_GBps / ranks_sharing_ports); ring and all-to-all both send "
                    "group_size-1 chunks in group_size-1 messages; tiers' latency_s and bandwidth_s split each "
                    "tier's busy time so"},
      {"overlap",
       "one compute and one communication stream, ops served one at a time in issue order, at the issue points "
       "the runtime uses (the schedule's micro-batch program): a unit's weight gather is issued at the acquire "
       "`prefetch` acquires earlier, a gradient reduction when its backward ends, and lending a gradient buffer "
       "first waits until at most `reductions_in_flight` reductions remain; the first gathers of a micro-batch "
       "and the optimizer-step phase (post-step weight gather, scalars, Adam, and the step reductions the last "
       "micro-batch's backward does not run: Schedule::bucket_ops runs ddp's and zero1's buckets and hsdp's and "
       "topo's unit by unit there) are never hidden; with a calibration, compute runs slower while an op is on the stream (overlap_slowdown_s): "
       "its tier's overlap_slowdown s (a tier without its own: the compute's), scaled by the bytes a second the op "
       "moves beside compute against the rate of the all-reduces s was timed beside (overlap_all_reduce_bytes at "
       "the tier's busy all-reduce curve) where the calibration records them"},
      {"flops", "model FLOPs a token = 6 x matmul params + 12 x layers x hidden x seq; recomputed FLOPs (full: each "
                "block's forward again; selective-op: the recomputed projections' forward) count in hfu, not mfu"},
      {"recompute", recompute_name(workload_.recompute)},
      {"recompute_means", recompute_means()},
      {"compute_time",
       calibrated_compute ? "per unit of the schedule: kernel_overhead x (FLOPs + matmuls x half_gflop) / peak_gflops "
                    "(the calibration's matmul curve: each matmul of F FLOPs takes (F + half_gflop) / peak_gflops; "
                    "a block has qkv, attention projection, 2 attention products and 2 (GELU) or 3 (SwiGLU) MLP "
                    "matmuls, the LM head 1); backward twice the forward"
                  : shape_ ? "FLOPs / (peak x compute_efficiency), per unit of the schedule; compute_efficiency by shape "
                             "(compute_shape)"
                           : "FLOPs / (peak x compute_efficiency), per unit of the schedule"},
      {"activations",
       "per block and token: 6 x hidden + 2 x kv_dim + (2 or 3 for SwiGLU) x ffn elements, plus heads x seq "
       "unless flash attention; with full recomputation only each block's input plus one block's set; with "
       "selective-op each block's input, the saved projections' outputs, the attention output and its fp32 "
       "log-sum-exp (heads), plus one block's set; plus the final norm's input and output and fp32 logits"},
      {"optimizer_time", calibrated_compute ? "OS shard elements x (24 + 2 x element bytes) / the calibration's optimizer_GBps"
                                    : "OS shard elements x (24 + 2 x element bytes) / HBM bandwidth"},
      {"memory", "GB = 1e9 bytes; total = weights + secondary + grads + optimizer + gathered + activations; "
                 "gathered = the most full-unit buffers alive at once over the micro-batch program (lifetime "
                 "replay) x the largest unit; communication (strata's host executor scratch) is not in the total"},
      {"left_out", left}};
  out.update(nlohmann::json(workload_));
  if (calibrated) out["calibration"] = calibration_->to_json();
  return out;
}

}  // namespace strata::plan
