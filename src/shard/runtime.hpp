#pragma once
// Everything a sharded run holds, built in dependency order under mpirun: the topology
// resolved for the world, the communication context (accounting, link emulation, comm
// thread), the tier groups and their collectives, and the ShardedEngine. With --tp the
// world splits twice: into TP groups (ParallelDims: consecutive domains of --tp-tier) and
// into the ranks of each TP index, whose tier groups the sharding runs over.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "comm/backends/tier_comms.hpp"
#include "comm/host/communicator.hpp"
#include "comm/runtime/context.hpp"
#include "device/device.hpp"
#include "model/config.hpp"
#include "parallel/dims.hpp"
#include "parallel/options.hpp"
#include "shard/sharded_engine.hpp"
#include "shard/spec.hpp"
#include "topo/groups.hpp"
#include "topo/topology.hpp"

namespace strata::shard {

// The topology the options describe (preset or file, --tier overrides), for any world size yet.
topo::Topology load_topology(const parallel::ShardOptions& options);
// The same, for a world of `world_size` ranks. Throws Error naming the option and the problem.
topo::Topology resolve_topology(const parallel::ShardOptions& options, int world_size);
// The fewest ranks the options' topology takes: one domain of the tier inside the outermost,
// times the outermost tier's size where it is given. Not for "host" (measured under mpirun).
int fewest_ranks(const parallel::ShardOptions& options);
// `spec` (a strategy's preset) with the options' overrides, resolved against `topology` (what
// the sharding runs over: the data-parallel topology under --tp). The one resolution of
// options to a spec: `strata train` (build_spec) and `strata plan` (its strategies) both run it.
ShardSpec apply_options(ShardSpec spec, const parallel::ShardOptions& options, const topo::Topology& topology);
// The run's spec: the strategy's preset, named preset+custom when the options change its traffic.
ShardSpec build_spec(const parallel::ShardOptions& options, const topo::Topology& topology);
// The run's data- and tensor-parallel dims (--tp over --tp-tier, the innermost tier by
// default); Error names the flag.
parallel::ParallelDims build_dims(const parallel::ShardOptions& options, const topo::Topology& topology);

// What a run of `world_size` ranks is, every rule checked before anything is built: the
// physical topology, the parallel dims, the topology the sharding runs over (the physical one
// without --tp) and the spec resolved against it. The runtime and --print-schedule
// --world-size both start from it.
struct RunLayout {
  topo::Topology topology;
  parallel::ParallelDims dims;
  topo::Topology data_parallel;
  ShardSpec spec;
};
RunLayout resolve_run(const parallel::ShardOptions& options, const model::ModelConfig& config, int world_size);

// The collectives each level of the schedule runs on: for buffers in the compute device's
// memory and for host values (executor.hpp's LevelCollectives), and whatever was built for
// them, kept alive by the runtime (adapters destroyed before the groups they wrap).
struct TierCollectives {
  LevelCollectives levels;
  std::unique_ptr<comm::TierComms> comms;  // a device backend's groups (NCCL's), when built for the run
  std::vector<std::unique_ptr<comm::Collectives>> owned;
};
// The seam where the tier collectives are chosen by device: given the run's tier groups,
// strata's MPI Communicators over them (`mpi`: the host levels) and the device, returns the
// collectives of every level. Collective over the world.
using TierCollectivesFactory = std::function<TierCollectives(comm::Context& ctx, const topo::ProcessGroups& groups,
                                                              comm::TierComms& mpi, device::Device& device)>;
// The default: the MPI Communicators, device and host levels alike, where the host addresses
// the device's memory. Any other device is refused, naming what its levels are: NCCL
// communicators per tier group (nccl_tier_collectives).
TierCollectives host_tier_collectives(comm::Context& ctx, const topo::ProcessGroups& groups, comm::TierComms& mpi,
                                      device::Device& device);
#ifdef STRATA_HAVE_NCCL
// The cuda device's (a build with NCCL; comm::nccl_built()): comm::TierComms with
// Backend::Nccl over the same groups, its within(0) and across(t) groups as the device levels,
// each waiting for the device's stream before every operation (nccl_levels.cpp says why that
// orders them), and `mpi`'s as the host levels. The process's GPU is chosen and the cuda
// device made before (device::choose_gpu, device_named); any other device is refused.
TierCollectives nccl_tier_collectives(comm::Context& ctx, const topo::ProcessGroups& groups, comm::TierComms& mpi,
                                      device::Device& device);
#endif

class ShardedRuntime {
 public:
  // Collective over MPI_COMM_WORLD (MPI must be initialised). `tier_collectives` chooses what
  // the levels run on for `device`'s memory.
  ShardedRuntime(const parallel::ShardOptions& options, const model::ModelConfig& config, int batch, int seq,
                 int accumulation_steps, std::uint64_t seed, device::Device& device, bool recompute = false,
                 Precision precision = Precision::F32,
                 const TierCollectivesFactory& tier_collectives = host_tier_collectives);
  ~ShardedRuntime();

  ShardedEngine& engine() { return *engine_; }
  const topo::Topology& topology() const { return context_->topology(); }

 private:
  std::unique_ptr<comm::Context> context_;
  MPI_Comm data_parallel_comm_ = MPI_COMM_NULL, tensor_parallel_comm_ = MPI_COMM_NULL;  // --tp only
  std::unique_ptr<topo::ProcessGroups> groups_;
  std::unique_ptr<comm::TierComms> comms_;
  TierCollectives levels_;
  std::unique_ptr<comm::Communicator> tensor_group_;
  std::unique_ptr<ShardedEngine> engine_;
};

}  // namespace strata::shard
