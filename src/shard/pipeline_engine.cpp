#include "shard/pipeline_engine.hpp"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <numeric>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/clock.hpp"
#include "base/collective.hpp"
#include "base/error.hpp"
#include "comm/api/buffer.hpp"
#include "comm/instrument/traffic.hpp"
#include "comm/runtime/agree.hpp"
#include "device/device.hpp"
#include "shard/run_summary.hpp"
#include "shard/runtime.hpp"

namespace strata::shard {

using parallel::PipelineAction;

PipelineSchedule::PipelineSchedule(const model::ModelConfig& config, int batch, int seq, int micro_batches, int stages,
                                   int stage, const StageReplicas& replicas, const std::vector<int>& stage_layers)
    : split_(parallel::stage_split(config.n_layer, stages, stage, stage_layers)),
      program_(parallel::one_f_one_b(stages, stage, micro_batches)),
      activation_floats_(parallel::stage_message_elements(batch, seq, config.n_embd, replicas.tensor.size,
                                                          replicas.sequence_parallel)),
      sequence_parallel_(replicas.sequence_parallel) {
  // The stage's units in this rank's TP slice (the whole model's without TP), and under TP
  // the stage walk's TP collectives (sequence parallelism without TP refused here, by name).
  const model::ParamLayout layout(config, replicas.tensor);
  tied_ = stages > 1 && layout.head_unit() == layout.embeddings_unit();
  add_sends();
  stage_units_ = model::stage_units(layout, range(), stages);
  TensorParallelPlan tp;
  auto calls = model::stage_tensor_parallel_calls(config, range(), replicas.tensor.size, batch, seq,
                                                  replicas.recompute, replicas.sequence_parallel);
  if (replicas.tensor.size > 1) tp = {replicas.tensor.size, replicas.tensor_level, std::move(calls)};
  sharding_ = std::make_shared<const Schedule>(stage_unit_plan(layout, stage_units_), replicas.topology,
                                               replicas.sharding, micro_batches, Composition::Hierarchical, tp);
  add_tied_sum(layout, replicas.index);
}

// The first stage's embeddings and the last stage's copy are units of the same size in
// schedules of the same levels: replica k of both holds the same OS slice, summed between them.
void PipelineSchedule::add_tied_sum(const model::ParamLayout& layout, int replica) {
  const int u = stage_units_.tied_unit;
  if (u < 0) return;
  const Slice o = sharding_->slice(u, replica, sharding_->levels().optimizer);
  const std::size_t begin = layout.units()[layout.embeddings_unit()].offset + o.offset;
  ops_.push_back({"tied embeddings", Collective::AllReduce, PipelineOp::Tied, -1, begin, begin + o.count,
                  o.count * sizeof(float)});
}

void PipelineSchedule::add_sends() {
  const std::uint64_t bytes = activation_floats_ * sizeof(float);
  for (const parallel::StageMessage& m : parallel::stage_messages(program_))
    ops_.push_back({m.purpose(), std::nullopt,
                    m.neighbour == parallel::StageMessage::Next ? PipelineOp::Next : PipelineOp::Previous,
                    m.micro_batch, 0, 0, bytes});
}

const std::vector<int>& PipelineGroups::of(PipelineOp::Group g) const {
  switch (g) {
    case PipelineOp::Previous: return previous;
    case PipelineOp::Next: return next;
    case PipelineOp::Tied: return tied;
  }
  return tied;
}

std::string_view kind_name(const std::optional<Collective>& kind) {
  return kind ? collective_name(*kind) : "send";
}

namespace {

// Activations travel from the lower stage (member 0 of a link) up; their gradients down.
int sender_of(const PipelineOp& op) { return op.purpose == "activation-send" ? 0 : 1; }
bool is_send(const PipelineOp& op) { return !op.kind; }

// A send is a broadcast from one end of its link; the tied sum a ring all-reduce.
comm::Algorithm algorithm_of(const PipelineOp& op) {
  return is_send(op) ? comm::Algorithm::BinomialBroadcast : comm::Algorithm::RingAllReduce;
}

// What `world_rank`'s part of `op` sends and receives, charged per tier to `counted`.
void charge_op(comm::Accounting& counted, const PipelineOp& op, const PipelineGroups& groups,
               const topo::Topology& physical, int world_rank) {
  const std::vector<int>& members = groups.of(op.group);
  const int d = static_cast<int>(members.size());
  const int me = static_cast<int>(std::find(members.begin(), members.end(), world_rank) - members.begin());
  std::vector<int> tiers;
  for (int m : members) tiers.push_back(m == world_rank ? 0 : physical.tier_between(world_rank, m));
  // A broadcast's message is the whole buffer; a ring's, one chunk of it.
  const std::uint64_t message = op.kind == Collective::AllReduce
                                    ? comm::chunk_count(op.bytes / sizeof(float), d, 1) * sizeof(float)
                                    : op.bytes;
  const std::vector<comm::Transfer> transfers =
      comm::algorithm_transfers(algorithm_of(op), d, me, message, is_send(op) ? sender_of(op) : 0);
  comm::charge_transfers(counted, transfers, tiers);
}

comm::Accounting accounting_of(const topo::Topology& physical) {
  std::vector<std::string> names;
  for (const topo::Tier& t : physical.tiers()) names.push_back(t.name);
  return comm::Accounting(names);
}

}  // namespace

comm::CommStats op_traffic(const PipelineOp& op, const PipelineGroups& groups, const topo::Topology& physical,
                           int world_rank) {
  comm::Accounting counted = accounting_of(physical);
  charge_op(counted, op, groups, physical, world_rank);
  return counted.snapshot();
}

comm::CommStats scheduled_traffic(const PipelineSchedule& schedule, const PipelineGroups& groups,
                                  const topo::Topology& physical, int world_rank) {
  comm::Accounting counted = accounting_of(physical);
  for (const PipelineOp& op : schedule.ops()) charge_op(counted, op, groups, physical, world_rank);
  comm::CommStats out = counted.snapshot();
  // The stage's sharding: its levels are the physical tiers by index (ParallelDims::data_parallel_topology).
  for (const TierTraffic& t : schedule.sharding()->traffic_per_step()) {
    comm::TierTraffic& mine = out.tiers.at(*physical.find_tier(t.tier));
    mine.bytes_sent += t.bytes_sent;
    mine.bytes_received += t.bytes_received;
    mine.messages += t.messages;
  }
  return out;
}

PipelineEngine::PipelineEngine(const parallel::ShardOptions& options, const model::ModelConfig& config, int batch,
                               int seq, int micro_batches, std::uint64_t seed, bool recompute)
    : layout_(config), micro_batches_(micro_batches), tokens_per_batch_(static_cast<std::size_t>(batch) * seq) {
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  comm::agree(MPI_COMM_WORLD, "world", [&] {
    if (options.pp < 2) throw Error(fmt::format("--pp {}: a pipeline takes at least 2 stages", options.pp));
    topology_ = resolve_topology(options, world);
    int level = topology_.outermost();
    if (!options.pp_tier.empty()) {
      const std::optional<int> t = topology_.find_tier(options.pp_tier);
      if (!t) throw Error(fmt::format("--pp-tier '{}': no such tier in topology '{}'", options.pp_tier, topology_.name()));
      level = *t;
    }
    dims_ = parallel::ParallelDims::model_parallel(topology_, options.tp, build_dims(options, topology_).tensor_level,
                                                   options.pp, level);
    stage_ = parallel::pipeline_stage(dims_, topology_, rank_);
    const ShardSpec sharding = build_spec(options, dims_.data_parallel_topology(topology_));
    schedule_ = std::make_unique<PipelineSchedule>(pipeline_schedule_of(config, batch, seq, micro_batches, dims_,
                                                                        topology_, rank_, sharding, options.pp_layers,
                                                                        recompute, options.sequence_parallel));
    // 1F1B runs a stage's micro-batches in halves: refused here, naming the setting, if they cannot be.
    static_cast<void>(schedule_->sharding()->halves_program(false));
    strategy_ = options.strategy;
  });
  context_ = std::make_unique<comm::Context>(topology_, comm::EmulationOptions{options.emulate_links, options.emulate_scale});
  build_groups();
  tokens_.resize(micro_batches);
  targets_.resize(micro_batches);
  grad_scales_.resize(micro_batches);
  losses_.resize(micro_batches);
  build_sharded(config, batch, seq, seed, recompute);
  last_stats_ = context_->accounting().snapshot();  // the initial weight distribution: no step's
}

// The stage's ShardedEngine over the stage's tier groups, running the stage's schedule.
void PipelineEngine::build_sharded(const model::ModelConfig& config, int batch, int seq, std::uint64_t seed,
                                   bool recompute) {
  const int tp_rank = dims_.tensor_rank(rank_), replica = dims_.data_parallel_rank(rank_);
  MPI_Comm_split(MPI_COMM_WORLD, replica * dims_.tensor + tp_rank, rank_, &across_stages_);
  // The stage's ranks of this TP index in world order are its replicas in order: the
  // communicator's ranks (dims.hpp).
  MPI_Comm replicas = mpi_comms_.front();
  std::optional<TensorParallelism> tp;
  if (dims_.tensor > 1) {
    MPI_Comm tensor = MPI_COMM_NULL;
    MPI_Comm_split(mpi_comms_.front(), tp_rank, rank_, &replicas);
    MPI_Comm_split(mpi_comms_.front(), replica, rank_, &tensor);
    mpi_comms_.push_back(replicas);
    mpi_comms_.push_back(tensor);
    tensor_group_ = std::make_unique<comm::Communicator>(*context_, tensor, fmt::format("pp{}-tp#{}", stage_, replica));
    tp = TensorParallelism{dims_, tensor_group_.get(), schedule_->sequence_parallel()};
  }
  stage_groups_ = std::make_unique<topo::ProcessGroups>(dims_.data_parallel_topology(topology_), replicas);
  stage_comms_ = std::make_unique<comm::TierComms>(*context_, *stage_groups_);
  PipelineStage stage{dims_, schedule_->range(), schedule_->sharding(), nullptr, nullptr};
  stage.sum_tied = [this](float* grad, std::size_t n) {
    const auto op = std::find_if(schedule_->ops().begin(), schedule_->ops().end(),
                                 [](const PipelineOp& o) { return o.group == PipelineOp::Tied; });
    if (op == schedule_->ops().end() || op->bytes != n * sizeof(float))
      throw Error(fmt::format("pipeline: stage {}'s tied sum of {} floats is not its schedule's", stage_, n));
    links_[PipelineOp::Tied]->all_reduce_async(comm::f32(grad, n), comm::ReduceOp::Sum).wait();
  };
  stage.sum_over_stages = [this](double v) { return sum_over_stages(v); };
  const ShardSpec& spec = schedule_->sharding()->spec();
  sharded_ = std::make_unique<ShardedEngine>(config, batch, seq, *context_, mpi_levels(*stage_comms_), spec,
                                             micro_batches_, seed, device::host(), recompute, tp,
                                             Precision::F32,
                                             parallel::micro_batches_in_flight(dims_.pipeline, stage_, micro_batches_),
                                             &stage);
}

double PipelineEngine::sum_over_stages(double value) {
  // Gathered and summed in stage order: every rank the same bits.
  int n = 0;
  MPI_Comm_size(across_stages_, &n);
  std::vector<double> all(n);
  MPI_Allgather(&value, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, across_stages_);
  return std::accumulate(all.begin(), all.end(), 0.0);
}

model::StageModel& PipelineEngine::stage_model(int micro_batch) {
  return sharded_->stage_walk(micro_batch % parallel::micro_batches_in_flight(dims_.pipeline, stage_, micro_batches_))
      .stage();
}

PipelineSchedule pipeline_schedule_of(const model::ModelConfig& config, int batch, int seq, int micro_batches,
                                      const parallel::ParallelDims& dims, const topo::Topology& physical,
                                      int world_rank, const ShardSpec& sharding,
                                      const std::vector<int>& stage_layers, bool recompute,
                                      bool sequence_parallel) {
  const StageReplicas replicas{dims.data_parallel_rank(world_rank),
                               sharding,
                               dims.data_parallel_topology(physical),
                               {dims.tensor, dims.tensor_rank(world_rank)},
                               dims.tensor_level,
                               recompute,
                               sequence_parallel};
  return PipelineSchedule(config, batch, seq, micro_batches, dims.pipeline,
                          parallel::pipeline_stage(dims, physical, world_rank), replicas, stage_layers);
}

PipelineGroups pipeline_groups(const parallel::ParallelDims& dims, const topo::Topology& physical, int world_rank,
                               bool tied) {
  const int P = dims.pipeline, stage = parallel::pipeline_stage(dims, physical, world_rank);
  auto peer = [&](int s) { return parallel::pipeline_peer(dims, physical, world_rank, s); };
  PipelineGroups g;
  for (int r = 0; r < dims.world_size(); ++r)
    if (parallel::pipeline_stage(dims, physical, r) == stage && dims.tensor_rank(r) == dims.tensor_rank(world_rank))
      g.stage.push_back(r);
  if (stage > 0) g.previous = {peer(stage - 1), world_rank};
  if (stage + 1 < P) g.next = {world_rank, peer(stage + 1)};
  if ((stage == 0 || stage == P - 1) && tied) g.tied = {peer(0), peer(P - 1)};
  return g;
}

void PipelineEngine::build_groups() {
  members_ = pipeline_groups(dims_, topology_, rank_, schedule_->tied());
  MPI_Comm stage_comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, stage_, rank_, &stage_comm);
  mpi_comms_.push_back(stage_comm);
  // Two-member groups, created lower link first on every rank: a chain from stage 0 up, so
  // no rank waits on a creation its partner has not reached.
  MPI_Group world_group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  auto pair = [&](const std::vector<int>& ranks, int tag) -> MPI_Comm {
    if (ranks.empty()) return MPI_COMM_NULL;
    MPI_Group g;
    MPI_Group_incl(world_group, 2, ranks.data(), &g);
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, &c);
    MPI_Group_free(&g);
    mpi_comms_.push_back(c);
    return c;
  };
  const MPI_Comm comms[] = {pair(members_.previous, 1), pair(members_.next, 1), pair(members_.tied, 2)};
  MPI_Group_free(&world_group);
  const std::string where = fmt::format("pp{}", stage_);
  const std::string names[] = {where + "-previous", where + "-next", "pp-tied"};
  for (int g : {PipelineOp::Previous, PipelineOp::Next, PipelineOp::Tied})
    if (comms[g] != MPI_COMM_NULL) links_[g] = std::make_unique<comm::Communicator>(*context_, comms[g], names[g]);
}

