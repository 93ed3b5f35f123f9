#include "shard/sharded_engine.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "base/error.hpp"
#include "comm/agree.hpp"
#include "comm/wait.hpp"
#include "optim/adamw.hpp"
#include "quant/convert.hpp"
#include "quant/quant.hpp"

namespace strata::shard {

namespace {

comm::DType dtype_of(Wire w) { return static_cast<comm::DType>(w); }

quant::QuantSpec qspec(Wire w, int block) {
  return {w == Wire::I4 ? quant::QuantBits::Int4 : quant::QuantBits::Int8, block};
}

// Bytes before element `offset` of a wire buffer (offsets are whole blocks, so even for int4).
std::size_t byte_offset(Wire w, std::size_t offset) { return comm::data_bytes(dtype_of(w), offset); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// ---- WireBuffer ------------------------------------------------------------------------

void WireBuffer::reset(Wire w, int block_size, std::size_t n) {
  wire = w;
  block = block_size;
  count = n;
  data.resize(comm::data_bytes(dtype_of(w), n));
  scales.resize(wire_quantized(w) ? (n + block_size - 1) / block_size : 0);
}

void WireBuffer::reserve_any(int block_size, std::size_t n) {
  block = block_size;
  count = n;
  data.resize(4 * n);                            // fp32 is the widest format
  scales.resize(n / std::max(block_size, 1) + 1);  // int8/int4 with the smallest blocks
}

comm::Buf WireBuffer::view(std::size_t offset, std::size_t n) {
  comm::Buf b(dtype_of(wire), data.data() + byte_offset(wire, offset), n);
  if (wire_quantized(wire)) {
    b.scales = scales.data() + offset / block;
    b.block = static_cast<std::size_t>(block);
  }
  return b;
}

comm::CBuf WireBuffer::cview(std::size_t offset, std::size_t n) const {
  return const_cast<WireBuffer*>(this)->view(offset, n);
}

void WireBuffer::encode(const float* src, std::size_t offset, std::size_t n) {
  std::uint8_t* dst = data.data() + byte_offset(wire, offset);
  switch (wire) {
    case Wire::F32: std::memcpy(dst, src, 4 * n); break;
    case Wire::BF16: {
      auto* d = reinterpret_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = quant::float_to_bf16(src[i]);
      break;
    }
    case Wire::F16: {
      auto* d = reinterpret_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = quant::float_to_fp16(src[i]);
      break;
    }
    case Wire::I8:
    case Wire::I4: quant::quantize(src, n, qspec(wire, block), dst, scales.data() + offset / block); break;
  }
}

void WireBuffer::decode(std::size_t offset, std::size_t n, float* dst) const {
  const std::uint8_t* src = data.data() + byte_offset(wire, offset);
  switch (wire) {
    case Wire::F32: std::memcpy(dst, src, 4 * n); break;
    case Wire::BF16: {
      auto* s = reinterpret_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = quant::bf16_to_float(s[i]);
      break;
    }
    case Wire::F16: {
      auto* s = reinterpret_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = quant::fp16_to_float(s[i]);
      break;
    }
    case Wire::I8:
    case Wire::I4: quant::dequantize(src, scales.data() + offset / block, n, qspec(wire, block), dst); break;
  }
}

void WireBuffer::decode_add(std::size_t offset, std::size_t n, float* dst) const {
  if (wire_quantized(wire)) {
    quant::dequantize_add(data.data() + byte_offset(wire, offset), scales.data() + offset / block, n,
                          qspec(wire, block), dst);
    return;
  }
  AlignedBuffer<float> tmp(n);
  decode(offset, n, tmp.data());
  for (std::size_t i = 0; i < n; ++i) dst[i] += tmp[i];
}

// ---- Per-unit state ----------------------------------------------------------------------

struct ShardedEngine::Unit {
  int index = 0;
  std::size_t numel = 0, padded = 0;
  std::size_t arena_offset = 0;   // in the layout's (unpadded) arena
  std::size_t padded_offset = 0;  // in the engine's replicated buffers
  Slice w, g, o, s;
  WireBuffer weights, secondary;
  AlignedBuffer<float> grad_accum;  // G slice (G sharded)
  AlignedBuffer<float> master, exp_avg, exp_avg_sq, os_grad;
  // Schedule ops of this unit, by event, in execution order.
  std::vector<const ScheduledOp*> gather_fwd, gather_bwd, grad_reduce, step_reduce, weight_step;
  float* full = nullptr;  // gathered fp32 weights, while held or in flight
  comm::Work gather;
  float* grad_full = nullptr;  // full fp32 gradient buffer while backward writes it
};

// Comm-thread scratch, shared by every chain: chains run one at a time on that thread.
struct ShardedEngine::Chain {
  WireBuffer wire_a, wire_b, wire_c;
  AlignedBuffer<float> f32_a, f32_b;
};

// ---- Construction ------------------------------------------------------------------------

ShardedEngine::ShardedEngine(const model::GPTConfig& config, int batch, int seq, comm::Context& ctx,
                             comm::TierComms& comms, const ShardSpec& spec, int accumulation_steps,
                             std::uint64_t seed)
    : model_(config, batch, seq),
      ctx_(ctx),
      comms_(comms),
      schedule_(model_.layout(), ctx.topology(), spec, accumulation_steps),
      rank_(ctx.world_rank()) {
  const LevelSpec& L = schedule_.levels();
  const model::ParamLayout& layout = model_.layout();
  if (spec.step_grad_allreduce)
    throw Error("shard.step_grad_allreduce: models ZeRO-topo's published cross-node all-reduce for the planner; "
                "the runtime reduces gradient slices straight to the optimizer slice instead");

  std::size_t padded_total = 0, largest = 0;
  for (int u = 0; u < schedule_.num_units(); ++u) {
    auto U = std::make_unique<Unit>();
    U->index = u;
    U->numel = layout.units()[u].numel;
    U->padded = schedule_.padded_numel(u);
    U->arena_offset = layout.units()[u].offset;
    U->padded_offset = padded_total;
    padded_total += U->padded;
    largest = std::max(largest, U->padded);
    U->w = schedule_.slice(u, rank_, L.weights);
    U->g = schedule_.slice(u, rank_, L.grads);
    U->o = schedule_.slice(u, rank_, L.optimizer);
    U->weights.reset(spec.weight_wire, spec.block_size, U->w.count);
    if (L.secondary > 0) {
      U->s = schedule_.slice(u, rank_, L.secondary);
      U->secondary.reset(spec.weight_wire, spec.block_size, U->s.count);
    }
    if (L.grads > 0) U->grad_accum.resize(U->g.count);
    U->master.resize(U->o.count);
    U->exp_avg.resize(U->o.count);
    U->exp_avg_sq.resize(U->o.count);
    U->os_grad.resize(U->o.count);
    U->gather_fwd = ops_for(schedule_.micro_batch_ops(), Purpose::WeightGatherForward, u);
    U->gather_bwd = ops_for(schedule_.micro_batch_ops(), Purpose::WeightGatherBackward, u);
    U->grad_reduce = ops_for(schedule_.micro_batch_ops(), Purpose::GradReduce, u);
    for (Purpose p : {Purpose::StepGradReduce, Purpose::ReplicaReduce, Purpose::ReplicaGather})
      for (auto* op : ops_for(schedule_.step_ops(), p, u)) U->step_reduce.push_back(op);
    U->weight_step = ops_for(schedule_.step_ops(), Purpose::WeightGatherStep, u);
    units_.push_back(std::move(U));
  }
  if (L.weights == 0 && spec.weight_wire != Wire::F32) replicated_params_.resize(padded_total);
  if (L.grads == 0) replicated_grads_.resize(padded_total);

  largest_unit_ = largest;
  chain_ = std::make_unique<Chain>();
  chain_->wire_a.reserve_any(spec.block_size, largest);
  chain_->wire_b.reserve_any(spec.block_size, largest);
  chain_->wire_c.reserve_any(spec.block_size, largest);
  chain_->f32_a.resize(largest);
  chain_->f32_b.resize(largest);

  for (const model::UnitEvent& e : schedule_.units().events)
    if (e.kind == model::UnitEvent::Acquire) {
      acquire_order_.emplace_back(e.unit, e.phase);
      if (e.phase == model::Phase::Forward) eval_order_.emplace_back(e.unit, e.phase);
    }

  // Same initial weights as the single-process trainer, then keep this rank's slices.
  AlignedBuffer<float> full(layout.total_floats());
  model::GPT::init_params(layout, full.data(), seed);
  for (auto& U : units_) {
    for (std::size_t i = 0; i < U->o.count; ++i) {
      std::size_t e = U->o.offset + i;
      U->master[i] = e < U->numel ? full[U->arena_offset + e] : 0.0f;
    }
  }
  refresh_weights_from_master();
}

ShardedEngine::~ShardedEngine() {
  // Let every collective that reads or writes our buffers finish before they go away.
  for (auto& U : units_) U->gather = comm::Work();
  pending_reductions_.clear();
}

std::vector<const ScheduledOp*> ShardedEngine::ops_for(const std::vector<ScheduledOp>& ops, Purpose purpose,
                                                       int unit) const {
  std::vector<const ScheduledOp*> out;
  for (auto& op : ops)
    if (op.purpose == purpose && op.unit == unit) out.push_back(&op);
  return out;
}

comm::Communicator& ShardedEngine::level_comm(int level) {
  return level == 0 ? comms_.within(0) : comms_.across(level);
}

// ---- Chains: a run of per-level ops, executed on the communication thread -------------------

// Gathers level by level from `src` (elements_in of the first op), ping-ponging between the
// scratch buffers a and b (neither may be `src`), and returns where the result landed.
const WireBuffer* ShardedEngine::gather_chain(const std::vector<const ScheduledOp*>& ops, const WireBuffer& src,
                                              WireBuffer& a, WireBuffer& b) {
  const WireBuffer* cur = &src;
  WireBuffer* out = &a;
  for (const ScheduledOp* op : ops) {
    out->set_format(src.wire, src.block);
    level_comm(op->level).run_all_gather(cur->cview(0, op->elements_in), out->view(0, op->elements_out));
    cur = out;
    out = out == &a ? &b : &a;
  }
  return cur;
}

void ShardedEngine::start_gather(int unit, model::Phase phase) {
  Unit& U = *units_[unit];
  const bool forward = phase == model::Phase::Forward;
  const auto& ops = forward ? U.gather_fwd : U.gather_bwd;
  const WireBuffer& src = (!forward && schedule_.levels().secondary > 0) ? U.secondary : U.weights;
  U.full = borrow_full();
  const bool keep_secondary = forward && schedule_.levels().secondary > 0;
  float* full = U.full;
  U.gather = ctx_.run("shard:weight_gather", [this, &U, &ops, &src, full, keep_secondary] {
    omp_set_num_threads(1);  // the compute thread owns the cores
    const WireBuffer* got = gather_chain(ops, src, chain_->wire_a, chain_->wire_b);
    if (keep_secondary) {
      // hpZ: keep this rank's secondary slice of what was just gathered.
      std::memcpy(U.secondary.data.data(), got->data.data() + byte_offset(got->wire, U.s.offset), U.secondary.data.size());
      if (U.secondary.scales.size() != 0)
        std::memcpy(U.secondary.scales.data(), got->scales.data() + U.s.offset / got->block,
                    4 * U.secondary.scales.size());
    }
    got->decode(0, U.padded, full);
  });
}

void ShardedEngine::wait(comm::Work& work) {
  auto t0 = std::chrono::steady_clock::now();
  work.wait();
  exposed_s_ += seconds_since(t0);
}

void ShardedEngine::drain_reductions(std::size_t keep) {
  while (pending_reductions_.size() > keep) {
    wait(pending_reductions_.front().first);
    give_back(pending_reductions_.front().second);
    pending_reductions_.pop_front();
  }
}

float* ShardedEngine::borrow_full() {
  if (free_buffers_.empty()) {
    pool_.emplace_back(largest_unit_);
    free_buffers_.push_back(pool_.back().data());
  }
  float* b = free_buffers_.back();
  free_buffers_.pop_back();
  return b;
}

void ShardedEngine::give_back(float* buffer) { free_buffers_.push_back(buffer); }

// ---- model::UnitAccess -----------------------------------------------------------------------

const float* ShardedEngine::acquire(int unit, model::Phase phase) {
  Unit& U = *units_[unit];
  const auto& order = training_ ? acquire_order_ : eval_order_;
  // Where this acquire sits in the micro-batch's walk, for prefetching the next ones.
  while (next_acquire_ < order.size() && order[next_acquire_] != std::make_pair(unit, phase)) ++next_acquire_;
  ++next_acquire_;

  if (schedule_.levels().weights == 0) {
    return replicated_params_.size() ? replicated_params_.data() + U.padded_offset
                                     : reinterpret_cast<const float*>(U.weights.data.data());
  }
  if (!U.full) start_gather(unit, phase);
  wait(U.gather);
  for (int k = 0; k < schedule_.spec().prefetch && next_acquire_ + k < order.size(); ++k) {
    auto [next, next_phase] = order[next_acquire_ + k];
    if (!units_[next]->full) start_gather(next, next_phase);
  }
  return U.full;
}

void ShardedEngine::release(int unit, model::Phase phase) {
  Unit& U = *units_[unit];
  if (schedule_.levels().weights == 0 || !U.full) return;
  bool drop = phase == model::Phase::Backward || !training_ || schedule_.spec().free_after_forward;
  if (!drop) return;
  wait(U.gather);
  give_back(U.full);
  U.full = nullptr;
}

float* ShardedEngine::grads(int unit) {
  Unit& U = *units_[unit];
  if (schedule_.levels().grads == 0) return replicated_grads_.data() + U.padded_offset;
  if (!U.grad_full) {
    drain_reductions(2);  // bound the buffers held by reductions still in flight
    U.grad_full = borrow_full();
    std::memset(U.grad_full, 0, 4 * U.padded);
  }
  return U.grad_full;
}

void ShardedEngine::grads_ready(int unit) {
  Unit& U = *units_[unit];
  if (schedule_.levels().grads == 0) return;
  float* full = U.grad_full;
  U.grad_full = nullptr;
  comm::Work w = ctx_.run("shard:grad_reduce", [this, &U, full] {
    omp_set_num_threads(1);
    const float* out = reduce_chain(U.grad_reduce, full);
    for (std::size_t i = 0; i < U.g.count; ++i) U.grad_accum[i] += out[i];
  });
  pending_reductions_.emplace_back(std::move(w), full);
}

// Reduce-scatters fp32 `input` level by level (each op's wire format), returning the fp32
// result in scratch (or `input` itself when there are no ops). Comm thread only.
const float* ShardedEngine::reduce_chain(const std::vector<const ScheduledOp*>& ops, const float* input) {
  const float* cur = input;
  Chain& c = *chain_;
  for (const ScheduledOp* op : ops) {
    comm::Communicator& comm = level_comm(op->level);
    float* out = cur == c.f32_a.data() ? c.f32_b.data() : c.f32_a.data();
    const std::size_t n = op->elements_in, chunk = op->elements_out;
    if (op->kind == OpKind::AllGather) {
      // The all-gather half of a hierarchical all-reduce.
      c.wire_a.set_format(op->wire, schedule_.spec().block_size);
      c.wire_b.set_format(op->wire, schedule_.spec().block_size);
      c.wire_a.encode(cur, 0, n);
      comm.run_all_gather(c.wire_a.cview(0, n), c.wire_b.view(0, chunk));
      c.wire_b.decode(0, chunk, out);
    } else if (op->wire == Wire::F32) {
      comm.run_reduce_scatter(comm::f32(cur, n), comm::f32(out, chunk), 1.0f);
    } else if (!wire_quantized(op->wire)) {
      c.wire_a.set_format(op->wire, 0);
      c.wire_b.set_format(op->wire, 0);
      c.wire_a.encode(cur, 0, n);
      comm.run_reduce_scatter(c.wire_a.cview(0, n), c.wire_b.view(0, chunk), 1.0f);
      c.wire_b.decode(0, chunk, out);
    } else {
      // ZeRO++ qgZ hop: quantize every chunk, all-to-all, dequantize and sum in fp32 in
      // member order (the same order on every rank).
      c.wire_a.set_format(op->wire, schedule_.spec().block_size);
      c.wire_b.set_format(op->wire, schedule_.spec().block_size);
      c.wire_a.encode(cur, 0, n);
      comm.run_all_to_all(c.wire_a.cview(0, n), c.wire_b.view(0, n));
      std::memset(out, 0, 4 * chunk);
      for (int m = 0; m < op->group_size; ++m) c.wire_b.decode_add(m * chunk, chunk, out);
    }
    cur = out;
  }
  return cur;
}

// ---- Steps -----------------------------------------------------------------------------------

float ShardedEngine::micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) {
  auto t0 = std::chrono::steady_clock::now();
  training_ = true;
  next_acquire_ = 0;
  float loss = model_.forward_backward(*this, tokens, targets, grad_scale);
  drain_reductions(0);
  wall_s_ += seconds_since(t0);
  return loss;
}

float ShardedEngine::eval_loss(const std::int32_t* tokens, const std::int32_t* targets) {
  auto t0 = std::chrono::steady_clock::now();
  evaluated_since_report_ = true;
  training_ = false;
  next_acquire_ = 0;
  float loss = model_.forward(*this, tokens, targets);
  training_ = true;
  wall_s_ += seconds_since(t0);
  return loss;
}

train::StepOutcome ShardedEngine::optimizer_step(const optim::AdamWConfig& hp, const train::StepArgs& args) {
  auto t0 = std::chrono::steady_clock::now();
  const LevelSpec& L = schedule_.levels();
  std::vector<comm::Work> works;
  for (auto& Up : units_) {
    Unit* U = Up.get();
    const float* input = L.grads > 0 ? U->grad_accum.data() : replicated_grads_.data() + U->padded_offset;
    works.push_back(ctx_.run("shard:step_reduce", [this, U, input] {
      omp_set_num_threads(1);
      const float* out = reduce_chain(U->step_reduce, input);
      std::memcpy(U->os_grad.data(), out, 4 * U->o.count);
    }));
  }
  for (auto& w : works) wait(w);

  // The average over data-parallel ranks, taken exactly once.
  const float inv_world = 1.0f / static_cast<float>(world_size());
  double local = 0;
  for (auto& U : units_) {
    for (std::size_t i = 0; i < U->o.count; ++i) U->os_grad[i] *= inv_world;
    local += optim::sum_squares(U->os_grad.data(), U->o.count);
  }
  // Every rank sums the same values in the same order: the same norm, the same verdict.
  train::StepOutcome out;
  out.grad_norm = std::sqrt(scalar_sum({local}, Purpose::GradNormAllReduce)[0]) / args.loss_scale;
  out.applied = !args.skip && std::isfinite(out.grad_norm);
  if (out.applied) {
    const float multiplier = optim::gradient_multiplier(hp, out.grad_norm, args.loss_scale);
    for (auto& U : units_) {
      if (U->o.offset >= U->numel) continue;  // all padding
      std::size_t n = std::min(U->o.count, U->numel - U->o.offset);
      std::size_t begin = U->arena_offset + U->o.offset;
      optim::adamw_update_range(layout(), begin, begin + n, U->master.data(), U->os_grad.data(), U->exp_avg.data(),
                                U->exp_avg_sq.data(), hp, args.lr, args.update, multiplier);
    }
  }
  // A skipped step still runs the post-step weight gather: the schedule (and every rank)
  // expects it, and it hands out the unchanged weights.
  refresh_weights_from_master();
  for (auto& U : units_) U->grad_accum.zero();
  replicated_grads_.zero();
  wall_s_ += seconds_since(t0);
  return out;
}

void ShardedEngine::refresh_weights_from_master() {
  std::vector<comm::Work> works;
  for (auto& Up : units_) {
    Unit* U = Up.get();
    works.push_back(ctx_.run("shard:weight_step", [this, U] {
      omp_set_num_threads(1);
      Chain& c = *chain_;
      if (U->weight_step.empty()) {
        U->weights.encode(U->master.data(), 0, U->o.count);  // OS slice == W slice
      } else {
        // wire_c holds the encoded OS slice; the gathers ping-pong through wire_a and wire_b.
        c.wire_c.set_format(U->weights.wire, U->weights.block);
        c.wire_c.encode(U->master.data(), 0, U->o.count);
        const WireBuffer* got = gather_chain(U->weight_step, c.wire_c, c.wire_a, c.wire_b);
        std::memcpy(U->weights.data.data(), got->data.data(), U->weights.data.size());
        if (U->weights.scales.size() != 0)
          std::memcpy(U->weights.scales.data(), got->scales.data(), 4 * U->weights.scales.size());
      }
      if (replicated_params_.size()) U->weights.decode(0, U->padded, replicated_params_.data() + U->padded_offset);
    }));
  }
  for (auto& w : works) wait(w);
}

// A few fp64 per rank (as many as the schedule's op carries), all-gathered level by level and
// summed in member order: every rank of the levels gets the same bits.
std::vector<double> ShardedEngine::scalar_sum(std::vector<double> local, Purpose purpose) {
  std::vector<const ScheduledOp*> ops = ops_for(schedule_.step_ops(), purpose, -1);
  for (const ScheduledOp* op : ops)
    if (op->elements_in != local.size())
      throw Error(fmt::format("shard: {} carries {} values, the runtime has {}", to_string(purpose), op->elements_in,
                              local.size()));
  comm::Work w = ctx_.run("shard:scalar", [this, &ops, &local] {
    const std::size_t k = local.size();
    for (const ScheduledOp* op : ops) {
      std::vector<double> all(k * static_cast<std::size_t>(op->group_size));
      level_comm(op->level).run_all_gather(comm::f32(reinterpret_cast<const float*>(local.data()), 2 * k),
                                           comm::f32(reinterpret_cast<float*>(all.data()), 2 * all.size()));
      std::fill(local.begin(), local.end(), 0.0);
      for (std::size_t m = 0; m < all.size(); m += k)
        for (std::size_t i = 0; i < k; ++i) local[i] += all[m + i];
    }
  });
  wait(w);
  return local;
}

std::pair<double, bool> ShardedEngine::all_mean_and_any(double local, bool flag) {
  // Part of the step: its wait counts as exposed communication, so its time counts as step time.
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<double> sum = scalar_sum({local, flag ? 1.0 : 0.0}, Purpose::LossAllReduce);
  wall_s_ += seconds_since(t0);
  return {sum[0] / world_size(), sum[1] > 0};
}

nlohmann::json ShardedEngine::describe() const {
  return {{"strategy", schedule_.spec().preset},
          {"world_size", world_size()},
          {"shard_spec", schedule_.spec().to_json()},
          {"topology", schedule_.topology().to_json()}};
}

bool ShardedEngine::fp16_gradients() const {
  const ShardSpec& spec = schedule_.spec();
  return spec.grad_wire == Wire::F16 || spec.step_grad_wire == Wire::F16;
}

std::vector<std::string> ShardedEngine::all_gather_strings(const std::string& local) {
  return comm::all_gather_strings(MPI_COMM_WORLD, local, "shard:all_gather_strings", "world");
}

std::vector<train::StateShard> ShardedEngine::state_shards() {
  std::vector<train::StateShard> out;
  for (const ArenaRun& run : optimizer_runs(schedule_, layout(), rank_)) {
    Unit& U = *units_[run.unit];  // its OS slice starts at run.begin
    out.push_back({run.begin, run.end, U.master.data(), U.exp_avg.data(), U.exp_avg_sq.data()});
  }
  return out;
}

std::vector<train::StateShard> ShardedEngine::saved_shards() {
  if (!saves_optimizer_state(schedule_, rank_)) return {};
  return state_shards();
}

void ShardedEngine::state_loaded() { refresh_weights_from_master(); }

void ShardedEngine::gather_params(float* full) {
  const LevelSpec& L = schedule_.levels();
  for (auto& Up : units_) {
    Unit* U = Up.get();
    AlignedBuffer<float> unit(U->padded);
    comm::Work w = ctx_.run("shard:gather_params", [this, U, &unit, &L] {
      // Master slices back to the whole unit: all-gather the OS levels, outer first.
      AlignedBuffer<float> cur(U->o.count), next;
      std::memcpy(cur.data(), U->master.data(), 4 * U->o.count);
      for (int t = L.optimizer - 1; t >= 0; --t) {
        next.resize(cur.size() * L.level_size[t]);
        level_comm(t).run_all_gather(comm::f32(cur.data(), cur.size()), comm::f32(next.data(), next.size()));
        cur = std::move(next);
      }
      std::memcpy(unit.data(), cur.data(), 4 * U->padded);
    });
    w.wait();
    std::memcpy(full + U->arena_offset, unit.data(), 4 * U->numel);
  }
}

StateMemory ShardedEngine::memory_bytes() const {
  StateMemory m;
  for (auto& U : units_) {
    m.weights += U->weights.bytes();
    m.secondary += U->secondary.bytes();
    m.grads += 4 * U->grad_accum.size();
    m.optimizer += 4 * (U->master.size() + U->exp_avg.size() + U->exp_avg_sq.size());
  }
  m.grads += 4 * replicated_grads_.size();
  m.gathered = 4 * replicated_params_.size();
  for (auto& b : pool_) m.gathered += 4 * b.size();
  return m;
}

StepTiming ShardedEngine::take_timing() {
  StepTiming t;
  t.exposed_comm_s = exposed_s_;
  t.compute_s = std::max(0.0, wall_s_ - exposed_s_);
  wall_s_ = exposed_s_ = 0;
  return t;
}

static nlohmann::json per_tier_json(const std::vector<std::string>& names, const std::vector<comm::TierTraffic>& t) {
  nlohmann::json j = nlohmann::json::object();
  for (std::size_t i = 0; i < names.size(); ++i)
    j[names[i]] = {{"bytes_sent", t[i].bytes_sent}, {"bytes_received", t[i].bytes_received}, {"messages", t[i].messages}};
  return j;
}

nlohmann::json ShardedEngine::step_report() {
  comm::CommStats now = ctx_.accounting().snapshot();
  comm::CommStats delta = last_stats_.tiers.empty() ? now : now - last_stats_;
  last_stats_ = now;
  StepTiming t = take_timing();
  nlohmann::json j = {{"compute_s", t.compute_s},
                      {"exposed_comm_s", t.exposed_comm_s},
                      {"comm", per_tier_json(delta.tier_names, delta.tiers)},
                      {"includes_eval", evaluated_since_report_}};
  evaluated_since_report_ = false;
  step_reports_.push_back(j);
  return j;
}

nlohmann::json ShardedEngine::summary_report() {
  // Mean over steps without evaluation traffic and after the first (which also carries the
  // initial weight distribution).
  std::vector<std::string> names;
  for (auto& t : schedule_.topology().tiers()) names.push_back(t.name);
  std::vector<double> sent(names.size()), recv(names.size()), msgs(names.size());
  double compute = 0, exposed = 0;
  int counted = 0;
  for (std::size_t s = 1; s < step_reports_.size(); ++s) {
    const auto& r = step_reports_[s];
    if (r["includes_eval"].get<bool>()) continue;
    ++counted;
    for (std::size_t i = 0; i < names.size(); ++i) {
      sent[i] += r["comm"][names[i]]["bytes_sent"].get<double>();
      recv[i] += r["comm"][names[i]]["bytes_received"].get<double>();
      msgs[i] += r["comm"][names[i]]["messages"].get<double>();
    }
    compute += r["compute_s"].get<double>();
    exposed += r["exposed_comm_s"].get<double>();
  }
  // Mean per rank over the world (collective: every rank calls summary_report).
  for (auto* v : {&sent, &recv, &msgs}) {
    MPI_Request request;  // waited for under the collective timeout (comm/wait.hpp)
    MPI_Iallreduce(MPI_IN_PLACE, v->data(), static_cast<int>(v->size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD,
                   &request);
    comm::wait_mpi_collective(request, MPI_COMM_WORLD, "shard:summary_report", "world", "MPI_Iallreduce");
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    sent[i] /= world_size();
    recv[i] /= world_size();
    msgs[i] /= world_size();
  }
  nlohmann::json measured = nlohmann::json::object(), scheduled = nlohmann::json::object();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (counted)
      measured[names[i]] = {{"bytes_sent", sent[i] / counted}, {"bytes_received", recv[i] / counted},
                            {"messages", msgs[i] / counted}};
  for (auto& t : schedule_.traffic_per_step())
    scheduled[t.tier] = {{"bytes_sent", t.bytes_sent}, {"bytes_received", t.bytes_received}, {"messages", t.messages}};
  StateMemory m = memory_bytes();
  return {{"strategy", schedule_.spec().preset},
          {"shard_spec", schedule_.spec().to_json()},
          {"world_size", world_size()},
          {"topology", schedule_.topology().to_json()},
          {"link_emulation", ctx_.emulation().enabled},
          {"comm", {{"per_step", measured}, {"scheduled_per_step", scheduled}, {"steps_measured", counted}}},
          {"compute_s", counted ? compute / counted : 0.0},
          {"exposed_comm_s", counted ? exposed / counted : 0.0},
          {"memory_bytes",
           {{"weights", m.weights}, {"secondary", m.secondary}, {"grads", m.grads}, {"optimizer", m.optimizer},
            {"gathered", m.gathered}}}};
}

}  // namespace strata::shard
