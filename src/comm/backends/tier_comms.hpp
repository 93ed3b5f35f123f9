#pragma once
// The collectives of every tier, built once from the topology's process groups:
//   within(t)        strata's flat algorithms over this rank's tier-t domain
//   across(t), t>=1  the same over the ranks at this rank's position in the sibling
//                    tier-(t-1) domains of its tier-t domain
//   hierarchical(t)  the composition within(0), across(1), ..., across(t): spans the same
//                    ranks as within(t), inner tiers first (layout: hierarchy.hpp)
//   mpi(t)           Open MPI's own collectives over within(t) (benchmark baseline)
// Names follow the groups: "node#1", "across-node#1.0", "hier:node#1", "mpi:node#1".
//
// These host groups always exist (host values: bootstrap, scalar sums). The backend chosen
// at construction gives the groups that move the training buffers, on the same process
// groups: Backend::Mpi the host ones above; Backend::Nccl an NCCL communicator on device
// buffers for within(0) and for each across(t) ("nccl:gpu#1", "nccl:across-node#1.0";
// nccl_communicator.hpp): the levels a sharded run moves its buffers on. Their hierarchical
// compositions ("hier:nccl:node#1") span what within(t) spans, with the copies, padding and
// sums between levels in device memory; no NCCL communicator is built for within(t), t >= 1
// (each costs GPU memory and start-up time, and nothing uses it), so backend_within(t >= 1)
// is an Error naming the group. Every rank creates the NCCL communicators in the same order
// (within(0), then across(1), across(2), ...), each bootstrapped over its group's MPI
// communicator, so no rank waits on a group its peers have not reached. Their traffic is
// charged to the same Accounting, per tier, by traffic.hpp's count.
#include <memory>
#include <string_view>
#include <vector>

struct CUstream_st;  // cudaStream_t, without the CUDA headers

#include "comm/backends/hierarchy.hpp"
#include "comm/backends/mpi_flat.hpp"
#include "comm/host/communicator.hpp"
#include "topo/groups.hpp"

namespace strata::comm {

enum class Backend { Mpi, Nccl };
std::string_view backend_name(Backend b);
// "mpi" or "nccl"; throws Error naming `field` otherwise.
Backend parse_backend(std::string_view name, std::string_view field);
// Whether this build has the NCCL backend (CUDA and NCCL found at configure time).
bool nccl_built();

class TierComms {
 public:
  // Collective over the world: every rank builds it at the same point. Backend::Nccl needs
  // a build with NCCL (else Error) and the rank's GPU selected (cudaSetDevice) before.
  TierComms(Context& ctx, const topo::ProcessGroups& groups, Backend backend = Backend::Mpi);
  ~TierComms();

  int num_tiers() const { return int(within_.size()); }
  Communicator& within(int t) { return *within_.at(t); }
  Communicator& across(int t);
  Hierarchy& hierarchical(int t) { return *hier_.at(t); }
  MpiFlat& mpi(int t) { return *mpi_.at(t); }

  // The backend's groups (for Backend::Mpi, the host ones above; Backend::Nccl has no
  // within(t) for t >= 1: use backend_hierarchical(t)).
  Backend backend() const { return backend_; }
  Collectives& backend_within(int t);
  Collectives& backend_across(int t);
  Hierarchy& backend_hierarchical(int t);
  // Backend::Nccl: orders, by events and without a host wait, every NCCL group's (and so
  // every hierarchy's) later operations after what `compute` holds now (the buffers it is
  // producing), or `compute`'s later work after the groups' operations so far (the buffers
  // they fill). Nothing to order for Backend::Mpi (host buffers).
  void after_compute(CUstream_st* compute);
  void before_compute(CUstream_st* compute);

 private:
  void order_against(CUstream_st* compute, bool after);

  Backend backend_;
  std::vector<std::unique_ptr<Communicator>> within_, across_;  // across_[0] stays empty
  std::vector<std::unique_ptr<Hierarchy>> hier_;
  std::vector<std::unique_ptr<MpiFlat>> mpi_;
  // Backend::Nccl only: within(0) and across(t) (across_device_[0] stays empty). Destroyed
  // first (declared last).
  std::unique_ptr<Collectives> innermost_device_;
  std::vector<std::unique_ptr<Collectives>> across_device_;
  std::vector<std::unique_ptr<Hierarchy>> hier_device_;
};

}  // namespace strata::comm
