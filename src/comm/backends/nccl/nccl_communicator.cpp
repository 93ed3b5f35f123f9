#include "comm/backends/nccl/nccl_communicator.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "base/error.hpp"
#include "comm/runtime/wait.hpp"

namespace strata::comm {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("cuda: {}: {}", what, cudaGetErrorString(e)));
}
void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(fmt::format("nccl: {}: {}", what, ncclGetErrorString(r)));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    default: return ncclUint8;  // quantized data only moves, as bytes
  }
}

std::byte* bytes_at(const void* p, std::size_t offset) {
  return static_cast<std::byte*>(const_cast<void*>(p)) + offset;
}

// Completion of one enqueued operation: the event after it, and one before it for timing.
// A wait polls the event under the collective timeout (comm/wait.hpp): a peer that died or
// stalls leaves NCCL's kernel spinning on the GPU for ever, and cudaEventSynchronize with it.
class EventWork final : public WorkState {
 public:
  EventWork(cudaEvent_t start, cudaEvent_t done, NcclCommunicator& comm, Accounting* acc, std::string kind,
            int busy_tier)
      : start_(start), done_(done), comm_(comm), acc_(acc), kind_(std::move(kind)), busy_tier_(busy_tier) {}
  ~EventWork() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(done_);
  }
  void wait() override {
    double waited = 0;
    const double timeout = collective_timeout();
    if (!poll_until([&] { return test(); }, timeout, &waited)) {
      int me = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &me);
      std::vector<int> members;
      for (int i = 0; i < comm_.size(); ++i) members.push_back(comm_.world_rank_of(i));
      comm_.abort();  // else NCCL's kernels spin on, and MPI_Abort may wait for them
      abort_timed_out({me, kind_, comm_.name(), {members_awaited(members, me, "", "NCCL")}, waited, timeout,
                       definite_peers(members, me)});
    }
  }
  bool test() override {
    cudaError_t e = cudaEventQuery(done_);
    if (e == cudaErrorNotReady) {
      // NCCL reports a failure it detects (a network error, a peer gone) here, not on the event.
      ncclResult_t async = ncclSuccess;
      check(ncclCommGetAsyncError(comm_.nccl_comm(), &async), "ncclCommGetAsyncError");
      if (async != ncclSuccess && async != ncclInProgress)
        throw Error(fmt::format("nccl: {} on '{}': {}", kind_, comm_.name(), ncclGetErrorString(async)));
      return false;
    }
    check(e, "cudaEventQuery");
    record();
    return true;
  }

 private:
  void record() {
    if (recorded_ || !acc_) return;
    recorded_ = true;
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, done_), "cudaEventElapsedTime");
    // The start event fires once the stream reaches the op, so this is the op's own time on
    // the stream: its kind's time, and its tier's busy time (as the host communicators charge).
    acc_->record_time(kind_, double(ms) * 1e-3);
    acc_->record_busy(busy_tier_, double(ms) * 1e-3);
  }
  cudaEvent_t start_, done_;
  NcclCommunicator& comm_;
  Accounting* acc_;
  std::string kind_;
  int busy_tier_;
  bool recorded_ = false;
};

// Runs `enqueue` (returning the first failing NCCL result) inside ncclGroupStart/End, and
// always closes the group before reporting a failure.
template <class F>
void grouped(const char* what, F&& enqueue) {
  check(ncclGroupStart(), "ncclGroupStart");
  ncclResult_t r = enqueue();
  ncclResult_t end = ncclGroupEnd();
  check(r, what);
  check(end, "ncclGroupEnd");
}

}  // namespace

NcclCommunicator::NcclCommunicator(Context& ctx, MPI_Comm comm, std::string name)
    : MpiGroup(comm, std::move(name)), accounting_(&ctx.accounting()) {
  for (int w : world_ranks_) tiers_.push_back(ctx.topology().tier_between(ctx.world_rank(), w));
  busy_tier_ = *std::max_element(tiers_.begin(), tiers_.end());
  // The bootstrap waits for every member; NCCL's init cannot be polled.
  const BlockingCallWatchdog watchdog("ncclCommInitRank", name_, comm);
  ncclUniqueId id{};
  if (position_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, int(sizeof(id)), MPI_BYTE, 0, comm);
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaHostAlloc(reinterpret_cast<void**>(&pinned_byte_), 1, cudaHostAllocDefault), "cudaHostAlloc");
  check(ncclCommInitRank(&comm_, size(), id, position_), "ncclCommInitRank");
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
  }
  cudaStreamDestroy(stream_);
  cudaFreeHost(pinned_byte_);
}

void NcclCommunicator::abort() {
  if (!comm_) return;
  ncclCommAbort(comm_);
  comm_ = nullptr;
}

