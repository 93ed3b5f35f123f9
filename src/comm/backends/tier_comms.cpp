#include "comm/backends/tier_comms.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#ifdef STRATA_HAVE_NCCL
#include "comm/backends/nccl/device_memory.hpp"
#include "comm/backends/nccl/nccl_communicator.hpp"
#endif

namespace strata::comm {

std::string_view backend_name(Backend b) { return b == Backend::Mpi ? "mpi" : "nccl"; }

Backend parse_backend(std::string_view name, std::string_view field) {
  if (name == "mpi") return Backend::Mpi;
  if (name == "nccl") return Backend::Nccl;
  throw Error(fmt::format("{} = '{}': not a communication backend (mpi, nccl)", field, name));
}

bool nccl_built() {
#ifdef STRATA_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

namespace {

std::unique_ptr<Collectives> device_group(Context& ctx, MPI_Comm comm, const std::string& name) {
#ifdef STRATA_HAVE_NCCL
  return std::make_unique<NcclCommunicator>(ctx, comm, "nccl:" + name);
#else
  (void)ctx, (void)comm;
  throw Error(fmt::format("comm backend nccl (group '{}'): this strata was built without NCCL (CUDA toolkit and "
                          "NCCL not found at configure time, or -DSTRATA_CUDA=OFF)",
                          name));
#endif
}

// On the innermost level's stream, so that ordering that level orders the memory's work.
std::unique_ptr<SlotMemory> device_memory(Collectives& innermost) {
#ifdef STRATA_HAVE_NCCL
  return std::make_unique<DeviceSlotMemory>(static_cast<NcclCommunicator&>(innermost).stream());
#else
  (void)innermost;
  return nullptr;  // unreachable: device_group refused first
#endif
}

}  // namespace

TierComms::TierComms(Context& ctx, const topo::ProcessGroups& groups, Backend backend) : backend_(backend) {
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
    std::vector<Collectives*> levels{within_[0].get()};
    for (int u = 1; u <= t; ++u) levels.push_back(across_[u].get());
    hier_.push_back(std::make_unique<Hierarchy>("hier:" + within_[t]->name(), ctx, levels));
  }
  if (backend_ != Backend::Nccl) return;
  // The same order on every rank: each creation waits for all members of its group.
  innermost_device_ = device_group(ctx, groups.within_group(0).comm, groups.within_group(0).name);
  across_device_.emplace_back();
  for (int t = 1; t < T; ++t)
    across_device_.push_back(device_group(ctx, groups.across_group(t).comm, groups.across_group(t).name));
  for (int t = 0; t < T; ++t) {
    std::vector<Collectives*> levels{innermost_device_.get()};
    for (int u = 1; u <= t; ++u) levels.push_back(across_device_[u].get());
    hier_device_.push_back(std::make_unique<Hierarchy>("hier:nccl:" + within_[t]->name(), ctx, levels,
                                                       device_memory(*levels[0])));
  }
}

TierComms::~TierComms() = default;

void TierComms::after_compute(CUstream_st* compute) { order_against(compute, true); }
void TierComms::before_compute(CUstream_st* compute) { order_against(compute, false); }

void TierComms::order_against(CUstream_st* compute, bool after) {
#ifdef STRATA_HAVE_NCCL
  std::vector<Collectives*> nccl_groups;
  if (innermost_device_) nccl_groups.push_back(innermost_device_.get());
  for (auto& g : across_device_)
    if (g) nccl_groups.push_back(g.get());  // across(0) is empty
  for (Collectives* g : nccl_groups) {
    auto& nccl = static_cast<NcclCommunicator&>(*g);
    if (after)
      nccl.after_compute(compute);
    else
      nccl.before_compute(compute);
  }
#else
  (void)compute, (void)after;  // no NCCL groups in this build
#endif
}

Communicator& TierComms::across(int t) {
  if (t < 1 || t >= num_tiers())
    throw Error(fmt::format("tier comms: across({}) needs a tier in [1, {})", t, num_tiers()));
  return *across_[t];
}

Collectives& TierComms::backend_within(int t) {
  if (backend_ == Backend::Mpi) return within(t);
  const Communicator& host = *within_.at(t);  // the same range check
  if (t == 0) return *innermost_device_;
  throw Error(fmt::format("tier comms: within({}) of tier group '{}' has no NCCL communicator: the NCCL backend "
                          "builds within(0) and across(t), a sharded run's levels; backend_hierarchical({}) spans "
                          "the same ranks",
                          t, host.name(), t));
}

Collectives& TierComms::backend_across(int t) {
  if (backend_ == Backend::Mpi) return across(t);
  across(t);  // the same range check
  return *across_device_[t];
}

Hierarchy& TierComms::backend_hierarchical(int t) {
  if (backend_ == Backend::Mpi) return hierarchical(t);
  return *hier_device_.at(t);
}

}  // namespace strata::comm
