// Pairwise all-to-all: member m keeps its own chunk m, then in step s (1 <= s < d) sends
// chunk m+s to member m+s and receives member (m-s)'s chunk m into slot m-s. One message
// to every other member; no member waits on more than one partner per step.
#include "comm/host/communicator.hpp"

namespace strata::comm {

void pairwise_all_to_all(Communicator& c, CBuf send, Buf recv) {
  const int d = c.size(), m = c.index();
  const std::size_t n = send.count / std::size_t(d);
  copy_elements(send, std::size_t(m) * n, recv, std::size_t(m) * n, n);
  for (int s = 1; s < d; ++s) {
    int dst = (m + s) % d, src = (m - s + d) % d;
    c.sendrecv(wire_chunk(send, std::size_t(dst) * n, n), dst, wire_chunk(recv, std::size_t(src) * n, n), src);
  }
}

}  // namespace strata::comm
