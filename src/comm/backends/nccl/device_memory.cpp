#include "comm/backends/nccl/device_memory.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "comm/api/wire.hpp"

namespace strata::comm {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("cuda: {}: {}", what, cudaGetErrorString(e)));
}

int kernel_type(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::BF16: return 1;
    case DType::F16: return 2;
    default: throw Error(fmt::format("comm: device sum of {} elements (only fp32, bf16, fp16)", dtype_name(t)));
  }
}

constexpr std::size_t kAlign = 256;  // what cudaMalloc gives; scales start on such a boundary too

}  // namespace

DeviceSlotMemory::DeviceSlotMemory(cudaStream_t stream) : stream_(stream) {}

DeviceSlotMemory::~DeviceSlotMemory() {
  for (Slot& s : slots_) cudaFree(s.data);  // waits for the device
}

void DeviceSlotMemory::finish() { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

Buf DeviceSlotMemory::view(int slot, DType t, std::size_t n, std::size_t block) {
  const std::size_t data = (data_bytes(t, n) + kAlign - 1) / kAlign * kAlign;
  const std::size_t bytes = data + scale_count(t, n, block) * sizeof(float);
  if (slot >= int(slots_.size())) slots_.resize(std::size_t(slot) + 1);
  Slot& s = slots_[std::size_t(slot)];
  if (s.bytes < bytes) {  // grow-only, like the host Scratch; cudaFree waits for the device
    check(cudaFree(s.data), "cudaFree");
    s = {};
    check(cudaMalloc(&s.data, bytes), "cudaMalloc");
    s.bytes = bytes;
  }
  auto* p = static_cast<std::byte*>(s.data);
  return Buf(t, p, n, is_quantized(t) ? reinterpret_cast<float*>(p + data) : nullptr, block);
}

void DeviceSlotMemory::sum_slots(CBuf slots, int k, Buf dst, float divisor) {
  launch_sum_slots(kernel_type(dst.dtype), slots.data, k, dst.count, dst.data, divisor, stream_);
  finish();
}

void DeviceSlotMemory::scale(Buf b, float divisor) {
  launch_sum_slots(kernel_type(b.dtype), b.data, 1, b.count, b.data, divisor, stream_);
  finish();
}

void DeviceSlotMemory::zero(Buf b, std::size_t first, std::size_t count) {
  if (count == 0) return;
  auto* base = static_cast<std::byte*>(b.data);
  // As zero_elements (wire.hpp): an odd int4 start shares its byte with element first - 1.
  if (b.dtype == DType::I4 && first % 2 == 1) launch_clear_high_nibble(base + first / 2, stream_);
  const std::size_t begin = data_bytes(b.dtype, first), end = data_bytes(b.dtype, first + count);
  if (end > begin) check(cudaMemsetAsync(base + begin, 0, end - begin, stream_), "cudaMemsetAsync");
  if (is_quantized(b.dtype)) {
    const std::size_t s0 = scale_count(b.dtype, first, b.block), s1 = scale_count(b.dtype, first + count, b.block);
    if (s1 > s0) check(cudaMemsetAsync(b.scales + s0, 0, (s1 - s0) * sizeof(float), stream_), "cudaMemsetAsync");
  }
  finish();
}

void DeviceSlotMemory::copy(CBuf src, std::size_t src_first, Buf dst, std::size_t dst_first, std::size_t count) {
  if (count == 0) return;
  const WireChunk s = wire_chunk(src, src_first, count), d = wire_chunk(dst, dst_first, count);
  if (s.data != d.data)
    check(cudaMemcpyAsync(d.data, s.data, s.bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
  if (s.n_scales && s.scales != d.scales)
    check(cudaMemcpyAsync(d.scales, s.scales, s.n_scales * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync");
  finish();
}

}  // namespace strata::comm
