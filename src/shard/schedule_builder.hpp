#pragma once
// Schedule's construction, one method a phase (internal to shard/). build() runs them in
// this order, each reading what the ones before it made: micro-batch ops, issue points, step
// reductions (buckets, or the step phase), scalar ops, tensor-parallel ops, the step's weight
// gather, slots.
#include <cstddef>
#include <vector>

#include "comm/compose.hpp"
#include "shard/schedule.hpp"

namespace strata::shard {

// What a schedule holds besides its inputs (Schedule's accessors of the same names).
struct ScheduleParts {
  std::vector<ScheduledOp> micro, step, bucket_ops, tensor_parallel;
  std::vector<std::vector<int>> buckets;
  MicroBatchProgram training, last_training, eval;
};

class ScheduleBuilder {
 public:
  // `padded`: each unit's padded size (Schedule::padded_numel). The arguments must outlive the builder.
  ScheduleBuilder(const UnitPlan& units, const ShardSpec& spec, const LevelSpec& levels,
                  const std::vector<std::size_t>& padded, Collectives collectives);

  ScheduleParts build(const TensorParallelPlan& tp) &&;

  // The gathers and reductions of one micro-batch, each naming the event it serves.
  void add_micro_batch_ops();
  // The training and evaluation programs, and each micro-batch op's issue_event and complete_by.
  void set_issue_points();
  // The step's reduction of the G shard to the OS shard: in buckets of the step's last
  // micro-batch (replicated gradients, or sharded ones the step still reduces), else unit by
  // unit in the step phase.
  void add_step_reductions();
  // The grad norm's and the loss's sums: fp64 all-gathers level by level.
  void add_scalar_ops();
  // The model's TP collectives and the step's two TP scalar sums (none without TP).
  void add_tensor_parallel_ops(const TensorParallelPlan& tp);
  // The updated OS shard gathered back to the W shard after the optimizer step.
  void add_step_gather();
  // What each op reads and writes.
  void set_slots();

  const ScheduleParts& parts() const { return parts_; }

 private:
  int num_events() const { return static_cast<int>(units_.events.size()); }
  void add_level_ops(std::vector<ScheduledOp>& out, When when, Purpose purpose, int unit,
                     const std::vector<comm::LevelStep>& steps) const;
  ScheduledOp flat_op(When when, Purpose purpose, comm::StepKind kind, int unit, int inner, int outer, DType wire,
                      std::size_t padded) const;
  void gather(std::vector<ScheduledOp>& out, When when, Purpose purpose, int unit, std::size_t padded, int from,
              int to, DType wire) const;
  void reduce(std::vector<ScheduledOp>& out, When when, Purpose purpose, int unit, std::size_t padded, int from,
              int to, DType wire) const;
  void step_reduction(std::vector<ScheduledOp>& out, When when, int unit, std::size_t padded) const;
  void add_replicated_buckets();
  void add_sharded_buckets();
  void add_bucket(int bucket, int unit, std::size_t padded, int event, int issue);
  void add_scalars(Purpose purpose, int levels, int values);

  const UnitPlan& units_;
  const ShardSpec& spec_;
  const LevelSpec& levels_;
  const std::vector<std::size_t>& padded_;
  const bool flat_;
  const int block_;
  ScheduleParts parts_;
};

}  // namespace strata::shard
