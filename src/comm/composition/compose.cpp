#include "comm/composition/compose.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "comm/api/reduce.hpp"

namespace strata::comm {

namespace {

// Elements [first, first + n) of b; `first` is a whole number of granules.
CBuf part(const CBuf& b, std::size_t first, std::size_t n) {
  CBuf p = b;
  p.data = static_cast<const std::byte*>(b.data) + data_bytes(b.dtype, first);
  p.count = n;
  if (is_quantized(b.dtype)) p.scales = b.scales + first / b.block;
  return p;
}

// A step in the carried type: the collective straight between the carried buffers.
void run_direct(Collectives& group, const LevelStep& s, CBuf cur, Buf dst, float divisor, ChainScratch& scratch) {
  switch (s.kind) {
    case Collective::AllGather: group.all_gather_inline(cur, dst); return;
    case Collective::ReduceScatter: group.reduce_scatter_inline(cur, dst, divisor); return;
    case Collective::AllToAll: {
      Buf received = scratch.staged(0, cur.dtype, s.elements_in, cur.block);
      group.all_to_all_inline(cur, received);
      scratch.sum_slots(received, group.size(), dst, divisor);
      return;
    }
    case Collective::AllReduce: break;
  }
  throw Error("comm: a chain's step is an all-gather, a reduce-scatter or an all-to-all, not an all-reduce");
}

// A step in another wire than the carried fp32: encode, run, decode.
void run_converted(Collectives& group, const LevelStep& s, CBuf cur, Buf dst, float divisor, ChainScratch& scratch,
                   const WireCodec* codec) {
  if (!codec || cur.dtype != DType::F32)
    throw Error(fmt::format("comm: a step in {} on a chain carrying {} needs an fp32 chain and a wire codec",
                            dtype_name(s.wire), dtype_name(cur.dtype)));
  if (s.kind == Collective::ReduceScatter && is_quantized(s.wire))
    throw Error(fmt::format("comm: a ring reduce-scatter cannot sum {} on the wire (quantized reductions go by "
                            "all-to-all)",
                            dtype_name(s.wire)));
  Buf sent = scratch.staged(0, s.wire, s.elements_in, s.block);
  codec->encode(cur, sent);
  Buf got = scratch.staged(1, s.wire, s.kind == Collective::AllToAll ? s.elements_in : s.elements_out, s.block);
  switch (s.kind) {
    case Collective::AllGather:
      group.all_gather_inline(sent, got);
      codec->decode(got, dst);
      return;
    case Collective::ReduceScatter:
      group.reduce_scatter_inline(sent, got, divisor);
      codec->decode(got, dst);
      return;
    case Collective::AllToAll:
      group.all_to_all_inline(sent, got);
      scratch.zero(dst, 0, dst.count);
      for (int m = 0; m < group.size(); ++m)
        codec->decode_add(part(got, std::size_t(m) * s.elements_out, s.elements_out), dst);
      if (divisor != 1.0f) scratch.scale(dst, divisor);
      return;
    case Collective::AllReduce: break;
  }
  throw Error("comm: a chain's step is an all-gather, a reduce-scatter or an all-to-all, not an all-reduce");
}

}  // namespace

void ChainScratch::sum_slots(CBuf slots, int k, Buf dst, float divisor) {
  comm::sum_slots(dst.dtype, slots.data, k, dst.count, dst.data, divisor);
}
void ChainScratch::scale(Buf b, float divisor) { scale_elements(b.dtype, b.data, b.data, b.count, divisor); }
void ChainScratch::zero(Buf b, std::size_t first, std::size_t count) { zero_elements(b, first, count); }
void ChainScratch::copy(CBuf src, std::size_t src_first, Buf dst, std::size_t dst_first, std::size_t count) {
  copy_elements(src, src_first, dst, dst_first, count);
}

Buf SlotMemory::padded_copy(int slot, CBuf src, std::size_t padded) {
  Buf b = view(slot, src.dtype, padded, src.block);
  copy(src, 0, b, 0, src.count);
  zero(b, src.count, padded - src.count);
  return b;
}

std::size_t level_elements(std::span<const int> sizes, std::size_t whole, int level) {
  for (int l = 0; l < level; ++l) whole /= std::size_t(sizes[l]);
  return whole;
}

std::vector<LevelStep> reduce_scatter_steps(std::span<const int> sizes, std::size_t whole, int from, int to,
                                            Collective kind, DType wire, std::size_t block) {
  std::vector<LevelStep> steps;
  for (int l = from; l < to; ++l) {
    const std::size_t n = level_elements(sizes, whole, l);
    steps.push_back({kind, l, wire, block, n, n / std::size_t(sizes[l])});
  }
  return steps;
}

std::vector<LevelStep> all_gather_steps(std::span<const int> sizes, std::size_t whole, int from, int to, DType wire,
                                        std::size_t block) {
  std::vector<LevelStep> steps;
  for (int l = from - 1; l >= to; --l)
    steps.push_back({Collective::AllGather, l, wire, block, level_elements(sizes, whole, l + 1),
                     level_elements(sizes, whole, l)});
  return steps;
}

CBuf run_chain(std::span<Collectives* const> levels, std::span<const LevelStep> steps, CBuf in, const Buf* out,
               float divisor, ChainScratch& scratch, const WireCodec* codec, ChainObserver* observer) {
  CBuf cur = in;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const LevelStep& s = steps[i];
    const bool last = i + 1 == steps.size();
    Collectives& group = *levels[s.level];
    Buf dst = last && out ? *out : scratch.carried(int(i % 2), in.dtype, s.elements_out, in.block);
    const float d = last ? divisor : 1.0f;
    if (observer) observer->step_started(i);
    if (s.wire == in.dtype)
      run_direct(group, s, cur, dst, d, scratch);
    else
      run_converted(group, s, cur, dst, d, scratch, codec);
    if (observer) observer->step_ended(i);
    cur = dst;
  }
  return cur;
}

}  // namespace strata::comm
