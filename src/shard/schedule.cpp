#include "shard/schedule.hpp"

#include <algorithm>
#include <deque>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/plural.hpp"
#include "comm/composition/compose.hpp"
#include "model/model.hpp"

namespace strata::shard {

std::string_view kind_name(const ScheduledOp& op) {
  return collective_name(op.kind == Collective::AllToAll ? Collective::ReduceScatter : op.kind);
}
std::string_view algorithm_name(const ScheduledOp& op) { return op.kind == Collective::AllToAll ? "all-to-all" : "ring"; }
std::string_view to_string(When w) {
  switch (w) {
    case When::Forward: return "forward";
    case When::Backward: return "backward";
    case When::Step: return "step";
  }
  return "?";
}
std::string_view to_string(Composition c) { return c == Composition::Hierarchical ? "hierarchical" : "nccl"; }

Composition parse_composition(std::string_view text) {
  if (text == "flat-ring") return Composition::Nccl;  // the name before NCCL's model priced it
  for (Composition c : {Composition::Hierarchical, Composition::Nccl})
    if (text == to_string(c)) return c;
  throw Error(fmt::format("--collectives '{}': expected hierarchical (strata's per-tier ops) or nccl (one call over "
                          "the whole group, as NCCL runs FSDP and DeepSpeed, priced by NCCL's model; flat-ring is "
                          "its earlier name)",
                          text));
}

int Schedule::op_id(const ScheduledOp* op) const {
  int base = 0;
  for (const auto* ops : {&parts_.micro, &parts_.tensor_parallel, &parts_.bucket_ops, &parts_.step}) {
    if (!ops->empty() && op >= ops->data() && op < ops->data() + ops->size())
      return base + static_cast<int>(op - ops->data());
    base += static_cast<int>(ops->size());
  }
  return -1;
}

std::string_view to_string(Slot s) {
  switch (s) {
    case Slot::None: return "-";
    case Slot::WeightShard: return "W shard";
    case Slot::Secondary: return "secondary";
    case Slot::Gathered: return "gathered";
    case Slot::GradBuffer: return "grad buffer";
    case Slot::GradShard: return "G shard";
    case Slot::OptimizerGrad: return "OS grad";
    case Slot::Master: return "master";
    case Slot::Scalars: return "scalars";
  }
  return "?";
}

namespace {

// Each purpose's name, and what its ops read and write (the first op of a chain reads, the
// last writes; the executor's scratch carries what is between), in the enum's order.
struct PurposeInfo {
  Purpose purpose;
  std::string_view name;
  Slot reads, writes;
};
constexpr PurposeInfo kPurposes[] = {
    {Purpose::WeightGatherForward, "W gather (forward)", Slot::WeightShard, Slot::Gathered},
    {Purpose::WeightGatherBackward, "W gather (backward)", Slot::WeightShard, Slot::Gathered},  // or hpZ's Secondary
    {Purpose::GradReduce, "G reduce", Slot::GradBuffer, Slot::GradShard},
    {Purpose::StepGradReduce, "G -> OS reduce", Slot::GradShard, Slot::OptimizerGrad},
    {Purpose::StepGradGather, "OS -> G gather", Slot::OptimizerGrad, Slot::GradShard},
    {Purpose::ReplicaReduce, "replica reduce", Slot::OptimizerGrad, Slot::OptimizerGrad},
    {Purpose::ReplicaGather, "replica gather", Slot::OptimizerGrad, Slot::OptimizerGrad},
    {Purpose::WeightGatherStep, "W gather (after step)", Slot::Master, Slot::WeightShard},
    {Purpose::GradNormAllReduce, "grad-norm all-reduce", Slot::Scalars, Slot::Scalars},
    {Purpose::LossAllReduce, "loss all-reduce", Slot::Scalars, Slot::Scalars},  // with the stop flag
    {Purpose::TensorParallel, "tensor parallel", Slot::None, Slot::None},       // the model's activations
    {Purpose::TensorParallelScalars, "TP scalars", Slot::Scalars, Slot::Scalars},
};
static_assert(std::size(kPurposes) == static_cast<std::size_t>(Purpose::TensorParallelScalars) + 1 &&
              std::ranges::all_of(kPurposes, [](const PurposeInfo& p) { return &p - kPurposes == int(p.purpose); }));

std::pair<Slot, Slot> slots_of(Purpose p, bool secondary) {
  const PurposeInfo& info = kPurposes[static_cast<int>(p)];
  return {p == Purpose::WeightGatherBackward && secondary ? Slot::Secondary : info.reads, info.writes};
}

std::uint64_t aligned(std::uint64_t bytes, std::size_t align_bytes) {
  return (bytes + align_bytes - 1) / align_bytes * align_bytes;
}

// One level's op: a step of comm's composition (compose.hpp) with its traffic. Both
// algorithms send group_size - 1 chunks a rank: the ring forwards one chunk per step, the
// all-to-all sends each peer its chunk.
ScheduledOp level_op(When when, Purpose purpose, int unit, const comm::LevelStep& step, int group_size, int block) {
  const bool gather = step.kind == Collective::AllGather;
  ScheduledOp op{step, when, purpose};
  if (!is_quantized(step.wire)) op.block = 0;  // scales only where the wire has them
  op.unit = unit;
  op.group_size = group_size;
  const std::size_t chunk = gather ? step.elements_in : step.elements_out;
  op.messages = group_size - 1;
  op.bytes_sent = op.bytes_received = static_cast<std::size_t>(group_size - 1) * wire_bytes(step.wire, chunk, block);
  return op;
}

// The micro-batch program of schedule.hpp for events [0, last_event). has_chain[e]: the
// event has ops (a gather for an Acquire, a reduction for a GradsReady). backward_from: the
// first backward event where the program is cut into halves (Schedule::halves_program): no
// gather is prefetched across it, so no chain runs from one half into the other (-1: uncut).
MicroBatchProgram build_program(const std::vector<model::UnitEvent>& events, const std::vector<bool>& has_chain,
                                const ShardSpec& spec, bool weights_gathered, int last_event,
                                int backward_from = -1) {
  using K = model::UnitEvent;
  const bool training = last_event == static_cast<int>(events.size());
  const bool keep_forward = training && !spec.free_after_forward;
  MicroBatchProgram p;
  p.last_event = last_event;
  p.steps.resize(events.size() + 1);
  p.reads.assign(events.size(), -1);

  // Weight gathers: the gather for the j-th acquire is issued at acquire max(j - prefetch,
  // first of its half) and completes before its own; a Release gives back what its Acquire read.
  std::vector<int> acquires;
  for (int e = 0; e < last_event; ++e)
    if (events[e].kind == K::Acquire) acquires.push_back(e);
  std::size_t half_begins = 0;  // the first acquire of the half acquire j is in
  for (std::size_t j = 0; j < acquires.size(); ++j) {
    const int a = acquires[j];
    if (backward_from >= 0 && a >= backward_from && (j == 0 || acquires[j - 1] < backward_from)) half_begins = j;
    if (has_chain[a]) {
      const std::size_t prefetch = static_cast<std::size_t>(spec.prefetch);
      const int at = acquires[j >= half_begins + prefetch ? j - prefetch : half_begins];
      p.steps[at].issue.push_back(a);
      p.steps[a].complete.push_back(a);
      p.reads[a] = a;
    } else if (weights_gathered) {
      // Weights kept after forward: the backward reads the forward acquire's buffer.
      for (int f = a - 1; f >= 0; --f)
        if (events[f].kind == K::Acquire && events[f].unit == events[a].unit && has_chain[f]) {
          p.reads[a] = f;
          break;
        }
    }
  }
  for (int e = 0; e < last_event; ++e) {
    if (events[e].kind != K::Release) continue;
    int a = e - 1;
    while (a >= 0 && !(events[a].kind == K::Acquire && events[a].unit == events[e].unit &&
                       events[a].phase == events[e].phase))
      --a;
    if (a < 0 || p.reads[a] < 0) continue;
    if (keep_forward && events[e].phase == model::Phase::Forward) continue;
    p.steps[e].free.push_back(p.reads[a]);
  }
  if (!training) return p;

  // Gradient buffers: lent before the compute that first writes them (the one after the run
  // of acquires holding the unit's backward acquire, or else the last before its
  // GradsReady); each lend first completes the oldest reductions until at most
  // reductions_in_flight remain. A reduction is issued at its GradsReady.
  auto run_end = [&](int e) {
    while (e + 1 < last_event && events[e + 1].kind == K::Acquire) ++e;
    return e;
  };
  std::vector<int> lend_at(events.size(), -1);
  for (int g = 0; g < last_event; ++g) {
    if (events[g].kind != K::GradsReady || !has_chain[g]) continue;
    int at = -1;
    for (int e = g - 1; e >= 0 && at < 0; --e)
      if (events[e].kind == K::Acquire && events[e].unit == events[g].unit && events[e].phase == model::Phase::Backward)
        at = run_end(e);
    for (int e = g - 1; e >= 0 && at < 0; --e)
      if (events[e].kind == K::Acquire) at = run_end(e);
    if (at < 0) throw Error(fmt::format("schedule: no compute writes the gradient of unit {}", events[g].unit));
    lend_at[g] = at;
  }
  std::deque<int> pending;
  for (int e = 0; e < last_event; ++e) {
    bool lends = false;
    for (int g = 0; g < last_event; ++g)
      if (lend_at[g] == e) p.steps[e].lend.push_back(events[g].unit), lends = true;
    if (lends)
      while (pending.size() > static_cast<std::size_t>(spec.reductions_in_flight)) {
        p.steps[e].complete.push_back(pending.front());
        pending.pop_front();
      }
    if (events[e].kind == K::GradsReady && has_chain[e]) {
      p.steps[e].issue.push_back(e);
      pending.push_back(e);
    }
  }
  for (int g : pending) p.steps[last_event].complete.push_back(g);
  return p;
}

// A ring collective of comm::Communicator over the `t` ranks of level `level` (comm's padding
// rule), n elements a rank in: an all-reduce sends 2(t-1) chunks of ceil(n/t), an all-gather
// t-1 chunks of n, a reduce-scatter t-1 chunks of ceil(n/t). The TP ops and the step's scalars.
ScheduledOp ring_op(int level, int t, When when, Purpose purpose, Collective kind, std::size_t n, DType wire) {
  ScheduledOp op{{kind, level, wire}, when, purpose};
  op.group_size = t;
  const std::size_t chunk = kind == Collective::AllGather ? n : comm::chunk_count(n, t, 1);
  op.elements_in = n;
  op.elements_out = kind == Collective::AllReduce ? n : kind == Collective::AllGather ? n * t : chunk;
  op.messages = (kind == Collective::AllReduce ? 2 : 1) * (t - 1);
  op.bytes_sent = op.bytes_received = static_cast<std::size_t>(op.messages) * data_bytes(wire, chunk);
  return op;
}

// Schedule's construction, one method a phase; build() runs them in order, each reading what
// the ones before it made.
class ScheduleBuilder {
 public:
  // `padded`: each unit's padded size (Schedule::padded_numel).
  ScheduleBuilder(const UnitPlan& units, const ShardSpec& spec, const LevelSpec& levels,
                  const std::vector<std::size_t>& padded, Composition collectives)
      : units_(units),
        spec_(spec),
        levels_(levels),
        padded_(padded),
        flat_(collectives == Composition::Nccl),
        block_(spec.block_size) {}

