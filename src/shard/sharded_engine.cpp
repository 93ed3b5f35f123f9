#include "shard/sharded_engine.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "comm/runtime/agree.hpp"
#include "comm/runtime/flight.hpp"
#include "model/init.hpp"
#include "optim/adamw.hpp"
#include "shard/unit_state.hpp"

namespace strata::shard {

namespace {

// A slice of a unit's padded positions, initialised on the host: the unit's part from the
// model's initialiser, its padding zero.
void init_unit_slice(const model::ParamLayout& layout, int unit, Slice slice, float* out, std::uint64_t seed) {
  const model::UnitInfo& u = layout.units()[unit];
  const std::size_t real = slice.offset < u.numel ? std::min(slice.count, u.numel - slice.offset) : 0;
  const std::size_t begin = u.offset + slice.offset;
  if (real > 0) model::init_params_range(layout, begin, begin + real, out, seed);
  std::fill(out + real, out + slice.count, 0.f);
}

model::TensorParallel model_split(const std::optional<TensorParallelism>& tp, int world_rank,
                                  model::TensorParallelGroup* group) {
  if (!tp) return {};
  return {{tp->dims.tensor, tp->dims.tensor_rank(world_rank)}, group, tp->sequence_parallel};
}

// The models on `device` (one a micro-batch in flight), made once the device has set aside
// everything the engine will hold. Tensor parallelism's model all-reduces through the engine
// and computes with the host's kernels: the host only.
std::vector<std::unique_ptr<model::Model>> reserve_and_make_models(const Schedule& schedule, device::Device& device,
                                                                   const model::ModelConfig& config, int batch,
                                                                   int seq, bool recompute, Precision precision,
                                                                   const model::TensorParallel& split, int in_flight,
                                                                   const std::optional<PipelineStage>& stage) {
  if (split.split.size > 1 && (!device.host_visible() || precision != Precision::F32))
    throw Error(fmt::format("--tp {}: tensor parallelism computes on the cpu in fp32 only, not on the {} device in {} "
                            "(train.device, train.precision)",
                            split.split.size, device.name(), precision_name(precision)));
  // A stage's model is the host's StageModel (model/model.hpp).
  if (stage && (!device.host_visible() || precision != Precision::F32))
    throw Error(fmt::format("--pp {}: a pipeline stage computes on the cpu in fp32 only, not on the {} device in {} "
                            "(train.device, train.precision)",
                            stage->dims.pipeline, device.name(), precision_name(precision)));
  if (in_flight < 1) throw Error(fmt::format("shard: {} micro-batches in flight: needs at least 1", in_flight));
  device.reserve(ShardedEngine::device_bytes(schedule, device, config, batch, seq, recompute, precision, in_flight));
  std::vector<std::unique_ptr<model::Model>> models;
  for (int i = 0; i < in_flight; ++i)
    if (stage)
      models.push_back(std::make_unique<model::StageWalk>(config, stage->range, stage->dims.pipeline, batch, seq,
                                                          recompute, split));
    else
      models.push_back(split.split.size > 1 ? model::make_model(config, batch, seq, recompute, device.kernels(), split)
                                            : device.make_model(config, batch, seq, recompute, precision));
  return models;
}

// What the sharding runs over: the data-parallel topology under TP or a pipeline, else the
// physical one; a pipeline stage's units, else the whole model's.
Schedule schedule_of(const model::ModelConfig& config, int batch, int seq, const comm::Context& ctx,
                     const ShardSpec& spec, int accumulation_steps, bool recompute,
                     const std::optional<TensorParallelism>& tp, const std::optional<PipelineStage>& stage,
                     const model::StageUnits& stage_units) {
  if (stage) {
    if (!stage->schedule || stage->schedule->units().layout_unit != stage_units.layout_unit ||
        stage->schedule->accumulation_steps() != accumulation_steps || stage->schedule->spec().preset != spec.preset)
      throw Error("shard: a pipeline stage's engine needs the stage's schedule of its units, spec and micro-batches");
    return *stage->schedule;
  }
  return Schedule(model::ParamLayout(config, model_split(tp, ctx.world_rank(), nullptr).split),
                  tp ? tp->dims.data_parallel_topology(ctx.topology()) : ctx.topology(), spec, accumulation_steps,
                  tp ? tensor_parallel_plan(tp->dims, config, batch, seq, recompute, tp->sequence_parallel)
                     : TensorParallelPlan{});
}

}  // namespace

LevelCollectives mpi_levels(comm::TierComms& comms) {
  std::vector<comm::Collectives*> levels;
  for (int t = 0; t < comms.num_tiers(); ++t) levels.push_back(t == 0 ? &comms.within(0) : &comms.across(t));
  return {levels, levels};
}

std::uint64_t ShardedEngine::device_bytes(const Schedule& schedule, const device::Device& device,
                                          const model::ModelConfig& config, int batch, int seq, bool recompute,
                                          Precision precision, int in_flight) {
  // The runtime's buffers are fp32 (4 bytes an element) whatever the products read.
  return schedule.memory_per_rank(4, device::kPoolAlignBytes).total() +
         static_cast<std::uint64_t>(in_flight) * device.model_bytes(config, batch, seq, recompute, precision);
}

// ---- Construction ------------------------------------------------------------------------

ShardedEngine::ShardedEngine(const model::ModelConfig& config, int batch, int seq, comm::Context& ctx,
                             LevelCollectives levels, const ShardSpec& spec, int accumulation_steps,
                             std::uint64_t seed, device::Device& device, bool recompute,
                             const std::optional<TensorParallelism>& tp, Precision precision, int in_flight,
                             const PipelineStage* stage)
    : device_(device),
      stage_(stage ? std::optional<PipelineStage>(*stage) : std::nullopt),
      stage_units_(stage ? model::stage_units(
                                   model::ParamLayout(config, model_split(tp, ctx.world_rank(), nullptr).split),
                                   stage->range, stage->dims.pipeline)
                         : model::StageUnits{}),
      schedule_(schedule_of(config, batch, seq, ctx, spec, accumulation_steps, recompute, tp, stage_, stage_units_)),
      models_(reserve_and_make_models(schedule_, device, config, batch, seq, recompute, precision,
                                      model_split(tp, ctx.world_rank(), this), in_flight, stage_)),
      ctx_(ctx),
      dims_(tp ? tp->dims : stage ? stage->dims : parallel::ParallelDims::data_parallel(ctx.topology())),
      rank_(ctx.world_rank()),
      dp_rank_(dims_.data_parallel_rank(rank_)),
      tp_group_(tp ? tp->group : nullptr),
      executor_(std::move(levels), schedule_.scratch_elements(), spec.block_size, device),
      replicated_params_(device),
      replicated_grads_(device) {
  const LevelSpec& L = schedule_.levels();
  const model::ParamLayout& layout = models_.front()->layout();
  for (const auto* given : {&executor_.levels().device, &executor_.levels().host})
    if (static_cast<int>(given->size()) < L.num_levels)
      throw Error(fmt::format("shard: {} collectives for {} levels given, the schedule runs over {}",
                              given == &executor_.levels().device ? "device" : "host", given->size(), L.num_levels));
  if (tp && (!tp_group_ || tp_group_->size() != dims_.tensor))
    throw Error(fmt::format("shard: --tp {} needs a TP group of that many ranks", dims_.tensor));
  if (spec.step_grad_allreduce)
    throw Error("shard.step_grad_allreduce: models ZeRO-topo's published cross-node all-reduce for the planner; "
                "the runtime reduces gradient slices straight to the optimizer slice instead");

  std::size_t padded_total = 0, largest = 0;
  for (int u = 0; u < schedule_.num_units(); ++u) {
    auto U = std::make_unique<Unit>(device_);
    U->index = u;
    const int lu = schedule_.units().layout_unit_of(u);
    U->numel = layout.units()[lu].numel;
    U->padded = schedule_.padded_numel(u);
    U->arena_offset = layout.units()[lu].offset;
    U->padded_offset = padded_total;
    padded_total += U->padded;
    largest = std::max(largest, U->padded);
    U->w = schedule_.slice(u, dp_rank_, L.weights);
    U->g = schedule_.slice(u, dp_rank_, L.grads);
    U->o = schedule_.slice(u, dp_rank_, L.optimizer);
    U->weights.reset(spec.weight_wire, spec.block_size, U->w.count);
    if (L.secondary > 0) {
      U->s = schedule_.slice(u, dp_rank_, L.secondary);
      U->secondary.reset(spec.weight_wire, spec.block_size, U->s.count);
    }
    if (L.grads > 0) U->grad_accum.resize(U->g.count);
    U->master.resize(U->o.count);
    U->exp_avg.resize(U->o.count);
    U->exp_avg_sq.resize(U->o.count);
    U->os_grad.resize(U->o.count);
    for (Purpose p : {Purpose::StepGradReduce, Purpose::ReplicaReduce, Purpose::ReplicaGather})
      for (auto* op : ops_for(schedule_.step_ops(), p, u)) U->step_reduce.push_back(op);
    U->weight_step = ops_for(schedule_.step_ops(), Purpose::WeightGatherStep, u);
    units_.push_back(std::move(U));
  }
  if (L.weights == 0 && spec.weight_wire != DType::F32) replicated_params_.resize(padded_total);
  if (L.grads == 0) replicated_grads_.resize(padded_total);
  // The pool of full-unit buffers, whole before the first micro-batch: no step allocates.
  for (int b = 0; b < schedule_.pool_buffers(); ++b) {
    pool_.emplace_back(device_, largest);
    free_buffers_.push_back(pool_.back().data());
  }

  const std::size_t events = schedule_.units().events.size();
  chains_.resize(events);
  for (const ScheduledOp& op : schedule_.micro_batch_ops()) chains_[op.event].push_back(&op);
  work_.resize(events);
  bucket_chains_.resize(schedule_.buckets().size());
  for (const ScheduledOp& op : schedule_.bucket_ops()) bucket_chains_[op.bucket].push_back(&op);
  bucket_work_.resize(bucket_chains_.size());
  gathered_.assign(events, nullptr);
  reducing_.assign(events, nullptr);
  grad_buffer_.assign(units_.size(), nullptr);
  forward_traces_.resize(models_.size());

  // The single-process trainer's initial weights, drawn on the host only for the slices this
  // rank holds (no rank ever builds the whole model) and copied to the device. The master
  // (OS) slice feeds W by the post-step gather; the secondary slice is drawn too, so it is
  // whole before the first forward (encoded on the device from a pool buffer).
  std::vector<float> initial;
  for (auto& U : units_) {
    initial.resize(U->o.count);
    init_unit_slice(layout, schedule_.units().layout_unit_of(U->index), U->o, initial.data(), seed);
    device_.from_host(U->master.data(), initial.data(), sizeof(float) * U->o.count);
    if (L.secondary > 0) {
      initial.resize(U->s.count);
      init_unit_slice(layout, schedule_.units().layout_unit_of(U->index), U->s, initial.data(), seed);
      float* staged = borrow_full();
      device_.from_host(staged, initial.data(), sizeof(float) * U->s.count);
      U->secondary.encode(staged, 0, U->s.count);
      give_back(staged);
    }
  }
  refresh_weights_from_master();
}

ShardedEngine::~ShardedEngine() {
  // Let every collective that reads or writes our buffers finish before they go away.
  for (comm::Work& w : work_) w = comm::Work();
  for (comm::Work& w : bucket_work_) w = comm::Work();
}

Chain ShardedEngine::ops_for(const std::vector<ScheduledOp>& ops, Purpose purpose, int unit) const {
  Chain out;
  for (auto& op : ops)
    if (op.purpose == purpose && op.unit == unit) out.push_back(&op);
  return out;
}

std::uint64_t ShardedEngine::record_issue(const Chain& ops, const std::vector<comm::Collectives*>& levels) const {
  comm::FlightRecorder& flight = comm::flight_recorder();
  if (!flight.enabled() || ops.empty()) return 0;
  const std::uint64_t first = flight.issue(flight_op(*ops.front(), levels.at(ops.front()->level)->name()));
  for (std::size_t i = 1; i < ops.size(); ++i) flight.issue(flight_op(*ops[i], levels.at(ops[i]->level)->name()));
  return first;
}

template <class F>
comm::Work ShardedEngine::run_chain(const char* name, const Chain& ops, F body) {
  const std::uint64_t seq = record_issue(ops, executor_.levels().device);
  return ctx_.run(name, [this, seq, body = std::move(body)] {
    omp_set_num_threads(1);  // the compute thread owns the cores
    executor_.record_next_chain(seq);
    body();
  });
}

comm::FlightOp ShardedEngine::flight_op(const ScheduledOp& op, std::string_view group) const {
  return {schedule_.op_id(&op),
          kind_name(op).data(),  // the schedule's names are literals
          to_string(op.purpose).data(),
          static_cast<std::int16_t>(op.level),
          group,
          op.bytes_sent + op.bytes_received,
          op.unit,
          op.when == When::Step ? -1 : micro_batch_,
          steps_};
}

std::uint64_t ShardedEngine::record_tensor_parallel(const ScheduledOp& op) const {
  comm::FlightRecorder& flight = comm::flight_recorder();
  if (!flight.enabled()) return 0;
  const std::uint64_t seq = flight.issue(flight_op(op, tp_group_->name()));
  flight.start(seq);
  return seq;
}

// ---- The micro-batch program ---------------------------------------------------------------

int ShardedEngine::advance(model::UnitEvent::Kind kind, int unit, model::Phase phase) {
  const std::vector<model::UnitEvent>& events = schedule_.units().events;
  const int e = next_event_;
  const bool phase_matters = kind != model::UnitEvent::GradsReady;
  if (!program_ || e >= program_->last_event || events[e].kind != kind || events[e].unit != unit ||
      (phase_matters && events[e].phase != phase))
    throw Error(fmt::format("shard: the model's walk left the schedule at event {} (unit {})", e, unit));
  ++next_event_;
  run_event(e);
  return e;
}

void ShardedEngine::run_event(int event) {
  const EventStep& step = program_->steps[event];
  for (int c : step.issue) issue(c);
  for (int b : step.bucket_issue) issue_bucket(b);
  for (int c : step.complete) complete(c);
  for (int b : step.bucket_complete) wait(bucket_work_[b]);
  for (int u : step.lend) {
    float* b = borrow_full();
    device_.zero(b, sizeof(float) * units_[u]->padded);
    grad_buffer_[u] = b;
  }
  for (int a : step.free) {
    give_back(gathered_[a]);
    gathered_[a] = nullptr;
  }
}

void ShardedEngine::issue(int chain) {
  const model::UnitEvent& ev = schedule_.units().events[chain];
  Unit& U = *units_[ev.unit];
  const Chain& ops = chains_[chain];
  if (ev.kind == model::UnitEvent::Acquire) {
    const comm::CBuf src = (ops.front()->reads == Slot::Secondary ? U.secondary : U.weights).cview();
    // hpZ: a forward gather also refreshes this rank's secondary slice.
    const bool keep_secondary = ev.phase == model::Phase::Forward && schedule_.levels().secondary > 0;
    float* full = gathered_[chain] = borrow_full();
    work_[chain] = run_chain("shard:weight_gather", ops, [this, &U, &ops, src, full, keep_secondary] {
      const comm::CBuf got = executor_.gather(ops, src);
      if (keep_secondary) U.secondary.copy_from(comm::wire_chunk(got, U.s.offset, U.s.count));
      decode(device_, got, full);
    });
  } else {
    float* full = reducing_[chain] = grad_buffer_[ev.unit];
    grad_buffer_[ev.unit] = nullptr;
    work_[chain] = run_chain("shard:grad_reduce", ops, [this, &U, &ops, full] {
      device_.add(U.grad_accum.data(), executor_.reduce(ops, full), U.g.count);
    });
  }
}

// The bucket's units' replicated gradients, reduced straight into their OS slices' gradient;
// or, gradients sharded, its one unit's accumulated G slice, reduced as the step phase would.
void ShardedEngine::issue_bucket(int bucket) {
  if (schedule_.levels().grads > 0) {
    Unit* U = units_[schedule_.buckets()[bucket].front()].get();
    bucket_work_[bucket] = run_chain("shard:step_reduce", bucket_chains_[bucket], [this, U, bucket] {
      reduce_for_step(*U, bucket_chains_[bucket], U->grad_accum.data());
    });
    return;
  }
  std::vector<OpExecutor::BucketPart> parts;
  for (int u : schedule_.buckets()[bucket]) {
    Unit& U = *units_[u];
    parts.push_back({replicated_grads_.data() + U.padded_offset, U.padded, U.os_grad.data()});
  }
  bucket_work_[bucket] =
      run_chain("shard:bucket_reduce", bucket_chains_[bucket], [this, bucket, parts = std::move(parts)] {
        executor_.reduce_bucket(bucket_chains_[bucket], parts);
      });
}

void ShardedEngine::reduce_for_step(Unit& U, const Chain& ops, const float* input) {
  device_.copy(U.os_grad.data(), executor_.reduce(ops, input), sizeof(float) * U.o.count);
}

void ShardedEngine::complete(int chain) {
  wait(work_[chain]);
  if (reducing_[chain]) {
    give_back(reducing_[chain]);
    reducing_[chain] = nullptr;
  }
}

void ShardedEngine::wait(comm::Work& work) {
  auto t0 = std::chrono::steady_clock::now();
  work.wait();
  exposed_s_ += seconds_since(t0);
}

float* ShardedEngine::borrow_full() {
  if (free_buffers_.empty())
    throw Error(fmt::format("shard: all {} full-unit buffers of the pool (the schedule's lifetime replay) are lent",
                            pool_.size()));
  float* b = free_buffers_.back();
  free_buffers_.pop_back();
  peak_lent_ = std::max(peak_lent_, static_cast<int>(pool_.size() - free_buffers_.size()));
  return b;
}

void ShardedEngine::give_back(float* buffer) { free_buffers_.push_back(buffer); }

// ---- model::UnitAccess -----------------------------------------------------------------------

const float* ShardedEngine::acquire(int unit, model::Phase phase) {
  const int e = advance(model::UnitEvent::Acquire, unit, phase);
  const int slot = program_->reads[e];
  if (slot >= 0) return gathered_[slot];
  const Unit& U = *units_[unit];
  return replicated_params_.size() ? replicated_params_.data() + U.padded_offset
                                   : reinterpret_cast<const float*>(U.weights.data.data());
}

void ShardedEngine::release(int unit, model::Phase phase) { advance(model::UnitEvent::Release, unit, phase); }

float* ShardedEngine::grads(int unit) {
  if (schedule_.levels().grads == 0) return replicated_grads_.data() + units_[unit]->padded_offset;
  if (!grad_buffer_[unit])
    throw Error(fmt::format("shard: the schedule lends no gradient buffer for unit {} here", unit));
  return grad_buffer_[unit];
}

void ShardedEngine::grads_ready(int unit) { advance(model::UnitEvent::GradsReady, unit, model::Phase::Backward); }

// ---- Steps -----------------------------------------------------------------------------------

void ShardedEngine::begin_walk(const MicroBatchProgram& program, int first_event, int first_tp_op) {
  program_ = &program;
  next_event_ = first_event;
  peak_lent_ = 0;
  next_tp_op_ = first_tp_op;
}

bool ShardedEngine::next_training_micro_batch() {
  micro_batch_ = micro_batches_in_step_;
  return ++micro_batches_in_step_ >= schedule_.accumulation_steps();
}

model::StageWalk& ShardedEngine::stage_walk(int slot) {
  if (!stage_) throw Error("shard: stage_walk: the engine runs the whole model, not a pipeline stage");
  return static_cast<model::StageWalk&>(slot_model(slot));
}

bool ShardedEngine::is_tied_copy(int u) const {
  return stage_ && stage_units_.tied_copy && u == stage_units_.tied_unit;
}

model::Model& ShardedEngine::slot_model(int slot) {
  if (slot < 0 || slot >= static_cast<int>(models_.size()))
    throw Error(fmt::format("shard: activation slot {} of {} micro-batches in flight", slot, models_.size()));
  return *models_[slot];
}

float ShardedEngine::micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) {
  auto t0 = std::chrono::steady_clock::now();
  comm::flight_recorder().dump_if_signalled();  // SIGUSR2: a safe point, between micro-batches
  executor_.take_trace();  // what ran between micro-batches (scalars, weight refreshes)
  const bool last_of_step = next_training_micro_batch();
  begin_walk(last_of_step ? schedule_.last_micro_batch_program() : schedule_.training_program(), 0, 0);
  float loss = models_.front()->forward_backward(*this, tokens, targets, grad_scale);
  check_tensor_parallel_done(static_cast<int>(schedule_.tensor_parallel_ops().size()));
  run_event(program_->last_event);  // the reductions still in flight
  micro_trace_ = executor_.take_trace();
  wall_s_ += seconds_since(t0);
  return loss;
}

