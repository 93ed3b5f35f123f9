#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "data/tokens.hpp"
#include "train/local_engine.hpp"
#include "train/trainer.hpp"
#include "util.hpp"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;

namespace {

TrainConfig tiny_config(const test::ScratchDir& dir) {
  if (!fs::exists(dir / "train.bin")) {
    test::write_tokens(dir / "train.bin", test::sample_text_tokens(40000, 1));
    test::write_tokens(dir / "val.bin", test::sample_text_tokens(8000, 2));
  }
  TrainConfig c;
  c.batch = 2;
  c.seq = 32;
  c.steps = 12;
  c.lr = 3e-3f;
  c.min_lr = 3e-4f;
  c.warmup = 2;
  c.train_data = (dir / "train.bin").string();
  c.val_data = (dir / "val.bin").string();
  c.val_batches = 2;
  return c;
}

TrainResult run_training(const TrainConfig& c) {
  LocalEngine engine(c.model, c.batch, c.seq_len(), c.seed);
  Trainer trainer(c, engine);
  return trainer.run();
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Trainer, SameSeedGivesTheSameLossesBitForBit) {
  test::ScratchDir dir;
  TrainConfig c = tiny_config(dir);
  TrainResult a = run_training(c), b = run_training(c);
  ASSERT_EQ(a.steps.size(), 12u);
  ASSERT_EQ(b.steps.size(), 12u);
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.steps[i].loss, &b.steps[i].loss, sizeof(double)), 0) << "step " << i + 1;
    EXPECT_EQ(std::memcmp(&a.steps[i].grad_norm, &b.steps[i].grad_norm, sizeof(double)), 0) << "step " << i + 1;
  }
  ASSERT_TRUE(a.steps.back().val_loss && b.steps.back().val_loss);
  EXPECT_EQ(*a.steps.back().val_loss, *b.steps.back().val_loss);

  c.seed = 99;
  TrainResult other = run_training(c);
  EXPECT_NE(other.steps.front().loss, a.steps.front().loss);
}

TEST(Trainer, GradientAccumulationMatchesOneBatchOfTheSameSequences) {
  test::ScratchDir dir;
  TrainConfig one = tiny_config(dir);
  one.batch = 4;
  one.steps = 4;
  TrainConfig accum = one;
  accum.batch = 2;
  accum.grad_accum = 2;
  TrainResult a = run_training(one), b = run_training(accum);
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_NEAR(a.steps[i].loss, b.steps[i].loss, 1e-5 * a.steps[i].loss) << "step " << i + 1;
    EXPECT_NEAR(a.steps[i].grad_norm, b.steps[i].grad_norm, 1e-4 * a.steps[i].grad_norm) << "step " << i + 1;
  }
}

TEST(Trainer, LearnsTheTextBelowItsUnigramEntropy) {
  test::ScratchDir dir;
  TrainConfig c = tiny_config(dir);
  c.batch = 4;
  c.steps = 60;
  TrainResult r = run_training(c);
  const double entropy = data::unigram_entropy(dir / "train.bin");
  ASSERT_TRUE(r.steps.back().val_loss);
  EXPECT_LT(*r.steps.back().val_loss, 0.8 * entropy);
  EXPECT_LT(r.summary["loss"]["final"].get<double>(), r.summary["loss"]["first"].get<double>());
}

