#pragma once
// A composition's memory on the GPU (built with NCCL): the numbered scratch views of a
// Hierarchy over NCCL levels, and the copies, padding and fp32 sums between its levels,
// as kernels and copies on the stream given (its innermost level's: what orders that
// level after a compute stream orders them too). Each returns once its work finished: the
// levels' collectives wait for theirs the same way (NcclCommunicator's inline forms), so
// the chain's steps keep their order across the levels' streams.
#include <cuda_runtime.h>

#include <vector>

#include "comm/backends/nccl/slot_kernels.hpp"
#include "comm/composition/compose.hpp"

namespace strata::comm {

class DeviceSlotMemory final : public SlotMemory {
 public:
  explicit DeviceSlotMemory(cudaStream_t stream);  // on the current CUDA device
  ~DeviceSlotMemory() override;
  DeviceSlotMemory(const DeviceSlotMemory&) = delete;
  DeviceSlotMemory& operator=(const DeviceSlotMemory&) = delete;

  Buf view(int slot, DType t, std::size_t n, std::size_t block) override;
  void sum_slots(CBuf slots, int k, Buf dst, float divisor) override;
  void scale(Buf b, float divisor) override;
  void zero(Buf b, std::size_t first, std::size_t count) override;
  void copy(CBuf src, std::size_t src_first, Buf dst, std::size_t dst_first, std::size_t count) override;

 private:
  void finish();  // waits for the stream

  struct Slot {
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  std::vector<Slot> slots_;
  cudaStream_t stream_;  // not owned
};

}  // namespace strata::comm
