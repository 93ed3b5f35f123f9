#pragma once
// Collectives on device memory through NCCL (built when CUDA and NCCL are found:
// STRATA_HAVE_NCCL). Same interface, layouts and padding rule as collectives.hpp; every
// Buf points to device memory of the current CUDA device. The communicator is
// bootstrapped over MPI: member 0 draws an ncclUniqueId and broadcasts it on `comm`.
//
// Non-blocking: each operation is enqueued on this communicator's own CUDA stream and its
// Work completes when an event recorded after it does (test = cudaEventQuery; wait polls
// it under the collective timeout of comm/wait.hpp, and on expiry aborts the NCCL
// communicator, then reports and ends the job as the host collectives do). Operations run
// in submission order.
// Accounting: NCCL picks its own algorithm (ring or tree) and strata sees none of its
// messages, so each operation charges the context's Accounting with what strata's host
// algorithm of the same collective and size sends and receives, peer by peer and so tier by
// tier (traffic.hpp, the count the host's measured figures are tested against), and its GPU
// time under "nccl.<kind>" and as its outermost tier's busy time. NCCL accumulates bf16/fp16 its own way (results may differ from
// the host's in the last bit) and link emulation does not apply. int8/int4 data moves as
// bytes and scales as fp32, in one NCCL group.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "comm/instrument/traffic.hpp"
#include "comm/runtime/context.hpp"
#include "comm/runtime/mpi_group.hpp"

namespace strata::comm {

class NcclCommunicator final : public MpiGroup {
 public:
  // Collective over `comm` (bootstrapped over it; every member creates its communicators in
  // the same order). Traffic and GPU time go to ctx's Accounting; ctx's topology says which
  // tier each member is across.
  NcclCommunicator(Context& ctx, MPI_Comm comm, std::string name);
  ~NcclCommunicator() override;

  cudaStream_t stream() const { return stream_; }
  // Ordering against a compute stream without blocking the host, through events:
  // after_compute: every later operation starts after what `compute` holds so far (the
  // buffers it produces); before_compute: what `compute` gets later starts after this
  // communicator's operations so far (the buffers they fill).
  void after_compute(cudaStream_t compute);
  void before_compute(cudaStream_t compute);
  ncclComm_t nccl_comm() const { return comm_; }

  Work all_gather_async(CBuf shard, Buf full) override;
  Work reduce_scatter_async(CBuf full, Buf shard, ReduceOp op) override;
  Work all_reduce_async(Buf data, ReduceOp op) override;
  Work all_to_all_async(CBuf send, Buf recv) override;
  Work broadcast_async(Buf data, int root) override;
  Work barrier_async() override;
  // A composition's average divides by more than this group's size: NCCL's pre-multiplied
  // sum (by 1/divisor) does it in the reduction.
  void reduce_scatter_inline(CBuf full, Buf shard, float divisor) override;
  // After a timed-out wait: ends NCCL's kernels and the communicator (ncclCommAbort).
  void abort();

 private:
  // A device buffer of `count` elements of t (data, then scales) from the stream-ordered
  // allocator, freed on the stream once the operation using it is enqueued.
  Buf device_scratch(DType t, std::size_t count, std::size_t block);
  // src copied into a device scratch of `padded` elements, the rest zero.
  Buf padded_copy(const CBuf& src, std::size_t padded);
  void copy_prefix(const CBuf& src, const Buf& dst);  // dst.count elements, data and scales
  void release_scratch();
  // Records the completion event and makes the handle (with GPU timing from `start`).
  Work finish(std::string kind, cudaEvent_t start);
  // Charges what strata's host `algorithm` would send and receive (traffic.hpp).
  void charge(Algorithm algorithm, std::uint64_t message_bytes, int root = 0);
  Work enqueue_reduce_scatter(CBuf full, Buf shard, ncclRedOp_t op);
  cudaEvent_t start_event();

  std::vector<int> tiers_;  // the tier a message to each member crosses
  int busy_tier_ = 0;       // the outermost of them: where this group's GPU time is charged
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  Accounting* accounting_ = nullptr;
  std::vector<void*> scratch_;  // allocations of the operation being enqueued
  unsigned char* pinned_byte_ = nullptr;  // host staging for the int4 half-byte padding fix
};

}  // namespace strata::comm
