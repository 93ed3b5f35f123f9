#include "shard/executor.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "base/aligned.hpp"
#include "base/error.hpp"
#include "base/half.hpp"
#include "quant/quant.hpp"

namespace strata::shard {

namespace {

quant::QuantSpec qspec(DType w, int block) {
  return {w == DType::I4 ? quant::QuantBits::Int4 : quant::QuantBits::Int8, block};
}

// Bytes before element `offset` of a wire buffer (offsets are whole blocks, so even for int4).
std::size_t byte_offset(DType w, std::size_t offset) { return comm::data_bytes(w, offset); }

}  // namespace

// ---- WireBuffer ------------------------------------------------------------------------

void WireBuffer::reset(DType w, int block_size, std::size_t n) {
  wire = w;
  block = block_size;
  count = n;
  data.resize(comm::data_bytes(w, n));
  scales.resize(comm::is_quantized(w) ? (n + block_size - 1) / block_size : 0);
}

void WireBuffer::reserve_any(int block_size, std::size_t n) {
  block = block_size;
  count = n;
  data.resize(4 * n);                            // fp32 is the widest format
  scales.resize(n / std::max(block_size, 1) + 1);  // int8/int4 with the smallest blocks
}

comm::Buf WireBuffer::view(std::size_t offset, std::size_t n) {
  comm::Buf b(wire, data.data() + byte_offset(wire, offset), n);
  if (comm::is_quantized(wire)) {
    b.scales = scales.data() + offset / block;
    b.block = static_cast<std::size_t>(block);
  }
  return b;
}

comm::CBuf WireBuffer::cview(std::size_t offset, std::size_t n) const {
  return const_cast<WireBuffer*>(this)->view(offset, n);
}

void WireBuffer::encode(const float* src, std::size_t offset, std::size_t n) {
  std::uint8_t* dst = data.data() + byte_offset(wire, offset);
  switch (wire) {
    case DType::F32: std::memcpy(dst, src, 4 * n); break;
    case DType::BF16: {
      auto* d = reinterpret_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      break;
    }
    case DType::F16: {
      auto* d = reinterpret_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
      break;
    }
    case DType::I8:
    case DType::I4: quant::quantize(src, n, qspec(wire, block), dst, scales.data() + offset / block); break;
  }
}

void WireBuffer::decode(std::size_t offset, std::size_t n, float* dst) const {
  const std::uint8_t* src = data.data() + byte_offset(wire, offset);
  switch (wire) {
    case DType::F32: std::memcpy(dst, src, 4 * n); break;
    case DType::BF16: {
      auto* s = reinterpret_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      break;
    }
    case DType::F16: {
      auto* s = reinterpret_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = fp16_to_float(s[i]);
      break;
    }
    case DType::I8:
    case DType::I4: quant::dequantize(src, scales.data() + offset / block, n, qspec(wire, block), dst); break;
  }
}

void WireBuffer::decode_add(std::size_t offset, std::size_t n, float* dst) const {
  if (comm::is_quantized(wire)) {
    quant::dequantize_add(data.data() + byte_offset(wire, offset), scales.data() + offset / block, n,
                          qspec(wire, block), dst);
    return;
  }
  AlignedBuffer<float> tmp(n);
  decode(offset, n, tmp.data());
  for (std::size_t i = 0; i < n; ++i) dst[i] += tmp[i];
}

// ---- OpExecutor ------------------------------------------------------------------------

OpExecutor::OpExecutor(std::vector<comm::Collectives*> levels, std::size_t scratch_elements, int block_size,
                       device::Device& device)
    : levels_(std::move(levels)),
      block_(block_size),
      wire_a_(device),
      wire_b_(device),
      wire_c_(device),
      f32_a_(device),
      f32_b_(device) {
  if (scratch_elements == 0) return;
  wire_a_.reserve_any(block_size, scratch_elements);
  wire_b_.reserve_any(block_size, scratch_elements);
  wire_c_.reserve_any(block_size, scratch_elements);
  f32_a_.resize(scratch_elements);
  f32_b_.resize(scratch_elements);
}

std::uint64_t OpExecutor::scratch_bytes() const {
  return wire_a_.bytes() + wire_b_.bytes() + wire_c_.bytes() + 4 * (f32_a_.size() + f32_b_.size());
}

std::vector<const ScheduledOp*> OpExecutor::take_trace() { return std::exchange(trace_, {}); }

const WireBuffer& OpExecutor::gather(const Chain& chain, const WireBuffer& src) {
  // Ping-pong between a and b (neither is `src`; wire_c holds an encoded source).
  const WireBuffer* cur = &src;
  WireBuffer* out = &wire_a_;
  for (const ScheduledOp* op : chain) {
    if (op->kind != OpKind::AllGather || op->algorithm != Algorithm::Ring || op->wire != src.wire)
      throw Error(fmt::format("shard: a weight gather runs ring all-gathers in its source's wire, not {} by {} in {}",
                              to_string(op->kind), to_string(op->algorithm), comm::dtype_name(op->wire)));
    record(op);
    out->set_format(src.wire, src.block);
    level(op->level).all_gather_inline(cur->cview(0, op->elements_in), out->view(0, op->elements_out));
    cur = out;
    out = out == &wire_a_ ? &wire_b_ : &wire_a_;
  }
  return *cur;
}

const WireBuffer& OpExecutor::gather(const Chain& chain, const float* src, std::size_t n, DType wire) {
  wire_c_.set_format(wire, block_);
  wire_c_.encode(src, 0, n);
  return gather(chain, wire_c_);
}

const float* OpExecutor::reduce(const Chain& chain, const float* input) {
  const float* cur = input;
  for (const ScheduledOp* op : chain) {
    record(op);
    comm::Collectives& comm = level(op->level);
    float* out = cur == f32_a_.data() ? f32_b_.data() : f32_a_.data();
    const std::size_t n = op->elements_in, chunk = op->elements_out;
    const int block = comm::is_quantized(op->wire) ? block_ : 0;
    wire_a_.set_format(op->wire, block);
    wire_b_.set_format(op->wire, block);
    if (op->kind == OpKind::AllGather) {
      // The all-gather half of a hierarchical all-reduce.
      wire_a_.encode(cur, 0, n);
      comm.all_gather_inline(wire_a_.cview(0, n), wire_b_.view(0, chunk));
      wire_b_.decode(0, chunk, out);
    } else if (op->algorithm == Algorithm::AllToAll) {
      // Every chunk in the wire format to its member, then the received chunks dequantized
      // and summed in fp32 in member order (the same order on every rank).
      wire_a_.encode(cur, 0, n);
      comm.all_to_all_inline(wire_a_.cview(0, n), wire_b_.view(0, n));
      std::memset(out, 0, 4 * chunk);
      for (int m = 0; m < op->group_size; ++m) wire_b_.decode_add(m * chunk, chunk, out);
    } else if (comm::is_quantized(op->wire)) {
      throw Error(fmt::format("shard: a ring reduce-scatter cannot sum {} on the wire (the schedule reduces "
                              "quantized gradients by all-to-all)",
                              comm::dtype_name(op->wire)));
    } else if (op->wire == DType::F32) {
      comm.reduce_scatter_inline(comm::f32(cur, n), comm::f32(out, chunk), comm::ReduceOp::Sum);
    } else {
      wire_a_.encode(cur, 0, n);
      comm.reduce_scatter_inline(wire_a_.cview(0, n), wire_b_.view(0, chunk), comm::ReduceOp::Sum);
      wire_b_.decode(0, chunk, out);
    }
    cur = out;
  }
  return cur;
}

void OpExecutor::reduce_bucket(const Chain& chain, const std::vector<BucketPart>& parts) {
  // A unit's slice after k levels is its piece (d_0, ..., d_{k-1}) of the finest split,
  // innermost digit most significant (schedule.hpp): laying the buffer out piece-major, unit
  // minor, makes every level's chunk the concatenation of the units' chunks.
  std::size_t pieces = 1, gathered = 1;
  for (const ScheduledOp* op : chain)
    (op->kind == OpKind::ReduceScatter ? pieces : gathered) *= static_cast<std::size_t>(op->group_size);
  float* packed = f32_a_.data();
  for (std::size_t q = 0; q < pieces; ++q)
    for (const BucketPart& p : parts) {
      const std::size_t n = p.padded / pieces;
      std::memcpy(packed, p.input + q * n, 4 * n);
      packed += n;
    }
  const float* out = reduce(chain, f32_a_.data());
  for (std::size_t q = 0; q < gathered; ++q)
    for (const BucketPart& p : parts) {
      const std::size_t n = p.padded / pieces;
      std::memcpy(p.output + q * n, out, 4 * n);
      out += n;
    }
}

void OpExecutor::scalar_sum(const Chain& chain, std::vector<double>& values) {
  const std::size_t k = values.size();
  for (const ScheduledOp* op : chain) {
    if (op->elements_in != k)
      throw Error(fmt::format("shard: {} carries {} values, the runtime has {}", to_string(op->purpose),
                              op->elements_in, k));
    record(op);
    std::vector<double> all(k * static_cast<std::size_t>(op->group_size));
    level(op->level).all_gather_inline(comm::f32(reinterpret_cast<const float*>(values.data()), 2 * k),
                                       comm::f32(reinterpret_cast<float*>(all.data()), 2 * all.size()));
    std::fill(values.begin(), values.end(), 0.0);
    for (std::size_t m = 0; m < all.size(); m += k)
      for (std::size_t i = 0; i < k; ++i) values[i] += all[m + i];
  }
}

}  // namespace strata::shard