TEST(Trainer, WritesMetricsEveryStepAndASummary) {
  test::ScratchDir dir;
  TrainConfig c = tiny_config(dir);
  c.steps = 10;
  c.val_every = 4;
  c.out_dir = (dir / "out").string();
  TrainResult r = run_training(c);

  auto lines = test::read_jsonl(dir / "out" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 10u);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& m = lines[i];
    EXPECT_EQ(m["step"], static_cast<int>(i + 1));
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s"}) {
      ASSERT_TRUE(m.contains(key)) << key;
      EXPECT_TRUE(std::isfinite(m[key].get<double>())) << key;
    }
    EXPECT_EQ(m["loss"].get<double>(), r.steps[i].loss);
    const bool validates = (i + 1) % 4 == 0 || i + 1 == 10;
    EXPECT_EQ(m.contains("val_loss"), validates) << "step " << i + 1;
  }
  EXPECT_FLOAT_EQ(lines[0]["lr"].get<float>(), 1.5e-3f);  // warm-up: step 1 of 2

  auto s = test::read_json(dir / "out" / "summary.json");
  EXPECT_EQ(s["steps"], 10);
  EXPECT_EQ(s["loss"]["first"].get<double>(), lines.front()["loss"].get<double>());
  EXPECT_EQ(s["loss"]["final"].get<double>(), lines.back()["loss"].get<double>());
  EXPECT_EQ(s["val_loss"].get<double>(), lines.back()["val_loss"].get<double>());
  EXPECT_GT(s["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(s["elapsed_s"].get<double>(), 0);
  EXPECT_EQ(s["tokens_per_step"].get<double>(), 2 * 32);
  EXPECT_EQ(s["model"]["params"].get<std::int64_t>(), c.model.num_params());
  EXPECT_EQ(s["model"]["config"], c.model.to_json());
  EXPECT_DOUBLE_EQ(s["data"]["unigram_entropy"].get<double>(), data::unigram_entropy(dir / "train.bin"));
  EXPECT_GT(s["threads"].get<int>(), 0);
  EXPECT_FALSE(s["isa"].get<std::string>().empty());
  EXPECT_TRUE(fs::exists(dir / "out" / "ckpt" / "step_00000010" / "manifest.json"));
}

TEST(Trainer, RefusesTheOutputOfAnEarlierRunUnlessToldToReplaceIt) {
  test::ScratchDir dir;
  TrainConfig c = tiny_config(dir);
  c.steps = 3;
  c.out_dir = (dir / "out").string();
  run_training(c);
  const std::string summary = read_file_text(dir / "out" / "summary.json");
  const std::string metrics = read_file_text(dir / "out" / "metrics.jsonl");

  c.seed = 5;
  std::string e = error_of([&] { run_training(c); });
  EXPECT_NE(e.find("holds the results of an earlier run"), std::string::npos) << e;
  EXPECT_EQ(read_file_text(dir / "out" / "summary.json"), summary);
  EXPECT_EQ(read_file_text(dir / "out" / "metrics.jsonl"), metrics);

  c.overwrite = true;
  run_training(c);
  EXPECT_NE(read_file_text(dir / "out" / "metrics.jsonl"), metrics);
  EXPECT_EQ(test::read_jsonl(dir / "out" / "metrics.jsonl").size(), 3u);
}

TEST(Trainer, ResumeRefusesChangedRunSettingsAndFinishedCheckpoints) {
  test::ScratchDir dir;
  TrainConfig c = tiny_config(dir);
  c.steps = 4;
  c.out_dir = (dir / "out").string();
  run_training(c);
  const fs::path ckpt = dir / "out" / "ckpt" / "step_00000004";

  TrainConfig wider = c;
  wider.steps = 8;
  wider.batch = 4;
  wider.resume = c.out_dir;
  EXPECT_EQ(error_of([&] { run_training(wider); }),
            ckpt.string() + ": train.batch = 2 in the checkpoint, 4 in this run; a resumed run must keep it");

  TrainConfig done = c;
  done.resume = c.out_dir;
  EXPECT_EQ(error_of([&] { run_training(done); }),
            ckpt.string() + ": the checkpoint is at step 4; nothing left to train up to step 4 (train.steps)");

  TrainConfig both = c;
  both.steps = 8;
  both.resume = c.out_dir;
  both.overwrite = true;
  EXPECT_NE(error_of([&] { run_training(both); }).find("--overwrite would delete"), std::string::npos);
}