  ScheduleParts build(const TensorParallelPlan& tp) && {
    add_micro_batch_ops();
    set_issue_points();
    add_step_reductions();
    add_scalar_ops();
    add_tensor_parallel_ops(tp);
    add_step_gather();
    set_slots();
    return std::move(parts_);
  }

 private:
  // The gathers and reductions of one micro-batch, in the order the model walks the units,
  // each naming the event it serves.
  void add_micro_batch_ops() {
    std::vector<ScheduledOp>& micro = parts_.micro;
    for (int event = 0; event < num_events(); ++event) {
      const model::UnitEvent& e = units_.events[event];
      const std::size_t first = micro.size();
      if (e.kind == model::UnitEvent::Acquire && levels_.weights > 0) {
        if (e.phase == model::Phase::Forward) {
          gather(micro, When::Forward, Purpose::WeightGatherForward, e.unit, padded_[e.unit], levels_.weights, 0,
                 spec_.weight_wire);
        } else if (spec_.free_after_forward) {
          int from = levels_.secondary > 0 ? levels_.secondary : levels_.weights;
          gather(micro, When::Backward, Purpose::WeightGatherBackward, e.unit, padded_[e.unit], from, 0,
                 spec_.weight_wire);
        }
      } else if (e.kind == model::UnitEvent::GradsReady) {
        reduce(micro, When::Backward, Purpose::GradReduce, e.unit, padded_[e.unit], 0, levels_.grads, spec_.grad_wire);
      }
      for (std::size_t i = first; i < micro.size(); ++i) micro[i].event = event;
    }
  }