namespace {
// `waiter` waits (on the device) for what `signaller` holds now.
void order_streams(cudaStream_t signaller, cudaStream_t waiter) {
  cudaEvent_t e;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventRecord(e, signaller), "cudaEventRecord");
  check(cudaStreamWaitEvent(waiter, e, 0), "cudaStreamWaitEvent");
  check(cudaEventDestroy(e), "cudaEventDestroy");  // released once it completed
}
}  // namespace

void NcclCommunicator::after_compute(cudaStream_t compute) { order_streams(compute, stream_); }
void NcclCommunicator::before_compute(cudaStream_t compute) { order_streams(stream_, compute); }

void NcclCommunicator::charge(Algorithm algorithm, std::uint64_t message_bytes, int root) {
  charge_transfers(*accounting_, algorithm_transfers(algorithm, size(), position_, message_bytes, root), tiers_);
}

cudaEvent_t NcclCommunicator::start_event() {
  cudaEvent_t e;
  check(cudaEventCreate(&e), "cudaEventCreate");
  check(cudaEventRecord(e, stream_), "cudaEventRecord");
  return e;
}

Work NcclCommunicator::finish(std::string kind, cudaEvent_t start) {
  release_scratch();
  cudaEvent_t done;
  check(cudaEventCreate(&done), "cudaEventCreate");
  check(cudaEventRecord(done, stream_), "cudaEventRecord");
  return Work(std::make_shared<EventWork>(start, done, *this, accounting_, std::move(kind), busy_tier_));
}

Buf NcclCommunicator::device_scratch(DType t, std::size_t count, std::size_t block) {
  std::size_t data = (data_bytes(t, count) + 255) / 256 * 256;
  std::size_t scales = scale_count(t, count, block) * sizeof(float);
  void* p = nullptr;
  check(cudaMallocAsync(&p, data + scales + 1, stream_), "cudaMallocAsync");
  scratch_.push_back(p);
  return Buf(t, p, count, is_quantized(t) ? reinterpret_cast<float*>(bytes_at(p, data)) : nullptr, block);
}

void NcclCommunicator::release_scratch() {
  for (void* p : scratch_) check(cudaFreeAsync(p, stream_), "cudaFreeAsync");
  scratch_.clear();
}

