// strata ckpt convert's library side: a checkpoint rewritten in another layout holds the
// same state, in the files the target's ranks would have written.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "base/aligned.hpp"
#include "base/error.hpp"
#include "shard/reshard.hpp"
#include "support.hpp"
#include "train/local_engine.hpp"

using namespace strata;
namespace fs = std::filesystem;

namespace {

// A single-process checkpoint of the tiny model with random optimizer state.
train::Checkpoint single_checkpoint(const fs::path& root) {
  const model::ModelConfig config = model::ModelConfig::preset("tiny");
  train::LocalEngine engine(config, 1, 8, 5);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  for (const auto& s : engine.state_shards())
    for (float* state : {s.exp_avg, s.exp_avg_sq})
      for (std::size_t i = 0; i < s.end - s.begin; ++i) state[i] = normal(rng);
  train::CheckpointInfo info;
  info.step = 7;
  info.model = config;
  info.engine = engine.describe();
  info.run = {{"train.global_batch", 16}};
  info.data = {{"train_position", 7}};
  return train::Checkpoint::open(train::save_checkpoint(engine, root, info));
}

std::vector<float> all_states(const train::Checkpoint& c) {
  const std::size_t n = c.arena_floats();
  std::vector<float> v(3 * n);
  c.read(0, n, v.data(), v.data() + n, v.data() + 2 * n);
  return v;
}

}  // namespace

TEST(Reshard, ConvertedCheckpointsHoldTheSameStateInTheTargetsFiles) {
  test::ScratchDir dir;
  const train::Checkpoint source = single_checkpoint(dir / "ckpt");
  const model::ParamLayout layout(source.info().model);

  parallel::ShardOptions zero3;
  zero3.strategy = "zero3";
  zero3.topology = "dgx-a100";  // 8 GPUs a node: 16 ranks = 2 nodes
  const shard::CheckpointLayout target = shard::sharded_layout(layout, zero3, 16);
  EXPECT_EQ(target.runs.size(), 16u);  // OS over every rank: all of them write
  shard::convert_checkpoint(source, dir / "zero3", target);
  const train::Checkpoint z = train::Checkpoint::open(dir / "zero3");
  z.verify();
  EXPECT_EQ(z.state_digest(), source.state_digest());
  EXPECT_EQ(z.info().world_size, 16);
  EXPECT_EQ(z.info().engine["strategy"], "zero3");
  EXPECT_EQ(z.info().engine["converted_from"]["engine"]["strategy"], "single");
  EXPECT_EQ(z.info().data, source.info().data);
  EXPECT_TRUE(fs::exists(dir / "zero3" / "rank00015.bin"));
  EXPECT_EQ(all_states(z), all_states(source));

  // hsdp shards OS inside a node only: the first node's 8 ranks write, the rest hold replicas.
  parallel::ShardOptions hsdp = zero3;
  hsdp.strategy = "hsdp";
  EXPECT_EQ(shard::sharded_layout(layout, hsdp, 16).runs.size(), 8u);

  // And back to one file, bit for bit the state it started from.
  shard::convert_checkpoint(z, dir / "single", shard::single_process_layout(layout));
  const train::Checkpoint back = train::Checkpoint::open(dir / "single");
  back.verify();
  ASSERT_EQ(back.shards().size(), 1u);
  EXPECT_EQ(back.shards()[0].xxh3, source.shards()[0].xxh3);
}

TEST(Reshard, RefusesAnExistingDestinationAndBadTargets) {
  test::ScratchDir dir;
  const train::Checkpoint source = single_checkpoint(dir / "ckpt");
  const model::ParamLayout layout(source.info().model);
  fs::create_directories(dir / "taken");
  try {
    shard::convert_checkpoint(source, dir / "taken", shard::single_process_layout(layout));
    FAIL() << "converted into an existing folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exists"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(dir / "taken"));
  parallel::ShardOptions bad;
  bad.strategy = "zero4";
  bad.topology = "dgx-a100";
  EXPECT_THROW(shard::sharded_layout(layout, bad, 16), Error);
  bad.strategy = "zero3";
  EXPECT_THROW(shard::sharded_layout(layout, bad, 0), Error);
}
