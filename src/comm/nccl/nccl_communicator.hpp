#pragma once
// Collectives on device memory through NCCL (built when CUDA and NCCL are found:
// STRATA_HAVE_NCCL). Same interface, layouts and padding rule as collectives.hpp; every
// Buf points to device memory of the current CUDA device. The communicator is
// bootstrapped over MPI: member 0 draws an ncclUniqueId and broadcasts it on `comm`.
//
// Non-blocking: each operation is enqueued on this communicator's own CUDA stream and its
// Work completes when an event recorded after it does (test = cudaEventQuery; wait polls
// it under the collective timeout of comm/wait.hpp). Operations run in submission order.
// Differences from the host backend, by NCCL's design: NCCL picks its own algorithm (ring
// or tree) and accumulates bf16/fp16 its own way, so per-tier bytes are not accounted
// (only GPU time, under "nccl.<kind>", when an Accounting is given) and link emulation
// does not apply. int8/int4 data moves as bytes and scales as fp32, in one NCCL group.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "comm/accounting.hpp"
#include "comm/collectives.hpp"

namespace strata::comm {

class NcclCommunicator final : public Collectives {
 public:
  // Collective over `comm`. `accounting` (optional) receives the GPU time of each operation.
  NcclCommunicator(MPI_Comm comm, std::string name, Accounting* accounting = nullptr);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  const std::string& name() const override { return name_; }
  int size() const override { return int(world_ranks_.size()); }
  int index() const override { return position_; }
  int world_rank_of(int index) const override { return world_ranks_.at(index); }
  cudaStream_t stream() const { return stream_; }
  ncclComm_t nccl_comm() const { return comm_; }

  Work all_gather_async(CBuf shard, Buf full) override;
  Work reduce_scatter_async(CBuf full, Buf shard, ReduceOp op) override;
  Work all_reduce_async(Buf data, ReduceOp op) override;
  Work all_to_all_async(CBuf send, Buf recv) override;
  Work broadcast_async(Buf data, int root) override;
  Work barrier_async() override;

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
  cudaEvent_t start_event();

  std::string name_;
  int position_ = 0;
  std::vector<int> world_ranks_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  Accounting* accounting_ = nullptr;
  std::vector<void*> scratch_;  // allocations of the operation being enqueued
  unsigned char* pinned_byte_ = nullptr;  // host staging for the int4 half-byte padding fix
};

}  // namespace strata::comm
