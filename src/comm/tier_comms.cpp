#include "comm/tier_comms.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::comm {

TierComms::TierComms(Context& ctx, const topo::ProcessGroups& groups) {
  const int T = groups.num_tiers();
  for (int t = 0; t < T; ++t) {
    const auto& w = groups.within_group(t);
    within_.push_back(std::make_unique<Communicator>(ctx, w.comm, w.name));
    if (t == 0) {
      across_.emplace_back();
    } else {
      const auto& a = groups.across_group(t);
      across_.push_back(std::make_unique<Communicator>(ctx, a.comm, a.name));
    }
    mpi_.push_back(std::make_unique<MpiFlat>(ctx, w.comm, "mpi:" + w.name));
  }
  for (int t = 0; t < T; ++t) {
    std::vector<Communicator*> levels{within_[0].get()};
    for (int u = 1; u <= t; ++u) levels.push_back(across_[u].get());
    hier_.push_back(std::make_unique<Hierarchy>("hier:" + within_[t]->name(), levels));
  }
}

Communicator& TierComms::across(int t) {
  if (t < 1 || t >= num_tiers())
    throw Error(fmt::format("tier comms: across({}) needs a tier in [1, {})", t, num_tiers()));
  return *across_[t];
}

}  // namespace strata::comm
