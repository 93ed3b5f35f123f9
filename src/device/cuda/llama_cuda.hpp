#pragma once
// Llama on the GPU: the same model as model::Llama (llama.hpp: its walk, model/gpt_walk.hpp,
// its units, its parameter layout, its kernels' conventions) computing with the CUDA kernels
// (kernels.hpp) and cuBLASLt (matmul.hpp) on device buffers the engine lends. Attention is
// the fused, memory-efficient grouped-query kernel: it keeps each row's log-sum-exp instead
// of T x T probabilities. Plain C++: no CUDA header is needed to include this one.
#include <cstdint>
#include <memory>

#include "device/cuda/cuda_model.hpp"

namespace strata::device::cuda {

class CudaLlama final : public CudaModel {
 public:
  // Activations for micro-batches of exactly `batch` sequences of `seq` tokens, in `device`'s
  // memory, and the rotary tables of `seq` positions; throws Error on other sizes or another
  // family.
  CudaLlama(Device& device, const model::ModelConfig& config, int batch, int seq, bool recompute,
            Precision precision);
  ~CudaLlama() override;

  // What such a model's device memory is made of (ModelBuffers::device_bytes sums it).
  static ModelSizes sizes(const model::ModelConfig& config, int batch, int seq, bool recompute);

  const float* logits() const override;  // in device memory

 private:  // CudaModel's per-unit steps
  void embed_forward(const float* embed_params, const std::int32_t* tokens) override;
  void block_forward(int layer, const float* p) override;
  float head_forward(const float* norm_params, const float* head_params, const std::int32_t* targets,
                     float dlogits_scale) override;
  void head_backward(const float* norm_params, const float* head_params, float* norm_grads, float* head_grads) override;
  void block_backward(int layer, const float* p, float* g) override;
  void embed_backward(float* embed_grads) override;

  struct Impl;  // activations, rotary tables, offsets; llama_cuda.cpp
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::device::cuda
