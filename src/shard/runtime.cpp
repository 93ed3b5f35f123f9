#include "shard/runtime.hpp"

#include <optional>

#include <fmt/format.h>

#include "base/error.hpp"
#include "comm/agree.hpp"
#include "comm/wait.hpp"

namespace strata::shard {

topo::Topology resolve_topology(const parallel::ShardOptions& options, int world_size) {
  topo::Topology t = topo::Topology::load(options.topology);
  for (const std::string& o : options.tier_overrides) t.apply_override(topo::parse_tier_override(o));
  t.resolve(world_size);
  return t;
}

ShardSpec build_spec(const parallel::ShardOptions& options, const topo::Topology& topology) {
  ShardSpec spec = ShardSpec::preset_for(options.strategy, topology);
  const std::string preset = spec.preset;
  bool changed = false;
  if (!options.shard.empty()) {
    spec.apply_shard_string(options.shard);
    changed = true;
  }
  if (!options.secondary.empty()) spec.secondary = options.secondary, changed = true;
  if (!options.weight_wire.empty()) spec.weight_wire = comm::parse_dtype(options.weight_wire, "shard.weight_wire"), changed = true;
  if (!options.grad_wire.empty()) spec.grad_wire = comm::parse_dtype(options.grad_wire, "shard.grad_wire"), changed = true;
  if (!options.step_grad_wire.empty())
    spec.step_grad_wire = comm::parse_dtype(options.step_grad_wire, "shard.step_grad_wire"), changed = true;
  if (options.block_size != 0) spec.block_size = options.block_size, changed = true;
  if (options.prefetch >= 0) spec.prefetch = options.prefetch;
  if (options.prefetch < -1) throw Error(fmt::format("shard.prefetch = {}: must be >= 0", options.prefetch));
  if (options.keep_weights_after_forward) spec.free_after_forward = false;
  if (options.bucket_bytes >= 0) spec.bucket_bytes = static_cast<std::uint64_t>(options.bucket_bytes);
  // A preset with its traffic changed is named after both, so tables never mislabel it.
  spec.preset = changed ? preset + "+custom" : preset;
  resolve(spec, topology);  // every rule checked before anything is allocated
  return spec;
}

ShardedRuntime::ShardedRuntime(const parallel::ShardOptions& options, const model::GPTConfig& config, int batch, int seq,
                               int accumulation_steps, std::uint64_t seed, device::Device& device, bool recompute) {
  // Host detection and communicator creation block inside MPI until every rank takes part.
  const comm::BlockingCallWatchdog watchdog("start-up (topology, communicators)", "world", MPI_COMM_WORLD);
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // Every rank reads the same topology and settings: a refusal is agreed on and reported once.
  std::optional<topo::Topology> topology;
  std::optional<ShardSpec> spec;
  comm::agree(MPI_COMM_WORLD, "world", [&] {
    topology.emplace(resolve_topology(options, world));
    spec.emplace(build_spec(options, *topology));
    if (options.emulate_scale <= 0)
      throw Error(fmt::format("shard.emulate_scale = {}: must be positive", options.emulate_scale));
  });
  context_ = std::make_unique<comm::Context>(*topology, comm::EmulationOptions{options.emulate_links, options.emulate_scale});
  groups_ = std::make_unique<topo::ProcessGroups>(context_->topology());
  comms_ = std::make_unique<comm::TierComms>(*context_, *groups_);
  engine_ = std::make_unique<ShardedEngine>(config, batch, seq, *context_, *comms_, *spec, accumulation_steps, seed,
                                            device, recompute);
}

ShardedRuntime::~ShardedRuntime() {
  // The engine's collectives must finish before the groups and the comm thread go away.
  engine_.reset();
  comms_.reset();
  groups_.reset();
  context_.reset();
}

}  // namespace strata::shard