  // The training and evaluation programs, and each micro-batch op's issue_event and complete_by.
  void set_issue_points() {
    const int n = num_events();
    std::vector<bool> has_chain(n, false);
    for (const ScheduledOp& op : parts_.micro) has_chain[op.event] = true;
    int forward_events = 0;
    while (forward_events < n && units_.events[forward_events].phase == model::Phase::Forward &&
           units_.events[forward_events].kind != model::UnitEvent::GradsReady)
      ++forward_events;
    parts_.training = build_program(units_.events, has_chain, spec_, levels_.weights > 0, n);
    parts_.eval = build_program(units_.events, has_chain, spec_, levels_.weights > 0, forward_events);
    parts_.forward_events = forward_events;
    // Weights gathered and kept from forward to backward would be a buffer held across the
    // halves by every micro-batch in flight: no halves then.
    if (levels_.weights == 0 || spec_.free_after_forward)
      parts_.halves = build_program(units_.events, has_chain, spec_, levels_.weights > 0, n, forward_events);
    for (int e = 0; e <= n; ++e) {
      for (int c : parts_.training.steps[e].issue)
        for (ScheduledOp& op : parts_.micro)
          if (op.event == c) op.issue_event = e;
      for (int c : parts_.training.steps[e].complete)
        for (ScheduledOp& op : parts_.micro)
          if (op.event == c) op.complete_by = e;
    }
  }

  // Replicated gradients are whole in the step's last micro-batch once backward is done with
  // their unit, so their step reduction runs there in buckets, each issued at its last
  // unit's GradsReady and done by the end of the micro-batch (DDP's overlap; earlier
  // micro-batches only accumulate, as under DDP's no_sync). Sharded gradients are whole only
  // after their per-micro-batch reductions: reduced in the step phase, unit by unit.
  void add_step_reductions() {
    parts_.last_training = parts_.training;
    parts_.last_halves = parts_.halves;
    if (levels_.grads == 0 && spec_.bucket_bytes > 0) {
      add_replicated_buckets();
    } else if (levels_.grads > 0 && levels_.grads < levels_.num_levels) {
      add_sharded_buckets();
    } else {
      for (int u = 0; u < static_cast<int>(padded_.size()); ++u)
        step_reduction(parts_.step, When::Step, u, padded_[u]);
    }
  }

  void add_replicated_buckets() {
    std::vector<std::vector<int>>& buckets = parts_.buckets;
    std::uint64_t filled = 0;
    std::vector<int> issue_at;  // per bucket: the GradsReady event of its last unit
    for (int event = 0; event < num_events(); ++event) {
      const model::UnitEvent& e = units_.events[event];
      if (e.kind != model::UnitEvent::GradsReady) continue;
      const std::uint64_t bytes = 4 * static_cast<std::uint64_t>(padded_[e.unit]);
      const std::uint64_t cap = buckets.size() == 1 ? std::min(spec_.first_bucket_bytes, spec_.bucket_bytes) : spec_.bucket_bytes;
      if (buckets.empty() || filled + bytes > cap) {
        buckets.emplace_back();
        issue_at.push_back(event);
        filled = 0;
      }
      buckets.back().push_back(e.unit);
      filled += bytes;
      issue_at.back() = event;
    }
    std::size_t bucketed = 0;
    for (const std::vector<int>& b : buckets) bucketed += b.size();
    if (bucketed != padded_.size())
      throw Error(fmt::format("schedule: the walk has {} GradsReady events for {} units", bucketed, padded_.size()));
    for (int b = 0; b < static_cast<int>(buckets.size()); ++b) {
      std::size_t padded = 0;
      for (int u : buckets[b]) padded += padded_[u];
      add_bucket(b, -1, padded, issue_at[b], issue_at[b]);
    }
  }

