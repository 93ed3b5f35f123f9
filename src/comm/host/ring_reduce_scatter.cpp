// Ring reduce-scatter: chunk k's partial sum starts at member k+1 (its own chunk k), and
// travels right; each member it passes adds its own chunk k in fp32 and rounds; member k
// adds last and keeps the result. In step s member m sends its partial of chunk (m-s-1)
// and receives the partial of chunk (m-s-2). So chunk k is summed in the fixed order
// x_{k+1} + x_{k+2} + ... + x_k, identically on every run. Each member sends d-1 chunks.
#include "comm/api/reduce.hpp"
#include "comm/host/communicator.hpp"

namespace strata::comm {

void ring_reduce_scatter(Communicator& c, CBuf full, Buf shard, float divisor) {
  const int d = c.size(), m = c.index();
  const std::size_t n = shard.count;
  const std::size_t chunk_bytes = data_bytes(full.dtype, n);
  auto* in = static_cast<const std::byte*>(full.data);
  if (d == 1) return scale_elements(full.dtype, in, shard.data, n, divisor);

  Buf partial = c.scratch().view(kScratchAlgoA, full.dtype, n, 0);
  Buf incoming = c.scratch().view(kScratchAlgoB, full.dtype, n, 0);
  const int right = (m + 1) % d, left = (m - 1 + d) % d;
  for (int s = 0; s < d - 1; ++s) {
    int send_idx = (m - s - 1 + 2 * d) % d;
    int recv_idx = (m - s - 2 + 2 * d) % d;
    WireChunk out = s == 0 ? wire_chunk(full, std::size_t(send_idx) * n, n) : wire_chunk(partial, 0, n);
    c.sendrecv(out, right, wire_chunk(incoming, 0, n), left);
    const std::byte* own = in + std::size_t(recv_idx) * chunk_bytes;
    if (s < d - 2)
      add_elements(full.dtype, incoming.data, own, partial.data, n, 1.0f);
    else
      add_elements(full.dtype, incoming.data, own, shard.data, n, divisor);  // recv_idx == m
  }
}

}  // namespace strata::comm
