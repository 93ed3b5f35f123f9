#include "shard/runtime.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "comm/runtime/agree.hpp"
#include "comm/runtime/wait.hpp"
#include "model/layout.hpp"

namespace strata::shard {

topo::Topology load_topology(const parallel::ShardOptions& options) {
  topo::Topology t = topo::Topology::load(options.topology);
  for (const std::string& o : options.tier_overrides) t.apply_override(topo::parse_tier_override(o));
  return t;
}

topo::Topology resolve_topology(const parallel::ShardOptions& options, int world_size) {
  topo::Topology t = load_topology(options);
  t.resolve(world_size);
  return t;
}

int fewest_ranks(const parallel::ShardOptions& options) {
  const topo::Topology t = load_topology(options);
  return t.ranks_per_outer_domain() * std::max(1, t.tier(t.outermost()).size);  // size 0: not given
}

ShardSpec apply_options(ShardSpec spec, const parallel::ShardOptions& options, const topo::Topology& topology) {
  if (!options.shard.empty()) spec.apply_shard_string(options.shard);
  if (!options.secondary.empty()) spec.secondary = options.secondary;
  if (!options.weight_wire.empty()) spec.weight_wire = parse_dtype(options.weight_wire, "shard.weight_wire");
  if (!options.grad_wire.empty()) spec.grad_wire = parse_dtype(options.grad_wire, "shard.grad_wire");
  if (!options.step_grad_wire.empty())
    spec.step_grad_wire = parse_dtype(options.step_grad_wire, "shard.step_grad_wire");
  if (options.block_size != 0) spec.block_size = options.block_size;
  if (options.prefetch >= 0) spec.prefetch = options.prefetch;
  if (options.prefetch < -1) throw Error(fmt::format("shard.prefetch = {}: must be >= 0", options.prefetch));
  if (options.keep_weights_after_forward) spec.free_after_forward = false;
  if (options.bucket_bytes >= 0) spec.bucket_bytes = static_cast<std::uint64_t>(options.bucket_bytes);
  if (options.first_bucket_bytes >= 0) spec.first_bucket_bytes = static_cast<std::uint64_t>(options.first_bucket_bytes);
  resolve(spec, topology);  // every rule checked before anything is allocated or priced
  return spec;
}

ShardSpec build_spec(const parallel::ShardOptions& options, const topo::Topology& topology) {
  ShardSpec spec = ShardSpec::preset_for(options.strategy, topology);
  // A preset with its traffic changed is named after both, so tables never mislabel it.
  if (options.changes_traffic()) spec.preset += "+custom";
  return apply_options(std::move(spec), options, topology);
}

parallel::ParallelDims build_dims(const parallel::ShardOptions& options, const topo::Topology& topology) {
  int level = 0;
  if (!options.tp_tier.empty()) {
    const std::optional<int> t = topology.find_tier(options.tp_tier);
    if (!t)
      throw Error(fmt::format("--tp-tier '{}': unknown tier '{}' (tiers of '{}': {})", options.tp_tier,
                              options.tp_tier, topology.name(), fmt::join(topology.tier_names(), ", ")));
    level = *t;
  }
  return parallel::ParallelDims::model_parallel(topology, options.tp, level, 1, topology.outermost());
}

RunLayout resolve_run(const parallel::ShardOptions& options, const model::ModelConfig& config, int world_size) {
  topo::Topology topology = resolve_topology(options, world_size);
  const parallel::ParallelDims dims = build_dims(options, topology);
  static_cast<void>(model::ParamLayout(config, {dims.tensor, 0}));  // a model that does not split is refused
  topo::Topology data_parallel = dims.tensor > 1 ? dims.data_parallel_topology(topology) : topology;
  ShardSpec spec = build_spec(options, data_parallel);
  return {std::move(topology), dims, std::move(data_parallel), std::move(spec)};
}

TierCollectives host_tier_collectives(comm::Context&, const topo::ProcessGroups&, comm::TierComms& mpi,
                                      device::Device& device) {
  if (!device.host_visible())
    throw Error(fmt::format("train.device = '{}': the sharding engine runs on it, but these tier collectives are "
                            "MPI over host memory; its levels are NCCL communicators per tier group "
                            "(shard::nccl_tier_collectives, in a build with NCCL)",
                            device.name()));
  return {mpi_levels(mpi), nullptr, {}};
}

ShardedRuntime::ShardedRuntime(const parallel::ShardOptions& options, const model::ModelConfig& config, int batch, int seq,
                               int accumulation_steps, std::uint64_t seed, device::Device& device, bool recompute,
                               Precision precision, const TierCollectivesFactory& tier_collectives) {
  // Host detection and communicator creation block inside MPI until every rank takes part.
  const comm::BlockingCallWatchdog watchdog("start-up (topology, communicators)", "world", MPI_COMM_WORLD);
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // Every rank reads the same topology and settings: a refusal is agreed on and reported once.
  std::optional<RunLayout> run;
  comm::agree(MPI_COMM_WORLD, "world", [&] {
    run.emplace(resolve_run(options, config, world));
    // A model or micro-batch sequence parallelism cannot shard is refused here, once.
    static_cast<void>(tensor_parallel_plan(run->dims, config, batch, seq, recompute, options.sequence_parallel));
    if (options.emulate_scale <= 0)
      throw Error(fmt::format("shard.emulate_scale = {}: must be positive", options.emulate_scale));
  });
  const ShardSpec& spec = run->spec;
  const parallel::ParallelDims& dims = run->dims;
  context_ = std::make_unique<comm::Context>(run->topology, comm::EmulationOptions{options.emulate_links, options.emulate_scale});
  const int rank = context_->world_rank();
  if (dims.tensor == 1) {
    groups_ = std::make_unique<topo::ProcessGroups>(context_->topology());
  } else {
    // The ranks of one TP index, in world order, are the data-parallel ranks in order
    // (dims.hpp): the key keeps that order inside each communicator.
    MPI_Comm_split(MPI_COMM_WORLD, dims.tensor_rank(rank), rank, &data_parallel_comm_);
    MPI_Comm_split(MPI_COMM_WORLD, dims.data_parallel_rank(rank), rank, &tensor_parallel_comm_);
    groups_ = std::make_unique<topo::ProcessGroups>(run->data_parallel, data_parallel_comm_);
  }
  comms_ = std::make_unique<comm::TierComms>(*context_, *groups_);
  levels_ = tier_collectives(*context_, *groups_, *comms_, device);
  std::optional<TensorParallelism> tp;
  if (dims.tensor > 1) {
    tensor_group_ = std::make_unique<comm::Communicator>(*context_, tensor_parallel_comm_,
                                                         fmt::format("tp#{}", dims.data_parallel_rank(rank)));
    tp = TensorParallelism{dims, tensor_group_.get(), options.sequence_parallel};
  }
  engine_ = std::make_unique<ShardedEngine>(config, batch, seq, *context_, levels_.levels, spec, accumulation_steps,
                                            seed, device, recompute, tp, precision);
}

ShardedRuntime::~ShardedRuntime() {
  // The engine's collectives must finish before the groups and the comm thread go away.
  engine_.reset();
  tensor_group_.reset();
  levels_ = {};
  comms_.reset();
  groups_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  for (MPI_Comm* c : {&data_parallel_comm_, &tensor_parallel_comm_})
    if (!finalized && *c != MPI_COMM_NULL) MPI_Comm_free(c);
  context_.reset();
}

}  // namespace strata::shard