  // Sharded gradients that the step still reduces (over the OS levels, or across replicas:
  // hsdp, topo) are whole once the step's last micro-batch has reduced them. Each unit's
  // step reduction is a bucket of its own, issued right behind that reduction (the FIFO
  // communication thread runs it after) and done by the micro-batch's end: it overlaps
  // the rest of backward, as PyTorch's HYBRID_SHARD all-reduces each unit's gradient
  // across replicas in backward, instead of waiting for the step phase.
  void add_sharded_buckets() {
    const std::vector<ScheduledOp>& micro = parts_.micro;
    for (int event = 0; event < num_events(); ++event) {
      const model::UnitEvent& e = units_.events[event];
      if (e.kind != model::UnitEvent::GradsReady) continue;
      const auto reduction =
          std::find_if(micro.begin(), micro.end(), [&](const ScheduledOp& op) { return op.event == event; });
      if (reduction == micro.end())
        throw Error(fmt::format("schedule: unit {}'s gradients are sharded but nothing reduces them", e.unit));
      parts_.buckets.push_back({e.unit});
      add_bucket(static_cast<int>(parts_.buckets.size()) - 1, e.unit, padded_[e.unit], event, reduction->issue_event);
    }
  }

  // Bucket `bucket`'s step reduction in the last micro-batch: serving `event`, issued at
  // `issue`, done by the micro-batch's end.
  void add_bucket(int bucket, int unit, std::size_t padded, int event, int issue) {
    std::vector<ScheduledOp>& ops = parts_.bucket_ops;
    const std::size_t first = ops.size();
    step_reduction(ops, When::Backward, unit, padded);
    for (std::size_t i = first; i < ops.size(); ++i) {
      ScheduledOp& op = ops[i];
      op.bucket = bucket;
      op.event = event;
      op.issue_event = issue;
      op.complete_by = num_events();
    }
    // A bucket is issued behind a reduction (GradsReady: backward in either program).
    for (MicroBatchProgram* p : {&parts_.last_training, &parts_.last_halves}) {
      if (p->steps.empty()) continue;
      p->steps[issue].bucket_issue.push_back(bucket);
      p->steps[num_events()].bucket_complete.push_back(bucket);
    }
  }

  // Scalars are all-gathered level by level and summed in member order, so every rank gets
  // the same bits. The squared gradient norm needs one OS domain (it covers the model
  // once); the logged loss needs every rank, and carries each rank's stop request with it.
  void add_scalar_ops() {
    add_scalars(Purpose::GradNormAllReduce, levels_.optimizer, 1);
    add_scalars(Purpose::LossAllReduce, levels_.num_levels, 2);
  }

  void add_scalars(Purpose purpose, int levels, int values) {
    for (int t = 0; t < levels; ++t)
      parts_.step.push_back(ring_op(t, levels_.level_size[t], When::Step, purpose, Collective::AllGather,
                                    static_cast<std::size_t>(values), DType::F64));
  }

  // The model's TP collectives, and the grad norm's and the loss's sums over the TP group
  // (fp64 all-gathers of 1 and 2 values a rank).
  void add_tensor_parallel_ops(const TensorParallelPlan& tp) {
    if (tp.degree <= 1) return;
    for (const model::TensorParallelCall& c : tp.calls)
      parts_.tensor_parallel.push_back(ring_op(tp.level, tp.degree, c.backward ? When::Backward : When::Forward,
                                               Purpose::TensorParallel, c.kind, c.elements, c.wire));
    for (std::size_t values : {1, 2})
      parts_.step.push_back(ring_op(tp.level, tp.degree, When::Step, Purpose::TensorParallelScalars,
                                    Collective::AllGather, values, DType::F64));
  }

  // The updated OS shard gathered back to the W shard after the optimizer step.
  void add_step_gather() {
    for (int u = 0; u < static_cast<int>(padded_.size()); ++u)
      gather(parts_.step, When::Step, Purpose::WeightGatherStep, u, padded_[u], levels_.optimizer, levels_.weights,
             spec_.weight_wire);
  }

  void set_slots() {
    for (auto* ops : {&parts_.micro, &parts_.step, &parts_.bucket_ops})
      for (ScheduledOp& op : *ops) std::tie(op.reads, op.writes) = slots_of(op.purpose, levels_.secondary > 0);
  }

  // Ops on `padded` elements (a unit's, or a bucket's units' together): comm's composition
  // over the levels, one op per step.
  void add_level_ops(std::vector<ScheduledOp>& out, When when, Purpose purpose, int unit,
                     const std::vector<comm::LevelStep>& steps) const {
    for (const comm::LevelStep& step : steps)
      out.push_back(level_op(when, purpose, unit, step, levels_.level_size[step.level], block_));
  }

