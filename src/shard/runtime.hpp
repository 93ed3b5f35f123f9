#pragma once
// Everything a sharded run holds, built in dependency order under mpirun: the topology
// resolved for the world, the communication context (accounting, link emulation, comm
// thread), the tier groups and their collectives, and the ShardedEngine.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/context.hpp"
#include "comm/tier_comms.hpp"
#include "device/device.hpp"
#include "model/config.hpp"
#include "parallel/options.hpp"
#include "shard/sharded_engine.hpp"
#include "shard/spec.hpp"
#include "topo/groups.hpp"
#include "topo/topology.hpp"

namespace strata::shard {

// The topology and spec the options describe, for a world of `world_size` ranks. Throws
// Error naming the option and the problem.
topo::Topology resolve_topology(const parallel::ShardOptions& options, int world_size);
ShardSpec build_spec(const parallel::ShardOptions& options, const topo::Topology& topology);

class ShardedRuntime {
 public:
  // Collective over MPI_COMM_WORLD (MPI must be initialised).
  ShardedRuntime(const parallel::ShardOptions& options, const model::GPTConfig& config, int batch, int seq,
                 int accumulation_steps, std::uint64_t seed, device::Device& device,
                 bool recompute = false);
  ~ShardedRuntime();

  ShardedEngine& engine() { return *engine_; }
  const topo::Topology& topology() const { return context_->topology(); }

 private:
  std::unique_ptr<comm::Context> context_;
  std::unique_ptr<topo::ProcessGroups> groups_;
  std::unique_ptr<comm::TierComms> comms_;
  std::unique_ptr<ShardedEngine> engine_;
};

}  // namespace strata::shard
