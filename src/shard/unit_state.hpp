#pragma once
// What the sharding runtime holds for one unit: this rank's slices of W, the secondary copy,
// G and OS, and the step-phase chains that move them. Shared by the engine's files.
#include "device/device.hpp"
#include "shard/executor.hpp"
#include "shard/schedule.hpp"
#include "shard/sharded_engine.hpp"

namespace strata::shard {

struct ShardedEngine::Unit {
  explicit Unit(device::Device& d)
      : weights(d), secondary(d), grad_accum(d), master(d), exp_avg(d), exp_avg_sq(d), os_grad(d) {}

  int index = 0;
  std::size_t numel = 0, padded = 0;
  std::size_t arena_offset = 0;   // in the layout's (unpadded) arena
  std::size_t padded_offset = 0;  // in the engine's replicated buffers
  Slice w, g, o, s;
  WireBuffer weights, secondary;
  device::Buffer<float> grad_accum;  // G slice (G sharded)
  device::Buffer<float> master, exp_avg, exp_avg_sq, os_grad;
  Chain step_reduce, weight_step;   // step-phase chains of this unit
};

}  // namespace strata::shard