// The forward half's chains all complete within it (each gather before its acquire): at its
// end nothing of this micro-batch is in flight but the slot's activations.
float ShardedEngine::forward_half(int slot, const std::int32_t* tokens, const std::int32_t* targets,
                                  float grad_scale) {
  auto t0 = std::chrono::steady_clock::now();
  model::Model& model = slot_model(slot);
  comm::flight_recorder().dump_if_signalled();
  executor_.take_trace();
  micro_batch_ = forwards_in_step_++;
  begin_walk(schedule_.halves_program(false), 0, 0);
  const float loss = model.forward_training(*this, tokens, targets, grad_scale);
  check_tensor_parallel_done(schedule_.eval_tensor_parallel_ops());
  if (next_event_ != schedule_.forward_events())
    throw Error(fmt::format("shard: the model's forward ended at event {}, the schedule's at {}", next_event_,
                            schedule_.forward_events()));
  forward_traces_[slot] = executor_.take_trace();
  wall_s_ += seconds_since(t0);
  return loss;
}

void ShardedEngine::backward_half(int slot) {
  auto t0 = std::chrono::steady_clock::now();
  model::Model& model = slot_model(slot);
  executor_.take_trace();
  const bool last_of_step = next_training_micro_batch();
  begin_walk(schedule_.halves_program(last_of_step), schedule_.forward_events(), schedule_.eval_tensor_parallel_ops());
  model.backward(*this);
  check_tensor_parallel_done(static_cast<int>(schedule_.tensor_parallel_ops().size()));
  run_event(program_->last_event);
  micro_trace_ = std::move(forward_traces_[slot]);
  for (const ScheduledOp* op : executor_.take_trace()) micro_trace_.push_back(op);
  forward_traces_[slot].clear();
  wall_s_ += seconds_since(t0);
}

