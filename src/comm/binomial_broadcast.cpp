// Binomial-tree broadcast over members renumbered so the root is 0: member v receives
// from v - 2^k (2^k its lowest set bit), then sends to v + 2^j for each 2^j below that
// bit (largest first). ceil(log2 d) rounds; the root sends ceil(log2 d) messages and
// every other member receives exactly one.
#include "comm/communicator.hpp"

namespace strata::comm {

void binomial_broadcast(Communicator& c, Buf data, int root) {
  const int d = c.size();
  const int v = (c.index() - root + d) % d;
  WireChunk whole = wire_chunk(data, 0, data.count);
  int mask = 1;
  while (mask < d) {
    if (v & mask) {
      c.recv(whole, (v - mask + root) % d);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < d) c.send(whole, (v + mask + root) % d);
}

}  // namespace strata::comm