PipelineEngine::~PipelineEngine() {
  // The stage's collectives finish before the groups and the comm thread go away.
  sharded_.reset();
  stage_comms_.reset();
  stage_groups_.reset();
  tensor_group_.reset();
  for (auto& link : links_) link.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  for (MPI_Comm& c : mpi_comms_)
    if (!finalized && c != MPI_COMM_NULL) MPI_Comm_free(&c);
  if (!finalized && across_stages_ != MPI_COMM_NULL) MPI_Comm_free(&across_stages_);
  context_.reset();
}

void PipelineEngine::communicate(const PipelineOp& op, float* data) {
  const auto t0 = std::chrono::steady_clock::now();
  links_[op.group]->broadcast_async(comm::f32(data, op.bytes / sizeof(float)), sender_of(op)).wait();
  exposed_s_ += seconds_since(t0);
}

void PipelineEngine::run_program() {
  const parallel::StageSplit& s = schedule_->split();
  const int slots = parallel::micro_batches_in_flight(dims_.pipeline, stage_, micro_batches_);
  auto op = schedule_->ops().begin();
  for (const PipelineAction& a : schedule_->program()) {
    model::StageModel& m = stage_model(a.micro_batch);
    const int i = a.micro_batch;
    switch (a.kind) {
      case PipelineAction::Forward:
        losses_[i] = sharded_->forward_half(i % slots, tokens_[i].data(), targets_[i].data(), grad_scales_[i]);
        break;
      case PipelineAction::Backward: sharded_->backward_half(i % slots); break;
      case PipelineAction::SendActivation: communicate(*op++, m.residual(s.end_layer())); break;
      case PipelineAction::ReceiveActivation: communicate(*op++, m.residual(s.first_layer)); break;
      case PipelineAction::SendGradient:
      case PipelineAction::ReceiveGradient: communicate(*op++, m.residual_grad()); break;
    }
  }
}

