// Ring all-gather: member m first places its shard in slot m of `full`; in step s
// (0 <= s < d-1) it sends slot (m - s) to m+1 and receives slot (m - s - 1) from m-1.
// After d-1 steps every slot is filled. Each member sends d-1 chunks.
#include "comm/host/ring_steps.hpp"

namespace strata::comm {

AllGatherSteps::AllGatherSteps(const Communicator& c, Buf full, std::size_t n)
    : full_(full), n_(n), d_(c.size()), m_(c.index()) {}

WireChunk AllGatherSteps::send(int step, std::size_t first, std::size_t n) {
  const int slot = (m_ - step + d_) % d_;
  return wire_chunk(full_, std::size_t(slot) * n_ + first, n);
}

WireChunk AllGatherSteps::recv(int step, std::size_t first, std::size_t n) {
  const int slot = (m_ - step - 1 + 2 * d_) % d_;
  return wire_chunk(full_, std::size_t(slot) * n_ + first, n);
}

void ring_all_gather(Communicator& c, CBuf shard, Buf full) {
  const std::size_t n = shard.count;
  copy_elements(shard, 0, full, std::size_t(c.index()) * n, n);  // no-op when the shard is slot m already
  AllGatherSteps steps(c, full, n);
  c.run_pipelined(steps);
}

}  // namespace strata::comm