float ShardedEngine::eval_loss(const std::int32_t* tokens, const std::int32_t* targets) {
  auto t0 = std::chrono::steady_clock::now();
  evaluated_since_report_ = true;
  executor_.take_trace();
  micro_batch_ = -1;  // not one of a step's micro-batches
  begin_walk(schedule_.eval_program(), 0, 0);
  float loss = models_.front()->forward(*this, tokens, targets);
  check_tensor_parallel_done(schedule_.eval_tensor_parallel_ops());
  run_event(program_->last_event);
  micro_trace_ = executor_.take_trace();
  wall_s_ += seconds_since(t0);
  return loss;
}

train::StepOutcome ShardedEngine::optimizer_step(const optim::AdamWConfig& hp, const train::StepArgs& args) {
  auto t0 = std::chrono::steady_clock::now();
  const LevelSpec& L = schedule_.levels();
  executor_.take_trace();
  // With buckets the last micro-batch has reduced the gradients already.
  if (!schedule_.buckets().empty() && micro_batches_in_step_ < schedule_.accumulation_steps())
    throw Error(fmt::format("shard: an optimizer step after {} of the step's {} micro-batches (the last one "
                            "reduces the gradient buckets)",
                            micro_batches_in_step_, schedule_.accumulation_steps()));
  micro_batches_in_step_ = forwards_in_step_ = 0;
  std::vector<comm::Work> works;
  if (schedule_.buckets().empty())
    for (auto& Up : units_) {
      Unit* U = Up.get();
      const float* input = L.grads > 0 ? U->grad_accum.data() : replicated_grads_.data() + U->padded_offset;
      works.push_back(run_chain("shard:step_reduce", U->step_reduce, [this, U, input] {
        reduce_for_step(*U, U->step_reduce, input);
      }));
    }
  for (auto& w : works) wait(w);

  // The average over data-parallel replicas, taken exactly once.
  const float inv_replicas = 1.0f / static_cast<float>(dims_.data_parallel_size());
  double local = 0;
  for (auto& U : units_) {
    device_.scale(U->os_grad.data(), U->o.count, inv_replicas);
    // A pipeline's tied embeddings: the lookup's and the head's gradients summed, the first
    // and last stage's replica k holding the same OS slice.
    if (stage_ && U->index == stage_units_.tied_unit) stage_->sum_tied(U->os_grad.data(), U->o.count);
    if (is_tied_copy(U->index)) continue;
    local += tp_group_ ? tensor_parallel_sum_squares(*U) : device_.sum_squares(U->os_grad.data(), U->o.count);
  }
  // Every rank sums the same values in the same order: the same norm, the same verdict.
  std::vector<double> squares = scalar_sum({local}, Purpose::GradNormAllReduce);
  tensor_parallel_sum(squares);
  if (stage_) squares[0] = stage_->sum_over_stages(squares[0]);
  train::StepOutcome out;
  out.grad_norm = std::sqrt(squares[0]) / args.loss_scale;
  out.applied = !args.skip && std::isfinite(out.grad_norm);
  if (out.applied) {
    const float multiplier = optim::gradient_multiplier(hp, out.grad_norm, args.loss_scale);
    for (auto& U : units_) {
      if (U->o.offset >= U->numel) continue;  // all padding
      std::size_t n = std::min(U->o.count, U->numel - U->o.offset);
      std::size_t begin = U->arena_offset + U->o.offset;
      device_.adamw_update_range(layout(), begin, begin + n, U->master.data(), U->os_grad.data(), U->exp_avg.data(),
                                 U->exp_avg_sq.data(), hp, args.lr, args.update, multiplier);
    }
    ++updates_;
  }
  // A skipped step still runs the post-step weight gather: the schedule (and every rank)
  // expects it, and it hands out the unchanged weights.
  refresh_weights_from_master();
  for (auto& U : units_) U->grad_accum.zero();
  replicated_grads_.zero();
  step_trace_ = executor_.take_trace();
  ++steps_;
  wall_s_ += seconds_since(t0);
  return out;
}

