#pragma once
// The "cuda" compute device: GPU 0 of this process, its memory one pool taken up front
// (Device::reserve, sized by the engine's own count of what it will hold: no allocation per
// step), every kernel, product and copy in order on one stream. Its models are CudaGPT
// (gpt_cuda.hpp) and CudaLlama (llama_cuda.hpp); its optimizer the fused AdamW kernel over the layout's decay segments.
// Plain C++: no CUDA header is needed to include this one.
#include <string>

#include "device/cuda/kernels.hpp"
#include "device/device.hpp"

namespace strata::device::cuda {

// Whether a GPU this build can run on (sm_80 or newer) answers; otherwise *why_not says why.
bool gpu_present(std::string* why_not);
// The process's cuda device; call gpu_present() first (device_named does).
Device& gpu();
// The stream every cuda-device operation is enqueued on.
Stream gpu_stream();
// Waits for the stream; throws Error naming `what` if anything on it failed.
void synchronize(const char* what);

}  // namespace strata::device::cuda
