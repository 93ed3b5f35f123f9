#pragma once
// Host launchers of strata's CUDA kernels (kernels_*.cu), callable from plain C++: no CUDA
// header is needed to include this one. Every launcher enqueues its kernel(s) on `stream` and
// returns at once; pointers are device pointers unless a comment says otherwise. A launcher
// throws strata::Error when the launch fails or an argument is out of range (naming it).
//
// Conventions, as the CPU kernels (model/kernels.hpp) have them:
// - rows are tokens, [N, C] row-major with N = B*T; gradient outputs named d<param> accumulate
//   (+=), activation outputs and input gradients are overwritten unless a comment says so;
// - column reductions (bias, norm-gain and embedding gradients) and every sum are computed in
//   an order fixed by the shapes alone, without floating-point atomics: same inputs, same bits;
// - bf16 values are held as their bit patterns (std::uint16_t), as base/half.hpp does.
// Launchers that reduce across rows take `scratch`, device memory of at least the size the
// matching *_scratch_bytes() function returns for the shapes (never per-step allocation).
#include <cstddef>
#include <cstdint>

#include "base/adamw_coefficients.hpp"
#include "quant/quant.hpp"

struct CUstream_st;  // what cudaStream_t points at

namespace strata::device::cuda {

using Stream = CUstream_st*;  // a cudaStream_t; nullptr is the legacy default stream

// ---------------------------------------------------------------------------------------
// Embeddings

// out[i,:] = wte[tokens[i],:] + wpe[i % T,:] over the N = B*T rows; wpe null (Llama) adds
// nothing. Every token must be in [0, V); one that is not is a kernel error (a trap).
void embed_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int N, int T, int C,
                   int V, Stream stream);
// dwte[tokens[i],:] += dout[i,:] and, when dwpe is given, dwpe[t,:] += sum_b dout[b*T+t,:].
// Each token's rows are added in row order, as the CPU does, so dwte gets the CPU's bits.
std::size_t embed_backward_scratch_bytes(int N, int V);
void embed_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int N, int T, int C,
                    int V, void* scratch, Stream stream);

// ---------------------------------------------------------------------------------------
// Normalizations (the CPU's eps: LayerNorm 1e-5; RMSNorm takes model::kRmsNormEps)

// LayerNorm of each row of x [N,C]; keeps each row's mean and 1/std for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int N,
                       int C, Stream stream);
// dx = residual + dL/dx (residual may be null or alias dx); dw, db += the gain and bias
// gradients summed over the N rows.
std::size_t norm_backward_scratch_bytes(int N, int C);
void layernorm_backward(float* dx, float* dw, float* db, const float* residual, const float* dout, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C, void* scratch,
                        Stream stream);

// out = x * rstd * w per row, rstd = 1 / sqrt(mean(x^2) + eps).
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps,
                     Stream stream);
// dx = residual + dL/dx (residual may be null or alias dx); dw += sum over rows of dout * x * rstd.
void rmsnorm_backward(float* dx, float* dw, const float* residual, const float* dout, const float* x,
                      const float* w, const float* rstd, int N, int C, void* scratch, Stream stream);

// ---------------------------------------------------------------------------------------
// Elementwise and column sums

// pre [N,C] += bias (when given); out = gelu_tanh(pre). pre keeps the pre-activation.
void bias_gelu_forward(float* pre, float* out, const float* bias, int N, int C, Stream stream);
// d [N,C] holds dL/d(gelu out) and becomes dL/d(pre).
void gelu_backward(float* d, const float* pre, int N, int C, Stream stream);
// out[i,:] = row for the N rows: a bias pre-broadcast for a GEMM that accumulates onto it.
void broadcast_rows(float* out, const float* row, int N, int C, Stream stream);
// out[c] += sum over i < N of x[i*ld + c] for c < C (bias gradients).
std::size_t column_sums_scratch_bytes(int N, int C);
void column_sums(float* out, const float* x, int N, int C, int ld, void* scratch, Stream stream);
// *out = sum of x[i]^2 over n floats, in double (the global gradient norm's square).
std::size_t sum_squares_scratch_bytes(std::size_t n);
void sum_squares(double* out, const float* x, std::size_t n, void* scratch, Stream stream);

// act = silu(gate) * up over n values.
void swiglu_forward(float* act, const float* gate, const float* up, std::size_t n, Stream stream);
// dgate, dup (overwritten) from dact.
void swiglu_backward(float* dgate, float* dup, const float* dact, const float* gate, const float* up,
                     std::size_t n, Stream stream);

// Rotary embedding in place on `heads` heads of hd floats per row of x [N, heads*hd]
// (element j pairs with j + hd/2), position = row % T, with cos/sin [T, hd/2]
// (model::llama_kernels::rope_tables, copied to the device). rope_backward applies the
// transpose: gradients at the rotated values become gradients at the inputs.
void rope_forward(float* x, int N, int heads, int hd, int T, const float* cos, const float* sin, Stream stream);
void rope_backward(float* dx, int N, int heads, int hd, int T, const float* cos, const float* sin, Stream stream);