void ShardedEngine::refresh_weights_from_master() {
  std::vector<comm::Work> works;
  for (auto& Up : units_) {
    Unit* U = Up.get();
    works.push_back(run_chain("shard:weight_step", U->weight_step, [this, U] {
      if (U->weight_step.empty()) {
        U->weights.encode(U->master.data(), 0, U->o.count);  // OS slice == W slice
      } else {
        const comm::CBuf got = executor_.gather(U->weight_step, U->master.data(), U->o.count, U->weights.wire);
        U->weights.copy_from(comm::wire_chunk(got, 0, got.count));
      }
      if (replicated_params_.size()) U->weights.decode(0, U->padded, replicated_params_.data() + U->padded_offset);
    }));
  }
  for (auto& w : works) wait(w);
}

// A few fp64 per rank (as many as the schedule's op carries), summed over the op's levels.
std::vector<double> ShardedEngine::scalar_sum(std::vector<double> local, Purpose purpose) {
  const Chain ops = ops_for(schedule_.step_ops(), purpose, -1);
  const std::uint64_t seq = record_issue(ops, executor_.levels().host);
  comm::Work w = ctx_.run("shard:scalar", [this, &ops, &local, seq] {
    executor_.record_next_chain(seq);
    executor_.scalar_sum(ops, local);
  });
  wait(w);
  return local;
}

