#pragma once
// Host copies of an engine's optimizer state, for checkpoints on a compute device the host
// cannot address (Device::host_visible() false): state_shards() hands these copies out and
// state_loaded() puts a loaded checkpoint back. LocalEngine and the sharding engine share it.
#include <cstdint>
#include <vector>

#include "device/device.hpp"
#include "train/engine.hpp"

namespace strata::train {

class StagedState {
 public:
  // Host copies of `on_device` (shards in the device's memory), copied afresh only when
  // `version` (the engine's count of applied updates) changed since the last call: a
  // checkpoint being loaded writes the copies, then reads them back (its digest) before
  // state_loaded() puts them back.
  std::vector<StateShard> host_shards(device::Device& device, const std::vector<StateShard>& on_device,
                                      std::int64_t version);
  // The copies back into `on_device`, the shards the last host_shards() was given.
  void put_back(device::Device& device, const std::vector<StateShard>& on_device);

 private:
  std::vector<float> floats_;  // each shard's master, exp_avg and exp_avg_sq, back to back
  std::int64_t version_ = -1;
};

}  // namespace strata::train
