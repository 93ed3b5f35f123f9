#include "train/staged_state.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::train {

namespace {

std::size_t floats_of(const std::vector<StateShard>& shards) {
  std::size_t n = 0;
  for (const StateShard& s : shards) n += 3 * (s.end - s.begin);
  return n;
}

// Each shard's host copy, laid out in `floats`.
template <class Each>
void walk(std::vector<float>& floats, const std::vector<StateShard>& on_device, Each each) {
  float* at = floats.data();
  for (const StateShard& s : on_device) {
    const std::size_t n = s.end - s.begin;
    each(s, StateShard{s.begin, s.end, at, at + n, at + 2 * n}, n * sizeof(float));
    at += 3 * n;
  }
}

}  // namespace

std::vector<StateShard> StagedState::host_shards(device::Device& device, const std::vector<StateShard>& on_device,
                                                 std::int64_t version) {
  const bool refresh = version != version_ || floats_.size() != floats_of(on_device);
  if (refresh) floats_.resize(floats_of(on_device));
  std::vector<StateShard> out;
  walk(floats_, on_device, [&](const StateShard& d, const StateShard& h, std::size_t bytes) {
    if (refresh) {
      device.to_host(h.master, d.master, bytes);
      device.to_host(h.exp_avg, d.exp_avg, bytes);
      device.to_host(h.exp_avg_sq, d.exp_avg_sq, bytes);
    }
    out.push_back(h);
  });
  version_ = version;
  return out;
}

void StagedState::put_back(device::Device& device, const std::vector<StateShard>& on_device) {
  if (floats_.size() != floats_of(on_device))
    throw Error(fmt::format("state_loaded: {} floats of host copies for shards of {}: no checkpoint was loaded "
                            "into them",
                            floats_.size(), floats_of(on_device)));
  walk(floats_, on_device, [&](const StateShard& d, const StateShard& h, std::size_t bytes) {
    device.from_host(d.master, h.master, bytes);
    device.from_host(d.exp_avg, h.exp_avg, bytes);
    device.from_host(d.exp_avg_sq, h.exp_avg_sq, bytes);
  });
}

}  // namespace strata::train
