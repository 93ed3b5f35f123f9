#pragma once
// The Llama kernels (defined in llama.cpp) that the incremental decoder (decode_llama.cpp)
// shares with the training forward, so both compute one position the same way. Serial over a
// Range of rows, like those of kernels.hpp.
#include <vector>

#include "model/config.hpp"
#include "model/kernels.hpp"

namespace strata::model::llama_kernels {

// out = x * rstd * w per row of [N,C], rstd = 1/sqrt(mean(x^2) + eps); residual_out = x
// when given (the start of the residual sum a GEMM then accumulates into).
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int C, Range rows,
                     float* residual_out);
// Rotary embedding in place on `heads` heads of hd floats per row of x, position = row % T,
// with cos/sin rows of [T, hd/2] (rope_tables); a single row at position t passes T = 1 and
// the tables from row t.
void rope_forward(float* x, int heads, int hd, int T, const float* cos, const float* sin, Range rows);
// act = silu(gate) * up over rows of [N,F].
void swiglu_forward(float* act, const float* gate, const float* up, int F, Range rows);
// cos and sin of the rotary angles of positions [0, T): [T, hd/2] each.
void rope_tables(const ModelConfig& config, int T, std::vector<float>& cos, std::vector<float>& sin);

}  // namespace strata::model::llama_kernels
