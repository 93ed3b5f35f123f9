#include "comm/backends/mpi_flat.hpp"

#include <climits>
#include <cstdint>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/half.hpp"
#include "comm/api/reduce.hpp"

namespace strata::comm {

namespace {

template <float (*Load)(std::uint16_t), std::uint16_t (*Store)(float)>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = Store(Load(a[i]) + Load(b[i]));
}

int as_count(std::size_t n, std::string_view op) {
  if (n > std::size_t(INT_MAX)) throw Error(fmt::format("mpi {}: {} elements exceed MPI's int count", op, n));
  return int(n);
}

}  // namespace

MpiFlat::MpiFlat(Context& ctx, MPI_Comm comm, std::string name) : MpiGroup(comm, std::move(name)), ctx_(ctx) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Op_create(&sum16<bf16_to_float, float_to_bf16>, 1, &bf16_sum_);
  MPI_Op_create(&sum16<fp16_to_float, float_to_fp16>, 1, &f16_sum_);
}

MpiFlat::~MpiFlat() {
  ctx_.comm_thread().submit([] {}).wait();  // FIFO: nothing queued still uses the communicator
  MPI_Op_free(&bf16_sum_);
  MPI_Op_free(&f16_sum_);
  MPI_Comm_free(&comm_);
}

MPI_Datatype MpiFlat::mpi_type(DType t) const { return t == DType::F32 ? MPI_FLOAT : MPI_UINT16_T; }

MPI_Op MpiFlat::mpi_sum(DType t) const {
  if (t == DType::F32) return MPI_SUM;
  return t == DType::BF16 ? bf16_sum_ : f16_sum_;
}

Work MpiFlat::all_gather_async(CBuf shard, Buf full) {
  check_all_gather(*this, shard, full);
  return ctx_.run("mpi.all_gather", [=, this] { all_gather_inline(shard, full); });
}

void MpiFlat::all_gather_inline(CBuf shard, Buf full) {
  std::size_t padded = shard.count * std::size_t(size());
  Buf out = full.count == padded ? full : scratch_.view(0, full.dtype, padded, full.block);
  int bytes = as_count(shard.bytes(), "all_gather");
  MPI_Allgather(shard.data, bytes, MPI_BYTE, out.data, bytes, MPI_BYTE, comm_);
  if (is_quantized(shard.dtype)) {
    int n = as_count(shard.n_scales(), "all_gather");
    MPI_Allgather(shard.scales, n, MPI_FLOAT, out.scales, n, MPI_FLOAT, comm_);
  }
  if (out.data != full.data) copy_elements(out, 0, full, 0, full.count);
}

Work MpiFlat::reduce_scatter_async(CBuf full, Buf shard, ReduceOp op) {
  check_reduce_scatter(*this, full, shard, op);
  return ctx_.run("mpi.reduce_scatter", [=, this] {
    reduce_scatter_inline(full, shard, op == ReduceOp::Avg ? float(size()) : 1.0f);
  });
}

void MpiFlat::reduce_scatter_inline(CBuf full, Buf shard, float divisor) {
  std::size_t padded = shard.count * std::size_t(size());
  CBuf in = full.count == padded ? full : CBuf(scratch_.padded_copy(0, full, padded));
  MPI_Reduce_scatter_block(in.data, shard.data, as_count(shard.count, "reduce_scatter"), mpi_type(full.dtype),
                           mpi_sum(full.dtype), comm_);
  if (divisor != 1.0f) scale_elements(shard.dtype, shard.data, shard.data, shard.count, divisor);
}

Work MpiFlat::all_reduce_async(Buf data, ReduceOp op) {
  check_all_reduce(*this, data, op);
  return ctx_.run("mpi.all_reduce", [=, this] {
    MPI_Allreduce(MPI_IN_PLACE, data.data, as_count(data.count, "all_reduce"), mpi_type(data.dtype),
                  mpi_sum(data.dtype), comm_);
    if (op == ReduceOp::Avg) scale_elements(data.dtype, data.data, data.data, data.count, float(size()));
  });
}

Work MpiFlat::all_to_all_async(CBuf send, Buf recv) {
  check_all_to_all(*this, send, recv);
  return ctx_.run("mpi.all_to_all", [=, this] { all_to_all_inline(send, recv); });
}

void MpiFlat::all_to_all_inline(CBuf send, Buf recv) {
  CBuf in = send.count == recv.count ? send : CBuf(scratch_.padded_copy(0, send, recv.count));
  std::size_t c = recv.count / std::size_t(size());
  int bytes = as_count(data_bytes(send.dtype, c), "all_to_all");
  MPI_Alltoall(in.data, bytes, MPI_BYTE, recv.data, bytes, MPI_BYTE, comm_);
  if (is_quantized(send.dtype)) {
    int n = as_count(scale_count(send.dtype, c, send.block), "all_to_all");
    MPI_Alltoall(in.scales, n, MPI_FLOAT, recv.scales, n, MPI_FLOAT, comm_);
  }
}

Work MpiFlat::broadcast_async(Buf data, int root) {
  check_broadcast(*this, data, root);
  return ctx_.run("mpi.broadcast", [=, this] {
    MPI_Bcast(data.data, as_count(data.bytes(), "broadcast"), MPI_BYTE, root, comm_);
    if (is_quantized(data.dtype)) MPI_Bcast(data.scales, as_count(data.n_scales(), "broadcast"), MPI_FLOAT, root, comm_);
  });
}

Work MpiFlat::barrier_async() {
  return ctx_.run("mpi.barrier", [this] { MPI_Barrier(comm_); });
}

}  // namespace strata::comm
