// Tensor parallelism in the sharding runtime, 8 ranks on the test topology (2 nodes x 2 GPUs
// x 2 dies): --tp 2 over the innermost tier with zero3, hsdp and a topo-like spec trains to
// the losses and weights of the same global batch without TP (the reduction order changes,
// so within fp32 rounding, not bit for bit), TP ranks start from slices of the TP-1 model,
// a TP run is deterministic, and a TP 2 checkpoint loads at TP 4, at TP 1 and in one process
// with the saved state and trains on to the uninterrupted run's losses.
#include <gtest/gtest.h>

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "data/safetensors.hpp"
#include "device/device.hpp"
#include "model/init.hpp"
#include "shard/runtime.hpp"
#include "key_bias.hpp"
#include "test_batches.hpp"
#include "train/checkpoint.hpp"
#include "train/local_engine.hpp"

using namespace strata;

namespace {

constexpr int kBatch = 2, kSeq = 32, kSteps = 6;

// Rank 0's folder for this program's files, the same on every rank (named after rank 0's
// process), removed when the program ends, whether its tests passed or failed. First used by
// every rank at once.
class SharedScratch {
 public:
  SharedScratch() {
    long long pid = ::getpid();
    MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    dir_ = std::filesystem::temp_directory_path() / fmt::format("strata_tp_test_{}", pid);
    if (rank_ == 0) std::filesystem::create_directories(dir_);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~SharedScratch() {
    if (rank_ == 0) std::filesystem::remove_all(dir_);
  }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  int rank_ = 0;
  std::filesystem::path dir_;
};

const std::filesystem::path& scratch_dir() {
  static const SharedScratch scratch;
  return scratch.dir();
}

// A topology file every rank names, written by rank 0.
std::string topology_file(const std::string& name, const std::string& toml) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string p = (scratch_dir() / (name + ".toml")).string();
  if (rank == 0) std::ofstream(p) << toml;
  MPI_Barrier(MPI_COMM_WORLD);
  return p;
}

// The topology of test_topologies.hpp as a file, which ShardOptions names.
std::string topology_file() {
  static const std::string path =
      topology_file("topology", "[[tiers]]\nname = \"gpu\"\nsize = 2\nbandwidth_GBps = 200\nlatency_us = 2\n"
                                "[[tiers]]\nname = \"node\"\nsize = 2\nbandwidth_GBps = 50\nlatency_us = 3\n"
                                "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n");
  return path;
}

// 2 nodes of 4 GPUs: room for --tp 4 in the inner tier.
std::string four_gpu_topology_file() {
  static const std::string path =
      topology_file("4gpu", "[[tiers]]\nname = \"gpu\"\nsize = 4\nbandwidth_GBps = 200\nlatency_us = 2\n"
                            "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 25\nlatency_us = 5\n");
  return path;
}

struct TpRun {
  std::vector<double> losses;
  std::vector<float> params;  // the whole model, gathered
  std::vector<comm::CommStats> step_traffic;  // per step, this rank
  std::vector<shard::TierTraffic> scheduled;
  std::size_t tensor_parallel_ops = 0;
};

std::unique_ptr<shard::ShardedRuntime> runtime_at(const std::string& strategy, const std::string& shard, int tp,
                                                  const std::string& topology = topology_file(),
                                                  const model::ModelConfig& config = model::ModelConfig::preset("tiny"),
                                                  bool sequence_parallel = false) {
  parallel::ShardOptions options;
  options.strategy = strategy;
  options.shard = shard;
  options.topology = topology;
  options.tp = tp;
  options.sequence_parallel = sequence_parallel;
  return std::make_unique<shard::ShardedRuntime>(options, config, kBatch * tp, kSeq, 1, 1234, device::host());
}

// One training step; returns the mean loss. The 8-rank TP-1 run's rank g reads stream g; TP-t
// replica d reads streams t d .. t d + t - 1: the same global batch at every degree.
double train_step(shard::ShardedEngine& engine, int step) {
  const int tp = engine.parallel_dims().tensor;
  const int replica = engine.parallel_dims().data_parallel_rank(engine.rank());
  std::vector<std::int32_t> tok, tgt;
  for (int g = 0; g < tp; ++g) append_test_batch(step, 0, replica * tp + g, kBatch, kSeq, tok, tgt);
  const double loss = engine.micro_step(tok.data(), tgt.data(), 1.0f);
  engine.optimizer_step({}, train::StepArgs{1e-3f, step});
  return engine.all_mean(loss);
}

std::vector<float> whole_params(train::Engine& engine) {
  std::vector<float> params(model::ParamLayout(engine.layout().config()).total_floats());
  engine.gather_params(params.data());
  return params;
}

TpRun train_tp(const std::string& strategy, const std::string& shard, int tp,
               const model::ModelConfig& config = model::ModelConfig::preset("tiny"), bool sequence_parallel = false) {
  const auto runtime = runtime_at(strategy, shard, tp, topology_file(), config, sequence_parallel);
  shard::ShardedEngine& engine = runtime->engine();
  TpRun run;
  run.scheduled = engine.schedule().traffic_per_step();
  run.tensor_parallel_ops = engine.schedule().tensor_parallel_ops().size();
  for (int step = 1; step <= kSteps; ++step) {
    const comm::CommStats before = engine.context().accounting().snapshot();
    run.losses.push_back(train_step(engine, step));
    run.step_traffic.push_back(engine.context().accounting().snapshot() - before);
  }
  run.params = whole_params(engine);
  return run;
}

// The run without TP of the same global batch: ddp on 8 ranks.
const TpRun& reference(const std::string& preset = "tiny") {
  static std::map<std::string, TpRun> runs;
  if (!runs.count(preset)) runs[preset] = train_tp("ddp", "", 1, model::ModelConfig::preset(preset));
  return runs[preset];
}

void expect_same_training(const TpRun& tp, const std::string& name, const std::string& preset = "tiny") {
  const TpRun& ref = reference(preset);
  ASSERT_EQ(tp.losses.size(), ref.losses.size());
  double loss_diff = 0;
  for (std::size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(tp.losses[i], ref.losses[i], 1e-5 * std::abs(ref.losses[i])) << name << " step " << i + 1;
    loss_diff = std::max(loss_diff, std::abs(tp.losses[i] - ref.losses[i]));
  }
  const model::ParamLayout layout(model::ModelConfig::preset(preset));
  double weight_diff = 0;
  for (std::size_t i = 0; i < ref.params.size(); ++i)
    if (!key_bias(layout, i)) weight_diff = std::max(weight_diff, double(std::abs(tp.params[i] - ref.params[i])));
  EXPECT_LT(weight_diff, 1e-4) << name;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf("%s %s vs ddp without TP, %d steps: largest loss difference %.3g, largest weight difference %.3g\n",
                preset.c_str(), name.c_str(), kSteps, loss_diff, weight_diff);
}

// The runtime refuses `options` for `config` with an error holding every one of `expected`.
void expect_refused(const parallel::ShardOptions& options, const model::ModelConfig& config,
                    const std::vector<std::string>& expected) {
  try {
    shard::ShardedRuntime runtime(options, config, kBatch, kSeq, 1, 1234, device::host());
    ADD_FAILURE() << "--tp " << options.tp << " --tp-tier '" << options.tp_tier << "' accepted";
  } catch (const Error& e) {
    for (const std::string& part : expected) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(TensorParallel, TheSplitLayoutHoldsSlicesOfTheWholeModelsInitialWeights) {
  for (const char* preset : {"tiny", "llama-tiny"}) {
  SCOPED_TRACE(preset);
  const model::ModelConfig config = model::ModelConfig::preset(preset);
  const model::ParamLayout whole(config);
  std::vector<float> full(whole.total_floats());
  model::init_params(whole, full.data(), 1234);
  std::size_t covered = 0;
  for (int r = 0; r < 2; ++r) {
    const model::ParamLayout slice(config, {2, r});
    std::vector<float> mine(slice.total_floats());
    model::init_params(slice, mine.data(), 1234);
    for (std::size_t ti = 0; ti < slice.tensors().size(); ++ti) {
      const model::TensorInfo& t = slice.tensors()[ti];
      for (const model::SliceRun& run : slice.slice_runs(t))
        for (std::size_t i = 0; i < run.count; ++i)
          ASSERT_EQ(mine[t.offset + run.local + i], full[whole.tensors()[ti].offset + run.full + i]) << t.name;
      if (t.split != model::Split::None) covered += t.numel;
    }
  }
  // The split tensors' slices of both ranks make up the whole tensors.
  const model::ParamLayout slice(config, {2, 0});
  std::size_t split_whole = 0;
  for (std::size_t ti = 0; ti < slice.tensors().size(); ++ti)
    if (slice.tensors()[ti].split != model::Split::None) split_whole += whole.tensors()[ti].numel;
  EXPECT_EQ(covered, split_whole);
  }
}

TEST(TensorParallel, Tp2WithZero3TrainsToTheLossesWithoutTp) {
  expect_same_training(train_tp("zero3", "", 2), "zero3 --tp 2");
}

TEST(TensorParallel, Tp2WithHsdpTrainsToTheLossesWithoutTp) {
  expect_same_training(train_tp("hsdp", "", 2), "hsdp --tp 2");
}

TEST(TensorParallel, Tp2WithATopoLikeSpecTrainsToTheLossesWithoutTp) {
  // ZeRO-topo's layout over what the TP slice leaves: weights in the node, gradients and
  // optimizer state over the cluster.
  expect_same_training(train_tp("zero3", "W=node,G=cluster,OS=cluster", 2), "W=node,G=cluster,OS=cluster --tp 2");
}

// Llama's splits (grouped-query heads, SwiGLU, untied vocab-parallel head): llama-tiny's 4
// query heads over 2 K/V heads, 2 and 1 a TP rank. The same ops as GPT-2's, measured as scheduled.
TEST(TensorParallel, LlamaTp2WithZero3AndZero1TrainsToTheLossesWithoutTpAndItsBytesAreTheSchedules) {
  const model::ModelConfig llama = model::ModelConfig::preset("llama-tiny");
  for (const char* strategy : {"zero3", "zero1"}) {
    const TpRun run = train_tp(strategy, "", 2, llama);
    expect_same_training(run, std::string(strategy) + " --tp 2", "llama-tiny");
    EXPECT_EQ(run.tensor_parallel_ops, 1u + 2 * 2 + 1 + 1 + 2 * 2) << strategy;
    for (std::size_t s = 0; s < run.step_traffic.size(); ++s)
      for (std::size_t t = 0; t < run.scheduled.size(); ++t) {
        EXPECT_EQ(run.step_traffic[s].tiers[t].bytes_sent, run.scheduled[t].bytes_sent) << strategy << " step " << s + 1;
        EXPECT_EQ(run.step_traffic[s].tiers[t].messages, run.scheduled[t].messages) << strategy;
      }
  }
}

// Megatron's sequence parallelism: the norms and residual sums on half the token rows each,
// reduce-scatters and all-gathers instead of all-reduces; the same training as TP without it
// (and as no TP), every op measured as scheduled.
TEST(TensorParallel, SequenceParallelTp2TrainsToTheLossesOfTpWithoutItAndItsBytesAreTheSchedules) {
  for (const char* preset : {"tiny", "llama-tiny"}) {
  SCOPED_TRACE(preset);
  const model::ModelConfig tiny = model::ModelConfig::preset(preset);
  const TpRun sp = train_tp("zero3", "", 2, tiny, true), tp = train_tp("zero3", "", 2, tiny);
  expect_same_training(sp, "zero3 --tp 2 --sequence-parallel", preset);
  double loss_diff = 0, weight_diff = 0;
  for (std::size_t i = 0; i < tp.losses.size(); ++i) {
    EXPECT_NEAR(sp.losses[i], tp.losses[i], 1e-5 * std::abs(tp.losses[i])) << "step " << i + 1;
    loss_diff = std::max(loss_diff, std::abs(sp.losses[i] - tp.losses[i]));
  }
  const model::ParamLayout layout(tiny);
  for (std::size_t i = 0; i < tp.params.size(); ++i)
    if (!key_bias(layout, i)) weight_diff = std::max(weight_diff, double(std::abs(sp.params[i] - tp.params[i])));
  EXPECT_LT(weight_diff, 1e-4);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf("%s zero3 --tp 2 --sequence-parallel vs --tp 2 without it, %d steps: largest loss difference %.3g, "
                "largest weight difference %.3g\n",
                preset, kSteps, loss_diff, weight_diff);
  // tiny: the embedding's reduce-scatter; 2 gathers and 2 reduce-scatters a block; the final
  // norm's gather and the loss's; the head's reduce-scatter and norm gradient sum; a block's 4
  // and its norm gradient sum; the embedding's gather.
  EXPECT_EQ(sp.tensor_parallel_ops, 1u + 4 * 2 + 2 + 2 + 5 * 2 + 1);
  for (std::size_t s = 0; s < sp.step_traffic.size(); ++s)
    for (std::size_t t = 0; t < sp.scheduled.size(); ++t) {
      EXPECT_EQ(sp.step_traffic[s].tiers[t].bytes_sent, sp.scheduled[t].bytes_sent) << "step " << s + 1;
      EXPECT_EQ(sp.step_traffic[s].tiers[t].bytes_received, sp.scheduled[t].bytes_received);
      EXPECT_EQ(sp.step_traffic[s].tiers[t].messages, sp.scheduled[t].messages);
    }
  }
}

TEST(TensorParallel, LlamaRefusesATpDegreeThatDoesNotDivideItsKvHeadsNamingBoth) {
  parallel::ShardOptions options;
  options.strategy = "zero3";
  options.topology = four_gpu_topology_file();
  options.tp = 4;
  expect_refused(options, model::ModelConfig::preset("llama-tiny"), {"--tp 4: does not divide model.n_kv_head = 2"});
}

TEST(TensorParallel, MeasuredBytesPerTierEqualTheScheduleWithItsTensorParallelOps) {
  for (const char* strategy : {"zero3", "hsdp"}) {
    const TpRun run = train_tp(strategy, "", 2);
    // tiny: the embedding's, 2 a block and the loss's in forward; the head's and 2 a block in backward.
    EXPECT_EQ(run.tensor_parallel_ops, 1u + 2 * 2 + 1 + 1 + 2 * 2) << strategy;
    for (std::size_t s = 0; s < run.step_traffic.size(); ++s)
      for (std::size_t t = 0; t < run.scheduled.size(); ++t) {
        EXPECT_EQ(run.step_traffic[s].tiers[t].bytes_sent, run.scheduled[t].bytes_sent)
            << strategy << " step " << s + 1 << " tier " << run.scheduled[t].tier;
        EXPECT_EQ(run.step_traffic[s].tiers[t].bytes_received, run.scheduled[t].bytes_received) << strategy;
        EXPECT_EQ(run.step_traffic[s].tiers[t].messages, run.scheduled[t].messages) << strategy;
      }
    // The TP group lies in the GPU tier: the only traffic there.
    EXPECT_GT(run.scheduled[0].bytes_sent, 0u) << strategy;
  }
}

TEST(TensorParallel, ATpRunIsDeterministic) {
  const TpRun a = train_tp("zero3", "", 2), b = train_tp("zero3", "", 2);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
}

namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// An empty folder of rank 0's, the same on every rank, inside the program's scratch folder.
std::filesystem::path shared_scratch(const std::string& name) {
  const auto dir = scratch_dir() / name;
  if (world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

train::CheckpointInfo info_at(train::Engine& engine, int step) {
  train::CheckpointInfo info;
  info.step = step;
  info.model = engine.layout().config();
  info.world_size = engine.world_size();
  info.engine = engine.describe();
  info.run = {{"train.global_batch", kBatch * 8}};
  info.rng = {{"data_shuffle_seed", 1234}};
  train::put_trainer_state(info, {step, 0, false, 1.0, 0});
  return info;
}

// Master weights, exp_avg and exp_avg_sq of the whole arena, back to back.
std::vector<float> all_states(const train::Checkpoint& c) {
  const std::size_t n = c.arena_floats();
  std::vector<float> v(3 * n);
  c.read(0, n, v.data(), v.data() + n, v.data() + 2 * n);
  return v;
}

double largest_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

}  // namespace

// Issue 16's "a TP 2 checkpoint resumes at TP 1 and at TP 4 with equal weights" on 8 ranks, TP 4
// on another topology (the CLI test tp_checkpoint_cli_test.sh resumes it on 4 ranks).
TEST(TensorParallel, ATp2CheckpointLoadsAtTp4AtTp1AndInOneProcessWithTheSavedState) {
  constexpr int kSaveAt = 2, kLast = 4;
  model::ModelConfig config = model::ModelConfig::preset("tiny");
  config.n_head = 4;  // room for --tp 4
  const std::filesystem::path root = shared_scratch("tp_ckpt_test");
  std::filesystem::path saved;
  std::uint64_t digest = 0;
  std::vector<float> params;
  std::vector<double> uninterrupted;
  {
    const auto tp2 = runtime_at("zero3", "", 2, topology_file(), config);
    for (int step = 1; step <= kSaveAt; ++step) train_step(tp2->engine(), step);
    saved = train::save_checkpoint(tp2->engine(), root / "tp2", info_at(tp2->engine(), kSaveAt));
    digest = train::engine_state_digest(tp2->engine());
    params = whole_params(tp2->engine());
    for (int step = kSaveAt + 1; step <= kLast; ++step) uninterrupted.push_back(train_step(tp2->engine(), step));
  }
  const train::Checkpoint ckpt = train::Checkpoint::open(saved);
  EXPECT_EQ(ckpt.state_digest(), digest);
  EXPECT_EQ(ckpt.info().engine["tensor_parallel"], 2);
  // load_checkpoint refuses a load whose state digest is not the checkpoint's; the weights
  // the engines assemble must also be the saved ones, bit for bit; training goes on to the
  // uninterrupted run's losses within fp32 reduction-order tolerance.
  auto resume = [&](int tp, const std::string& topology, const char* name) {
    const auto runtime = runtime_at("zero3", "", tp, topology, config);
    train::load_checkpoint(runtime->engine(), ckpt);
    EXPECT_EQ(train::engine_state_digest(runtime->engine()), digest) << name;
    EXPECT_EQ(whole_params(runtime->engine()), params) << name;
    std::vector<double> losses;
    for (int step = kSaveAt + 1; step <= kLast; ++step) losses.push_back(train_step(runtime->engine(), step));
    for (std::size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(losses[i], uninterrupted[i], 1e-5 * std::abs(uninterrupted[i])) << name << " step " << kSaveAt + 1 + i;
    if (world_rank() == 0)
      std::printf("TP 2 checkpoint resumed at %s: steps %d-%d, largest loss difference from the uninterrupted TP 2 "
                  "run %.3g\n",
                  name, kSaveAt + 1, kLast, largest_difference(losses, uninterrupted));
  };
  resume(4, four_gpu_topology_file(), "TP 4 (2 nodes of 4 GPUs)");
  {
    // At TP 1 it saves again: a TP 1 checkpoint of the same state.
    const auto tp1 = runtime_at("zero3", "", 1, topology_file(), config);
    train::load_checkpoint(tp1->engine(), ckpt);
    train::save_checkpoint(tp1->engine(), root / "tp1", info_at(tp1->engine(), kSaveAt));
  }
  resume(1, topology_file(), "TP 1");

  if (world_rank() == 0) {
    train::LocalEngine local(config, kBatch, kSeq, 99);
    train::load_checkpoint(local, ckpt);
    EXPECT_EQ(whole_params(local), params);
    const train::Checkpoint tp1 = train::Checkpoint::open(root / "tp1" / train::checkpoint_name(kSaveAt));
    EXPECT_EQ(tp1.state_digest(), ckpt.state_digest());
    const std::vector<float> states = all_states(ckpt);
    EXPECT_EQ(all_states(tp1), states);  // master weights and both moments, every float
    const train::StateShard all = local.state_shards().front();
    const std::size_t n = all.end - all.begin;
    EXPECT_TRUE(std::equal(all.exp_avg_sq, all.exp_avg_sq + n, states.begin() + 2 * n));
    // The safetensors exports (whole tensors, Hugging Face names) of both, byte for byte.
    const model::ParamLayout layout(config);
    data::export_hf_safetensors(layout, states.data(), (root / "tp2.safetensors").string());
    std::vector<float> tp1_params(n);
    tp1.read(0, n, tp1_params.data(), nullptr, nullptr);
    data::export_hf_safetensors(layout, tp1_params.data(), (root / "tp1.safetensors").string());
    EXPECT_EQ(read_file_text(root / "tp2.safetensors"), read_file_text(root / "tp1.safetensors"));

    // A damaged TP checkpoint is refused naming the shard file and its rank.
    std::filesystem::copy(saved, root / "damaged");
    const std::filesystem::path file = root / "damaged" / train::rank_file_name(3);
    std::string bytes = read_file_text(file);
    bytes[bytes.size() / 2] ^= 0x40;
    atomic_write_file(file, bytes);
    try {
      train::Checkpoint::open(root / "damaged").verify();
      ADD_FAILURE() << "a damaged TP checkpoint verified";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file.string() + ": checksum mismatch in the shard of rank 3"),
                std::string::npos)
          << e.what();
    }
    std::filesystem::remove_all(root);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Under hsdp only one replica's ranks write the optimizer state; a TP 2 checkpoint of it still
// holds the whole state, which zero3 at TP 1 loads and trains on from.
TEST(TensorParallel, AnHsdpTp2CheckpointLoadsAtTp1UnderZero3WithTheSavedState) {
  constexpr int kSaveAt = 2;
  const model::ModelConfig config = model::ModelConfig::preset("tiny");
  const std::filesystem::path root = shared_scratch("tp_hsdp_ckpt_test");
  std::filesystem::path saved;
  std::uint64_t digest = 0;
  std::vector<float> params;
  double next_loss = 0;
  {
    const auto hsdp = runtime_at("hsdp", "", 2, topology_file(), config);
    for (int step = 1; step <= kSaveAt; ++step) train_step(hsdp->engine(), step);
    saved = train::save_checkpoint(hsdp->engine(), root / "hsdp", info_at(hsdp->engine(), kSaveAt));
    digest = train::engine_state_digest(hsdp->engine());
    params = whole_params(hsdp->engine());
    next_loss = train_step(hsdp->engine(), kSaveAt + 1);
  }
  const train::Checkpoint ckpt = train::Checkpoint::open(saved);
  EXPECT_EQ(ckpt.state_digest(), digest);
  const auto zero3 = runtime_at("zero3", "", 1, topology_file(), config);
  train::load_checkpoint(zero3->engine(), ckpt);
  EXPECT_EQ(train::engine_state_digest(zero3->engine()), digest);
  EXPECT_EQ(whole_params(zero3->engine()), params);
  EXPECT_NEAR(train_step(zero3->engine(), kSaveAt + 1), next_loss, 1e-5 * std::abs(next_loss));
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove_all(root);
}

TEST(TensorParallel, ADegreeThatDoesNotDivideTheTierIsRefusedNamingTheFlag) {
  parallel::ShardOptions options;
  options.strategy = "zero3";
  options.topology = topology_file();
  options.tp = 3;
  expect_refused(options, model::ModelConfig::preset("tiny"), {"--tp 3", "gpu"});
  options.tp = 2;
  options.tp_tier = "rack";
  expect_refused(options, model::ModelConfig::preset("tiny"), {"--tp-tier 'rack'"});
}
