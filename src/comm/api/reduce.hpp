#pragma once
// Element-wise reduction kernels of the host collectives: fp32 accumulation for fp32,
// bf16 and fp16, each result rounded once (to nearest even) into the element type. The
// order of additions is fixed by the caller, so results are bit-reproducible.
#include <cstddef>

#include "comm/api/buffer.hpp"

namespace strata::comm {

// out[i] = round((float(a[i]) + float(b[i])) / divisor); out may alias a or b.
// divisor == 1 means no division.
void add_elements(DType t, const void* a, const void* b, void* out, std::size_t n, float divisor);
// out[i] = round(float(x[i]) / divisor); out may alias x.
void scale_elements(DType t, const void* x, void* out, std::size_t n, float divisor);
// out[i] = round(((s_0[i] + s_1[i]) + ... + s_{k-1}[i]) / divisor), where slot j is the n
// elements at `slots + j * n`. The sum runs in fp32 in slot order.
void sum_slots(DType t, const void* slots, int k, std::size_t n, void* out, float divisor);

}  // namespace strata::comm
