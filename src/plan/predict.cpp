#include "plan/predict.hpp"

#include <algorithm>

#include "comm/backends/hierarchy.hpp"
#include "comm/instrument/emulation.hpp"

namespace strata::plan {

namespace {
// The slowest of the messages m -> m+shift (mod d).
double step_seconds(const topo::Topology& topo, const std::vector<int>& members, int shift, std::size_t bytes,
                    double scale) {
  const int d = int(members.size());
  double worst = 0;
  for (int m = 0; m < d; ++m) {
    int t = topo.tier_between(members[m], members[(m + shift) % d]);
    worst = std::max(worst, comm::link_seconds(topo.tier(t), bytes, scale));
  }
  return worst;
}
}  // namespace

double ring_pass_seconds(const topo::Topology& topo, const std::vector<int>& members, std::size_t chunk_bytes,
                         double scale) {
  if (members.size() < 2) return 0;
  return double(members.size() - 1) * step_seconds(topo, members, 1, chunk_bytes, scale);
}

double pairwise_exchange_seconds(const topo::Topology& topo, const std::vector<int>& members,
                                 std::size_t chunk_bytes, double scale) {
  double total = 0;
  for (int s = 1; s < int(members.size()); ++s) total += step_seconds(topo, members, s, chunk_bytes, scale);
  return total;
}

double predict_seconds(const topo::Topology& topo, const comm::Collectives& group, Collective kind,
                       std::size_t total_bytes, double scale) {
  std::vector<int> m;
  for (int i = 0; i < group.size(); ++i) m.push_back(group.world_rank_of(i));
  const std::size_t chunk = total_bytes / m.size();
  switch (kind) {
    case Collective::AllGather:
    case Collective::ReduceScatter: return ring_pass_seconds(topo, m, chunk, scale);
    case Collective::AllReduce: return 2 * ring_pass_seconds(topo, m, chunk, scale);
    case Collective::AllToAll: return pairwise_exchange_seconds(topo, m, chunk, scale);
  }
  return 0;
}

double predict_seconds(const topo::Topology& topo, const comm::Hierarchy& group, Collective kind,
                       std::size_t total_bytes, double scale) {
  if (kind == Collective::AllReduce)
    return predict_seconds(topo, group, Collective::ReduceScatter, total_bytes, scale) +
           predict_seconds(topo, group, Collective::AllGather, total_bytes, scale);
  double total = 0;
  std::size_t carried = total_bytes;
  for (int l = 0; l < group.num_levels(); ++l) {
    const comm::Collectives& level = group.level(l);
    total += predict_seconds(topo, level, kind, carried, scale);
    if (kind != Collective::AllToAll) carried /= std::size_t(level.size());
  }
  return total;
}

}  // namespace strata::plan