std::pair<double, bool> ShardedEngine::all_mean_and_any(double local, bool flag) {
  // Part of the step: its wait counts as exposed communication, so its time counts as step time.
  auto t0 = std::chrono::steady_clock::now();
  std::vector<double> sum = scalar_sum({local, flag ? 1.0 : 0.0}, Purpose::LossAllReduce);
  tensor_parallel_sum(sum);  // a stop flag on any TP rank reaches every data-parallel group
  wall_s_ += seconds_since(t0);
  return {sum[0] / world_size(), sum[1] > 0};
}

bool ShardedEngine::fp16_gradients() const {
  const ShardSpec& spec = schedule_.spec();
  return spec.grad_wire == DType::F16 || spec.step_grad_wire == DType::F16;
}

std::vector<std::string> ShardedEngine::all_gather_strings(const std::string& local) {
  return comm::all_gather_strings(MPI_COMM_WORLD, local, "shard:all_gather_strings", "world");
}

std::vector<train::StateShard> ShardedEngine::device_shards(bool saved) {
  std::vector<train::StateShard> out;
  for (const ArenaRun& run : optimizer_runs(schedule_, layout(), dp_rank_)) {
    if (saved && is_tied_copy(run.unit)) continue;
    Unit& U = *units_[run.unit];  // its OS slice starts at run.begin
    out.push_back({run.begin, run.end, U.master.data(), U.exp_avg.data(), U.exp_avg_sq.data()});
  }
  return out;
}

