#pragma once
// The "cuda" compute device: one GPU of this process (choose_gpu), its memory one pool taken up front
// (Device::reserve, sized by the engine's own count of what it will hold: no allocation per
// step), every kernel, product and copy in order on one stream. Its models are CudaGPT
// (gpt_cuda.hpp) and CudaLlama (llama_cuda.hpp); its optimizer the fused AdamW kernel over the layout's decay segments.
// Plain C++: no CUDA header is needed to include this one.
#include <string>

#include "device/cuda/kernels.hpp"
#include "device/device.hpp"

namespace strata::device::cuda {

// device::choose_gpu's: records the local rank whose GPU the device is made on.
void choose_gpu(int local_rank);
// The GPUs this machine has (0 where none answers).
int gpu_count();
// Whether the chosen GPU answers and this build runs on it (sm_80 or newer); otherwise
// *why_not says why.
bool gpu_present(std::string* why_not);
// The process's cuda device; call gpu_present() first (device_named does).
Device& gpu();
// The stream every cuda-device operation is enqueued on.
Stream gpu_stream();
// Makes the device's GPU the calling thread's current one (CUDA's is per thread): a thread
// other than the one that made the device (the communication thread) calls it before
// enqueuing anything on the device's memory or stream.
void use_gpu_on_this_thread();
// Waits for the stream; throws Error naming `what` if anything on it failed.
void synchronize(const char* what);

}  // namespace strata::device::cuda
