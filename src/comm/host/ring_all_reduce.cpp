// Ring all-reduce = ring reduce-scatter into the member's own chunk of `data`, then ring
// all-gather of those chunks in place: 2(d-1) messages of one chunk per member, run as one
// ring pipeline (ring_steps.hpp). All members end with identical bits (the reduced chunks
// are copied, not recomputed).
#include "comm/host/ring_steps.hpp"

namespace strata::comm {

void ring_all_reduce(Communicator& c, Buf data, float divisor) {
  const std::size_t n = data.count / std::size_t(c.size());
  Buf own(data.dtype, static_cast<std::byte*>(data.data) + data_bytes(data.dtype, std::size_t(c.index()) * n), n);
  if (c.size() == 1) return ring_reduce_scatter(c, data, own, divisor);
  ReduceScatterSteps reduce(c, data, own, divisor);
  AllGatherSteps gather(c, data, n);
  ChainedSteps both(reduce, gather);
  c.run_pipelined(both);
}

}  // namespace strata::comm
