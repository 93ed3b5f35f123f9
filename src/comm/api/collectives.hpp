#pragma once
// One interface for every way strata runs a collective over a group of ranks:
//   Communicator  - host memory, strata's own algorithms over MPI point-to-point (ring
//                   all-gather / reduce-scatter / all-reduce, pairwise all-to-all, binomial
//                   broadcast, dissemination barrier), every message accounted and, when
//                   asked, link-emulated;
//   Hierarchy     - compositions of Communicators over nested tiers (hierarchy.hpp, run
//                   as chains of per-level steps, compose.hpp);
//   MpiFlat       - Open MPI's own collectives (a baseline for benchmarks);
//   NcclCommunicator - device memory through NCCL (built when CUDA is found).
//
// Data layout, the same for all of them. A group has d members; member m has an index()
// in [0, d) (a Communicator: its position in rank order; a Hierarchy: see hierarchy.hpp).
// A buffer of n elements is cut into d chunks of c = chunk_count(n, d, granule) elements
// (see dtype.hpp; the part past n is zero padding). Then
//   all_gather(shard[c], full[n])       member k contributes chunk k; all receive all of [0, n)
//   reduce_scatter(full[n], shard[c])   member k receives chunk k of the element-wise sum (or
//                                       average) over members; padding elements come out 0
//   all_reduce(data[n])                 every member receives the element-wise sum/average
//   all_to_all(send[n], recv[d*c])      chunk k of member j's send lands in slot j of member
//                                       k's recv (recv is always d whole chunks)
//   broadcast(data[n], root)            member `root` (an index) sends data to all
//   barrier()                           returns once every member entered
// Reductions accumulate in fp32: bf16/fp16 values are widened per element, summed in fp32
// and rounded (to nearest even) back when stored or sent. Average divides the final fp32
// sum by d once. int8/int4 buffers (data + scales) are moved, never reduced: asking to
// reduce them is an Error naming the operation and dtype.
//
// Every operation has a non-blocking form returning a Work handle; the blocking form is
// the same plus wait(). Buffers must stay alive and untouched until the handle finished.
// All members must call the same collectives on the group in the same order.
#include <string>
#include <string_view>

#include "comm/api/buffer.hpp"
#include "comm/api/work.hpp"

namespace strata::comm {

enum class ReduceOp { Sum, Avg };
std::string_view reduce_op_name(ReduceOp op);

class Collectives {
 public:
  virtual ~Collectives() = default;

  virtual const std::string& name() const = 0;
  virtual int size() const = 0;
  virtual int index() const = 0;
  virtual int world_rank_of(int index) const = 0;  // world rank of the member with that index

  virtual Work all_gather_async(CBuf shard, Buf full) = 0;
  virtual Work reduce_scatter_async(CBuf full, Buf shard, ReduceOp op) = 0;
  virtual Work all_reduce_async(Buf data, ReduceOp op) = 0;
  virtual Work all_to_all_async(CBuf send, Buf recv) = 0;
  virtual Work broadcast_async(Buf data, int root) = 0;
  virtual Work barrier_async() = 0;

  // The same collectives run on the calling thread, inside a task already ordered among
  // the process's collectives: a schedule executor runs a chain of per-level ops, with
  // encoding between them, as one such task on the communication thread. The defaults wait
  // for the asynchronous forms, right for backends that enqueue on their own stream
  // (NCCL); backends whose asynchronous forms queue on the communication thread override.
  // A reduction divides its final fp32 sums by `divisor` (1: sum; a composition over
  // several levels averages over all of them at its last, compose.hpp).
  virtual void all_gather_inline(CBuf shard, Buf full) { all_gather_async(shard, full).wait(); }
  virtual void reduce_scatter_inline(CBuf full, Buf shard, float divisor);
  virtual void all_to_all_inline(CBuf send, Buf recv) { all_to_all_async(send, recv).wait(); }
  virtual void broadcast_inline(Buf data, int root) { broadcast_async(data, root).wait(); }
  virtual void barrier_inline() { barrier_async().wait(); }

  void all_gather(CBuf shard, Buf full) { all_gather_async(shard, full).wait(); }
  void reduce_scatter(CBuf full, Buf shard, ReduceOp op) { reduce_scatter_async(full, shard, op).wait(); }
  void all_reduce(Buf data, ReduceOp op) { all_reduce_async(data, op).wait(); }
  void all_to_all(CBuf send, Buf recv) { all_to_all_async(send, recv).wait(); }
  void broadcast(Buf data, int root) { broadcast_async(data, root).wait(); }
  void barrier() { barrier_async().wait(); }

  // Elements per chunk for n elements of `t` (with `block` for int8/int4) on this group.
  std::size_t chunk_elements(std::size_t n, DType t, std::size_t block = 0) const {
    return chunk_count(n, size(), granule(t, block));
  }
};

// Argument checks shared by every implementation; each throws Error naming the group, the
// operation and the mismatch.
void check_all_gather(const Collectives& g, const CBuf& shard, const Buf& full);
void check_reduce_scatter(const Collectives& g, const CBuf& full, const Buf& shard, ReduceOp op);
void check_all_reduce(const Collectives& g, const Buf& data, ReduceOp op);
void check_all_to_all(const Collectives& g, const CBuf& send, const Buf& recv);
void check_broadcast(const Collectives& g, const Buf& data, int root);

}  // namespace strata::comm