std::vector<train::StateShard> ShardedEngine::state_shards() {
  if (device_.host_visible()) return device_shards(false);
  return staged_.host_shards(device_, device_shards(false), updates_);
}

std::vector<train::StateShard> ShardedEngine::saved_shards() {
  if (!saves_optimizer_state(schedule_, dp_rank_)) return {};
  if (device_.host_visible()) return device_shards(true);
  return staged_.host_shards(device_, device_shards(true), updates_);
}

void ShardedEngine::state_loaded() {
  if (!device_.host_visible()) staged_.put_back(device_, device_shards(false));
  refresh_weights_from_master();
}

void ShardedEngine::gather_params(float* full) {
  if (!tp_group_) return gather_slice_params(full);
  // Every TP rank's slice arena, then each tensor's slice runs into the whole model's arena.
  const model::ParamLayout& mine = layout();
  AlignedBuffer<float> own(mine.total_floats());
  AlignedBuffer<float> slices(mine.total_floats() * static_cast<std::size_t>(dims_.tensor));
  gather_slice_params(own.data());
  gather_over_tensor_group(comm::f32(own.data(), mine.total_floats()),  // not a step's traffic
                           comm::f32(slices.data(), slices.size()));
  // Each whole-arena float comes from the one TP rank that would save it (a checkpoint's map).
  for (int r = 0; r < dims_.tensor; ++r) {
    const model::ParamLayout slice(mine.config(), {dims_.tensor, r});
    const float* arena = slices.data() + static_cast<std::size_t>(r) * mine.total_floats();
    for (const model::WholeRun& w : slice.whole_runs(0, slice.total_floats(), model::WholeCover::Saved)) {
      if (w.zeros) std::fill_n(full + w.whole, w.count, 0.f);
      else std::copy_n(arena + w.local, w.count, full + w.whole);
    }
  }
}

