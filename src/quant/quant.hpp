#pragma once
// Symmetric block quantization to INT8 or INT4, the wire format of quantized weight gathers
// and gradient reductions (ZeRO++ qwZ/qgZ). docs/quantization.md describes the format.
//
// A buffer of n values is cut into blocks of block_size consecutive values; the last block
// may be shorter. Each block gets one fp32 scale = absmax / qmax (qmax = 127 for INT8, 7 for
// INT4; at least FLT_MIN; 0 for an all-zero block) and each value q = rne(x * (1 / scale)),
// which never leaves [-qmax, qmax].
// Every block occupies block_bytes(spec) bytes of data, the short last one included (its
// unused bytes and nibbles are zero), so block b starts at byte b * block_bytes(spec) and its
// scale is scales[b]: a range of whole blocks can be handled with offset pointers.
// INT4 stores two values a byte, the lower-indexed value in the low nibble, as 4-bit two's
// complement; with an odd block_size each block ends in one zero padding nibble.
//
// Blocks holding NaN or infinity are refused with an Error naming the block; the output
// buffers then hold unspecified bytes. The `isa` argument forces a kernel (tests check that
// all give bit-identical results); by default the best one the CPU has is used.
// Large buffers are split over the OpenMP threads, by whole blocks, with a static schedule.
#include <cstddef>
#include <cstdint>

#include "base/cpu.hpp"
#include "base/dtype.hpp"

namespace strata::quant {

struct QuantSpec {  // the functions below throw Error for any other dtype or block_size
  DType dtype = DType::I8;  // I8 or I4
  int block_size = 256;     // values per block, any positive number
};

int qmax(DType dtype);                                          // 127 (I8) or 7 (I4)
std::size_t block_bytes(const QuantSpec& spec);                     // data bytes of one block
std::size_t num_blocks(std::size_t n, const QuantSpec& spec);       // = number of scales
std::size_t quantized_bytes(std::size_t n, const QuantSpec& spec);  // data bytes, scales not included

// src holds n values; data gets quantized_bytes(n, spec) bytes, scales num_blocks(n, spec) floats.
void quantize(const float* src, std::size_t n, const QuantSpec& spec, std::uint8_t* data, float* scales,
              Isa isa = detected_isa());
void quantize_bf16(const std::uint16_t* src, std::size_t n, const QuantSpec& spec, std::uint8_t* data,
                   float* scales, Isa isa = detected_isa());
void quantize_fp16(const std::uint16_t* src, std::size_t n, const QuantSpec& spec, std::uint8_t* data,
                   float* scales, Isa isa = detected_isa());

// dst[i] = q[i] * scale, rounded to fp32 (then to bf16, nearest even, for dequantize_bf16).
// dequantize_add: dst[i] += q[i] * scale, the product rounded to fp32 before the fp32 add, so
// summing several buffers gives the same bits as dequantize + add. Scales are checked first
// (finite, not negative; an Error names the block) and nothing is written if one is bad.
void dequantize(const std::uint8_t* data, const float* scales, std::size_t n, const QuantSpec& spec,
                float* dst, Isa isa = detected_isa());
void dequantize_bf16(const std::uint8_t* data, const float* scales, std::size_t n, const QuantSpec& spec,
                     std::uint16_t* dst, Isa isa = detected_isa());
void dequantize_add(const std::uint8_t* data, const float* scales, std::size_t n, const QuantSpec& spec,
                    float* dst, Isa isa = detected_isa());

}  // namespace strata::quant
