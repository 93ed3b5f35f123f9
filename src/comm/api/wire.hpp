#pragma once
// Pieces of typed buffers as they travel: a chunk of a buffer is its data bytes plus, for
// int8/int4, its scales, sent together as one MPI message. Plus reusable scratch memory
// for the communication thread.
#include <cstddef>
#include <vector>

#include "base/aligned.hpp"
#include "comm/api/buffer.hpp"

namespace strata::comm {

struct WireChunk {
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  float* scales = nullptr;
  std::size_t n_scales = 0;
  std::size_t total_bytes() const { return bytes + n_scales * sizeof(float); }
};

// Elements [first, first + count) of b. `first` must be a multiple of b's granule (whole
// scale blocks; for int4 an even element, i.e. a whole byte).
template <bool C>
WireChunk wire_chunk(const BufView<C>& b, std::size_t first, std::size_t count) {
  WireChunk w;
  // Sending only reads, so a read-only view may yield a chunk with mutable pointers.
  w.data = static_cast<std::byte*>(const_cast<void*>(static_cast<const void*>(b.data))) + data_bytes(b.dtype, first);
  w.bytes = data_bytes(b.dtype, count);
  if (is_quantized(b.dtype)) {
    w.scales = const_cast<float*>(b.scales) + first / b.block;
    w.n_scales = scale_count(b.dtype, count, b.block);
  }
  return w;
}

// Copies elements [src_first, +count) of src to [dst_first, +count) of dst (data and
// scales). Both offsets must be multiples of the granule.
void copy_elements(const CBuf& src, std::size_t src_first, const Buf& dst, std::size_t dst_first, std::size_t count);
// Zeroes elements [first, first + count) of b and the scales of the blocks that start there.
void zero_elements(const Buf& b, std::size_t first, std::size_t count);

// Grow-only scratch arrays in numbered slots; a view stays valid until its slot is asked
// for again. Used only on the communication thread.
class Scratch {
 public:
  std::byte* bytes(int slot, std::size_t n);
  // `count` elements of t (data, then its scales, in one slot); contents undefined.
  Buf view(int slot, DType t, std::size_t count, std::size_t block);
  // A copy of src padded with zeros to `padded` elements.
  Buf padded_copy(int slot, const CBuf& src, std::size_t padded);

 private:
  std::vector<AlignedBuffer<std::byte>> slots_;
};

}  // namespace strata::comm
