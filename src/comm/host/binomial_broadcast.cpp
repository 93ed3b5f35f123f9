// Binomial-tree broadcast over members renumbered so the root is 0: member v receives
// from v - 2^k (2^k its lowest set bit), then sends to v + 2^j for each 2^j below that
// bit (largest first). ceil(log2 d) rounds; the root sends ceil(log2 d) messages and
// every other member receives exactly one.
#include "comm/host/communicator.hpp"
#include "comm/instrument/traffic.hpp"

namespace strata::comm {

void binomial_broadcast(Communicator& c, Buf data, int root) {
  WireChunk whole = wire_chunk(data, 0, data.count);
  // The tree is traffic.hpp's, which also counts it for backends strata does not see.
  for (const Transfer& t :
       algorithm_transfers(Algorithm::BinomialBroadcast, c.size(), c.index(), whole.total_bytes(), root)) {
    if (t.sent)
      c.send(whole, t.peer);
    else
      c.recv(whole, t.peer);
  }
}

}  // namespace strata::comm
