#pragma once
// replay_micro_batch's two streams, one method a moment (internal to plan/). run() walks the
// program's events: at each, issue, then wait, then compute; after the last, drain the
// stream and attribute each op's time to its tier.
#include <cstddef>
#include <utility>
#include <vector>

#include "plan/cost_model.hpp"

namespace strata::plan {

class MicroBatchReplay {
 public:
  // Throws Error when the times or factors do not match the schedule's ops and units.
  MicroBatchReplay(const shard::Schedule& schedule, const std::vector<double>& forward_s,
                   const std::vector<double>& backward_s, const std::vector<double>& op_seconds, bool last_of_step,
                   const OverlapFactors& factors);

  Timeline run() &&;

  // Queues on the stream the chains and buckets the program issues at `step`.
  void issue(const shard::EventStep& step);
  // Compute waits, the stream alone, for the chains and buckets that must be done at `step`.
  void wait(const shard::EventStep& step);
  // Event `event`'s compute: an acquire adds its unit's forward or backward, run once the
  // last of a run of acquires is in.
  void compute(std::size_t event);
  // The micro-batch ends when the stream is idle.
  void drain();
  // Each op's busy, stretched and exposed time, on its tier.
  void attribute();

  const Timeline& timeline() const { return t_; }

 private:
  double under_compute(std::size_t i) const;
  double slows_compute(std::size_t i) const;
  int enqueue(const std::vector<int>& chain);
  void finish_head();
  void settle();
  void wait_for(int i);
  void run_compute(double work);

  const std::vector<model::UnitEvent>& events_;
  const std::vector<double>& forward_s_;
  const std::vector<double>& backward_s_;
  const std::vector<double>& op_seconds_;
  const OverlapFactors& factors_;
  const shard::MicroBatchProgram& program_;
  std::vector<shard::ScheduledOp> ops_;  // micro-batch ops, then (last_of_step) bucket ops
  std::vector<std::vector<int>> ops_of_event_, ops_of_bucket_;
  Timeline t_;
  std::vector<double> start_, end_;
  std::vector<char> done_;
  std::vector<int> chain_last_, bucket_last_;
  std::vector<std::pair<double, double>> waits_;
  double clock_ = 0, run_ = 0;
  // The stream, simulated up to clock_: t_.order[head_] is on it with left_ seconds of its
  // own (alone) time to go; the ops before it are done.
  std::size_t head_ = 0;
  double left_ = 0;
};

}  // namespace strata::plan
