#pragma once
// The collectives of every tier, built once from the topology's process groups:
//   within(t)        strata's flat algorithms over this rank's tier-t domain
//   across(t), t>=1  the same over the ranks at this rank's position in the sibling
//                    tier-(t-1) domains of its tier-t domain
//   hierarchical(t)  the composition within(0), across(1), ..., across(t): spans the same
//                    ranks as within(t), inner tiers first (layout: hierarchy.hpp)
//   mpi(t)           Open MPI's own collectives over within(t) (benchmark baseline)
// Names follow the groups: "node#1", "across-node#1.0", "hier:node#1", "mpi:node#1".
#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/hierarchy.hpp"
#include "comm/mpi_flat.hpp"
#include "topo/groups.hpp"

namespace strata::comm {

class TierComms {
 public:
  // Collective over the world: every rank builds it at the same point.
  TierComms(Context& ctx, const topo::ProcessGroups& groups);

  int num_tiers() const { return int(within_.size()); }
  Communicator& within(int t) { return *within_.at(t); }
  Communicator& across(int t);
  Hierarchy& hierarchical(int t) { return *hier_.at(t); }
  MpiFlat& mpi(int t) { return *mpi_.at(t); }

 private:
  std::vector<std::unique_ptr<Communicator>> within_, across_;  // across_[0] stays empty
  std::vector<std::unique_ptr<Hierarchy>> hier_;
  std::vector<std::unique_ptr<MpiFlat>> mpi_;
};

}  // namespace strata::comm