  // --collectives nccl: one call over levels [inner, outer] instead of a step per level,
  // booked on the outer one (as NCCL runs FSDP's and DeepSpeed's collectives).
  ScheduledOp flat_op(When when, Purpose purpose, Collective kind, int unit, int inner, int outer, DType wire,
                      std::size_t padded) const {
    const int group = levels_.degree(outer + 1) / levels_.degree(inner);
    comm::LevelStep step{kind, outer, wire, static_cast<std::size_t>(block_), 0, 0};
    const bool gathers = kind == Collective::AllGather;
    step.elements_in = padded / levels_.degree(gathers ? outer + 1 : inner);
    step.elements_out = gathers ? step.elements_in * group : step.elements_in / group;
    ScheduledOp op = level_op(when, purpose, unit, step, group, block_);
    op.levels_spanned = outer - inner + 1;
    return op;
  }

  // The levels [first, last] of [lo, hi) whose groups have more than one rank: a flat ring
  // spans only those (on one node the cluster level is one rank, and the ring never leaves
  // the node). Empty (first > last) when none has.
  std::pair<int, int> spanned_levels(int lo, int hi) const {
    int first = hi, last = lo - 1;
    for (int l = lo; l < hi; ++l)
      if (levels_.level_size[l] > 1) first = std::min(first, l), last = l;
    return {first, last};
  }

  // All-gather from sharded over `from` levels down to `to` levels.
  void gather(std::vector<ScheduledOp>& out, When when, Purpose purpose, int unit, std::size_t padded, int from,
              int to, DType wire) const {
    if (const auto [inner, outer] = spanned_levels(to, from); flat_ && outer > inner) {
      out.push_back(flat_op(when, purpose, Collective::AllGather, unit, inner, outer, wire, padded));
      return;
    }
    add_level_ops(out, when, purpose, unit, comm::all_gather_steps(levels_.level_size, padded, from, to, wire, block_));
  }

  // Reduce-scatter from `from` levels up to `to` levels; quantized wires by all-to-all.
  void reduce(std::vector<ScheduledOp>& out, When when, Purpose purpose, int unit, std::size_t padded, int from,
              int to, DType wire) const {
    const Collective kind =
        is_quantized(wire) ? Collective::AllToAll : Collective::ReduceScatter;
    if (const auto [inner, outer] = spanned_levels(from, to); flat_ && outer > inner) {
      out.push_back(flat_op(when, purpose, kind, unit, inner, outer, wire, padded));
      return;
    }
    add_level_ops(out, when, purpose, unit,
                  comm::reduce_scatter_steps(levels_.level_size, padded, from, to, kind, wire, block_));
  }

  // The step's reduction of the G slice down to the OS slice. Ranks outside the OS domain
  // hold the same OS slice: it is summed over them (hierarchical all-reduce: reduce-scatter
  // up the remaining levels, gather back down).
  void step_reduction(std::vector<ScheduledOp>& out, When when, int unit, std::size_t padded) const {
    const DType wire = spec_.step_grad_wire;
    reduce(out, when, Purpose::StepGradReduce, unit, padded, levels_.grads, levels_.optimizer, wire);
    reduce(out, when, Purpose::ReplicaReduce, unit, padded, levels_.optimizer, levels_.num_levels, wire);
    gather(out, when, Purpose::ReplicaGather, unit, padded, levels_.num_levels, levels_.optimizer, wire);
    if (spec_.step_grad_allreduce)
      gather(out, when, Purpose::StepGradGather, unit, padded, levels_.optimizer, levels_.grads, wire);
  }

  int num_events() const { return static_cast<int>(units_.events.size()); }