Buf NcclCommunicator::padded_copy(const CBuf& src, std::size_t padded) {
  Buf b = device_scratch(src.dtype, padded, src.block);
  check(cudaMemsetAsync(b.data, 0, data_bytes(src.dtype, padded), stream_), "cudaMemsetAsync");
  check(cudaMemcpyAsync(b.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
  if (src.dtype == DType::I4 && src.count % 2 == 1) {
    // The last byte's high nibble is padding and must travel as zero: mask it on the host,
    // in stream order (no kernel needed for one byte).
    std::byte* last = bytes_at(b.data, src.bytes() - 1);
    check(cudaMemcpyAsync(pinned_byte_, last, 1, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
    check(cudaLaunchHostFunc(stream_, [](void* p) { *static_cast<unsigned char*>(p) &= 0x0f; }, pinned_byte_),
          "cudaLaunchHostFunc");
    check(cudaMemcpyAsync(last, pinned_byte_, 1, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
  }
  if (is_quantized(src.dtype)) {
    check(cudaMemsetAsync(b.scales, 0, b.n_scales() * sizeof(float), stream_), "cudaMemsetAsync");
    check(cudaMemcpyAsync(b.scales, src.scales, src.n_scales() * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync");
  }
  return b;
}

void NcclCommunicator::copy_prefix(const CBuf& src, const Buf& dst) {
  check(cudaMemcpyAsync(dst.data, src.data, dst.bytes(), cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
  if (is_quantized(dst.dtype))
    check(cudaMemcpyAsync(dst.scales, src.scales, dst.n_scales() * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync");
}

Work NcclCommunicator::all_gather_async(CBuf shard, Buf full) {
  check_all_gather(*this, shard, full);
  cudaEvent_t start = start_event();
  const std::size_t padded = shard.count * std::size_t(size());
  Buf out = full.count == padded ? full : device_scratch(full.dtype, padded, full.block);
  grouped("ncclAllGather", [&] {
    ncclResult_t r = ncclAllGather(shard.data, out.data, shard.bytes(), ncclUint8, comm_, stream_);
    if (r == ncclSuccess && is_quantized(shard.dtype))
      r = ncclAllGather(shard.scales, out.scales, shard.n_scales(), ncclFloat32, comm_, stream_);
    return r;
  });
  if (out.data != full.data) copy_prefix(out, full);
  charge(Algorithm::RingAllGather, wire_bytes(shard.dtype, shard.count, shard.block));
  return finish("nccl.all_gather", start);
}

Work NcclCommunicator::reduce_scatter_async(CBuf full, Buf shard, ReduceOp op) {
  check_reduce_scatter(*this, full, shard, op);
  return enqueue_reduce_scatter(full, shard, op == ReduceOp::Avg ? ncclAvg : ncclSum);
}

void NcclCommunicator::reduce_scatter_inline(CBuf full, Buf shard, float divisor) {
  check_reduce_scatter(*this, full, shard, ReduceOp::Sum);
  if (divisor == 1.0f) return enqueue_reduce_scatter(full, shard, ncclSum).wait();
  // The scalar is of the data's type (bf16/fp16 round 1/divisor; exact for powers of two).
  const float inverse = 1.0f / divisor;
  std::uint16_t half = 0;
  const void* scalar = &inverse;
  if (full.dtype == DType::BF16 || full.dtype == DType::F16) {
    half = full.dtype == DType::BF16 ? float_to_bf16(inverse) : float_to_fp16(inverse);
    scalar = &half;
  }
  ncclRedOp_t op;
  check(ncclRedOpCreatePreMulSum(&op, const_cast<void*>(scalar), nccl_type(full.dtype), ncclScalarHostImmediate,
                                 comm_),
        "ncclRedOpCreatePreMulSum");
  Work w = enqueue_reduce_scatter(full, shard, op);
  // Destroying the operator once the reduction is enqueued is allowed (NCCL keeps it alive).
  check(ncclRedOpDestroy(op, comm_), "ncclRedOpDestroy");
  w.wait();
}

Work NcclCommunicator::enqueue_reduce_scatter(CBuf full, Buf shard, ncclRedOp_t op) {
  cudaEvent_t start = start_event();
  const std::size_t padded = shard.count * std::size_t(size());
  CBuf in = full.count == padded ? full : CBuf(padded_copy(full, padded));
  check(ncclReduceScatter(in.data, shard.data, shard.count, nccl_type(full.dtype), op, comm_, stream_),
        "ncclReduceScatter");
  charge(Algorithm::RingReduceScatter, wire_bytes(shard.dtype, shard.count, shard.block));
  return finish("nccl.reduce_scatter", start);
}

Work NcclCommunicator::all_reduce_async(Buf data, ReduceOp op) {
  check_all_reduce(*this, data, op);
  cudaEvent_t start = start_event();
  check(ncclAllReduce(data.data, data.data, data.count, nccl_type(data.dtype), op == ReduceOp::Avg ? ncclAvg : ncclSum,
                      comm_, stream_),
        "ncclAllReduce");
  charge(Algorithm::RingAllReduce, data_bytes(data.dtype, chunk_count(data.count, size(), data.granule())));
  return finish("nccl.all_reduce", start);
}

Work NcclCommunicator::all_to_all_async(CBuf send, Buf recv) {
  check_all_to_all(*this, send, recv);
  cudaEvent_t start = start_event();
  CBuf in = send.count == recv.count ? send : CBuf(padded_copy(send, recv.count));
  const std::size_t c = recv.count / std::size_t(size());
  const std::size_t bytes = data_bytes(send.dtype, c), ns = scale_count(send.dtype, c, send.block);
  grouped("ncclSend/ncclRecv", [&] {
    ncclResult_t r = ncclSuccess;
    for (int p = 0; p < size() && r == ncclSuccess; ++p) {
      r = ncclSend(bytes_at(in.data, p * bytes), bytes, ncclUint8, p, comm_, stream_);
      if (r == ncclSuccess) r = ncclRecv(bytes_at(recv.data, p * bytes), bytes, ncclUint8, p, comm_, stream_);
      if (r == ncclSuccess && ns) r = ncclSend(in.scales + p * ns, ns, ncclFloat32, p, comm_, stream_);
      if (r == ncclSuccess && ns) r = ncclRecv(recv.scales + p * ns, ns, ncclFloat32, p, comm_, stream_);
    }
    return r;
  });
  charge(Algorithm::PairwiseAllToAll, wire_bytes(send.dtype, c, send.block));
  return finish("nccl.all_to_all", start);
}

Work NcclCommunicator::broadcast_async(Buf data, int root) {
  check_broadcast(*this, data, root);
  cudaEvent_t start = start_event();
  grouped("ncclBroadcast", [&] {
    ncclResult_t r = ncclBroadcast(data.data, data.data, data.bytes(), ncclUint8, root, comm_, stream_);
    if (r == ncclSuccess && is_quantized(data.dtype))
      r = ncclBroadcast(data.scales, data.scales, data.n_scales(), ncclFloat32, root, comm_, stream_);
    return r;
  });
  charge(Algorithm::BinomialBroadcast, wire_bytes(data.dtype, data.count, data.block), root);
  return finish("nccl.broadcast", start);
}

Work NcclCommunicator::barrier_async() {
  cudaEvent_t start = start_event();
  Buf token = device_scratch(DType::F32, 1, 0);
  check(cudaMemsetAsync(token.data, 0, sizeof(float), stream_), "cudaMemsetAsync");
  // An all-reduce completes on no member before every member contributed.
  check(ncclAllReduce(token.data, token.data, 1, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
  charge(Algorithm::DisseminationBarrier, 0);
  return finish("nccl.barrier", start);
}

}  // namespace strata::comm