void ShardedEngine::gather_slice_params(float* full) {
  const LevelSpec& L = schedule_.levels();
  for (auto& Up : units_) {
    Unit* U = Up.get();
    if (is_tied_copy(U->index)) continue;  // the first stage writes the embeddings
    comm::Work w = ctx_.run("shard:gather_params", [this, U, full, &L] {
      // Master slices back to the whole unit: the OS levels' all-gather (outer first), in the
      // executor's scratch, then to the host.
      const auto steps = comm::all_gather_steps(L.level_size, U->padded, L.optimizer, 0, DType::F32, 0);
      const comm::CBuf got = executor_.run_steps(steps, comm::f32(U->master.data(), U->o.count));
      device_.to_host(full + U->arena_offset, got.data, sizeof(float) * U->numel);
    });
    w.wait();
  }
}

// ---- Tensor parallelism ----------------------------------------------------------------------

// The schedule's next TP op must be the model's call: the runtime runs exactly those.
const ScheduledOp& ShardedEngine::next_tensor_parallel_op(Collective kind, std::size_t n) {
  const std::vector<ScheduledOp>& ops = schedule_.tensor_parallel_ops();
  const int k = next_tp_op_++;
  if (k >= static_cast<int>(ops.size()) || ops[k].kind != kind || ops[k].elements_in != n)
    throw Error(fmt::format("shard: the model's tensor-parallel {} of {} elements left the schedule at its op {}",
                            collective_name(kind), n, k));
  return ops[k];
}

