#pragma once
// Matrix products on the GPU through cuBLASLt, in the two precisions of Precision:
// fp32 (strict fp32 arithmetic, no TF32: for checking against the CPU) or bf16 inputs with
// fp32 accumulation and fp32 output (the operands are rounded to bf16 into scratch first, so
// master weights, activations and gradients all stay fp32 in memory).
// Plain C++: no CUDA header is needed to include this one.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "device/cuda/kernels.hpp"
#include "device/device.hpp"

namespace strata::device::cuda {

class Matmul {
 public:
  // Products whose operands span at most `max_operand_elements` floats each (a strided
  // operand counts from its first to its last element). Scratch and the cuBLASLt workspace
  // come from `device` now, never per product.
  Matmul(Device& device, Precision precision, std::size_t max_operand_elements, Stream stream);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  // Device bytes such a Matmul takes from its device (pool_bytes of each of its buffers).
  static std::uint64_t device_bytes(Precision precision, std::size_t max_operand_elements);

  // Column-major C [m,n] = op(A) op(B) + beta C, with A stored k x m when transpose_a (else
  // m x k) and B stored n x k when transpose_b (else k x n), leading dimensions lda/ldb/ldc.
  void gemm(bool transpose_a, bool transpose_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
            float* c, int ldc, float beta);

  // The linear layers of model/kernels.hpp, row-major, W stored [out, in]:
  // y [N,out] = x W^T, or y += x W^T when accumulate.
  void forward(float* y, const float* x, const float* w, int N, int in, int out, bool accumulate);
  // dx [N,in] = dy W, dy having row stride ld_dy (>= out); dx += dy W when accumulate (an
  // input that feeds several products, as Llama's normed input feeds q, k and v).
  void backward_input(float* dx, const float* dy, int ld_dy, const float* w, int N, int in, int out,
                      bool accumulate = false);
  // dw [out,in] += dy^T x, summed over the N rows.
  void backward_weight(float* dw, const float* dy, int ld_dy, const float* x, int N, int in, int out);

  Precision precision() const { return precision_; }

 private:
  struct Plan;  // a cuBLASLt descriptor set and its chosen algorithm, per shape
  using Shape = std::tuple<bool, bool, int, int, int, int, int, int, bool>;
  const Plan& plan_for(bool transpose_a, bool transpose_b, int m, int n, int k, int lda, int ldb, int ldc,
                       bool accumulate);
  const void* operand(const float* x, int rows, int cols, int ld, Buffer<std::uint16_t>& scratch);

  Precision precision_;
  std::size_t max_operand_;
  Stream stream_;
  void* handle_ = nullptr;  // cublasLtHandle_t
  Buffer<std::uint8_t> workspace_;
  Buffer<std::uint16_t> bf16_a_, bf16_b_;
  std::map<Shape, std::unique_ptr<Plan>> plans_;
};

}  // namespace strata::device::cuda