  const UnitPlan& units_;
  const ShardSpec& spec_;
  const LevelSpec& levels_;
  const std::vector<std::size_t>& padded_;
  const bool flat_;
  const int block_;
  ScheduleParts parts_;
};

}  // namespace

std::string_view to_string(Purpose p) { return kPurposes[static_cast<int>(p)].name; }

UnitPlan unit_plan(const model::ParamLayout& layout) {
  UnitPlan p;
  for (auto& u : layout.units()) {
    p.names.push_back(u.name);
    p.numel.push_back(u.numel);
  }
  p.events = model::unit_event_order(layout.config());
  return p;
}

UnitPlan stage_unit_plan(const model::ParamLayout& layout, const model::StageUnits& stage) {
  UnitPlan p;
  p.names = stage.names;
  for (int u : stage.layout_unit) p.numel.push_back(layout.units()[u].numel);
  p.events = stage.events;
  p.layout_unit = stage.layout_unit;
  return p;
}

TensorParallelPlan tensor_parallel_plan(const parallel::ParallelDims& dims, const model::ModelConfig& config, int batch,
                                        int seq, bool recompute, bool sequence_parallel) {
  const auto calls = model::tensor_parallel_calls(config, dims.tensor, batch, seq, recompute, sequence_parallel);
  if (dims.tensor == 1) return {};
  return {dims.tensor, dims.tensor_level, calls};
}

Schedule::Schedule(UnitPlan units, const topo::Topology& topology, const ShardSpec& spec, int accumulation_steps,
                   Composition collectives, const TensorParallelPlan& tp)
    : units_(std::move(units)),
      topology_(topology),
      spec_(spec),
      levels_(resolve(spec, topology)),
      accum_(accumulation_steps),
      collectives_(collectives),
      tp_degree_(tp.degree) {
  if (accumulation_steps <= 0)
    throw Error(fmt::format("train.grad_accum = {}: must be positive", accumulation_steps));
  const int world = world_size();
  const bool quantized = is_quantized(spec.weight_wire) || is_quantized(spec.grad_wire) ||
                         is_quantized(spec.step_grad_wire);
  // Every rank's chunk a whole number of 16-float (and quantization) blocks: comm's padding
  // rule with that granule.
  const std::size_t align = quantized ? std::lcm<std::size_t>(16, spec.block_size) : 16;
  for (std::size_t n : units_.numel) padded_.push_back(comm::chunk_count(n, world, align) * world);

  parts_ = ScheduleBuilder(units_, spec_, levels_, padded_, collectives).build(tp);
}

const MicroBatchProgram& Schedule::halves_program(bool last_of_step) const {
  if (parts_.halves.steps.empty())
    throw Error("shard.free_after_forward = false: a micro-batch's gathered weights kept from its forward to its "
                "backward cannot be cut into halves with other micro-batches in flight between them");
  return last_of_step ? parts_.last_halves : parts_.halves;
}

int Schedule::peak_buffers(const MicroBatchProgram& program) const {
  int live = 0, peak = 0;
  for (int e = 0; e <= program.last_event; ++e) {
    const EventStep& s = program.steps[e];
    for (int c : s.issue)
      if (units_.events[c].kind == model::UnitEvent::Acquire) peak = std::max(peak, ++live);
    for (int c : s.complete)
      if (units_.events[c].kind == model::UnitEvent::GradsReady) --live;
    for (std::size_t i = 0; i < s.lend.size(); ++i) peak = std::max(peak, ++live);
    live -= static_cast<int>(s.free.size());
  }
  return peak;
}

std::size_t Schedule::scratch_elements() const {
  std::size_t n = 0;
  for (auto* ops : {&parts_.micro, &parts_.step, &parts_.bucket_ops})
    for (const ScheduledOp& op : *ops)
      if (op.unit >= 0 || op.bucket >= 0) n = std::max({n, op.elements_in, op.elements_out});
  return n;
}

std::uint64_t scratch_bytes(std::size_t elements, int block_size, std::size_t align_bytes) {
  if (elements == 0) return 0;
  // Three wire buffers (room for fp32 data and the scales of the smallest blocks) and two
  // fp32 buffers: see the executor.
  const std::uint64_t data = aligned(4 * elements, align_bytes);
  return 3 * (data + aligned(4 * (elements / std::max(block_size, 1) + 1), align_bytes)) + 2 * data;
}

int Schedule::eval_tensor_parallel_ops() const {
  return static_cast<int>(std::count_if(parts_.tensor_parallel.begin(), parts_.tensor_parallel.end(),
                                        [](const ScheduledOp& op) { return op.when == When::Forward; }));
}

std::size_t Schedule::total_padded() const { return std::accumulate(padded_.begin(), padded_.end(), std::size_t{0}); }

Slice Schedule::slice(int unit, int rank, int levels) const {
  const std::size_t n = padded_.at(unit);
  std::size_t offset = 0;
  int stride = 1;  // ranks per domain below level t
  for (int t = 0; t < levels; ++t) {
    int digit = (rank / stride) % levels_.level_size[t];
    stride *= levels_.level_size[t];
    offset += static_cast<std::size_t>(digit) * (n / stride);
  }
  return {offset, n / levels_.degree(levels)};
}

std::vector<TierTraffic> Schedule::traffic_per_step() const {
  std::vector<TierTraffic> out;
  for (auto& t : topology_.tiers()) out.push_back({t.name});
  auto add = [&](const std::vector<ScheduledOp>& ops, std::uint64_t times) {
    for (auto& op : ops) {
      out[op.level].bytes_sent += times * op.bytes_sent;
      out[op.level].bytes_received += times * op.bytes_received;
      out[op.level].messages += times * op.messages;
    }
  };
  add(parts_.micro, accum_);
  add(parts_.tensor_parallel, accum_);
  add(parts_.bucket_ops, 1);
  add(parts_.step, 1);
  return out;
}

StateMemory Schedule::memory_per_rank(int compute_bytes, std::size_t align_bytes) const {
  if (compute_bytes != 2 && compute_bytes != 4)
    throw Error(fmt::format("memory_per_rank: compute_bytes = {}: expected 2 (bf16) or 4 (fp32)", compute_bytes));
  if (align_bytes == 0) throw Error("memory_per_rank: align_bytes = 0: must be positive");
  const LevelSpec& L = levels_;
  const auto held = [align_bytes](std::uint64_t bytes) { return aligned(bytes, align_bytes); };
  // A wire-format buffer is two: its data and, quantized, its scales.
  const auto wire = [&](std::size_t count) {
    return held(data_bytes(spec_.weight_wire, count)) +
           held(sizeof(float) * scale_count(spec_.weight_wire, count, spec_.block_size));
  };
  StateMemory m;
  std::size_t largest = 0;
  for (std::size_t u = 0; u < padded_.size(); ++u) {
    std::size_t n = padded_[u];
    largest = std::max(largest, n);
    m.weights += wire(n / L.degree(L.weights));
    if (L.secondary > 0) m.secondary += wire(n / L.degree(L.secondary));
    if (L.grads > 0) m.grads += held(compute_bytes * (n / L.degree(L.grads)));
    m.optimizer += 4 * held(4 * (n / L.degree(L.optimizer)));  // master, two moments, its gradient
  }
  // Replicated gradients: one buffer over every unit.
  if (L.grads == 0) m.grads = held(static_cast<std::uint64_t>(compute_bytes) * total_padded());
  // Full-unit buffers, from their lifetimes: the most alive at once over a training or an
  // evaluation micro-batch, each of the largest unit's size (one pool serves them all).
  m.gathered = held(static_cast<std::uint64_t>(compute_bytes) * largest) * static_cast<std::uint64_t>(pool_buffers());
  // Replicated weights whose wire is not the compute format are decoded once, whole.
  const bool compute_format = (spec_.weight_wire == DType::F32 && compute_bytes == 4) ||
                              (spec_.weight_wire == DType::BF16 && compute_bytes == 2);
  if (L.weights == 0 && !compute_format) m.gathered += held(static_cast<std::uint64_t>(compute_bytes) * total_padded());
  m.communication = scratch_bytes(scratch_elements(), spec_.block_size, align_bytes);
  return m;
}

int Schedule::pool_buffers() const {
  int peak = std::max({peak_buffers(parts_.training), peak_buffers(parts_.last_training), peak_buffers(parts_.eval)});
  if (!parts_.halves.steps.empty())
    peak = std::max({peak, peak_buffers(parts_.halves), peak_buffers(parts_.last_halves)});
  return peak;
}

static nlohmann::json op_json(const ScheduledOp& op, const topo::Topology& topology) {
  nlohmann::json j{{"when", to_string(op.when)},
                   {"purpose", to_string(op.purpose)},
                   {"kind", kind_name(op)},
                   {"algorithm", algorithm_name(op)},
                   {"unit", op.unit},
                   {"reads", to_string(op.reads)},
                   {"writes", to_string(op.writes)},
                   {"tier", topology.tier(op.level).name},
                   {"levels_spanned", op.levels_spanned},
                   {"group_size", op.group_size},
                   {"wire", dtype_name(op.wire)},
                   {"elements_in", op.elements_in},
                   {"elements_out", op.elements_out},
                   {"bytes_sent", op.bytes_sent},
                   {"bytes_received", op.bytes_received},
                   {"messages", op.messages}};
  if (op.bucket >= 0) j["bucket"] = op.bucket;
  // Only micro-batch and bucket ops have issue points (events of the program); step ops run
  // in order.
  if (op.issue_event >= 0) {
    j["event"] = op.event;
    j["issue_event"] = op.issue_event;
    j["complete_by"] = op.complete_by;
  }
  return j;
}

nlohmann::json Schedule::to_json() const {
  nlohmann::json j;
  j["spec"] = spec_.to_json();
  j["world_size"] = world_size();
  j["tensor_parallel"] = tp_degree_;
  j["accumulation_steps"] = accum_;
  j["collectives"] = to_string(collectives_);
  // The program's parameters (what decides the issue points of the ops below and the
  // gathered memory) and its events, which an op's event, issue_event and complete_by index.
  nlohmann::json events = nlohmann::json::array();
  for (const model::UnitEvent& e : units_.events) {
    using K = model::UnitEvent::Kind;
    const char* kind = e.kind == K::Acquire ? "acquire" : e.kind == K::Release ? "release" : "grads_ready";
    nlohmann::json ej{{"kind", kind}, {"unit", e.unit}};
    if (e.kind != K::GradsReady) ej["phase"] = e.phase == model::Phase::Forward ? "forward" : "backward";
    events.push_back(ej);
  }
  j["program"] = {{"prefetch", spec_.prefetch},
                  {"reductions_in_flight", spec_.reductions_in_flight},
                  {"free_after_forward", spec_.free_after_forward},
                  {"bucket_bytes", spec_.bucket_bytes},
                  {"first_bucket_bytes", spec_.first_bucket_bytes},
                  {"peak_buffers", peak_buffers(parts_.training)},
                  {"events", events}};
  nlohmann::json buckets = nlohmann::json::array();
  for (const std::vector<int>& b : parts_.buckets) {
    nlohmann::json names = nlohmann::json::array();
    for (int u : b) names.push_back(units_.names[u]);
    buckets.push_back(names);
  }
  j["program"]["buckets"] = buckets;
  for (const auto& [key, ops] : {std::pair{"micro_batch_ops", &parts_.micro}, {"bucket_ops", &parts_.bucket_ops},
                                  {"tensor_parallel_ops", &parts_.tensor_parallel}, {"step_ops", &parts_.step}}) {
    j[key] = nlohmann::json::array();
    for (const ScheduledOp& op : *ops) j[key].push_back(op_json(op, topology_));
  }
  nlohmann::json per_tier = nlohmann::json::object();
  for (auto& t : traffic_per_step())
    per_tier[t.tier] = {{"bytes_sent", t.bytes_sent}, {"bytes_received", t.bytes_received}, {"messages", t.messages}};
  j["per_step"] = per_tier;
  StateMemory m = memory_per_rank();
  j["memory_bytes"] = {{"weights", m.weights},     {"secondary", m.secondary}, {"grads", m.grads},
                       {"optimizer", m.optimizer}, {"gathered", m.gathered}, {"communication", m.communication}};
  return j;
}

std::string op_section(std::string_view title, const std::vector<OpRow>& rows) {
  std::string s = fmt::format("{}\n  {:<10} {:<22} {:<12} {:<14} {:<13} {:>5} {:<5} {:>12} {:>5}\n", title, "when",
                              "purpose", "unit", "collective", "tier", "group", "wire", "bytes sent", "msgs");
  for (const OpRow& r : rows)
    s += fmt::format("  {:<10} {:<22} {:<12} {:<14} {:<13} {:>5} {:<5} {:>12} {:>5}\n", r.when, r.purpose, r.unit,
                     r.collective, r.tier, r.group_size, r.wire, r.bytes_sent, r.messages);
  if (rows.empty()) s += "  (none)\n";
  return s;
}

std::string tier_section(std::string_view title, const std::vector<TierRow>& rows) {
  std::string s =
      fmt::format("{}\n  {:<11} {:>14} {:>14} {:>9}\n", title, "tier", "bytes sent", "bytes recv", "messages");
  for (const TierRow& t : rows)
    s += fmt::format("  {:<11} {:>14} {:>14} {:>9}\n", t.tier, t.bytes_sent, t.bytes_received, t.messages);
  return s;
}

std::string Schedule::table() const {
  // Under TP the sharding's ranks are one TP index's: the run has tp x as many.
  const std::string ranks =
      tp_degree_ == 1 ? count_of(world_size(), "rank")
                      : fmt::format("{} ranks: tp {} x {} data-parallel", tp_degree_ * world_size(), tp_degree_,
                                    world_size());
  std::string s = fmt::format("schedule: strategy {} on {} of '{}', {} a step, {} collectives\n", spec_.preset,
                              ranks, topology_.name(),
                              count_of(accum_, "micro-batch", "micro-batches"), to_string(collectives_));
  auto unit_name = [&](const ScheduledOp& op) {
    if (op.unit >= 0) return units_.names[op.unit];
    return op.bucket >= 0 ? fmt::format("bucket {}", op.bucket) : std::string("-");
  };
  // A flat op names the tiers its ring spans, innermost..outermost.
  auto tier_name = [&](const ScheduledOp& op) {
    const std::string& outer = topology_.tier(op.level).name;
    if (op.levels_spanned == 1) return outer;
    return fmt::format("{}..{}", topology_.tier(op.level - op.levels_spanned + 1).name, outer);
  };
  auto section = [&](const char* title, const std::vector<ScheduledOp>& ops) {
    std::vector<OpRow> rows;
    for (auto& op : ops)
      rows.push_back({std::string(to_string(op.when)), std::string(to_string(op.purpose)), unit_name(op),
                      std::string(kind_name(op)), tier_name(op), op.group_size, std::string(dtype_name(op.wire)),
                      op.bytes_sent, static_cast<std::uint64_t>(op.messages)});
    s += op_section(title, rows);
  };
  section("per micro-batch:", parts_.micro);
  if (!parts_.buckets.empty() && levels_.grads > 0) {
    section("per optimizer step, in the last micro-batch's backward (each unit's right behind its gradient reduction):",
            parts_.bucket_ops);
  } else if (!parts_.buckets.empty()) {
    s += fmt::format("buckets of at most {} B of gradient (the first {} B), in the order backward finishes them:\n",
                     spec_.bucket_bytes, std::min(spec_.first_bucket_bytes, spec_.bucket_bytes));
    for (std::size_t b = 0; b < parts_.buckets.size(); ++b) {
      std::vector<std::string> names;
      for (int u : parts_.buckets[b]) names.push_back(units_.names[u]);
      s += fmt::format("  bucket {}: {}\n", b, fmt::join(names, " "));
    }
    section("per optimizer step, in the last micro-batch's backward (each bucket once its last unit is done):",
            parts_.bucket_ops);
  }
  if (!parts_.tensor_parallel.empty())
    section("per micro-batch, tensor parallel (in the model's order, on the critical path):", parts_.tensor_parallel);
  section("per optimizer step:", parts_.step);
  std::vector<TierRow> tiers;
  for (auto& t : traffic_per_step())
    tiers.push_back({t.tier, double(t.bytes_sent), double(t.bytes_received), double(t.messages)});
  s += tier_section("per step, per rank, by tier:", tiers);
  StateMemory m = memory_per_rank();
  s += fmt::format(
      "memory per rank: weights {} B, secondary {} B, grads {} B, optimizer {} B, gathered {} B, communication {} B\n",
      m.weights, m.secondary, m.grads, m.optimizer, m.gathered, m.communication);
  return s;
}

std::vector<ArenaRun> optimizer_runs(const Schedule& schedule, const model::ParamLayout& layout, int rank) {
  if (schedule.units().layout_unit.empty() && layout.units().size() != static_cast<std::size_t>(schedule.num_units()))
    throw Error(fmt::format("shard: the layout has {} units, the schedule {}", layout.units().size(),
                            schedule.num_units()));
  std::vector<ArenaRun> runs;
  const int levels = schedule.levels().optimizer;
  for (int u = 0; u < schedule.num_units(); ++u) {
    const Slice o = schedule.slice(u, rank, levels);
    const std::size_t numel = schedule.units().numel[u];
    if (o.offset >= numel) continue;  // all padding
    const std::size_t begin = layout.units()[schedule.units().layout_unit_of(u)].offset + o.offset;
    runs.push_back({u, begin, begin + std::min(o.count, numel - o.offset)});
  }
  return runs;
}

bool saves_optimizer_state(const Schedule& schedule, int rank) {
  return rank < schedule.levels().degree(schedule.levels().optimizer);
}

}  // namespace strata::shard
