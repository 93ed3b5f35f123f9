#pragma once
// What every GPU model (gpt_cuda.cpp's CudaGPT, llama_cuda.cpp's CudaLlama) has in common:
// the shape checks, and beside its own activations' layout, the buffers it computes in (the
// activation storage, this micro-batch's token ids, the kernels' shared scratch and the
// matmul, all from the device's pool) and the loss's way back to the host. One place for the
// device bytes the pool is sized by. Plain C++: no CUDA header is needed to include this one.
#include <cstdint>
#include <memory>
#include <vector>

#include "device/cuda/matmul.hpp"
#include "device/device.hpp"
#include "model/config.hpp"
#include "model/layout.hpp"
#include "model/model.hpp"

namespace strata::device::cuda {

// What a model's device memory is made of, in the units its parts are sized in.
struct ModelSizes {
  std::size_t activation_floats;     // activations and their gradients
  std::size_t tokens;                // B*T
  std::size_t kernel_scratch_bytes;  // the largest scratch any of its kernels asks for
  std::size_t largest_operand;       // the largest operand of any product (Matmul's scratch)
  std::size_t table_floats = 0;      // constant tables (Llama's rotary cos and sin)
};

class ModelBuffers {
 public:
  ModelBuffers(Device& device, const ModelSizes& sizes, Precision precision);
  // Device bytes such buffers take (pool_bytes of each).
  static std::uint64_t device_bytes(const ModelSizes& sizes, Precision precision);

  // Copies this micro-batch's ids to the device (their kernels read them there).
  void upload_tokens(const std::int32_t* tokens);
  void upload_targets(const std::int32_t* targets);
  // The mean of the per-row losses (device memory), summed in row order as the CPU models sum.
  float mean_loss(const float* losses);

  Device& device;
  Buffer<float> storage;
  Buffer<float> tables;
  Buffer<std::uint8_t> scratch;  // one stream: never two kernels' scratch at once
  Matmul matmul;

  std::int32_t* tokens() { return ids_.data(); }
  std::int32_t* targets() { return ids_.data() + host_losses_.size(); }

 private:
  Buffer<std::int32_t> ids_;  // this micro-batch's tokens, then its targets
  std::vector<float> host_losses_;
};

class CudaModel : public model::Model {
 public:
  // The micro-batch's ids are checked before anything is acquired (a kernel would only trap
  // on a bad one); then the family's walks run; training waits for the stream once, at the end of
  // its backward.
  float forward_training(model::UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                         float grad_scale) final;
  void backward(model::UnitAccess& access) final;
  float forward(model::UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets) final;

  const model::ParamLayout& layout() const override { return layout_; }
  int batch() const override { return B_; }
  int seq() const override { return T_; }
  std::uint64_t activation_bytes() const override { return buffers_->storage.size() * sizeof(float); }
  bool recompute() const override { return recompute_; }

 protected:
  using Sizes = ModelSizes (*)(const model::ModelConfig& config, int batch, int seq, bool recompute);
  // Refuses a config of another family than `family`, or a micro-batch shape the GPU cannot
  // run (naming the field), before `sizes` of the device's memory are taken.
  CudaModel(Device& device, const model::ModelConfig& config, model::Family family, int batch, int seq,
            bool recompute, Precision precision, Sizes sizes);
  ModelBuffers& buffers() { return *buffers_; }
  // The family's per-unit steps, which the walks (model/gpt_walk.hpp) run. dlogits_scale: what
  // the fused cross-entropy scales the logits' gradient by, in the forward (0 in forward-only use).
  virtual void embed_forward(const float* embed_params, const std::int32_t* tokens) = 0;
  virtual void block_forward(int layer, const float* p) = 0;
  virtual float head_forward(const float* norm_params, const float* head_params, const std::int32_t* targets,
                             float dlogits_scale) = 0;
  virtual void head_backward(const float* norm_params, const float* head_params, float* norm_grads,
                             float* head_grads) = 0;
  virtual void block_backward(int layer, const float* p, float* g) = 0;
  virtual void embed_backward(float* embed_grads) = 0;

  model::ParamLayout layout_;
  int B_, T_;
  bool recompute_;

 private:
  float forward_walk(model::UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                     float dlogits_scale);

  std::unique_ptr<ModelBuffers> buffers_;
};

// The families' GPU models, each the same model as the host's (gpt_cuda.cpp: model::GPT's;
// llama_cuda.cpp: model::Llama's), with activations for micro-batches of exactly `batch`
// sequences of `seq` tokens in `device`'s memory; throw Error on other sizes or another family.
std::unique_ptr<CudaModel> make_cuda_gpt(Device& device, const model::ModelConfig& config, int batch, int seq,
                                         bool recompute, Precision precision);
std::unique_ptr<CudaModel> make_cuda_llama(Device& device, const model::ModelConfig& config, int batch, int seq,
                                           bool recompute, Precision precision);
// What such a model's device memory is made of (ModelBuffers::device_bytes sums it).
ModelSizes cuda_gpt_sizes(const model::ModelConfig& config, int batch, int seq, bool recompute);
ModelSizes cuda_llama_sizes(const model::ModelConfig& config, int batch, int seq, bool recompute);

}  // namespace strata::device::cuda
