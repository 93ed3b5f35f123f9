#pragma once
// The compute device: where the engine's buffers live (its pool of full-unit buffers, the
// shards of every state, the executor's scratch), which model computes on them and how the
// optimizer updates them. strata computes on the host CPU ("cpu") and, in a build with CUDA
// and on a machine with a GPU, on one NVIDIA GPU ("cuda", device/cuda/). Engines allocate only
// through Device and Buffer and run the model, the gradient norm and AdamW through it, so
// the engines, the trainer and the checkpoint code never know which device runs
// (docs/architecture.md, docs/gpu.md).
//
// The defaults of the compute members are the host's, so a Device over host memory (the
// CPU, a test's counting wrapper) overrides only its allocator and kernel table. The sharding
// engine moves, accumulates, encodes and decodes its buffers only through these members too.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "base/dtype.hpp"
#include "base/precision.hpp"
#include "model/config.hpp"
#include "model/kernels.hpp"
#include "model/layout.hpp"
#include "model/model.hpp"
#include "optim/adamw.hpp"
#include "quant/quant.hpp"

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

  // Whether the host reads and writes this device's memory in place: engines then hand its
  // pointers out as they are, with no staging copies.
  virtual bool host_visible() const { return true; }
  // Sets aside `bytes` (pool_bytes() of every buffer to come) before the first allocation,
  // so a run allocates once, up front, and never per step. Host memory needs no pool.
  virtual void reserve(std::size_t /*bytes*/) {}
  // Copies between host memory and memory this device allocated (checkpoints, data, tests).
  virtual void to_host(void* host, const void* memory, std::size_t bytes);
  virtual void from_host(void* memory, const void* host, std::size_t bytes);

  // The model of config.family computing on this device at `precision` (make_model's
  // contract); its activations come from this device's memory. The host computes fp32 only.
  virtual std::unique_ptr<model::Model> make_model(const model::ModelConfig& config, int batch, int seq,
                                                   bool recompute, Precision precision);
  // Bytes of device memory such a model takes (activations, their gradients, its scratch).
  virtual std::uint64_t model_bytes(const model::ModelConfig& config, int batch, int seq, bool recompute,
                                    Precision precision) const;
  // optim::sum_squares and optim::adamw_update_range over this device's memory.
  virtual double sum_squares(const float* x, std::size_t n);
  virtual void adamw_update_range(const model::ParamLayout& layout, std::size_t begin, std::size_t end,
                                  float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                                  const optim::AdamWConfig& hp, float lr, std::int64_t step, float grad_scale);

  // Between buffers of this device's memory (the sharding engine's staging, gradient
  // accumulation and averaging). The host's: memcpy, and one fp32 operation an element.
  virtual void copy(void* dst, const void* src, std::size_t bytes);
  virtual void add(float* x, const float* y, std::size_t n);       // x[i] += y[i]
  virtual void scale(float* x, std::size_t n, float factor);       // x[i] *= factor

  // The wire codec: fp32 to and from the wire formats (base/dtype.hpp) weights and gradients
  // cross ranks in, over this device's memory. The host's are the CPU kernels (base/half.hpp,
  // quant/quant.hpp); a device's own must give their bits, so ranks exchange the same bytes
  // whatever computes. `format` is BF16 or F16 (rounded to nearest even); others are an Error.
  virtual void to_half(DType format, const float* src, std::size_t n, std::uint16_t* dst);
  virtual void from_half(DType format, const std::uint16_t* src, std::size_t n, float* dst);
  virtual void from_half_add(DType format, const std::uint16_t* src, std::size_t n, float* dst);  // dst +=
  // quant::quantize / dequantize / dequantize_add (a block with NaN or infinity is an Error).
  virtual void quantize(const float* src, std::size_t n, const quant::QuantSpec& spec, std::uint8_t* data,
                        float* scales);
  virtual void dequantize(const std::uint8_t* data, const float* scales, std::size_t n, const quant::QuantSpec& spec,
                          float* dst);
  virtual void dequantize_add(const std::uint8_t* data, const float* scales, std::size_t n,
                              const quant::QuantSpec& spec, float* dst);
};

// Device allocations are rounded to this many bytes (a pool's unit, cuBLASLt's alignment).
inline constexpr std::size_t kPoolAlignBytes = 256;
inline constexpr std::size_t pool_bytes(std::size_t bytes) {
  return (bytes + kPoolAlignBytes - 1) / kPoolAlignBytes * kPoolAlignBytes;
}

Device& host();  // the CPU, with the kernels of the widest instruction set it has
// The device a run names; throws Error naming `field` for a device strata has no backend for,
// and for "cuda" in a build without CUDA or on a machine without a usable GPU (saying which).
Device& device_named(std::string_view name, std::string_view field);
// Whether device_named("cuda") would succeed; otherwise *why_not says why.
bool cuda_available(std::string* why_not = nullptr);
// Whether the device named `device_name` (device_named's names) has a codec for wire `format`:
// the cpu every one, the cuda device all but fp16 (its GPU casts are bf16's). By name, so that
// a run's wires are checked before any device is made (strata train's checks); CudaDevice
// refuses by it too, so the two cannot disagree.
bool has_codec(std::string_view device_name, DType format);
// Which GPU is "cuda" in this process: GPU local_rank % (the GPUs this machine has), so the
// ranks mpirun starts on one machine spread over its GPUs (NCCL refuses two ranks on one
// GPU). Makes no CUDA call: it takes effect when the cuda device is first made, and is an
// Error after that if it names another GPU. Without a call, local rank 0 (GPU 0). Nothing
// to choose in a build without CUDA.
void choose_gpu(int local_rank);

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
