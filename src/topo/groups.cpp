#include "topo/groups.hpp"

#include <numeric>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace strata::topo {

nlohmann::json Group::to_json() const { return {{"name", name}, {"members", members}, {"index", index}}; }

ProcessGroups::ProcessGroups(const Topology& topology, MPI_Comm base) : topology_(topology) {
  int base_size = 0;
  MPI_Comm_size(base, &base_size);
  MPI_Comm_rank(base, &rank_);
  if (!topology_.resolved())
    throw Error(
        fmt::format("process groups: topology '{}' is not resolved for a world size", topology_.name()));
  if (topology_.world_size() != base_size)
    throw Error(
        fmt::format("process groups: topology '{}' is resolved for {} ranks but the communicator has {}",
                    topology_.name(), topology_.world_size(), base_size));
  MPI_Group base_group;
  MPI_Comm_group(base, &base_group);

  auto make = [&](int t, bool across) {
    const int domain = topology_.domain_of(rank_, t);
    const int inner = topology_.domain_ranks(t - 1);
    const int position = rank_ % inner;  // this rank's place inside its tier-(t-1) domain
    Group g;
    g.tier = t;
    g.across = across;
    const std::string& tier_name = topology_.tier(t).name;
    g.name = across ? fmt::format("across-{}#{}.{}", tier_name, domain, position)
                    : fmt::format("{}#{}", tier_name, domain);
    // Colours are unique per group; the key keeps rank order inside each communicator.
    const int color = across ? domain * inner + position : domain;
    MPI_Comm_split(base, color, rank_, &g.comm);
    // Members come from the communicator MPI built, not from the arithmetic above, so the
    // description is what the collectives will actually use.
    int n = 0;
    MPI_Comm_size(g.comm, &n);
    MPI_Comm_rank(g.comm, &g.index);
    std::vector<int> local(n);
    std::iota(local.begin(), local.end(), 0);
    g.members.resize(n);
    MPI_Group group;
    MPI_Comm_group(g.comm, &group);
    MPI_Group_translate_ranks(group, n, local.data(), base_group, g.members.data());
    MPI_Group_free(&group);
    return g;
  };
  for (int t = 0; t < topology_.num_tiers(); ++t) {
    within_.push_back(make(t, false));
    across_.push_back(make(t, true));
  }
  MPI_Group_free(&base_group);
}

ProcessGroups::~ProcessGroups() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto* groups : {&within_, &across_})
    for (Group& g : *groups)
      if (g.comm != MPI_COMM_NULL) MPI_Comm_free(&g.comm);
}

const Group& ProcessGroups::within_group(int t) const {
  if (t < 0 || t >= num_tiers())
    throw Error(fmt::format("process groups: tier index {} out of range [0, {})", t, num_tiers()));
  return within_[t];
}

const Group& ProcessGroups::across_group(int t) const {
  if (t < 0 || t >= num_tiers())
    throw Error(fmt::format("process groups: tier index {} out of range [0, {})", t, num_tiers()));
  return across_[t];
}

nlohmann::json ProcessGroups::to_json() const {
  nlohmann::json tiers = nlohmann::json::array();
  for (int t = 0; t < num_tiers(); ++t)
    tiers.push_back({{"tier", topology_.tier(t).name},
                     {"within", within_[t].to_json()},
                     {"across", across_[t].to_json()}});
  return {{"rank", rank_}, {"tiers", std::move(tiers)}};
}

}  // namespace strata::topo
