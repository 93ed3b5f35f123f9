#pragma once
// The parallel dimensions of a run: how its ranks split into data-parallel replicas. Data
// sharding (which batches a rank reads) and gradient averaging (what the summed gradient is
// divided by) take their sizes from here, never from the world size, so a model-parallel
// dimension changes this object and not its users.
//
// Today every rank is a data-parallel replica: the data-parallel levels are the topology's
// tiers. Tensor parallelism would take a slice of the innermost tier: `tensor` consecutive
// ranks then hold one replica between them, read the same batches and average nothing
// among themselves.
#include <vector>

#include "topo/topology.hpp"

namespace strata::parallel {

struct ParallelDims {
  std::vector<int> data_levels{1};  // data-parallel ranks per level, inner first
  int tensor = 1;                   // consecutive ranks sharing one replica (1: none)

  // Every rank of a resolved topology a data-parallel replica, one level per tier.
  static ParallelDims data_parallel(const topo::Topology& topology);

  int data_parallel_size() const;  // replicas: the product of the levels
  int world_size() const { return data_parallel_size() * tensor; }
  int data_parallel_rank(int world_rank) const { return world_rank / tensor; }
};

}  // namespace strata::parallel
