#pragma once
// A flat group of ranks running strata's own host algorithms over MPI point-to-point
// (one algorithm per file: ring_all_gather.cpp, ring_reduce_scatter.cpp,
// ring_all_reduce.cpp, pairwise_all_to_all.cpp, binomial_broadcast.cpp,
// dissemination_barrier.cpp). Member index = position in the MPI communicator (rank
// order for the groups of groups.hpp); the layouts are those of collectives.hpp.
//
// Every message goes through sendrecv/send/recv/run_pipelined/relay below, which charge it to the tier it
// crosses in the context's Accounting and, with link emulation on, hold it back (see
// emulation.hpp), and every wait for one has the collective timeout's deadline (wait.hpp).
// Ring algorithms: member m sends to m+1 and receives from m-1 (mod d).
// Closed forms, c = chunk bytes (data + scales) after padding, d = size():
//   all_gather, reduce_scatter: d-1 messages of c to the right neighbour
//   all_reduce: 2(d-1) messages of c to the right neighbour
//   all_to_all: d-1 messages of c, one to every other member
//   broadcast (binomial tree): the root sends ceil(log2 d) messages of the whole buffer
//   barrier (dissemination): ceil(log2 d) messages of 0 bytes
#include <mpi.h>

#include <array>
#include <string>
#include <vector>

#include "comm/api/wire.hpp"
#include "comm/runtime/context.hpp"
#include "comm/runtime/mpi_group.hpp"
#include "comm/runtime/pieces.hpp"
#include "comm/runtime/queued.hpp"

namespace strata::comm {

// The steps of a ring algorithm or of the pairwise all-to-all as the pipeline runs them
// (Communicator::run_pipelined): `steps()` exchanges of `count()` elements each, step s
// sending to the member shift(s) places right and receiving from the one shift(s) places
// left; elements [first, first + n) of step s are sent from send(), received into recv(),
// then handed to received() (a reduction, or nothing). The pipeline calls received(s, piece)
// only once that piece of step s is both in and sent, and reads send(s + 1, piece) /
// overwrites recv(s + 1, piece) only after received(s, piece).
class PipelinedSteps {
 public:
  virtual ~PipelinedSteps() = default;
  virtual int steps() const = 0;
  virtual std::size_t count() const = 0;
  virtual std::size_t granule() const = 0;
  virtual int shift(int /*step*/) const { return 1; }  // 1: a ring's neighbours
  virtual WireChunk send(int step, std::size_t first, std::size_t n) = 0;
  virtual WireChunk recv(int step, std::size_t first, std::size_t n) = 0;
  virtual void received(int /*step*/, std::size_t /*first*/, std::size_t /*n*/) {}
};

// One message's MPI requests: its data bytes, then, for int8/int4, its scales as a second
// contiguous MPI message (MPI_REQUEST_NULL otherwise). Never one message of a derived datatype
// over both arrays: Open MPI 4.1's TCP transport hangs on non-contiguous messages when a peer
// has several connections (btl_tcp_links 2, strata's default; docs/cluster.md).
using MessageRequests = std::array<MPI_Request, 2>;
inline MessageRequests no_requests() { return {MPI_REQUEST_NULL, MPI_REQUEST_NULL}; }

class Communicator final : public QueuedCollectives<MpiGroup> {
 public:
  // Duplicates `comm` (collective over its members), so strata's messages never mix with
  // other traffic on it. `comm` itself stays owned by the caller.
  Communicator(Context& ctx, MPI_Comm comm, std::string name);
  ~Communicator() override;

  Context& context() { return ctx_; }
  // The outermost tier a message from this rank to `member` crosses.
  int tier_to(int member) const { return tiers_.at(member); }

  // ---- On the communication thread only (algorithms, Hierarchy) ----
  // The collectives with the padding rule applied (sizes as in collectives.hpp); a
  // reduction divides its final fp32 sums by `divisor` (1 = sum).
  void all_gather_inline(CBuf shard, Buf full) override;
  void reduce_scatter_inline(CBuf full, Buf shard, float divisor) override;
  void all_reduce_inline(Buf data, float divisor) override;
  void all_to_all_inline(CBuf send, Buf recv) override;
  void broadcast_inline(Buf data, int root) override;
  void barrier_inline() override;

  // Point-to-point between members, accounted and emulated. One message each way (on the
  // wire, a quantized one is two: see MessageRequests).
  void sendrecv(const WireChunk& out, int dst, const WireChunk& in, int src);
  // The exchanges of a ring algorithm or of the pairwise all-to-all (pipeline.cpp): each
  // step sends and receives, accounted and emulated as one message a step each way as
  // sendrecv, but cut on the wire into pieces of about piece_bytes() that are kept in flight
  // while earlier pieces are reduced and forwarded (piece k of a step goes as soon as piece k
  // of the step before it is in). Same bytes, same order of additions.
  void run_pipelined(PipelinedSteps& steps);
  // `data` received whole from member `from` (-1: this member has it), then sent whole to
  // each of `to` in turn (pipeline.cpp): accounted and emulated as one message from `from`
  // and one to each of `to`, but on the wire in pieces of about piece_bytes(), each sent on
  // as soon as it is in.
  void relay(Buf data, int from, const std::vector<int>& to);
  // Bytes of a piece on the wire (0: whole messages, as link emulation always sends, since it
  // holds whole messages); a new communicator takes the process's (comm/runtime/pieces.hpp).
  void set_piece_bytes(std::size_t bytes) { piece_bytes_ = bytes; }
  std::size_t piece_bytes() const { return piece_bytes_; }
  void send(const WireChunk& out, int dst);
  void recv(const WireChunk& in, int src);
  Scratch& scratch() { return scratch_; }

 private:
  void before_send(const WireChunk& out, int dst);
  void after_send(const WireChunk& out, int dst);
  void after_recv(const WireChunk& in, int src);
  // Post a receive of `in` from src / a send of `out` to dst (no accounting).
  void post_receive(const WireChunk& in, int src, MessageRequests* requests);
  void post_send(const WireChunk& out, int dst, MessageRequests* requests);
  // Who a message exchanges with: member index, and whether it receives (else sends).
  struct Peer {
    int member;
    bool receive;
  };
  // Polls until the n messages complete, under the collective timeout (wait.hpp); past it,
  // aborts the job naming the peers of the messages still pending.
  void wait_all(MessageRequests* messages, int n, const Peer* peers);
  void check_thread() const;  // Error unless on the communication thread

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::vector<int> tiers_;
  int busy_tier_ = 0;  // the outermost tier any member is across: where this group's time is charged
  std::vector<std::string> hosts_;  // each member's host, named when a wait for it times out
  Scratch scratch_;
  std::size_t piece_bytes_;
};

// Scratch slots: algorithms use 0..1, the padding stage of run_* uses 2.
inline constexpr int kScratchAlgoA = 0;
inline constexpr int kScratchAlgoB = 1;
inline constexpr int kScratchStage = 2;

// The algorithms, on exact sizes (no padding): the *_all_gather, *_reduce_scatter,
// *_all_reduce and *_all_to_all buffers hold d whole chunks.
void ring_all_gather(Communicator& c, CBuf shard, Buf full);
void ring_reduce_scatter(Communicator& c, CBuf full, Buf shard, float divisor);
void ring_all_reduce(Communicator& c, Buf data, float divisor);
void pairwise_all_to_all(Communicator& c, CBuf send, Buf recv);
void binomial_broadcast(Communicator& c, Buf data, int root);
void dissemination_barrier(Communicator& c);

}  // namespace strata::comm
