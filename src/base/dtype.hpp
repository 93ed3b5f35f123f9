#pragma once
// The one element type strata moves, and the one wire format: the schedule's wires (how each
// state travels), comm's collectives, the device codecs (Device::to_half and friends) and the
// quantizer (quant::QuantSpec) all take a DType, so nothing converts between formats.
//
// Quantized buffers (int8, int4 packed two per byte, low nibble first) travel as (data
// bytes, fp32 scales): one scale per `block` consecutive elements.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace strata {

// F64 carries the step's scalars (the squared gradient norm, the loss), which move and are
// summed by the runtime in member order; it is never reduced on the wire nor a state's wire
// (parse_dtype does not take it).
enum class DType : std::uint8_t { F32, BF16, F16, I8, I4, F64 };

std::string_view dtype_name(DType t);  // "fp32", "bf16", "fp16", "int8", "int4", "fp64"
// "fp32" (or "f32"), "bf16", "fp16" ("f16"), "int8" ("i8"), "int4" ("i4"), any case;
// throws Error naming `field` (the flag or config key the name came from).
DType parse_dtype(std::string_view name, std::string_view field);

inline bool is_quantized(DType t) { return t == DType::I8 || t == DType::I4; }
inline bool is_half(DType t) { return t == DType::BF16 || t == DType::F16; }  // 16-bit floats
inline bool is_reducible(DType t) { return t == DType::F32 || is_half(t); }

// Bytes that `count` elements occupy (int4: two per byte, an odd count rounds up).
std::size_t data_bytes(DType t, std::size_t count);
// Scales that `count` elements of a quantized type carry: ceil(count / block); 0 otherwise.
std::size_t scale_count(DType t, std::size_t count, std::size_t block);
// Bytes `count` elements occupy on the wire: data plus fp32 scales.
inline std::size_t wire_bytes(DType t, std::size_t count, std::size_t block) {
  return data_bytes(t, count) + sizeof(float) * scale_count(t, count, block);
}
// Throws Error unless `block` suits `t`: quantized types need block > 0, int4 an even block
// (so that every block starts on a byte boundary).
void check_block(DType t, std::size_t block, std::string_view what);

}  // namespace strata
