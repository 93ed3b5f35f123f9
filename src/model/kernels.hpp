#pragma once
// The model's kernels, one table per instruction set. Every kernel is written once
// (kernels_impl.inc) over a small vector type and compiled three times: scalar, AVX2+FMA and
// AVX-512, each in its own translation unit. The model picks a table with
// kernels_for(detected_isa()); tests call each table directly.
//
// Kernels are serial and work on the part of their output given by a Range: rows, columns or
// (batch, head) pairs. The model runs each unit in one OpenMP parallel region and hands every
// thread a fixed share (see share()), with a barrier only where a step needs rows another
// thread wrote: a few per layer instead of a fork/join per kernel and per GEMM. Each output
// element is computed by one thread in a fixed order, so results are deterministic; column
// reductions (bias and LayerNorm gradients, embedding scatter-adds) sum every row in row
// order, so they do not even depend on the thread count.
// Gradient outputs named d<param> accumulate (+=); activation outputs are overwritten.
#include <cstddef>
#include <cstdint>

#include "base/cpu.hpp"

namespace strata::model {

struct Range {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
};

// Share `part` of `parts` near-equal contiguous shares of [0, n); inner boundaries fall on
// multiples of `align` (columns: whole cache lines, so threads never share one).
Range share(int n, int parts, int part, int align = 1);

inline constexpr int kColumnAlign = 16;  // floats in a 64-byte cache line

struct Kernels {
  Isa isa;

  // out[i,:] = wte[tokens[i],:] + wpe[i % T,:] for rows i of [B*T, C]
  void (*embed_forward)(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int T, int C,
                        Range rows);
  // Columns `cols` of: dwte[tokens[i],:] += dout[i,:]; dwpe[t,:] += sum_b dout[b*T+t,:]
  void (*embed_backward)(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T,
                         int C, Range cols);

  // Row-wise LayerNorm (eps 1e-5) of x [N,C]; keeps mean and 1/std per row for backward.
  // When residual_out is given it also writes residual_out = x + residual_bias (broadcast
  // over rows): the start of the next residual sum, which a GEMM then accumulates into.
  void (*layernorm_forward)(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                            int C, Range rows, float* residual_out, const float* residual_bias);
  // dx = residual + dL/dx for dL/d(out) = dout; residual may be null (then dx = dL/dx) and
  // may alias dx.
  void (*layernorm_backward_input)(float* dx, const float* residual, const float* dout, const float* x,
                                   const float* w, const float* mean, const float* rstd, int C, Range rows);
  // Columns `cols` of the gain and bias gradients, summed over all N rows.
  void (*layernorm_backward_params)(float* dw, float* db, const float* dout, const float* x, const float* mean,
                                    const float* rstd, int N, int C, Range cols);

  // pre [N,C] += bias; out = gelu_tanh(pre). pre keeps the pre-activation for backward.
  void (*bias_gelu_forward)(float* pre, float* out, const float* bias, int C, Range rows);
  // d [N,C] holds dL/d(gelu out) and becomes dL/d(pre).
  void (*gelu_backward)(float* d, const float* pre, int C, Range rows);

  // out[i,:] = row: a bias pre-broadcast for a GEMM that accumulates onto it.
  void (*broadcast_rows)(float* out, const float* row, int C, Range rows);
  // out[c] += sum over i < N of x[i*ld + c], for c in cols (bias gradients).
  void (*column_sums)(float* out, const float* x, int N, int ld, Range cols);

  // Causal multi-head attention over qkv [B,T,3C] (q | k | v, heads contiguous inside
  // each) for the (batch, head) pairs b*NH + h in `pairs`. att [B,NH,T,T] receives the
  // probabilities (zero above the diagonal), out [B,T,C] the heads' outputs side by side.
  // The per-head GEMMs call OpenBLAS, which runs serially inside a parallel region.
  void (*attention_forward)(float* out, float* att, const float* qkv, int T, int C, int NH, Range pairs);
  // dqkv = gradient of qkv for the given pairs (overwritten); scratch: T*T floats.
  void (*attention_backward)(float* dqkv, const float* dout, const float* att, const float* qkv, int T, int C,
                             int NH, Range pairs, float* scratch);

  // Softmax cross-entropy over the first V of Vp logits a row: each row's log-sum-exp and loss.
  void (*crossentropy_forward)(float* lse, float* losses, const float* logits, const std::int32_t* targets, int V,
                               int Vp, Range rows);
  // dlogits = scale * (softmax - onehot(target)) over the first V columns, 0 past them.
  void (*crossentropy_backward)(float* dlogits, const float* logits, const float* lse, const std::int32_t* targets,
                                int V, int Vp, float scale, Range rows);
};

// The table for `isa`; throws Error if the CPU (or STRATA_ISA) does not allow it.
const Kernels& kernels_for(Isa isa);

// Linear layers y = x W^T with W stored [out, in], through OpenBLAS (the same on every ISA),
// serial when called inside a parallel region.
// Rows `rows` of y [N,out] = x W^T, or y += x W^T when accumulate (e.g. onto a broadcast bias).
void matmul_forward(float* y, const float* x, const float* w, int in, int out, bool accumulate, Range rows);
// Rows `rows` of dx [N,in] = dy W, dy having row stride ld_dy (>= out).
void matmul_backward_input(float* dx, const float* dy, int ld_dy, const float* w, int in, int out, Range rows);
// Rows `out_rows` of dw [out,in] += dy^T x, summed over all N rows of dy and x.
void matmul_backward_weight(float* dw, const float* dy, int ld_dy, const float* x, int N, int in, Range out_rows);

}  // namespace strata::model