float PipelineEngine::micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) {
  const std::size_t n = tokens_per_batch_;
  // Which of the step's micro-batches this is: the count of those kept so far.
  int i = 0;
  while (i < micro_batches_ && !tokens_[i].empty()) ++i;
  if (i == micro_batches_) throw Error(fmt::format("--pp: more than --grad-accum {} micro-batches in one step", micro_batches_));
  tokens_[i].assign(tokens, tokens + n);
  targets_[i].assign(targets, targets + n);
  grad_scales_[i] = grad_scale;
  if (i + 1 < micro_batches_) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  run_program();
  wall_s_ += seconds_since(t0);
  exposed_s_ += sharded_->take_timing().exposed_comm_s;
  for (auto& t : tokens_) t.clear();
  return schedule_->split().last ? static_cast<float>(std::accumulate(losses_.begin(), losses_.end(), 0.0)) : 0.f;
}

float PipelineEngine::eval_loss(const std::int32_t* tokens, const std::int32_t* targets) {
  const std::size_t n = tokens_per_batch_;
  const parallel::StageSplit& s = schedule_->split();
  model::StageModel& m = stage_model(0);
  tokens_[0].assign(tokens, tokens + n);
  targets_[0].assign(targets, targets + n);
  const std::uint64_t bytes = schedule_->activation_floats() * sizeof(float);
  auto send = [&](PipelineOp::Group g, float* data) {
    communicate({"activation-send", std::nullopt, g, 0, 0, 0, bytes}, data);
  };
  if (!s.first) send(PipelineOp::Previous, m.residual(s.first_layer));
  losses_[0] = sharded_->eval_loss(tokens_[0].data(), targets_[0].data());
  if (!s.last) send(PipelineOp::Next, m.residual(s.end_layer()));
  tokens_[0].clear();
  evaluated_since_report_ = true;
  return s.last ? static_cast<float>(losses_[0]) : 0.f;
}

