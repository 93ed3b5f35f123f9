// The schedule's program on 8 ranks of the test topology (2 nodes x 2 GPUs x 2 dies): the
// runtime runs its ops in the order the planner's replay gives, and allocates for each state
// what the lifetime replay says, for every preset, prefetch 0/1/2 and kept weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/backends/tier_comms.hpp"
#include "comm/runtime/context.hpp"
#include "plan/cost_model.hpp"
#include "shard/sharded_engine.hpp"
#include "test_topologies.hpp"
#include "topo/groups.hpp"

using namespace strata;

namespace {

constexpr int kBatch = 2, kSeq = 32;

shard::ShardSpec preset(const char* name) { return shard::ShardSpec::preset_for(name, two_node_topology(8)); }

// One engine on the test topology, one training micro-batch, one optimizer step and one
// evaluation; `check` looks at the engine after each.
// The communication context and groups, built once for every engine.
struct World {
  topo::Topology topology = two_node_topology(8);
  comm::Context ctx{topology};
  topo::ProcessGroups groups{topology};
  comm::TierComms comms{ctx, groups};
};

template <typename Check>
void run_one_step(World& world, const shard::ShardSpec& spec, Check check) {
  comm::Context& ctx = world.ctx;
  comm::TierComms& comms = world.comms;
  shard::ShardedEngine engine(model::ModelConfig::preset("tiny"), kBatch, kSeq, ctx, comms, spec, 1, 1234,
                              device::host());
  std::vector<std::int32_t> tok(kBatch * kSeq), tgt(kBatch * kSeq);
  for (int i = 0; i < kBatch * kSeq; ++i) tok[i] = (7 * i + engine.rank()) % 256, tgt[i] = (tok[i] + 1) % 256;
  engine.micro_step(tok.data(), tgt.data(), 1.0f);
  check(engine, std::string("micro-batch"));
  engine.optimizer_step({}, train::StepArgs{1e-3f, 1});
  check(engine, std::string("step"));
  engine.eval_loss(tok.data(), tgt.data());
  check(engine, std::string("evaluation"));
}

// Every preset as it is; those that gather weights also with prefetch 0 and 2, and with
// weights kept after forward (neither changes a program without weight gathers).
std::vector<shard::ShardSpec> specs_with_options() {
  std::vector<shard::ShardSpec> out;
  for (const char* name : {"ddp", "zero1", "zero2"}) out.push_back(preset(name));
  // Replicated gradients reduced in buckets: the whole model in one (the default), a unit
  // or two a bucket, and after backward (no buckets).
  for (const char* name : {"ddp", "zero1"})
    for (std::uint64_t bytes : {std::uint64_t{250'000}, std::uint64_t{0}}) {
      out.push_back(preset(name));
      out.back().bucket_bytes = bytes;
    }
  for (const char* name : {"zero3", "hsdp", "zeropp", "topo"}) {
    out.push_back(preset(name));
    for (int prefetch : {0, 2}) {
      out.push_back(preset(name));
      out.back().prefetch = prefetch;
    }
    out.push_back(preset(name));
    out.back().free_after_forward = false;
  }
  return out;
}

std::string label(const shard::ShardSpec& s) {
  return s.preset + " prefetch " + std::to_string(s.prefetch) + (s.free_after_forward ? "" : " kept weights") +
         " buckets of " + std::to_string(s.bucket_bytes) + " B";
}

// Host memory that counts what is allocated through it and what is still held.
class CountingDevice final : public device::Device {
 public:
  std::string_view name() const override { return "counting cpu"; }
  void* allocate(std::size_t bytes) override {
    void* p = device::host().allocate(bytes);
    held_[p] = bytes;
    live += bytes;
    return p;
  }
  void deallocate(void* memory) noexcept override {
    const auto it = held_.find(memory);
    live -= it->second;
    held_.erase(it);
    device::host().deallocate(memory);
  }
  void zero(void* memory, std::size_t bytes) override { device::host().zero(memory, bytes); }
  const model::Kernels& kernels() const override {
    ++kernel_tables;
    return device::host().kernels();
  }

  std::uint64_t live = 0;
  mutable int kernel_tables = 0;

 private:
  std::map<void*, std::size_t> held_;
};

// Each traced op's index in `ops`, or past them in `after` (the planner's numbering of a
// last micro-batch: its ops, then the buckets').
std::vector<int> indices(const std::vector<const shard::ScheduledOp*>& trace,
                         const std::vector<shard::ScheduledOp>& ops, const std::vector<shard::ScheduledOp>& after = {}) {
  std::vector<int> out;
  for (const shard::ScheduledOp* op : trace) {
    const bool first = op >= ops.data() && op < ops.data() + ops.size();
    out.push_back(static_cast<int>(first ? op - ops.data() : ops.size() + (op - after.data())));
  }
  return out;
}

}  // namespace

// One run per option serves both: the runtime's op order is the planner's replay, and
// what it allocates for each state is the schedule's lifetime replay.
TEST(ShardedEngine, RuntimeOrderIsThePlannersReplayAndItsMemoryTheLifetimeReplay) {
  World world;
  for (const shard::ShardSpec& spec : specs_with_options()) {
    int walked = 0;  // the most full-unit buffers the runtime had lent at once, over its walks
    run_one_step(world, spec, [&](shard::ShardedEngine& engine, const std::string& phase) {
      const shard::Schedule& s = engine.schedule();
      const std::string what = label(spec) + ", after the " + phase;
      std::vector<int> want;
      if (phase == "micro-batch") {
        // The planner's replay with any times: compute and ops of a second or two. With one
        // micro-batch a step it is the step's last, which runs the buckets' reductions.
        const std::size_t units = s.units().numel.size(), ops = s.micro_batch_ops().size() + s.bucket_ops().size();
        want = plan::replay_micro_batch(s, std::vector<double>(units, 1.0), std::vector<double>(units, 2.0),
                                        std::vector<double>(ops, 1.0), true)
                   .order;
        EXPECT_EQ(want.size(), ops) << what;
        EXPECT_EQ(indices(engine.last_micro_batch_trace(), s.micro_batch_ops(), s.bucket_ops()), want) << what;
        // Buckets: replicated gradients unless bucket_bytes is 0; sharded ones the step still reduces.
        const shard::LevelSpec& L = s.levels();
        EXPECT_EQ(s.bucket_ops().empty(), L.grads == 0 ? spec.bucket_bytes == 0 : L.grads == L.num_levels) << what;
      } else if (phase == "step") {
        // Every step op but the logged loss's (the trainer asks for it after the step), in
        // the schedule's order.
        for (int i = 0; i < static_cast<int>(s.step_ops().size()); ++i)
          if (s.step_ops()[i].purpose != shard::Purpose::LossAllReduce) want.push_back(i);
        EXPECT_EQ(indices(engine.last_step_trace(), s.step_ops()), want) << what;
      } else {
        // Evaluation runs the forward gathers, in the order training issues them.
        for (int i = 0; i < static_cast<int>(s.micro_batch_ops().size()); ++i)
          if (s.micro_batch_ops()[i].purpose == shard::Purpose::WeightGatherForward) want.push_back(i);
        EXPECT_EQ(indices(engine.last_micro_batch_trace(), s.micro_batch_ops()), want) << what;
      }
      const shard::StateMemory got = engine.memory_bytes(), replay = s.memory_per_rank();
      EXPECT_EQ(got.weights, replay.weights) << what;
      EXPECT_EQ(got.secondary, replay.secondary) << what;
      EXPECT_EQ(got.grads, replay.grads) << what;
      EXPECT_EQ(got.optimizer, replay.optimizer) << what;
      // Full-unit buffers: the runtime's high-water mark over the walk that ran is the
      // lifetime replay's peak for its program, and the pool it holds (each buffer of the
      // largest unit, plus replicated weights decoded whole) is what its walks needed at once.
      if (phase != "step") {
        const shard::MicroBatchProgram& ran =
            phase == "micro-batch" ? s.last_micro_batch_program() : s.eval_program();
        EXPECT_EQ(engine.last_micro_batch_peak_buffers(), s.peak_buffers(ran)) << what;
        walked = std::max(walked, engine.last_micro_batch_peak_buffers());
      }
      if (phase == "evaluation") {
        std::uint64_t largest = 0;
        for (int u = 0; u < s.num_units(); ++u) largest = std::max<std::uint64_t>(largest, s.padded_numel(u));
        const bool decoded = s.levels().weights == 0 && spec.weight_wire != DType::F32;
        EXPECT_EQ(got.gathered, 4 * largest * walked + (decoded ? 4 * s.total_padded() : 0)) << what;
      }
      EXPECT_EQ(got.communication, replay.communication) << what;
    });
  }
}

// The engine holds its states, its pool of full-unit buffers and the executor's scratch in
// the memory of the device it was given, and computes with that device's kernels.
TEST(ShardedEngine, AllocatesEveryBufferThroughItsDeviceAndUsesItsKernels) {
  World world;
  CountingDevice counting;
  for (const char* name : {"zero3", "zeropp"}) {
    {
      shard::ShardedEngine engine(model::ModelConfig::preset("tiny"), kBatch, kSeq, world.ctx, world.comms,
                                  preset(name), 1, 1234, counting);
      // What the engine reports per state: all of it, nothing else.
      auto held = [](const shard::StateMemory& m) {
        return m.weights + m.secondary + m.grads + m.optimizer + m.gathered + m.communication;
      };
      const shard::StateMemory built = engine.memory_bytes();
      EXPECT_EQ(counting.live, held(built)) << name;
      std::vector<std::int32_t> tok(kBatch * kSeq), tgt(kBatch * kSeq);
      for (int i = 0; i < kBatch * kSeq; ++i) tok[i] = (3 * i + engine.rank()) % 256, tgt[i] = (tok[i] + 1) % 256;
      engine.micro_step(tok.data(), tgt.data(), 1.0f);
      // The pool was whole before the first step: nothing more was allocated.
      const shard::StateMemory stepped = engine.memory_bytes();
      EXPECT_GT(built.gathered, 0u) << name;
      EXPECT_EQ(stepped.gathered, built.gathered) << name;
      EXPECT_EQ(counting.live, held(stepped)) << name;
    }
    EXPECT_EQ(counting.live, 0u) << name << ": all given back";
  }
  EXPECT_EQ(counting.kernel_tables, 2);  // the model of each engine took the device's table
}
