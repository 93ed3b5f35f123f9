// Ring reduce-scatter: chunk k's partial sum starts at member k+1 (its own chunk k), and
// travels right; each member it passes adds its own chunk k in fp32 and rounds; member k
// adds last and keeps the result. In step s member m sends its partial of chunk (m-s-1)
// and receives the partial of chunk (m-s-2). So chunk k is summed in the fixed order
// x_{k+1} + x_{k+2} + ... + x_k, identically on every run. Each member sends d-1 chunks.
#include "comm/api/reduce.hpp"
#include "comm/host/ring_steps.hpp"

namespace strata::comm {

ReduceScatterSteps::ReduceScatterSteps(Communicator& c, CBuf full, Buf shard, float divisor)
    : full_(full),
      shard_(shard),
      partial_(c.scratch().view(kScratchAlgoA, full.dtype, shard.count, 0)),
      incoming_(c.scratch().view(kScratchAlgoB, full.dtype, shard.count, 0)),
      divisor_(divisor),
      d_(c.size()),
      m_(c.index()) {}

WireChunk ReduceScatterSteps::send(int step, std::size_t first, std::size_t n) {
  const int chunk = (m_ - step - 1 + 2 * d_) % d_;
  return step == 0 ? wire_chunk(full_, std::size_t(chunk) * shard_.count + first, n) : wire_chunk(partial_, first, n);
}

WireChunk ReduceScatterSteps::recv(int /*step*/, std::size_t first, std::size_t n) {
  return wire_chunk(incoming_, first, n);
}

void ReduceScatterSteps::received(int step, std::size_t first, std::size_t n) {
  const int chunk = (m_ - step - 2 + 2 * d_) % d_;
  const DType t = full_.dtype;
  const std::size_t at = data_bytes(t, first);
  const auto* own = static_cast<const std::byte*>(full_.data) + data_bytes(t, std::size_t(chunk) * shard_.count) + at;
  const auto* in = static_cast<const std::byte*>(incoming_.data) + at;
  const bool last = step == d_ - 2;  // chunk == m_: the sum is the member's shard
  auto* out = static_cast<std::byte*>(last ? shard_.data : partial_.data) + at;
  add_elements(t, in, own, out, n, last ? divisor_ : 1.0f);
}

void ring_reduce_scatter(Communicator& c, CBuf full, Buf shard, float divisor) {
  if (c.size() == 1) return scale_elements(full.dtype, full.data, shard.data, shard.count, divisor);
  ReduceScatterSteps steps(c, full, shard, divisor);
  c.run_pipelined(steps);
}

}  // namespace strata::comm
