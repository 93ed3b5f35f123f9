#pragma once
// The MPI communicators a tiered collective needs, built once from a resolved Topology.
//
// For tier t, with D(t) = domain_ranks(t) and D(-1) = 1:
//   within(t): the ranks sharing this rank's tier-t domain: rank / D(t) equal.
//              For the outermost tier that is the whole base communicator.
//   across(t): the ranks of this rank's tier-t domain that sit at the same position
//              inside their tier-(t-1) domain: rank / D(t) and rank % D(t-1) equal;
//              tier(t).size members. The outer step of a hierarchical collective.
//              across(0) has the same members as within(0) (D(-1) = 1).
// Example, 2 nodes x 2 GPUs x 2 dies (tiers gpu 2, node 2, cluster 2), rank 5:
//   gpu#2 {4,5}  node#1 {4,5,6,7}  across-node#1.1 {5,7}  cluster#0 {0..7}  across-cluster#0.1 {1,5}
// Members are listed in rank order, and a rank's index in a group is its rank in the
// group's communicator.
#include <string>
#include <vector>

#include <mpi.h>
#include <nlohmann/json_fwd.hpp>

#include "topo/topology.hpp"

namespace strata::topo {

struct Group {
  std::string name;  // "node#1" (within) or "across-node#1.0" (across)
  int tier = 0;      // index into the topology's tiers
  bool across = false;
  std::vector<int> members;  // ranks of the base communicator, ascending
  int index = 0;             // this rank's position in members (its rank in comm)
  MPI_Comm comm = MPI_COMM_NULL;

  int size() const { return static_cast<int>(members.size()); }
  nlohmann::json to_json() const;  // name, members, index
};

class ProcessGroups {
 public:
  // Collective over `base`: every rank calls it with the same topology. The topology must
  // be resolved for the size of `base`; throws Error otherwise.
  explicit ProcessGroups(const Topology& topology, MPI_Comm base = MPI_COMM_WORLD);
  ~ProcessGroups();  // frees the communicators (unless MPI is already finalised)
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;
  ProcessGroups(ProcessGroups&&) = default;  // the moved-from object owns no communicator
  ProcessGroups& operator=(ProcessGroups&&) = delete;

  const Topology& topology() const { return topology_; }
  int rank() const { return rank_; }
  int size() const { return topology_.world_size(); }
  int num_tiers() const { return topology_.num_tiers(); }

  MPI_Comm within(int t) const { return within_group(t).comm; }
  MPI_Comm across(int t) const { return across_group(t).comm; }
  const Group& within_group(int t) const;
  const Group& across_group(int t) const;

  // {"rank": r, "tiers": [{"tier": "gpu", "within": Group, "across": Group}, ...]}
  nlohmann::json to_json() const;

 private:
  Topology topology_;
  int rank_ = 0;
  std::vector<Group> within_, across_;  // one per tier
};

}  // namespace strata::topo
