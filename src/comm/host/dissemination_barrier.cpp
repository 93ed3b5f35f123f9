// Dissemination barrier: in round k member m signals m + 2^k and waits for m - 2^k, with
// empty messages. After ceil(log2 d) rounds every member has (transitively) heard from all.
#include "comm/host/communicator.hpp"

namespace strata::comm {

void dissemination_barrier(Communicator& c) {
  const int d = c.size(), m = c.index();
  for (int k = 1; k < d; k <<= 1) c.sendrecv(WireChunk{}, (m + k) % d, WireChunk{}, (m - k + d) % d);
}

}  // namespace strata::comm