void ShardedEngine::check_tensor_parallel_done(int ops) const {
  if (next_tp_op_ != ops)
    throw Error(fmt::format("shard: the model ran {} of the schedule's {} tensor-parallel ops", next_tp_op_, ops));
}

void ShardedEngine::all_reduce_sum(float* data, std::size_t n) {
  const std::uint64_t seq = record_tensor_parallel(next_tensor_parallel_op(Collective::AllReduce, n));
  comm::Work w = tp_group_->all_reduce_async(comm::f32(data, n), comm::ReduceOp::Sum);
  wait(w);
  comm::flight_recorder().end(seq);
}

void ShardedEngine::all_gather(const float* mine, std::size_t n, float* all) {
  const std::uint64_t seq = record_tensor_parallel(next_tensor_parallel_op(Collective::AllGather, n));
  gather_over_tensor_group(comm::f32(mine, n), comm::f32(all, n * tp_group_->size()));
  comm::flight_recorder().end(seq);
}

void ShardedEngine::reduce_scatter_sum(const float* all, std::size_t n, float* mine) {
  const std::uint64_t seq = record_tensor_parallel(next_tensor_parallel_op(Collective::ReduceScatter, n));
  comm::Work w = tp_group_->reduce_scatter_async(comm::f32(all, n), comm::f32(mine, n / tp_group_->size()),
                                                  comm::ReduceOp::Sum);
  wait(w);
  comm::flight_recorder().end(seq);
}

void ShardedEngine::gather_over_tensor_group(comm::CBuf mine, comm::Buf all) {
  comm::Work w = tp_group_->all_gather_async(mine, all);
  wait(w);
}

void ShardedEngine::tensor_parallel_sum(std::vector<double>& values) {
  if (!tp_group_) return;
  const std::size_t k = values.size();
  const auto& step = schedule_.step_ops();
  const auto op = std::find_if(step.begin(), step.end(), [k](const ScheduledOp& o) {
    return o.purpose == Purpose::TensorParallelScalars && o.elements_in == k;
  });
  if (op == step.end()) throw Error(fmt::format("shard: the schedule has no tensor-parallel sum of {} values", k));
  const std::uint64_t seq = record_tensor_parallel(*op);
  sum_scalars(*op, values, [this](comm::CBuf mine, comm::Buf all) { gather_over_tensor_group(mine, all); });
  comm::flight_recorder().end(seq);
}

// The squares of this rank's OS gradient slice that the TP group's norm counts: a whole
// tensor's (the same on every TP rank) on TP rank 0 only, a split tensor's on every rank.
double ShardedEngine::tensor_parallel_sum_squares(const Unit& U) const {
  const model::ParamLayout& L = layout();
  const bool lead = dims_.tensor_rank(rank_) == 0;
  const std::size_t begin = U.arena_offset + U.o.offset, end = begin + U.o.count;
  double sum = 0;
  for (int ti : L.units()[schedule_.units().layout_unit_of(U.index)].tensors) {
    const model::TensorInfo& t = L.tensors()[ti];
    if (t.split == model::Split::None && !lead) continue;
    const std::size_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    if (lo < hi) sum += device_.sum_squares(U.os_grad.data() + (lo - begin), hi - lo);
  }
  return sum;
}

}  // namespace strata::shard
