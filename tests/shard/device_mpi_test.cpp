// The sharding engine on a compute device the host cannot address (tests/staged_device.hpp:
// host memory behind device calls), 8 ranks of configs/topology/2node-2gpu-2die.toml, the
// tiny model, 3 steps: zero3, zeropp and topo (int8/int4 wires), bf16 wires and zero1's
// buckets train through the device's copies, sums, codec, norm and AdamW to the host's losses
// bit for bit; the engine allocates exactly what it reserved from the schedule's memory
// formula, all of it before the first step; a checkpoint taken through the device's copies
// resumes to the uninterrupted run's losses. The runtime on such a device, its levels from a
// factory as the cuda device's NCCL ones come: only device buffers reach the training levels,
// the scalar sums run on the host levels.
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/backends/tier_comms.hpp"
#include "comm/runtime/context.hpp"
#include "shard/runtime.hpp"
#include "shard/sharded_engine.hpp"
#include "staged_device.hpp"
#include "support.hpp"
#include "test_batches.hpp"
#include "topo/groups.hpp"
#include "train/checkpoint.hpp"

using namespace strata;
using test::StagedDevice;

namespace {

constexpr int kBatch = 2, kSeq = 32, kSteps = 3;

topo::Topology test_topology() {
  topo::Topology t = topo::Topology::load(test::source_path("configs/topology/2node-2gpu-2die.toml").string());
  t.resolve(8);
  return t;
}

struct World {
  topo::Topology topology = test_topology();
  comm::Context ctx{topology};
  topo::ProcessGroups groups{topology};
  comm::TierComms comms{ctx, groups};
};

const model::ModelConfig& tiny() {
  static const model::ModelConfig config = model::ModelConfig::preset("tiny");
  return config;
}

struct StepResult {
  double loss = 0, grad_norm = 0;
};

// One micro-batch and one optimizer step; the loss averaged over the ranks.
StepResult train_step(shard::ShardedEngine& engine, int step) {
  std::vector<std::int32_t> tok, tgt;
  append_test_batch(step, 0, engine.rank(), kBatch, kSeq, tok, tgt);
  const float loss = engine.micro_step(tok.data(), tgt.data(), 1.0f);
  const train::StepOutcome out = engine.optimizer_step({}, train::StepArgs{1e-3f, step});
  return {engine.all_mean(loss), out.grad_norm};
}

void expect_same_bits(double a, double b, const std::string& what) {
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << what << ": " << a << " vs " << b;
}

struct RunResult {
  std::vector<StepResult> steps;
  std::vector<float> params;  // the whole model after the last step
};

void train_steps(shard::ShardedEngine& engine, RunResult& run) {
  for (int s = 1; s <= kSteps; ++s) run.steps.push_back(train_step(engine, s));
}
void gather(shard::ShardedEngine& engine, RunResult& run) {
  run.params.resize(engine.layout().total_floats());
  engine.gather_params(run.params.data());
}

// The host engine's run of `spec`.
RunResult host_run(World& world, const shard::ShardSpec& spec) {
  RunResult run;
  shard::ShardedEngine engine(tiny(), kBatch, kSeq, world.ctx, world.comms, spec, 1, 1234, device::host());
  train_steps(engine, run);
  gather(engine, run);
  return run;
}

void expect_same_run(const RunResult& host, const RunResult& device, const std::string& name) {
  ASSERT_EQ(host.steps.size(), device.steps.size()) << name;
  for (std::size_t s = 0; s < host.steps.size(); ++s) {
    expect_same_bits(host.steps[s].loss, device.steps[s].loss, name + ", loss of step " + std::to_string(s + 1));
    expect_same_bits(host.steps[s].grad_norm, device.steps[s].grad_norm,
                     name + ", gradient norm of step " + std::to_string(s + 1));
  }
  ASSERT_EQ(host.params.size(), device.params.size()) << name;
  EXPECT_EQ(std::memcmp(host.params.data(), device.params.data(), 4 * host.params.size()), 0) << name;
}

std::vector<std::pair<std::string, shard::ShardSpec>> specs(const topo::Topology& topology) {
  std::vector<std::pair<std::string, shard::ShardSpec>> out;
  for (const char* name : {"zero3", "zeropp", "topo", "zero1"})
    out.emplace_back(name, shard::ShardSpec::preset_for(name, topology));
  shard::ShardSpec bf16 = shard::ShardSpec::preset_for("zero3", topology);
  bf16.weight_wire = bf16.grad_wire = DType::BF16;
  out.emplace_back("zero3 in bf16 wires", bf16);
  return out;
}

// rank 0's path, on every rank (a checkpoint folder all ranks write into).
std::string rank0_path(const std::string& mine) {
  int n = static_cast<int>(mine.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string path = mine;
  path.resize(n);
  MPI_Bcast(path.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

// One level's collectives, checked: every buffer an operation gets (data and scales) must lie
// in the staged device's memory (a training level) or outside it (a host level).
class CheckedLevel final : public comm::Collectives {
 public:
  enum class Memory { Device, Host };
  CheckedLevel(comm::Collectives& inner, const StagedDevice& device, Memory memory)
      : inner_(inner), device_(device), memory_(memory) {}

  const std::string& name() const override { return inner_.name(); }
  int size() const override { return inner_.size(); }
  int index() const override { return inner_.index(); }
  int world_rank_of(int index) const override { return inner_.world_rank_of(index); }

  comm::Work all_gather_async(comm::CBuf shard, comm::Buf full) override {
    return inner_.all_gather_async(check(shard), check(full));
  }
  comm::Work reduce_scatter_async(comm::CBuf full, comm::Buf shard, comm::ReduceOp op) override {
    return inner_.reduce_scatter_async(check(full), check(shard), op);
  }
  comm::Work all_reduce_async(comm::Buf data, comm::ReduceOp op) override {
    return inner_.all_reduce_async(check(data), op);
  }
  comm::Work all_to_all_async(comm::CBuf send, comm::Buf recv) override {
    return inner_.all_to_all_async(check(send), check(recv));
  }
  comm::Work broadcast_async(comm::Buf data, int root) override { return inner_.broadcast_async(check(data), root); }
  comm::Work barrier_async() override { return inner_.barrier_async(); }
  // The executor's: run on the communication thread, by the inner group's own inline forms.
  void all_gather_inline(comm::CBuf shard, comm::Buf full) override {
    inner_.all_gather_inline(check(shard), check(full));
  }
  void reduce_scatter_inline(comm::CBuf full, comm::Buf shard, float divisor) override {
    inner_.reduce_scatter_inline(check(full), check(shard), divisor);
  }
  void all_to_all_inline(comm::CBuf send, comm::Buf recv) override {
    inner_.all_to_all_inline(check(send), check(recv));
  }
  void broadcast_inline(comm::Buf data, int root) override { inner_.broadcast_inline(check(data), root); }
  void barrier_inline() override { inner_.barrier_inline(); }

  int buffers() const { return buffers_; }
  int misplaced() const { return misplaced_; }
  std::string first_misplaced() const {
    std::lock_guard lock(mutex_);
    return first_misplaced_;
  }

 private:
  template <bool C>
  comm::BufView<C> check(comm::BufView<C> b) {
    ++buffers_;
    const bool on_device = device_.holds(b.data, b.bytes()) &&
                           (!is_quantized(b.dtype) || device_.holds(b.scales, 4 * b.n_scales()));
    if (on_device != (memory_ == Memory::Device) && misplaced_++ == 0) {
      std::lock_guard lock(mutex_);
      first_misplaced_ = std::to_string(b.count) + " elements of " + std::string(dtype_name(b.dtype)) +
                         (on_device ? " in the device's memory" : " outside the device's memory");
    }
    return b;
  }

  comm::Collectives& inner_;
  const StagedDevice& device_;
  Memory memory_;
  std::atomic<int> buffers_{0}, misplaced_{0};
  mutable std::mutex mutex_;
  std::string first_misplaced_;
};

}  // namespace

TEST(ShardedOnADevice, TrainsThroughTheDeviceToTheHostsLossesBitForBitWithinItsReservation) {
  World world;
  for (const auto& [name, spec] : specs(world.topology)) {
    const RunResult host = host_run(world, spec);
    RunResult on_device;
    StagedDevice staged;
    shard::ShardedEngine engine(tiny(), kBatch, kSeq, world.ctx, world.comms, spec, 1, 1234, staged);
    const shard::Schedule& schedule = engine.schedule();
    // Reserved: the schedule's formula at the pool's alignment, and the model's activations;
    // allocated: exactly the formula's buffers, all of them before the first step.
    EXPECT_EQ(staged.reserved, shard::ShardedEngine::device_bytes(schedule, staged, tiny(), kBatch, kSeq, false,
                                                                  Precision::F32))
        << name;
    EXPECT_EQ(staged.allocated, schedule.memory_per_rank(4, device::kPoolAlignBytes).total()) << name;
    const int allocations = staged.allocations;
    EXPECT_GE(staged.copies_from_host.load(), schedule.num_units()) << name << ": the initial master slices";
    train_steps(engine, on_device);
    EXPECT_EQ(staged.allocations, allocations) << name << ": a step allocated";
    EXPECT_FALSE(staged.over_reserve) << name << ": " << staged.allocated << " bytes allocated, " << staged.reserved
                                      << " reserved";
    const int to_host = staged.copies_to_host;
    gather(engine, on_device);
    EXPECT_EQ(staged.copies_to_host.load(), to_host + schedule.num_units()) << name << ": export, a unit a copy";
    expect_same_run(host, on_device, name);

    // Every step's norm, averaging and update went through the device, a unit at a time.
    EXPECT_EQ(staged.norms.load(), kSteps * schedule.num_units()) << name;
    EXPECT_EQ(staged.scales.load(), kSteps * schedule.num_units()) << name;
    EXPECT_GT(staged.updates.load(), 0) << name;
    EXPECT_GT(staged.copies.load(), 0) << name;
    const shard::LevelSpec& L = schedule.levels();
    if (L.grads > 0) {
      EXPECT_GT(staged.adds.load(), 0) << name << ": gradient slices accumulated";
    }
    const bool quantized = is_quantized(spec.weight_wire) || is_quantized(spec.grad_wire);
    EXPECT_EQ(staged.quantizes.load() > 0, quantized) << name;
    EXPECT_EQ(staged.dequantizes.load() > 0, quantized) << name;
    const bool half = spec.weight_wire == DType::BF16 || spec.grad_wire == DType::BF16;
    EXPECT_EQ(staged.half_encodes.load() > 0, half) << name;
    EXPECT_EQ(staged.half_decodes.load() > 0, half) << name;
  }
}

TEST(ShardedOnADevice, ACheckpointTakenThroughTheDevicesCopiesResumesToTheSameLosses) {
  World world;
  const shard::ShardSpec spec = shard::ShardSpec::preset_for("zeropp", world.topology);
  std::vector<StepResult> straight;
  {
    StagedDevice staged;
    shard::ShardedEngine engine(tiny(), kBatch, kSeq, world.ctx, world.comms, spec, 1, 1234, staged);
    for (int s = 1; s <= kSteps; ++s) straight.push_back(train_step(engine, s));
  }
  test::ScratchDir dir;
  const std::string root = rank0_path((dir / "ckpt").string());
  std::filesystem::path saved;
  {
    StagedDevice staged;
    shard::ShardedEngine engine(tiny(), kBatch, kSeq, world.ctx, world.comms, spec, 1, 1234, staged);
    for (int s = 1; s < kSteps; ++s) train_step(engine, s);
    train::CheckpointInfo info;
    info.step = kSteps - 1;
    info.model = tiny();
    info.world_size = engine.world_size();
    info.engine = engine.describe();
    const int before = staged.copies_to_host;
    saved = train::save_checkpoint(engine, root, info);
    // Master weights and both moments of every optimizer slice, through the device's copies.
    const int shards = static_cast<int>(shard::optimizer_runs(engine.schedule(), engine.layout(),
                                                              engine.rank()).size());
    EXPECT_EQ(staged.copies_to_host.load(), before + 3 * shards);
  }
  StagedDevice staged;
  shard::ShardedEngine engine(tiny(), kBatch, kSeq, world.ctx, world.comms, spec, 1, 1234, staged);
  const int before = staged.copies_from_host;
  train::load_checkpoint(engine, train::Checkpoint::open(saved));
  EXPECT_GT(staged.copies_from_host.load(), before);
  const StepResult resumed = train_step(engine, kSteps);
  expect_same_bits(straight.back().loss, resumed.loss, "the resumed step's loss");
  expect_same_bits(straight.back().grad_norm, resumed.grad_norm, "the resumed step's gradient norm");
}

TEST(ShardedOnADevice, TheRuntimesTierCollectivesRefuseADeviceMpiCannotReadNamingTheMissingPiece) {
  World world;
  StagedDevice staged;
  const std::string what =
      test::error_of([&] { shard::host_tier_collectives(world.ctx, world.groups, world.comms, staged); });
  EXPECT_NE(what.find("train.device = 'staged cpu': the sharding engine runs on it, but these tier collectives are "
                      "MPI over host memory"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("its levels are NCCL communicators per tier group (shard::nccl_tier_collectives"),
            std::string::npos)
      << what;
  // On the host, the device and host levels are the same MPI groups.
  const shard::TierCollectives host = shard::host_tier_collectives(world.ctx, world.groups, world.comms,
                                                                    device::host());
  EXPECT_EQ(host.levels.device.size(), static_cast<std::size_t>(world.topology.num_tiers()));
  EXPECT_EQ(host.levels.device, host.levels.host);
}

// The runtime on a device the host cannot address, its levels from a factory (the seam the
// cuda device's NCCL levels plug into), each level checked: the training levels get only
// buffers in the device's memory, the host levels only host memory (the loss and gradient-norm
// sums), and the run gives the host engine's losses, norms and weights bit for bit.
TEST(ShardedOnADevice, TheRuntimesTrainingLevelsGetOnlyDeviceBuffersAndItsScalarSumsTheHostLevels) {
  World world;
  for (const char* strategy : {"zeropp", "zero3", "zero1"}) {
    const RunResult host = host_run(world, shard::ShardSpec::preset_for(strategy, world.topology));
    StagedDevice staged;
    std::vector<CheckedLevel*> device_levels, host_levels;
    const shard::TierCollectivesFactory checked = [&](comm::Context&, const topo::ProcessGroups&,
                                                      comm::TierComms& mpi, device::Device& device) {
      EXPECT_EQ(&device, &staged);
      const shard::LevelCollectives groups = shard::mpi_levels(mpi);
      shard::TierCollectives out;
      for (std::size_t t = 0; t < groups.device.size(); ++t) {
        auto on_device = std::make_unique<CheckedLevel>(*groups.device[t], staged, CheckedLevel::Memory::Device);
        auto on_host = std::make_unique<CheckedLevel>(*groups.host[t], staged, CheckedLevel::Memory::Host);
        device_levels.push_back(on_device.get());
        host_levels.push_back(on_host.get());
        out.levels.device.push_back(on_device.get());
        out.levels.host.push_back(on_host.get());
        out.owned.push_back(std::move(on_device));
        out.owned.push_back(std::move(on_host));
      }
      return out;
    };
    parallel::ShardOptions options;
    options.strategy = strategy;
    options.topology = test::source_path("configs/topology/2node-2gpu-2die.toml").string();
    shard::ShardedRuntime runtime(options, tiny(), kBatch, kSeq, 1, 1234, staged, false, Precision::F32,
                                  checked);
    RunResult on_device;
    train_steps(runtime.engine(), on_device);
    gather(runtime.engine(), on_device);

    int device_buffers = 0, host_buffers = 0;
    for (auto* levels : {&device_levels, &host_levels})
      for (const CheckedLevel* level : *levels) {
        EXPECT_EQ(level->misplaced(), 0) << strategy << ", level " << level->name() << ": "
                                         << level->first_misplaced();
        (levels == &device_levels ? device_buffers : host_buffers) += level->buffers();
      }
    EXPECT_GT(device_buffers, 0) << strategy << ": the training buffers moved on the device levels";
    EXPECT_GT(host_buffers, 0) << strategy << ": the scalar sums ran on the host levels";
    expect_same_run(host, on_device, strategy);
  }
}

TEST(ShardedOnADevice, TensorParallelismIsRefusedOnADeviceTheHostCannotAddressNamingTheFlag) {
  World world;
  StagedDevice staged;
  const parallel::ParallelDims dims = parallel::ParallelDims::model_parallel(world.topology, 2, 0, 1,
                                                                             world.topology.outermost());
  const std::string what = test::error_of([&] {
    const shard::ShardSpec spec = shard::ShardSpec::preset_for("zero3", world.topology);
    shard::ShardedEngine(tiny(), kBatch, kSeq, world.ctx, world.comms, spec, 1, 1234, staged, false,
                         shard::TensorParallelism{dims, &world.comms.within(0)});
  });
  EXPECT_NE(what.find("--tp 2: tensor parallelism computes on the cpu in fp32 only, not on the staged cpu device"),
            std::string::npos)
      << what;
}
