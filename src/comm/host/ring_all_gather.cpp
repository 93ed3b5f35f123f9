// Ring all-gather: member m first places its shard in slot m of `full`; in step s
// (0 <= s < d-1) it sends slot (m - s) to m+1 and receives slot (m - s - 1) from m-1.
// After d-1 steps every slot is filled. Each member sends d-1 chunks.
#include "comm/host/communicator.hpp"

namespace strata::comm {

void ring_all_gather(Communicator& c, CBuf shard, Buf full) {
  const int d = c.size(), m = c.index();
  const std::size_t n = shard.count;
  copy_elements(shard, 0, full, std::size_t(m) * n, n);  // no-op when the shard is slot m already
  const int right = (m + 1) % d, left = (m - 1 + d) % d;
  for (int s = 0; s < d - 1; ++s) {
    int send_slot = (m - s + d) % d;
    int recv_slot = (m - s - 1 + 2 * d) % d;
    c.sendrecv(wire_chunk(full, std::size_t(send_slot) * n, n), right, wire_chunk(full, std::size_t(recv_slot) * n, n),
               left);
  }
}

}  // namespace strata::comm
