#include "parallel/dims.hpp"

#include <functional>
#include <numeric>

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

ParallelDims ParallelDims::model_parallel(const topo::Topology& topology, int tensor, int tensor_level, int pipeline,
                                          int pipeline_level) {
  ParallelDims d = data_parallel(topology);
  auto take = [&](const char* flag, int degree, int level) {
    if (degree <= 0) throw Error(fmt::format("{} {}: must be positive", flag, degree));
    if (level < 0 || level >= topology.num_tiers())
      throw Error(fmt::format("{}: no tier {} in topology '{}'", flag, level, topology.name()));
    const int left = d.data_levels[level];
    if (left % degree != 0)
      throw Error(fmt::format("{} {}: does not divide what tier '{}' has left ({}{}); choose a divisor of {}", flag,
                              degree, topology.tier(level).name, left,
                              left == topology.tier(level).size ? "" : " after the other slice", left));
    d.data_levels[level] = left / degree;
  };
  take("--tp", tensor, tensor_level);
  take("--pp", pipeline, pipeline_level);
  d.tensor = tensor;
  d.tensor_level = tensor_level;
  d.pipeline = pipeline;
  d.pipeline_level = pipeline_level;
  return d;
}

int ParallelDims::tensor_stride() const {
  return std::accumulate(data_levels.begin(), data_levels.begin() + tensor_level, 1, std::multiplies<>());
}

int ParallelDims::data_parallel_rank(int world_rank) const {
  const int stride = tensor_stride();
  const int r = world_rank / (stride * tensor) * stride + world_rank % stride;
  // The stages likewise (above the TP slice's tier): ranks of one stage are the replicas.
  const int pipeline_stride =
      std::accumulate(data_levels.begin(), data_levels.begin() + pipeline_level, 1, std::multiplies<>());
  return r / (pipeline_stride * pipeline) * pipeline_stride + r % pipeline_stride;
}

topo::Topology ParallelDims::data_parallel_topology(const topo::Topology& physical) const {
  std::vector<topo::Tier> tiers = physical.tiers();
  int physical_ranks = 1, data_ranks = 1;  // ranks in one domain of the tier inside, before and after the split
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i].ports > 0) tiers[i].port_GBps *= static_cast<double>(data_ranks) / physical_ranks;
    physical_ranks *= tiers[i].size;
    tiers[i].size = data_levels[i];
    data_ranks *= tiers[i].size;
  }
  topo::Topology out(std::move(tiers), physical.name());
  out.resolve(data_parallel_size());
  return out;
}

int ParallelDims::data_parallel_size() const {
  return std::accumulate(data_levels.begin(), data_levels.end(), 1, std::multiplies<>());
}

}  // namespace strata::parallel
