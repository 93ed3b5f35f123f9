#include "comm/api/wire.hpp"

#include <cstring>

namespace strata::comm {

void copy_elements(const CBuf& src, std::size_t src_first, const Buf& dst, std::size_t dst_first, std::size_t count) {
  if (count == 0) return;
  WireChunk s = wire_chunk(src, src_first, count);
  WireChunk d = wire_chunk(dst, dst_first, count);
  if (s.data != d.data) std::memmove(d.data, s.data, s.bytes);
  if (s.n_scales && s.scales != d.scales) std::memmove(d.scales, s.scales, s.n_scales * sizeof(float));
}

void zero_elements(const Buf& b, std::size_t first, std::size_t count) {
  if (count == 0) return;
  auto* base = static_cast<std::byte*>(b.data);
  std::size_t begin_byte = data_bytes(b.dtype, first);
  if (b.dtype == DType::I4 && first % 2 == 1) {
    // Element `first` is the high nibble of a byte whose low nibble stays.
    base[first / 2] &= std::byte{0x0f};
  }
  std::size_t end_byte = data_bytes(b.dtype, first + count);
  if (end_byte > begin_byte) std::memset(base + begin_byte, 0, end_byte - begin_byte);
  if (is_quantized(b.dtype)) {
    std::size_t s0 = scale_count(b.dtype, first, b.block);  // first block starting at or after `first`
    std::size_t s1 = scale_count(b.dtype, first + count, b.block);
    if (s1 > s0) std::memset(b.scales + s0, 0, (s1 - s0) * sizeof(float));
  }
}

std::byte* Scratch::bytes(int slot, std::size_t n) {
  if (slot >= int(slots_.size())) slots_.resize(slot + 1);
  auto& s = slots_[slot];
  if (s.size() < n) s.resize(n);
  return s.data();
}

Buf Scratch::view(int slot, DType t, std::size_t count, std::size_t block) {
  std::size_t data = (data_bytes(t, count) + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
  std::size_t scales = scale_count(t, count, block) * sizeof(float);
  std::byte* p = bytes(slot, data + scales);
  return Buf(t, p, count, is_quantized(t) ? reinterpret_cast<float*>(p + data) : nullptr, block);
}

Buf Scratch::padded_copy(int slot, const CBuf& src, std::size_t padded) {
  Buf b = view(slot, src.dtype, padded, src.block);
  copy_elements(src, 0, b, 0, src.count);
  zero_elements(b, src.count, padded - src.count);
  return b;
}

}  // namespace strata::comm