train::StepOutcome PipelineEngine::optimizer_step(const optim::AdamWConfig& hp, const train::StepArgs& args) {
  const auto t0 = std::chrono::steady_clock::now();
  // The stage's reductions, the tied sum and the norm over the stages (PipelineStage).
  const train::StepOutcome out = sharded_->optimizer_step(hp, args);
  wall_s_ += seconds_since(t0);
  exposed_s_ += sharded_->take_timing().exposed_comm_s;
  return out;
}

void PipelineEngine::state_loaded() {
  sharded_->state_loaded();
  last_stats_ = context_->accounting().snapshot();
}

std::pair<double, bool> PipelineEngine::all_mean_and_any(double local, bool flag) {
  // The loss lives on the last stage: the mean is over its ranks. The stage's sum by its
  // schedule's op, then over the stages (under --tp every TP rank's loss counted: a mean over
  // the replicas' TP ranks).
  std::vector<double> v =
      sharded_->sum_over_levels({schedule_->split().last ? local : 0.0, flag ? 1.0 : 0.0}, Purpose::LossAllReduce);
  return {sum_over_stages(v[0]) / (dims_.data_parallel_size() * dims_.tensor), sum_over_stages(v[1]) > 0};
}

std::vector<std::string> PipelineEngine::all_gather_strings(const std::string& local) {
  return comm::all_gather_strings(MPI_COMM_WORLD, local, "pp:all_gather_strings", "world");
}

