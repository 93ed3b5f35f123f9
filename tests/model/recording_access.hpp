#pragma once
// A UnitAccess for tests of either model family's walk.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "model/model.hpp"

namespace strata::model {

// Serves each acquire from a fresh copy of the unit and poisons it with NaN on release, so
// a parameter read after release turns the loss or gradients into NaN; records every
// event; hands out per-unit gradient buffers and snapshots them at grads_ready, so a write
// after grads_ready is caught.
class RecordingAccess final : public UnitAccess {
 public:
  RecordingAccess(const ParamLayout& layout, const float* params)
      : layout_(layout), params_(params), grads_(layout.total_floats(), 0.f) {}

  const float* acquire(int unit, Phase phase) override {
    events.push_back({UnitEvent::Acquire, unit, phase});
    const UnitInfo& u = layout_.units()[unit];
    auto& copy = copies_.emplace_back(std::make_unique<std::vector<float>>(params_ + u.offset,
                                                                           params_ + u.offset + u.numel));
    EXPECT_EQ(live_.count({unit, phase}), 0u) << "unit " << unit << " acquired twice";
    live_[{unit, phase}] = copy.get();
    return copy->data();
  }
  void release(int unit, Phase phase) override {
    events.push_back({UnitEvent::Release, unit, phase});
    auto it = live_.find({unit, phase});
    ASSERT_NE(it, live_.end()) << "unit " << unit << " released without acquire";
    std::fill(it->second->begin(), it->second->end(), NAN);  // kept allocated: reads give NaN
    live_.erase(it);
  }
  float* grads(int unit) override {
    EXPECT_EQ(ready_.count(unit), 0u) << "grads(" << unit << ") asked for after grads_ready";
    return grads_.data() + layout_.units()[unit].offset;
  }
  void grads_ready(int unit) override {
    events.push_back({UnitEvent::GradsReady, unit, Phase::Backward});
    const UnitInfo& u = layout_.units()[unit];
    ready_[unit] = std::vector<float>(grads_.begin() + u.offset, grads_.begin() + u.offset + u.numel);
  }

  const std::vector<float>& all_grads() const { return grads_; }
  void expect_no_writes_after_ready() const {
    for (auto& [unit, snapshot] : ready_) {
      const UnitInfo& u = layout_.units()[unit];
      EXPECT_EQ(0, std::memcmp(snapshot.data(), grads_.data() + u.offset, u.numel * sizeof(float)))
          << "unit " << unit << " gradients changed after grads_ready";
    }
    EXPECT_TRUE(live_.empty()) << "units left acquired";
  }

  std::vector<UnitEvent> events;

 private:
  const ParamLayout& layout_;
  const float* params_;
  std::vector<float> grads_;
  std::vector<std::unique_ptr<std::vector<float>>> copies_;
  std::map<std::pair<int, Phase>, std::vector<float>*> live_;
  std::map<int, std::vector<float>> ready_;
};

}  // namespace strata::model
