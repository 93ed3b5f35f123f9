#pragma once
// The compute device: where the engine's buffers live (its pool of full-unit buffers, the
// shards of every state, the executor's scratch) and which kernel table the model computes
// with. strata computes on the host CPU ("cpu"). A GPU backend implements Device (its
// allocator, its kernel table) and is named in device_named(); the sharding engine, which
// allocates only through Device and Buffer, then takes it unchanged (docs/architecture.md).
#include <cstddef>
#include <string_view>
#include <utility>

#include "model/kernels.hpp"

namespace strata::device {

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string_view name() const = 0;
  // `bytes` of zeroed memory, aligned for the device's widest vector; throws std::bad_alloc.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* memory) noexcept = 0;
  virtual void zero(void* memory, std::size_t bytes) = 0;
  virtual const model::Kernels& kernels() const = 0;
};

Device& host();  // the CPU, with the kernels of the widest instruction set it has
// The device a run names; throws Error naming `field` for a device strata has no backend for.
Device& device_named(std::string_view name, std::string_view field);

// n zeroed elements of T in one device's memory; moves, never copies. The device is bound
// at construction, so resize() keeps allocating where the owner said.
template <class T>
class Buffer {
 public:
  explicit Buffer(Device& device) : device_(&device) {}
  Buffer(Device& device, std::size_t n) : device_(&device) { resize(n); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept
      : device_(o.device_), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      device_ = o.device_;
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~Buffer() { release(); }

  // Discards the old contents; the new array is zeroed.
  void resize(std::size_t n) {
    release();
    if (n > 0) data_ = static_cast<T*>(device_->allocate(n * sizeof(T)));
    size_ = n;
  }
  void zero() {
    if (data_) device_->zero(data_, size_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }

 private:
  void release() noexcept {
    if (data_) device_->deallocate(data_);
    data_ = nullptr;
    size_ = 0;
  }

  Device* device_;
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace strata::device
