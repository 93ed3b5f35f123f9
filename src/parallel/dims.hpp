#pragma once
// The parallel dimensions of a run: how its ranks split into data-parallel replicas. Data
// sharding (which batches a rank reads) and gradient averaging (what the summed gradient is
// divided by) take their sizes from here, never from the world size, so a model-parallel
// dimension changes this object and not its users.
//
// Tensor parallelism takes a slice of one tier (usually the innermost): `tensor` consecutive
// ranks of that tier hold one replica between them, read the same batches and average
// nothing among themselves. Pipeline parallelism takes a slice of another tier (usually the
// outermost): `pipeline` domains of it hold one stage each. A tier of size s holding a
// slice of t becomes a data-parallel level of s/t. The runtime runs all three (TP inside a
// pipeline's sharded stages, parallel/pipeline.hpp); the planner prices them from this object.
//
// Rank order: a TP group is `tensor` consecutive domains of the tier inside tensor_level
// (consecutive ranks for the innermost tier), its members D apart, D = the ranks of one such
// domain; the stages likewise `pipeline` consecutive domains of the tier inside
// pipeline_level. A rank's TP index is its place in that group; its data-parallel rank counts
// the replicas in rank order.
#include <vector>

#include "topo/topology.hpp"

namespace strata::parallel {

struct ParallelDims {
  std::vector<int> data_levels{1};  // data-parallel ranks per level, inner first
  int tensor = 1;                   // consecutive ranks sharing one replica (1: none)
  int tensor_level = 0;             // the tier whose ranks the tensor slice takes
  int pipeline = 1;                 // pipeline stages (1: none)
  int pipeline_level = 0;           // the tier whose domains the stages take

  // Every rank of a resolved topology a data-parallel replica, one level per tier.
  static ParallelDims data_parallel(const topo::Topology& topology);
  // `tensor` ranks of tier `tensor_level` and `pipeline` domains of tier `pipeline_level`
  // taken out of the data-parallel levels; refuses (naming --tp / --pp) a degree that does
  // not divide what its tier has left.
  static ParallelDims model_parallel(const topo::Topology& topology, int tensor, int tensor_level, int pipeline,
                                     int pipeline_level);

  int data_parallel_size() const;  // replicas: the product of the levels
  int world_size() const { return data_parallel_size() * tensor * pipeline; }
  // The replica a rank reads batches for (the stages of one replica read the same), and the
  // rank's index in its TP group. The ranks of one TP index, in world rank order, are the
  // replicas in data-parallel rank order.
  int data_parallel_rank(int world_rank) const;
  int tensor_rank(int world_rank) const { return world_rank / tensor_stride() % tensor; }
  // The topology data-parallel sharding runs over: each tier's size is its data-parallel
  // level, its figures the physical tier's (a tier of size 1 is one the TP slice took
  // whole). Ports keep their per-physical-rank share: every TP rank and stage crosses a
  // tier at once.
  topo::Topology data_parallel_topology(const topo::Topology& physical) const;

 private:
  int tensor_stride() const;  // world ranks between the members of a TP group
};

}  // namespace strata::parallel
