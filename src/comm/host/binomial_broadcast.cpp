// Binomial-tree broadcast over members renumbered so the root is 0: member v receives
// from v - 2^k (2^k its lowest set bit), then sends to v + 2^j for each 2^j below that
// bit (largest first). ceil(log2 d) rounds; the root sends ceil(log2 d) messages and
// every other member receives exactly one. Each hop is a relay (pipeline.cpp): a member
// sends a piece on as soon as it is in.
#include "comm/host/communicator.hpp"
#include "comm/instrument/traffic.hpp"

namespace strata::comm {

void binomial_broadcast(Communicator& c, Buf data, int root) {
  // The tree is traffic.hpp's, which also counts it for backends strata does not see.
  const std::size_t bytes = wire_chunk(data, 0, data.count).total_bytes();
  int from = -1;
  std::vector<int> to;
  for (const Transfer& t : algorithm_transfers(Algorithm::BinomialBroadcast, c.size(), c.index(), bytes, root)) {
    if (t.sent)
      to.push_back(t.peer);
    else
      from = t.peer;
  }
  c.relay(data, from, to);
}

}  // namespace strata::comm
