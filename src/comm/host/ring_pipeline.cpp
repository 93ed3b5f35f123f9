// The ring pipeline (Communicator::run_ring): a ring algorithm's steps, each cut into pieces
// on the wire. Piece k of step s + 1 is posted as soon as piece k of step s is in, sent and
// handed to received(), so the link carries later pieces while earlier ones are reduced and
// a step's rendezvous round trips overlap the data of the pieces around them. Every rank
// posts its receives and its sends in the same order (step by step, piece by piece), which
// is what MPI matches messages of one tag by. Each step is accounted as one message of its
// whole size, as sendrecv accounts it, so the bytes and message counts do not depend on
// the piece size, and neither do the results: a piece is reduced exactly as the whole step
// would be, element by element in the same order.
#include <algorithm>
#include <vector>

#include "comm/host/communicator.hpp"

namespace strata::comm {

namespace {

// How a step of `count` elements is cut: pieces of `elements` (whole granules), the last
// one shorter where they do not divide.
struct Pieces {
  std::size_t elements = 0;
  std::size_t number = 1;
  std::size_t first(std::size_t k) const { return k * elements; }
  std::size_t size(std::size_t k, std::size_t count) const { return std::min(elements, count - first(k)); }
};

Pieces cut_into_pieces(RingSteps& r, std::size_t piece_bytes) {
  const std::size_t count = r.count(), granule = r.granule();
  Pieces p{count, 1};
  if (piece_bytes == 0 || count == 0) return p;
  const std::size_t granules = count / granule;
  const std::size_t granule_bytes = std::max<std::size_t>(1, r.send(0, 0, count).total_bytes() / granules);
  p.elements = std::max<std::size_t>(1, piece_bytes / granule_bytes) * granule;
  p.number = (count + p.elements - 1) / p.elements;
  return p;
}

}  // namespace

void Communicator::run_ring(RingSteps& r) {
  check_thread();
  const int steps = r.steps();
  if (steps == 0) return;
  const int d = size(), right = (position_ + 1) % d, left = (position_ - 1 + d) % d;
  const std::size_t count = r.count();
  // Link emulation holds each message for its whole alpha-beta time: whole steps only.
  const Pieces pieces = cut_into_pieces(r, ctx_.emulation().enabled ? 0 : ring_piece_bytes_);
  // The requests in flight for each piece: at most one step's receive and send at a time.
  std::vector<MPI_Request> receives(pieces.number, MPI_REQUEST_NULL), sends(pieces.number, MPI_REQUEST_NULL);
  auto post = [&](int s, std::size_t k) {
    const std::size_t first = pieces.first(k), n = pieces.size(k, count);
    if (k == 0) before_send(r.send(s, 0, count), right);
    post_exchange(r.send(s, first, n), right, r.recv(s, first, n), left, &receives[k], &sends[k]);
  };
  const Peer peers[2] = {{left, true}, {right, false}};
  for (std::size_t k = 0; k < pieces.number; ++k) post(0, k);
  for (int s = 0; s < steps; ++s)
    for (std::size_t k = 0; k < pieces.number; ++k) {
      MPI_Request pair[2] = {receives[k], sends[k]};
      wait_all(pair, 2, peers);
      r.received(s, pieces.first(k), pieces.size(k, count));
      if (k + 1 == pieces.number) {
        after_send(r.send(s, 0, count), right);
        after_recv(r.recv(s, 0, count), left);
      }
      if (s + 1 < steps) post(s + 1, k);
    }
}

}  // namespace strata::comm
