#pragma once
// Open MPI's own collectives behind the Collectives interface: MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Allreduce, MPI_Alltoall, MPI_Bcast, MPI_Barrier on a
// duplicate of the group's communicator, run on the communication thread. A baseline for
// benchmarks: same layouts and padding as collectives.hpp, bf16/fp16 summed in fp32 by a
// user MPI_Op (average divides afterwards). MPI picks its own algorithms and sends its own
// messages, so per-tier bytes cannot be accounted and link emulation does not apply; only
// wall time is recorded, under "mpi.<kind>". int8/int4 gathers move data and scales as two
// MPI collectives.
#include <mpi.h>

#include <string>
#include <vector>

#include "comm/api/wire.hpp"
#include "comm/runtime/context.hpp"
#include "comm/runtime/mpi_group.hpp"

namespace strata::comm {

class MpiFlat final : public MpiGroup {
 public:
  MpiFlat(Context& ctx, MPI_Comm comm, std::string name);
  ~MpiFlat() override;

  Work all_gather_async(CBuf shard, Buf full) override;
  Work reduce_scatter_async(CBuf full, Buf shard, ReduceOp op) override;
  Work all_reduce_async(Buf data, ReduceOp op) override;
  Work all_to_all_async(CBuf send, Buf recv) override;
  Work broadcast_async(Buf data, int root) override;
  Work barrier_async() override;
  void all_gather_inline(CBuf shard, Buf full) override;
  void reduce_scatter_inline(CBuf full, Buf shard, float divisor) override;
  void all_to_all_inline(CBuf send, Buf recv) override;

 private:
  MPI_Datatype mpi_type(DType t) const;
  MPI_Op mpi_sum(DType t) const;

  Context& ctx_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL, f16_sum_ = MPI_OP_NULL;
  Scratch scratch_;
};

}  // namespace strata::comm
