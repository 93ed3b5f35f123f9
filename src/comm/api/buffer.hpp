#pragma once
// Typed buffer views of base/dtype.hpp's element types and the padding rule every collective
// shares. The bf16/fp16 <-> fp32 conversions the reductions use are base/half.hpp's.
// Quantized buffers' data and scales travel together; collectives move both and never look
// inside (the quantize/dequantize kernels live in src/quant).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "base/dtype.hpp"
#include "base/half.hpp"

namespace strata::comm {

// ---- Padding rule (one for every collective, flat or hierarchical) -------------------
// A buffer of n elements over a group of d ranks is cut into d chunks of
//   c = round_up(ceil(n / d), granule)   elements,
// granule = 1 for fp32/bf16/fp16 and `block` for int8/int4 (so every chunk holds whole
// scale blocks). Chunk k covers elements [k*c, (k+1)*c); the part past n is zero padding
// that travels on the wire but is never read from or written to the caller's buffers.
// So d*c >= n, and the last chunks may be partly or wholly padding.
std::size_t granule(DType t, std::size_t block);
std::size_t chunk_count(std::size_t n, int d, std::size_t granule);
// Elements of chunk k that lie inside [0, n): min(c, max(0, n - k*c)).
std::size_t chunk_valid(std::size_t n, std::size_t c, int k);

// ---- Typed views -----------------------------------------------------------------------
template <bool Const>
struct BufView {
  using Ptr = std::conditional_t<Const, const void*, void*>;
  using ScalePtr = std::conditional_t<Const, const float*, float*>;

  DType dtype = DType::F32;
  Ptr data = nullptr;
  std::size_t count = 0;      // elements
  ScalePtr scales = nullptr;  // int8/int4 only: scale_count(dtype, count, block) floats
  std::size_t block = 0;      // int8/int4 only: elements per scale

  BufView() = default;
  BufView(DType t, Ptr d, std::size_t n, ScalePtr s = nullptr, std::size_t b = 0)
      : dtype(t), data(d), count(n), scales(s), block(b) {}
  template <bool C = Const, class = std::enable_if_t<C>>
  BufView(const BufView<false>& o)  // a mutable view converts to a read-only one
      : dtype(o.dtype), data(o.data), count(o.count), scales(o.scales), block(o.block) {}

  std::size_t bytes() const { return data_bytes(dtype, count); }
  std::size_t n_scales() const { return scale_count(dtype, count, block); }
  std::size_t granule() const { return comm::granule(dtype, block); }
};
using Buf = BufView<false>;
using CBuf = BufView<true>;

inline Buf f32(float* p, std::size_t n) { return {DType::F32, p, n}; }
inline CBuf f32(const float* p, std::size_t n) { return {DType::F32, p, n}; }
inline Buf bf16(std::uint16_t* p, std::size_t n) { return {DType::BF16, p, n}; }
inline CBuf bf16(const std::uint16_t* p, std::size_t n) { return {DType::BF16, p, n}; }
inline Buf f16(std::uint16_t* p, std::size_t n) { return {DType::F16, p, n}; }
inline CBuf f16(const std::uint16_t* p, std::size_t n) { return {DType::F16, p, n}; }
inline Buf quantized(DType t, std::uint8_t* p, std::size_t n, float* scales, std::size_t block) {
  return {t, p, n, scales, block};
}
inline CBuf quantized(DType t, const std::uint8_t* p, std::size_t n, const float* scales, std::size_t block) {
  return {t, p, n, scales, block};
}

}  // namespace strata::comm
