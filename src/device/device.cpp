#include "device/device.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>

#include <fmt/format.h>

#include "base/aligned.hpp"
#include "base/cpu.hpp"
#include "base/error.hpp"
#include "base/half.hpp"
#ifdef STRATA_HAVE_CUDA
#include "device/cuda/cuda_device.hpp"
#endif

namespace strata::device {

void Device::to_host(void* host, const void* memory, std::size_t bytes) { std::memcpy(host, memory, bytes); }
void Device::from_host(void* memory, const void* host, std::size_t bytes) { std::memcpy(memory, host, bytes); }

std::unique_ptr<model::Model> Device::make_model(const model::ModelConfig& config, int batch, int seq, bool recompute,
                                                 Precision precision) {
  if (precision != Precision::F32)
    throw Error(fmt::format("train.precision = '{}': the {} device computes in fp32 only", precision_name(precision),
                            name()));
  return model::make_model(config, batch, seq, recompute, kernels());
}

std::uint64_t Device::model_bytes(const model::ModelConfig& config, int batch, int seq, bool recompute,
                                  Precision) const {
  return model::activation_bytes(config, batch, seq, recompute);
}

double Device::sum_squares(const float* x, std::size_t n) { return optim::sum_squares(x, n); }

void Device::adamw_update_range(const model::ParamLayout& layout, std::size_t begin, std::size_t end, float* params,
                                const float* grads, float* exp_avg, float* exp_avg_sq, const optim::AdamWConfig& hp,
                                float lr, std::int64_t step, float grad_scale) {
  optim::adamw_update_range(layout, begin, end, params, grads, exp_avg, exp_avg_sq, hp, lr, step, grad_scale);
}

void Device::copy(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

void Device::add(float* x, const float* y, std::size_t n) { std::transform(x, x + n, y, x, std::plus<float>()); }

void Device::scale(float* x, std::size_t n, float factor) {
  std::transform(x, x + n, x, [factor](float v) { return v * factor; });
}

namespace {

// Whether a 16-bit `format` is bf16 (else fp16); any other format is an Error.
bool is_bf16(DType format) {
  if (!is_half(format)) throw Error(fmt::format("device: {} is not a 16-bit float format", dtype_name(format)));
  return format == DType::BF16;
}

}  // namespace

void Device::to_half(DType format, const float* src, std::size_t n, std::uint16_t* dst) {
  if (is_bf16(format)) std::transform(src, src + n, dst, float_to_bf16);
  else std::transform(src, src + n, dst, float_to_fp16);
}

void Device::from_half(DType format, const std::uint16_t* src, std::size_t n, float* dst) {
  if (is_bf16(format)) std::transform(src, src + n, dst, bf16_to_float);
  else std::transform(src, src + n, dst, fp16_to_float);
}

// Widening is exact, so this is decode-then-add's bits without the temporary.
void Device::from_half_add(DType format, const std::uint16_t* src, std::size_t n, float* dst) {
  if (is_bf16(format))
    for (std::size_t i = 0; i < n; ++i) dst[i] += bf16_to_float(src[i]);
  else
    for (std::size_t i = 0; i < n; ++i) dst[i] += fp16_to_float(src[i]);
}

void Device::quantize(const float* src, std::size_t n, const quant::QuantSpec& spec, std::uint8_t* data,
                      float* scales) {
  quant::quantize(src, n, spec, data, scales);
}

void Device::dequantize(const std::uint8_t* data, const float* scales, std::size_t n, const quant::QuantSpec& spec,
                        float* dst) {
  quant::dequantize(data, scales, n, spec, dst);
}

void Device::dequantize_add(const std::uint8_t* data, const float* scales, std::size_t n,
                            const quant::QuantSpec& spec, float* dst) {
  quant::dequantize_add(data, scales, n, spec, dst);
}

namespace {

class HostDevice final : public Device {
 public:
  std::string_view name() const override { return "cpu"; }
  void* allocate(std::size_t bytes) override { return aligned_zeroed(bytes); }
  void deallocate(void* memory) noexcept override { std::free(memory); }
  void zero(void* memory, std::size_t bytes) override { std::memset(memory, 0, bytes); }
  const model::Kernels& kernels() const override { return model::kernels_for(detected_isa()); }
};

}  // namespace

Device& host() {
  static HostDevice device;
  return device;
}

bool cuda_available(std::string* why_not) {
#ifdef STRATA_HAVE_CUDA
  return cuda::gpu_present(why_not);
#else
  if (why_not) *why_not = "this strata was built without CUDA (configure with the CUDA toolkit and -DSTRATA_CUDA=ON)";
  return false;
#endif
}

bool has_codec(std::string_view device_name, DType format) {
  return !(device_name == "cuda" && format == DType::F16);
}

void choose_gpu(int local_rank) {
#ifdef STRATA_HAVE_CUDA
  cuda::choose_gpu(local_rank);
#else
  static_cast<void>(local_rank);
#endif
}

Device& device_named(std::string_view name, std::string_view field) {
  if (name == host().name()) return host();
  if (name == "cuda") {
    std::string why;
    if (!cuda_available(&why)) throw Error(fmt::format("{} = 'cuda' (--device cuda): {}", field, why));
#ifdef STRATA_HAVE_CUDA
    return cuda::gpu();
#endif
  }
  throw Error(fmt::format("{} = '{}': no backend for that device (known: cpu, cuda)", field, name));
}

}  // namespace strata::device