// ---------------------------------------------------------------------------------------
// Causal attention, fused and memory-efficient: scores are computed tile by tile with an online
// softmax, never stored as T x T. Query head h attends over key/value head h / (NH / NKV)
// (NH == NKV: multi-head; GPT-2's packed qkv passes q = qkv, k = qkv + C, v = qkv + 2C and
// strides 3C). Token row t of batch b, head h starts at q + (b*T + t)*q_stride + h*hd (k, v:
// kv_stride; out, dout: out_stride; dq: q_stride; dk, dv: kv_stride). hd <= 128.
struct AttentionShape {
  int B, T, NH, NKV, hd;
  int q_stride, kv_stride, out_stride;
};
// out = softmax(q k^T / sqrt(hd), causal) v; lse [B,NH,T] = each row's log-sum-exp of the
// scaled scores, kept for backward.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& shape, Stream stream);
// dq, dk, dv (overwritten) from dout, recomputing the probabilities from q, k and lse.
// scratch: attention_backward_scratch_bytes(shape). Keys' gradients are summed over query
// tiles and over a group's query heads in a fixed order (no atomics).
std::size_t attention_backward_scratch_bytes(const AttentionShape& shape);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, const AttentionShape& shape, void* scratch,
                        Stream stream);

// ---------------------------------------------------------------------------------------
// Softmax cross-entropy fused with the LM head's output: one pass over each row of logits
// [N, Vp] (the first V columns are the vocabulary, the rest padding) gives lse[i], losses[i]
// = lse - logit[target] and overwrites the row with dlogits = scale * (softmax - onehot(target))
// over the first V columns, 0 past them. dlogits may alias logits. Targets in [0, V).
void crossentropy_fused(float* dlogits, float* losses, float* lse, const float* logits,
                        const std::int32_t* targets, int N, int V, int Vp, float scale, Stream stream);

// ---------------------------------------------------------------------------------------
// Optimizer

// One AdamW update of n elements with the CPU's coefficients (optim::adamw_coefficients) and
// the same IEEE operations in the same order, without fused multiply-adds: the same bits as
// optim::adamw_update. When params_bf16 is given it also receives the new parameters in bf16.
void adamw_update(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t n,
                  const AdamWCoefficients& c, std::uint16_t* params_bf16, Stream stream);

// ---------------------------------------------------------------------------------------
// Casts (round to nearest even, base/half.hpp's rounding)

void cast_f32_to_bf16(std::uint16_t* dst, const float* src, std::size_t n, Stream stream);
void cast_bf16_to_f32(float* dst, const std::uint16_t* src, std::size_t n, Stream stream);

// ---------------------------------------------------------------------------------------
// Elementwise, for the sharding engine (Device::add, scale, from_half_add): one rounded fp32
// operation an element, the host loop's bits.

void add(float* x, const float* y, std::size_t n, Stream stream);               // x += y
void add_bf16(float* x, const std::uint16_t* y, std::size_t n, Stream stream);  // x += widened y
void scale(float* x, std::size_t n, float factor, Stream stream);                // x *= factor

// ---------------------------------------------------------------------------------------
// Block quantization, byte for byte the CPU format of quant/quant.hpp (its QuantSpec: int8 or
// int4, any positive block_size, one fp32 scale per block, INT4 low nibble first, padding zeroed).

// data gets quant::quantized_bytes(n) bytes, scales quant::num_blocks(n) floats. A block holding NaN or
// infinity is left unwritten, and the smallest such block index is stored to
// *first_nonfinite_block (device memory, which the caller sets to UINT64_MAX first; may be null).
void quantize(std::uint8_t* data, float* scales, const float* src, std::size_t n, const quant::QuantSpec& format,
              std::uint64_t* first_nonfinite_block, Stream stream);
void quantize_bf16(std::uint8_t* data, float* scales, const std::uint16_t* src, std::size_t n,
                   const quant::QuantSpec& format, std::uint64_t* first_nonfinite_block, Stream stream);
// dst[i] = q[i] * scale (fp32; then bf16 for dequantize_bf16). Unlike the CPU's, these do not
// check the scales first (they are in device memory): a negative or non-finite scale is used
// as it is, where the CPU would refuse the buffer.
void dequantize(float* dst, const std::uint8_t* data, const float* scales, std::size_t n, const quant::QuantSpec& format,
                Stream stream);
void dequantize_bf16(std::uint16_t* dst, const std::uint8_t* data, const float* scales, std::size_t n,
                     const quant::QuantSpec& format, Stream stream);
// qgZ's reduction: dst[i] += q_0[i]*s_0 then += q_1[i]*s_1 ... over `count` quantized buffers
// of n values each, buffer j at data + j*data_stride bytes with scales at scales + j*scales_stride
// floats; each product is rounded to fp32 before its add, in buffer order: the bits of `count`
// calls of quant::dequantize_add.
void dequantize_sum(float* dst, const std::uint8_t* data, std::size_t data_stride, const float* scales,
                    std::size_t scales_stride, int count, std::size_t n, const quant::QuantSpec& format, Stream stream);

}  // namespace strata::device::cuda
