#include "parallel/dims.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::parallel {

ParallelDims ParallelDims::data_parallel(const topo::Topology& topology) {
  if (!topology.resolved()) throw Error("parallel dims: the topology is not resolved against a world size");
  ParallelDims d;
  d.data_levels.clear();
  for (const topo::Tier& t : topology.tiers()) d.data_levels.push_back(t.size);
  return d;
}

int ParallelDims::data_parallel_size() const {
  int n = 1;
  for (int s : data_levels) n *= s;
  return n;
}

}  // namespace strata::parallel
