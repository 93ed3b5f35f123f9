#pragma once
// The model's non-GEMM kernels (and attention, which drives per-head GEMMs), one table per
// instruction set. Every kernel is written once (kernels_impl.inc) over a small vector type
// and compiled three times: scalar, AVX2+FMA and AVX-512, each in its own translation unit.
// The model picks a table with kernels_for(detected_isa()); tests call each table directly.
//
// All kernels are threaded with OpenMP static schedules and are deterministic for a given
// thread count. Column reductions (bias and LayerNorm parameter gradients, embedding
// scatter-adds) split columns, not rows, between threads, so each output element is summed
// by one thread in row order: their results do not depend on the thread count either.
// Gradient outputs named d<param> accumulate (+=); activation outputs are overwritten
// unless stated.
#include <cstddef>
#include <cstdint>

#include "base/cpu.hpp"

namespace strata::model {

struct Kernels {
  Isa isa;

  // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
  void (*embed_forward)(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                        int C);
  // dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum_b dout[b,t,:]
  void (*embed_backward)(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T,
                         int C);

  // Row-wise LayerNorm (eps 1e-5) of x [N,C]; keeps mean and 1/std per row for backward.
  // When residual_out is given it also writes residual_out = x + residual_bias (broadcast
  // over rows): the start of the next residual sum, which a GEMM then accumulates into.
  void (*layernorm_forward)(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                            int N, int C, float* residual_out, const float* residual_bias);
  // dx += (or = when !accumulate) the input gradient; dw, db += parameter gradients. When
  // dx_colsum is given, it also adds the column sums of the final dx into it.
  void (*layernorm_backward)(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                             const float* mean, const float* rstd, int N, int C, bool accumulate,
                             float* dx_colsum);

  // pre [N,C] += bias; out = gelu_tanh(pre). pre keeps the pre-activation for backward.
  void (*bias_gelu_forward)(float* pre, float* out, const float* bias, int N, int C);
  // d [N,C] holds dL/d(gelu out) and becomes dL/d(pre); dbias += column sums of the result.
  void (*gelu_backward)(float* d, float* dbias, const float* pre, int N, int C);

  // out[n,:] = row (for every n < N): a bias pre-broadcast for a GEMM with beta = 1.
  void (*broadcast_rows)(float* out, const float* row, int N, int C);
  // out[c] += sum_n x[n*ld + c]
  void (*column_sums)(float* out, const float* x, int N, int C, int ld);

  // Causal multi-head attention over qkv [B,T,3C] (q | k | v, heads contiguous inside
  // each). att [B,NH,T,T] receives the probabilities (zero above the diagonal), out
  // [B,T,C] the heads' outputs side by side.
  void (*attention_forward)(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
  // dqkv [B,T,3C] = gradient of qkv (overwritten). scratch: attention_scratch_floats().
  void (*attention_backward)(float* dqkv, const float* dout, const float* att, const float* qkv, int B, int T, int C,
                             int NH, float* scratch);

  // Softmax cross-entropy over the first V of Vp logits a row. Writes each row's
  // log-sum-exp and loss; returns the sum of the N losses (accumulated in double).
  double (*crossentropy_forward)(float* lse, float* losses, const float* logits, const std::int32_t* targets, int N,
                                 int V, int Vp);
  // dlogits = scale * (softmax - onehot(target)) over the first V columns, 0 past them.
  void (*crossentropy_backward)(float* dlogits, const float* logits, const float* lse, const std::int32_t* targets,
                                int N, int V, int Vp, float scale);
};

// The table for `isa`; throws Error if the CPU (or STRATA_ISA) does not allow it.
const Kernels& kernels_for(Isa isa);

// Floats of scratch attention_backward needs: one T x T tile per thread that may run it.
std::size_t attention_scratch_floats(int T, int max_threads);

// Linear layers y = x W^T with W stored [out, in], through OpenBLAS (the same on every ISA).
// y [N,out] = x W^T, or y += x W^T when accumulate (e.g. onto a pre-broadcast bias).
void matmul_forward(float* y, const float* x, const float* w, int N, int in, int out, bool accumulate);
// dx [N,in] = dy W, dy having row stride ld_dy (>= out).
void matmul_backward_input(float* dx, const float* dy, int ld_dy, const float* w, int N, int in, int out);
// dw [out,in] += dy^T x
void matmul_backward_weight(float* dw, const float* dy, int ld_dy, const float* x, int N, int in, int out);

}  // namespace strata::model
