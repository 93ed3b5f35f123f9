#include "comm/api/collectives.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::comm {

std::string_view reduce_op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "avg"; }

void Collectives::reduce_scatter_inline(CBuf full, Buf shard, float divisor) {
  if (divisor != 1.0f && divisor != float(size()))
    throw Error(fmt::format("reduce_scatter on group '{}': a reduction divided by {} (a composition's average); this "
                            "backend divides only by its own size {}",
                            name(), divisor, size()));
  reduce_scatter_async(full, shard, divisor == 1.0f ? ReduceOp::Sum : ReduceOp::Avg).wait();
}

namespace {

std::string where(const Collectives& g, std::string_view op) { return fmt::format("{} on group '{}'", op, g.name()); }

template <bool C>
void check_view(const Collectives& g, std::string_view op, std::string_view role, const BufView<C>& b) {
  check_block(b.dtype, b.block, fmt::format("{}: {}", where(g, op), role));
  if (b.count > 0 && !b.data) throw Error(fmt::format("{}: {} has {} elements but no data", where(g, op), role, b.count));
  if (is_quantized(b.dtype) && b.count > 0 && !b.scales)
    throw Error(fmt::format("{}: {} buffer {} has no scales", where(g, op), dtype_name(b.dtype), role));
}

template <bool A, bool B>
void check_same_type(const Collectives& g, std::string_view op, const BufView<A>& a, const BufView<B>& b) {
  if (a.dtype != b.dtype)
    throw Error(fmt::format("{}: input is {} but output is {}", where(g, op), dtype_name(a.dtype), dtype_name(b.dtype)));
  if (is_quantized(a.dtype) && a.block != b.block)
    throw Error(fmt::format("{}: input block size {} differs from output block size {}", where(g, op), a.block, b.block));
}

void check_reducible(const Collectives& g, std::string_view op, DType t, ReduceOp rop) {
  if (!is_reducible(t))
    throw Error(fmt::format("{}: cannot reduce ({}) {} buffers; quantized data is only moved (dequantize, "
                            "or use all_to_all and reduce between hops)",
                            where(g, op), reduce_op_name(rop), dtype_name(t)));
}

void check_shard(const Collectives& g, std::string_view op, std::size_t n, std::size_t shard_count, DType t,
                 std::size_t block) {
  std::size_t c = g.chunk_elements(n, t, block);
  if (shard_count != c)
    throw Error(fmt::format("{}: shard has {} elements; {} elements over {} ranks need shards of {} "
                            "(ceil(n/d) rounded up to the granule {})",
                            where(g, op), shard_count, n, g.size(), c, granule(t, block)));
}

}  // namespace

void check_all_gather(const Collectives& g, const CBuf& shard, const Buf& full) {
  check_view(g, "all_gather", "shard", shard);
  check_view(g, "all_gather", "full", full);
  check_same_type(g, "all_gather", shard, full);
  check_shard(g, "all_gather", full.count, shard.count, full.dtype, full.block);
}

void check_reduce_scatter(const Collectives& g, const CBuf& full, const Buf& shard, ReduceOp op) {
  check_view(g, "reduce_scatter", "full", full);
  check_view(g, "reduce_scatter", "shard", shard);
  check_same_type(g, "reduce_scatter", full, shard);
  check_reducible(g, "reduce_scatter", full.dtype, op);
  check_shard(g, "reduce_scatter", full.count, shard.count, full.dtype, full.block);
}

void check_all_reduce(const Collectives& g, const Buf& data, ReduceOp op) {
  check_view(g, "all_reduce", "data", data);
  check_reducible(g, "all_reduce", data.dtype, op);
}

void check_all_to_all(const Collectives& g, const CBuf& send, const Buf& recv) {
  check_view(g, "all_to_all", "send", send);
  check_view(g, "all_to_all", "recv", recv);
  check_same_type(g, "all_to_all", send, recv);
  std::size_t c = g.chunk_elements(send.count, send.dtype, send.block);
  if (recv.count != c * std::size_t(g.size()))
    throw Error(fmt::format("{}: recv has {} elements; {} send elements over {} ranks need {} x {} = {}",
                            where(g, "all_to_all"), recv.count, send.count, g.size(), g.size(), c,
                            c * std::size_t(g.size())));
}

void check_broadcast(const Collectives& g, const Buf& data, int root) {
  check_view(g, "broadcast", "data", data);
  if (root < 0 || root >= g.size())
    throw Error(fmt::format("{}: root {} is not an index in [0, {})", where(g, "broadcast"), root, g.size()));
}

}  // namespace strata::comm