std::vector<train::StateShard> PipelineEngine::state_shards() { return sharded_->state_shards(); }

std::vector<train::StateShard> PipelineEngine::saved_shards() { return sharded_->saved_shards(); }

void PipelineEngine::gather_params(float* full) {
  // Each stage's units whole on its ranks (the tied copy left out), then summed over the stages.
  const std::size_t n = layout_.total_floats();
  std::fill(full, full + n, 0.f);
  sharded_->gather_params(full);
  MPI_Allreduce(MPI_IN_PLACE, full, static_cast<int>(n), MPI_FLOAT, MPI_SUM, across_stages_);
}

nlohmann::json PipelineEngine::describe() const {
  return {{"strategy", strategy_},
          {"pp", dims_.pipeline},
          {"tensor_parallel", dims_.tensor},
          {"world_size", dims_.world_size()}};
}

nlohmann::json PipelineEngine::step_report() {
  const comm::CommStats now = context_->accounting().snapshot();
  const comm::CommStats delta = now - last_stats_;
  last_stats_ = now;
  const double compute = std::max(0.0, wall_s_ - exposed_s_), exposed = exposed_s_;
  wall_s_ = exposed_s_ = 0;
  return add_step_report(step_reports_, delta, compute, exposed, std::exchange(evaluated_since_report_, false));
}

