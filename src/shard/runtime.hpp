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
#include "model/config.hpp"
#include "shard/sharded_engine.hpp"
#include "shard/spec.hpp"
#include "topo/groups.hpp"
#include "topo/topology.hpp"

namespace strata::shard {

// What a user chooses for a sharded run ([shard] in a config file, or flags).
struct ShardOptions {
  std::string strategy;                  // preset name; empty = single process, no sharding
  std::string topology = "host";         // preset name or TOML file
  std::vector<std::string> tier_overrides;  // NAME.FIELD=VALUE
  std::string shard;                     // "W=gpu,G=node,OS=cluster" on top of the preset
  std::string secondary;                 // tier or "none"; empty = the preset's
  std::string weight_wire, grad_wire, step_grad_wire;  // empty = the preset's
  int block_size = 0;                    // 0 = the preset's (256)
  int prefetch = -1;                     // -1 = the preset's (1)
  bool keep_weights_after_forward = false;
  bool emulate_links = false;
  double emulate_scale = 1.0;

  bool sharded() const { return !strategy.empty(); }
};

// The topology and spec the options describe, for a world of `world_size` ranks. Throws
// Error naming the option and the problem.
topo::Topology resolve_topology(const ShardOptions& options, int world_size);
ShardSpec build_spec(const ShardOptions& options, const topo::Topology& topology);

class ShardedRuntime {
 public:
  // Collective over MPI_COMM_WORLD (MPI must be initialised).
  ShardedRuntime(const ShardOptions& options, const model::GPTConfig& config, int batch, int seq,
                 int accumulation_steps, std::uint64_t seed);
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
