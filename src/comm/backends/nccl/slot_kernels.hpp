#pragma once
// Host launchers of the kernels of DeviceSlotMemory (slot_kernels.cu), each enqueued on
// `stream`. Plain types only: the .cu file compiles as C++17 without strata's headers.
#include <cuda_runtime.h>

#include <cstddef>

namespace strata::comm {

// Element types: 0 fp32, 1 bf16, 2 fp16.
// out[i] = round((s_0[i] + ... + s_{k-1}[i]) / divisor), fp32 sums in slot order, slot j
// the n elements at slots + j * n; divisor 1: no division. out may alias slot 0.
void launch_sum_slots(int type, const void* slots, int k, std::size_t n, void* out, float divisor,
                      cudaStream_t stream);
// *byte &= 0x0f: an int4 element in a byte's high nibble zeroed, the low one kept.
void launch_clear_high_nibble(void* byte, cudaStream_t stream);

}  // namespace strata::comm
