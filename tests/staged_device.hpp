#pragma once
// A compute device for tests, on the CPU: host memory behind a device that says the host
// cannot address it (as a GPU's), so an engine must go through its copies for initialisation,
// checkpoints and export. It counts every transfer and every device operation (copies, sums,
// the wire codec, the gradient norm, AdamW), so a test fails if an engine bypasses the device,
// and checks that every allocation fits in what was reserved up front. It knows its
// allocations, so a test can check where a buffer lies (holds).
#include <atomic>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>

#include "device/device.hpp"

namespace strata::test {

class StagedDevice final : public device::Device {
 public:
  std::string_view name() const override { return "staged cpu"; }
  bool host_visible() const override { return false; }
  void reserve(std::size_t bytes) override { reserved += bytes; }
  void* allocate(std::size_t bytes) override {
    allocated += device::pool_bytes(bytes);
    ++allocations;
    if (allocated > reserved) over_reserve = true;
    void* memory = device::host().allocate(bytes);
    std::lock_guard lock(blocks_mutex_);
    blocks_[static_cast<const std::byte*>(memory)] = bytes;
    return memory;
  }
  void deallocate(void* memory) noexcept override {
    {
      std::lock_guard lock(blocks_mutex_);
      blocks_.erase(static_cast<const std::byte*>(memory));
    }
    device::host().deallocate(memory);
  }
  // Whether [memory, memory + bytes) lies inside one allocation of this device.
  bool holds(const void* memory, std::size_t bytes) const {
    const auto* p = static_cast<const std::byte*>(memory);
    std::lock_guard lock(blocks_mutex_);
    auto it = blocks_.upper_bound(p);
    if (it == blocks_.begin()) return false;
    --it;
    return p + bytes <= it->first + it->second;
  }
  void zero(void* memory, std::size_t bytes) override { device::host().zero(memory, bytes); }
  const model::Kernels& kernels() const override { return device::host().kernels(); }
  void to_host(void* host, const void* memory, std::size_t bytes) override {
    ++copies_to_host;
    std::memcpy(host, memory, bytes);
  }
  void from_host(void* memory, const void* host, std::size_t bytes) override {
    ++copies_from_host;
    std::memcpy(memory, host, bytes);
  }

  // The host's operations, counted.
  void copy(void* dst, const void* src, std::size_t bytes) override {
    ++copies;
    Device::copy(dst, src, bytes);
  }
  void add(float* x, const float* y, std::size_t n) override {
    ++adds;
    Device::add(x, y, n);
  }
  void scale(float* x, std::size_t n, float factor) override {
    ++scales;
    Device::scale(x, n, factor);
  }
  void to_half(DType format, const float* src, std::size_t n, std::uint16_t* dst) override {
    ++half_encodes;
    Device::to_half(format, src, n, dst);
  }
  void from_half(DType format, const std::uint16_t* src, std::size_t n, float* dst) override {
    ++half_decodes;
    Device::from_half(format, src, n, dst);
  }
  void from_half_add(DType format, const std::uint16_t* src, std::size_t n, float* dst) override {
    ++half_decodes;
    Device::from_half_add(format, src, n, dst);
  }
  void quantize(const float* src, std::size_t n, const quant::QuantSpec& spec, std::uint8_t* data,
                float* scales_out) override {
    ++quantizes;
    Device::quantize(src, n, spec, data, scales_out);
  }
  void dequantize(const std::uint8_t* data, const float* scales_in, std::size_t n, const quant::QuantSpec& spec,
                  float* dst) override {
    ++dequantizes;
    Device::dequantize(data, scales_in, n, spec, dst);
  }
  void dequantize_add(const std::uint8_t* data, const float* scales_in, std::size_t n, const quant::QuantSpec& spec,
                      float* dst) override {
    ++dequantizes;
    Device::dequantize_add(data, scales_in, n, spec, dst);
  }
  double sum_squares(const float* x, std::size_t n) override {
    ++norms;
    return Device::sum_squares(x, n);
  }
  void adamw_update_range(const model::ParamLayout& layout, std::size_t begin, std::size_t end, float* params,
                          const float* grads, float* exp_avg, float* exp_avg_sq, const optim::AdamWConfig& hp,
                          float lr, std::int64_t step, float grad_scale) override {
    ++updates;
    Device::adamw_update_range(layout, begin, end, params, grads, exp_avg, exp_avg_sq, hp, lr, step, grad_scale);
  }

  std::size_t reserved = 0, allocated = 0;  // bytes, over the device's life
  int allocations = 0;
  bool over_reserve = false;
  // Called from the engine's compute and communication threads alike.
  std::atomic<int> copies_to_host{0}, copies_from_host{0}, copies{0}, adds{0}, scales{0}, half_encodes{0},
      half_decodes{0}, quantizes{0}, dequantizes{0}, norms{0}, updates{0};

 private:
  mutable std::mutex blocks_mutex_;
  std::map<const std::byte*, std::size_t> blocks_;  // live allocations: start, bytes
};

}  // namespace strata::test
