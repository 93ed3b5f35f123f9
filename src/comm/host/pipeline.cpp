// Messages on the wire in pieces (Communicator::run_pipelined, Communicator::relay).
//
// The pipeline: the steps of a ring algorithm or of the pairwise all-to-all, each cut into
// pieces. Piece k of step s + 1 is posted as soon as piece k of step s is in, sent and
// handed to received(), so the link carries later pieces while earlier ones are reduced and
// a step's rendezvous round trips overlap the data of the pieces around them. Every rank
// posts its receives and its sends in the same order (step by step, piece by piece), which
// is what MPI matches messages of one tag and peer by.
//
// The relay (the broadcast tree's hop): a member posts the receive of every piece at once and
// sends piece k to a child as soon as it is in, to its children one after another as the
// tree sends whole messages.
//
// Each message is accounted as one of its whole size, as sendrecv/send/recv account it, so
// the bytes and message counts do not depend on the piece size, and neither do the results:
// a piece is reduced exactly as the whole message would be, element by element in the same
// order. Link emulation holds each message for its whole alpha-beta time: whole messages only.
#include <algorithm>
#include <vector>

#include "comm/host/communicator.hpp"

namespace strata::comm {

namespace {

// How a message of `count` elements is cut: pieces of `elements` (whole granules), the last
// one shorter where they do not divide.
struct Pieces {
  std::size_t elements = 0;
  std::size_t number = 1;
  std::size_t first(std::size_t k) const { return k * elements; }
  std::size_t size(std::size_t k, std::size_t count) const { return std::min(elements, count - first(k)); }
};

// `bytes`: the whole message's, data and scales.
Pieces cut_into_pieces(std::size_t count, std::size_t granule, std::size_t bytes, std::size_t piece_bytes) {
  Pieces p{count, 1};
  if (piece_bytes == 0 || count == 0) return p;
  const std::size_t granules = (count + granule - 1) / granule;  // a broadcast's last may be short
  const std::size_t granule_bytes = std::max<std::size_t>(1, bytes / granules);
  p.elements = std::max<std::size_t>(1, piece_bytes / granule_bytes) * granule;
  p.number = (count + p.elements - 1) / p.elements;
  return p;
}

}  // namespace

void Communicator::run_pipelined(PipelinedSteps& r) {
  check_thread();
  const int steps = r.steps();
  if (steps == 0) return;
  const int d = size();
  auto right = [&](int s) { return (position_ + r.shift(s)) % d; };
  auto left = [&](int s) { return ((position_ - r.shift(s)) % d + d) % d; };
  const std::size_t count = r.count();
  const Pieces pieces = cut_into_pieces(count, r.granule(), r.send(0, 0, count).total_bytes(),
                                        ctx_.emulation().enabled ? 0 : piece_bytes_);
  // The requests in flight for each piece: at most one step's receive and send at a time.
  std::vector<MessageRequests> receives(pieces.number, no_requests()), sends(pieces.number, no_requests());
  auto post = [&](int s, std::size_t k) {
    const std::size_t first = pieces.first(k), n = pieces.size(k, count);
    if (k == 0) before_send(r.send(s, 0, count), right(s));
    post_receive(r.recv(s, first, n), left(s), &receives[k]);
    post_send(r.send(s, first, n), right(s), &sends[k]);
  };
  for (std::size_t k = 0; k < pieces.number; ++k) post(0, k);
  for (int s = 0; s < steps; ++s) {
    const Peer peers[2] = {{left(s), true}, {right(s), false}};
    for (std::size_t k = 0; k < pieces.number; ++k) {
      MessageRequests pair[2] = {receives[k], sends[k]};
      wait_all(pair, 2, peers);
      r.received(s, pieces.first(k), pieces.size(k, count));
      if (k + 1 == pieces.number) {
        after_send(r.send(s, 0, count), right(s));
        after_recv(r.recv(s, 0, count), left(s));
      }
      if (s + 1 < steps) post(s + 1, k);
    }
  }
}

void Communicator::relay(Buf data, int from, const std::vector<int>& to) {
  check_thread();
  const std::size_t count = data.count;
  const WireChunk whole = wire_chunk(data, 0, count);
  const Pieces pieces =
      cut_into_pieces(count, data.granule(), whole.total_bytes(), ctx_.emulation().enabled ? 0 : piece_bytes_);
  std::vector<MessageRequests> receives(pieces.number, no_requests()), sends(pieces.number, no_requests());
  auto piece = [&](std::size_t k) { return wire_chunk(data, pieces.first(k), pieces.size(k, count)); };
  std::size_t in = pieces.number;  // pieces of `data` this member holds, in order
  if (from >= 0) {
    in = 0;
    for (std::size_t k = 0; k < pieces.number; ++k) post_receive(piece(k), from, &receives[k]);
  }
  const Peer source{from, true};
  auto have = [&](std::size_t k) {  // waits until pieces 0..k are in
    for (; in <= k; ++in) wait_all(&receives[in], 1, &source);
    if (in == pieces.number && from >= 0) after_recv(whole, from);
  };
  for (int child : to) {
    before_send(whole, child);
    for (std::size_t k = 0; k < pieces.number; ++k) {
      if (k >= in) have(k);
      post_send(piece(k), child, &sends[k]);
    }
    const std::vector<Peer> peers(pieces.number, Peer{child, false});
    wait_all(sends.data(), int(sends.size()), peers.data());
    after_send(whole, child);
  }
  if (in < pieces.number) have(pieces.number - 1);
}

}  // namespace strata::comm
