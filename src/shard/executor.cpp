#include "shard/executor.hpp"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "base/error.hpp"
#include "quant/quant.hpp"

namespace strata::shard {

namespace {

[[noreturn]] void refuse_wire(DType w) {
  throw Error(fmt::format("shard: {} is not a wire format (the step's scalars travel in it, uncoded)",
                          dtype_name(w)));
}

}  // namespace

void encode(device::Device& device, const float* src, comm::Buf dst) {
  auto* d = static_cast<std::uint8_t*>(dst.data);
  switch (dst.dtype) {
    case DType::F32: device.copy(d, src, 4 * dst.count); break;
    case DType::BF16:
    case DType::F16: device.to_half(dst.dtype, src, dst.count, reinterpret_cast<std::uint16_t*>(d)); break;
    case DType::I8:
    case DType::I4: device.quantize(src, dst.count, {dst.dtype, static_cast<int>(dst.block)}, d, dst.scales); break;
    case DType::F64: refuse_wire(dst.dtype);
  }
}

void decode(device::Device& device, comm::CBuf src, float* dst, bool add) {
  const auto* s = static_cast<const std::uint8_t*>(src.data);
  const auto* half = reinterpret_cast<const std::uint16_t*>(s);
  const quant::QuantSpec quant{src.dtype, static_cast<int>(src.block)};
  switch (src.dtype) {
    case DType::F32:
      if (add) device.add(dst, reinterpret_cast<const float*>(s), src.count);
      else device.copy(dst, s, 4 * src.count);
      break;
    case DType::BF16:
    case DType::F16:
      if (add) device.from_half_add(src.dtype, half, src.count, dst);
      else device.from_half(src.dtype, half, src.count, dst);
      break;
    case DType::I8:
    case DType::I4:
      if (add) device.dequantize_add(s, src.scales, src.count, quant, dst);
      else device.dequantize(s, src.scales, src.count, quant, dst);
      break;
    case DType::F64: refuse_wire(src.dtype);
  }
}

void OpExecutor::Codec::encode(comm::CBuf fp32, comm::Buf wire) const {
  shard::encode(device_, static_cast<const float*>(fp32.data), wire);
}
void OpExecutor::Codec::decode(comm::CBuf wire, comm::Buf fp32) const {
  shard::decode(device_, wire, static_cast<float*>(fp32.data));
}
void OpExecutor::Codec::decode_add(comm::CBuf wire, comm::Buf fp32) const {
  shard::decode(device_, wire, static_cast<float*>(fp32.data), true);
}

// ---- WireBuffer ------------------------------------------------------------------------

void WireBuffer::reset(DType w, int block_size, std::size_t n) {
  wire = w;
  block = block_size;
  count = n;
  data.resize(data_bytes(w, n));
  scales.resize(is_quantized(w) ? (n + block_size - 1) / block_size : 0);
}

void WireBuffer::reserve_any(int block_size, std::size_t n) {
  block = block_size;
  count = n;
  data.resize(4 * n);                            // fp32 is the widest format
  scales.resize(n / std::max(block_size, 1) + 1);  // int8/int4 with the smallest blocks
}

comm::Buf WireBuffer::view(std::size_t offset, std::size_t n) {
  // Offsets are whole blocks, so a whole byte even for int4.
  comm::Buf b(wire, data.data() + data_bytes(wire, offset), n);
  if (is_quantized(wire)) {
    b.scales = scales.data() + offset / block;
    b.block = static_cast<std::size_t>(block);
  }
  return b;
}

comm::CBuf WireBuffer::cview(std::size_t offset, std::size_t n) const {
  return const_cast<WireBuffer*>(this)->view(offset, n);
}

void WireBuffer::copy_from(const comm::WireChunk& src) {
  if (src.bytes != data.size() || src.n_scales != scales.size())
    throw Error(fmt::format("shard: {} bytes and {} scales copied into a wire buffer of {} and {}", src.bytes,
                            src.n_scales, data.size(), scales.size()));
  device->copy(data.data(), src.data, src.bytes);
  if (src.n_scales != 0) device->copy(scales.data(), src.scales, sizeof(float) * src.n_scales);
}

// ---- DeviceChainWork -------------------------------------------------------------------

namespace {

void require_sum(float divisor, std::string_view what) {
  if (divisor != 1.0f)
    throw Error(fmt::format("shard: {} divides by {} between levels, but the executor's chains sum (divisor 1): "
                            "the device's scale multiplies, which would round otherwise than the host's division",
                            what, divisor));
}

}  // namespace

void DeviceChainWork::sum_slots(comm::CBuf slots, int k, comm::Buf dst, float divisor) {
  require_sum(divisor, "sum_slots");
  if (dst.dtype != DType::F32)
    throw Error(fmt::format("shard: sum_slots of {} elements: the executor carries fp32 between levels",
                            dtype_name(dst.dtype)));
  // The host's order: s = slot 0, then s += slot j for j = 1, 2, ... (comm/reduce.cpp).
  const auto* first = static_cast<const float*>(slots.data);
  auto* out = static_cast<float*>(dst.data);
  if (out != first) device_.copy(out, first, 4 * dst.count);
  for (int j = 1; j < k; ++j) device_.add(out, first + std::size_t(j) * dst.count, dst.count);
}

void DeviceChainWork::scale(comm::Buf, float divisor) { require_sum(divisor, "scale"); }

void DeviceChainWork::zero(comm::Buf b, std::size_t first, std::size_t count) {
  if (count == 0) return;
  auto* base = static_cast<std::uint8_t*>(b.data);
  if (b.dtype == DType::I4 && first % 2 == 1) {
    // Element `first` is the high nibble of a byte whose low nibble stays: that byte goes
    // through the host, as no device call masks a nibble (only an odd-sized int4 pad starts so).
    std::uint8_t byte = 0;
    device_.to_host(&byte, base + first / 2, 1);
    byte &= 0x0f;
    device_.from_host(base + first / 2, &byte, 1);
  }
  const std::size_t begin = data_bytes(b.dtype, first), end = data_bytes(b.dtype, first + count);
  if (end > begin) device_.zero(base + begin, end - begin);
  if (is_quantized(b.dtype)) {
    const std::size_t s0 = scale_count(b.dtype, first, b.block);  // the first block starting at or after it
    const std::size_t s1 = scale_count(b.dtype, first + count, b.block);
    if (s1 > s0) device_.zero(b.scales + s0, sizeof(float) * (s1 - s0));
  }
}

void DeviceChainWork::copy(comm::CBuf src, std::size_t src_first, comm::Buf dst, std::size_t dst_first,
                           std::size_t count) {
  if (count == 0) return;
  const comm::WireChunk s = comm::wire_chunk(src, src_first, count), d = comm::wire_chunk(dst, dst_first, count);
  if (s.data != d.data) device_.copy(d.data, s.data, s.bytes);
  if (s.n_scales && s.scales != d.scales) device_.copy(d.scales, s.scales, sizeof(float) * s.n_scales);
}

// ---- OpExecutor ------------------------------------------------------------------------

OpExecutor::OpExecutor(LevelCollectives levels, std::size_t scratch_elements, int block_size, device::Device& device)
    : levels_(std::move(levels)),
      device_(device),
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

comm::Buf OpExecutor::Between::carried(int i, DType t, std::size_t n, std::size_t block) {
  if (t == DType::F32) return comm::f32(i == 0 ? e_.f32_a_.data() : e_.f32_b_.data(), n);
  return staged(i, t, n, block);
}

comm::Buf OpExecutor::Between::staged(int i, DType t, std::size_t n, std::size_t block) {
  WireBuffer& w = i == 0 ? e_.wire_a_ : e_.wire_b_;
  w.set_format(t, int(block));
  return w.view(0, n);
}

const std::vector<comm::LevelStep>& OpExecutor::steps_of(const Chain& chain) {
  steps_.clear();
  for (const ScheduledOp* op : chain) {
    record(op);
    steps_.push_back(*op);  // the op's own step
  }
  return steps_;
}

comm::CBuf OpExecutor::gather(const Chain& chain, comm::CBuf src) {
  for (const ScheduledOp* op : chain)
    if (op->kind != Collective::AllGather || op->wire != src.dtype)
      throw Error(fmt::format("shard: a weight gather runs ring all-gathers in its source's wire, not {} by {} in {}",
                              kind_name(*op), algorithm_name(*op), dtype_name(op->wire)));
  const comm::CBuf got = comm::run_chain(levels_.device, steps_of(chain), src, nullptr, 1.0f, between_, nullptr,
                                         flight_observer());
  flight_.first = 0;
  return got;
}

comm::CBuf OpExecutor::gather(const Chain& chain, const float* src, std::size_t n, DType wire) {
  wire_c_.set_format(wire, block_);
  wire_c_.encode(src, 0, n);
  return gather(chain, wire_c_.cview(0, n));
}

const float* OpExecutor::reduce(const Chain& chain, const float* input) {
  if (chain.empty()) return input;
  const comm::CBuf in = comm::f32(input, chain.front()->elements_in);
  const comm::CBuf got =
      comm::run_chain(levels_.device, steps_of(chain), in, nullptr, 1.0f, between_, &codec_, flight_observer());
  flight_.first = 0;
  return static_cast<const float*>(got.data);
}

void OpExecutor::reduce_bucket(const Chain& chain, const std::vector<BucketPart>& parts) {
  // A unit's slice after k levels is its piece (d_0, ..., d_{k-1}) of the finest split,
  // innermost digit most significant (schedule.hpp): laying the buffer out piece-major, unit
  // minor, makes every level's chunk the concatenation of the units' chunks.
  std::size_t pieces = 1, gathered = 1;
  for (const ScheduledOp* op : chain)
    (op->kind == Collective::AllGather ? gathered : pieces) *= static_cast<std::size_t>(op->group_size);
  // Packed where the chain's first op does not write (comm::run_chain's carried(0)).
  float* packed = f32_b_.data();
  for (std::size_t q = 0; q < pieces; ++q)
    for (const BucketPart& p : parts) {
      const std::size_t n = p.padded / pieces;
      device_.copy(packed, p.input + q * n, 4 * n);
      packed += n;
    }
  const float* out = reduce(chain, f32_b_.data());
  for (std::size_t q = 0; q < gathered; ++q)
    for (const BucketPart& p : parts) {
      const std::size_t n = p.padded / pieces;
      device_.copy(p.output + q * n, out, 4 * n);
      out += n;
    }
}

comm::CBuf OpExecutor::run_steps(std::span<const comm::LevelStep> steps, comm::CBuf src) {
  for (const comm::LevelStep& s : steps)
    if (std::max(s.elements_in, s.elements_out) > f32_a_.size())
      throw Error(fmt::format("shard: a step of {} elements does not fit the executor's scratch of {}",
                              std::max(s.elements_in, s.elements_out), f32_a_.size()));
  return comm::run_chain(levels_.device, steps, src, nullptr, 1.0f, between_, &codec_);
}

void sum_scalars(const ScheduledOp& op, std::vector<double>& values,
                 const std::function<void(comm::CBuf mine, comm::Buf all)>& gather) {
  const std::size_t k = values.size();
  if (op.wire != DType::F64)
    throw Error(fmt::format("shard: {} travels in {}; the runtime's scalars are fp64", to_string(op.purpose),
                            dtype_name(op.wire)));
  if (op.elements_in != k)
    throw Error(fmt::format("shard: {} carries {} values, the runtime has {}", to_string(op.purpose), op.elements_in,
                            k));
  std::vector<double> all(k * static_cast<std::size_t>(op.group_size));
  gather({op.wire, values.data(), k}, {op.wire, all.data(), all.size()});
  std::fill(values.begin(), values.end(), 0.0);
  for (std::size_t m = 0; m < all.size(); m += k)
    for (std::size_t j = 0; j < k; ++j) values[j] += all[m + j];
}

void OpExecutor::scalar_sum(const Chain& chain, std::vector<double>& values) {
  for (std::size_t i = 0; i < chain.size(); ++i) {
    const ScheduledOp* op = chain[i];
    record(op);
    sum_scalars(*op, values, [&](comm::CBuf mine, comm::Buf all) {
      if (flight_.first) flight_.step_started(i);
      levels_.host.at(op->level)->all_gather_inline(mine, all);
      if (flight_.first) flight_.step_ended(i);
    });
  }
  flight_.first = 0;
}

}  // namespace strata::shard
