// A sharded run's tier collectives on the cuda device (runtime.hpp's nccl_tier_collectives),
// in a build with NCCL only.
#ifdef STRATA_HAVE_NCCL
#include <fmt/format.h>

#include "base/error.hpp"
#include "comm/backends/nccl/nccl_communicator.hpp"
#include "device/cuda/cuda_device.hpp"
#include "shard/runtime.hpp"

namespace strata::shard {

namespace {

// One level's NCCL group, ordered after the compute stream before each of its operations.
// Why per operation, and why that suffices: the executor enqueues everything it does between
// a chain's ops (copies, encoding, sums: DeviceChainWork and the codec) on the cuda device's
// one stream, in the host's order, then calls the next op, whose stream now waits (on the GPU,
// by an event) for all that stream holds: what the op reads has been written. Every form the
// executor calls returns once its operation finished (the inline forms wait for its event),
// so what it enqueues next on the compute stream, reading what the op wrote, follows it in
// the host's order. Ordering once at a task's start would miss the encodes and sums between
// its ops.
class AfterCompute final : public comm::Collectives {
 public:
  AfterCompute(comm::NcclCommunicator& group, device::cuda::Stream compute) : group_(group), compute_(compute) {}

  const std::string& name() const override { return group_.name(); }
  int size() const override { return group_.size(); }
  int index() const override { return group_.index(); }
  int world_rank_of(int index) const override { return group_.world_rank_of(index); }

  comm::Work all_gather_async(comm::CBuf shard, comm::Buf full) override {
    return ordered().all_gather_async(shard, full);
  }
  comm::Work reduce_scatter_async(comm::CBuf full, comm::Buf shard, comm::ReduceOp op) override {
    return ordered().reduce_scatter_async(full, shard, op);
  }
  comm::Work all_reduce_async(comm::Buf data, comm::ReduceOp op) override {
    return ordered().all_reduce_async(data, op);
  }
  comm::Work all_to_all_async(comm::CBuf send, comm::Buf recv) override {
    return ordered().all_to_all_async(send, recv);
  }
  comm::Work broadcast_async(comm::Buf data, int root) override { return ordered().broadcast_async(data, root); }
  comm::Work barrier_async() override { return group_.barrier_async(); }  // reads no buffer
  // NCCL's own (a composition's divisor in the reduction); the other inline forms are the
  // defaults, which wait for the asynchronous ones above.
  void reduce_scatter_inline(comm::CBuf full, comm::Buf shard, float divisor) override {
    ordered().reduce_scatter_inline(full, shard, divisor);
  }

 private:
  comm::NcclCommunicator& ordered() {
    group_.after_compute(compute_);
    return group_;
  }

  comm::NcclCommunicator& group_;
  device::cuda::Stream compute_;
};

}  // namespace

TierCollectives nccl_tier_collectives(comm::Context& ctx, const topo::ProcessGroups& groups, comm::TierComms& mpi,
                                      device::Device& device) {
  if (device.name() != "cuda")
    throw Error(fmt::format("train.device = '{}': NCCL's tier collectives move the cuda device's buffers, not this "
                            "device's",
                            device.name()));
  // The communication thread enqueues the executor's device work and NCCL's operations: like
  // the thread that made the device, it must address the process's GPU.
  ctx.comm_thread().submit([] { device::cuda::use_gpu_on_this_thread(); }).wait();
  TierCollectives out;
  out.comms = std::make_unique<comm::TierComms>(ctx, groups, comm::Backend::Nccl);
  for (int t = 0; t < groups.num_tiers(); ++t) {
    comm::Collectives& level = t == 0 ? out.comms->backend_within(0) : out.comms->backend_across(t);
    out.owned.push_back(
        std::make_unique<AfterCompute>(static_cast<comm::NcclCommunicator&>(level), device::cuda::gpu_stream()));
    out.levels.device.push_back(out.owned.back().get());
  }
  out.levels.host = mpi_levels(mpi).host;
  return out;
}

}  // namespace strata::shard
#endif