nlohmann::json PipelineEngine::scheduled_per_step() const {
  const comm::CommStats scheduled = traffic_per_step();
  // Summed over the world's ranks first, as the measured mean is.
  std::vector<double> p;
  for (const comm::TierTraffic& t : scheduled.tiers)
    p.insert(p.end(), {double(t.bytes_sent), double(t.bytes_received), double(t.messages)});
  MPI_Allreduce(MPI_IN_PLACE, p.data(), static_cast<int>(p.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  nlohmann::json out = nlohmann::json::object();
  static constexpr const char* kFields[] = {"bytes_sent", "bytes_received", "messages"};
  for (std::size_t t = 0; t < scheduled.tier_names.size(); ++t)
    for (std::size_t f = 0; f < std::size(kFields); ++f)
      out[scheduled.tier_names[t]][kFields[f]] = p[3 * t + f] / world_size();
  return out;
}

nlohmann::json PipelineEngine::summary_report() {
  const nlohmann::json measured = measured_summary(step_reports_, topology_.tier_names(), world_size());
  const nlohmann::json per_step_scheduled = scheduled_per_step();
  // Every stage's memory as its first rank (replica 0, TP rank 0) holds it, in stage order.
  const nlohmann::json memory = sharded_->memory_report();
  const bool first_of_stage = dims_.data_parallel_rank(rank_) == 0 && dims_.tensor_rank(rank_) == 0;
  nlohmann::json stages = nlohmann::json::array();
  for (const std::string& text :
       all_gather_strings(first_of_stage ? nlohmann::json{{"stage", stage_}, {"memory_bytes", memory}}.dump() : ""))
    if (!text.empty()) stages.push_back(nlohmann::json::parse(text));
  std::sort(stages.begin(), stages.end(), [](const auto& a, const auto& b) { return a["stage"] < b["stage"]; });
  return {{"strategy", strategy_},
          {"pipeline_stages", dims_.pipeline},
          {"tensor_parallel", dims_.tensor},
          {"world_size", world_size()},
          {"link_emulation", context_->emulation().enabled},
          {"compute_s", measured["compute_s"]},
          {"compute_max_s", measured["compute_max_s"]},
          {"exposed_comm_s", measured["exposed_comm_s"]},
          {"comm",
           {{"per_step", measured["per_step"]},
            {"scheduled_per_step", per_step_scheduled},
            {"steps_measured", measured["steps_measured"]}}},
          {"memory_bytes", memory},
          {"stages", stages}};
}

comm::CommStats PipelineEngine::traffic_per_step() const {
  return scheduled_traffic(*schedule_, members_, topology_, rank_);
}

}  // namespace strata::shard
