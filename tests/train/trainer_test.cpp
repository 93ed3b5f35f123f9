#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "data/tokens.hpp"
#include "train/checkpoint.hpp"
#include "train/local_engine.hpp"
#include "train/trainer.hpp"
#include "util.hpp"

using namespace strata;
using namespace strata::train;
using strata::test::error_of;
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
            ckpt.string() + ": train.global_batch = 2 in the checkpoint (batch x data-parallel replicas), 4 in this run "
                            "(batch 4 x 1 replica); a resumed run must keep it: give --batch 2");

  TrainConfig longer = c;
  longer.steps = 8;
  longer.seq = 16;
  longer.resume = c.out_dir;
  EXPECT_EQ(error_of([&] { run_training(longer); }),
            ckpt.string() + ": train.seq = 32 in the checkpoint, 16 in this run; a resumed run must keep it");

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

namespace {

// A LocalEngine whose gradients become NaN on the listed micro-steps (1-based, counted over
// this engine's life): what an overflow or a bad batch does to one step.
class PoisonedEngine final : public Engine {
 public:
  PoisonedEngine(const TrainConfig& c, std::vector<int> poisoned)
      : inner_(c.model, c.batch, c.seq_len(), c.seed), poisoned_(std::move(poisoned)) {}
  const model::ParamLayout& layout() const override { return inner_.layout(); }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  float micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) override {
    ++calls_;
    if (std::find(poisoned_.begin(), poisoned_.end(), calls_) != poisoned_.end()) grad_scale = NAN;
    return inner_.micro_step(tokens, targets, grad_scale);
  }
  float eval_loss(const std::int32_t* tokens, const std::int32_t* targets) override {
    return inner_.eval_loss(tokens, targets);
  }
  StepOutcome optimizer_step(const optim::AdamWConfig& hp, const StepArgs& args) override {
    return inner_.optimizer_step(hp, args);
  }
  std::pair<double, bool> all_mean_and_any(double local, bool flag) override { return {local, flag}; }
  std::vector<std::string> all_gather_strings(const std::string& local) override { return {local}; }
  std::vector<StateShard> state_shards() override { return inner_.state_shards(); }
  void state_loaded() override {}
  void gather_params(float* full) override { inner_.gather_params(full); }
  nlohmann::json describe() const override { return inner_.describe(); }

 private:
  LocalEngine inner_;
  std::vector<int> poisoned_;
  int calls_ = 0;
};

std::vector<float> params_of(Engine& e) {
  std::vector<float> p(e.layout().total_floats());
  e.gather_params(p.data());
  return p;
}

std::vector<double> losses_of(const fs::path& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return out;
}

// Runs the 12 steps uninterrupted into dir/straight (the losses to reproduce) and returns the
// configuration pointed at dir/out.
TrainConfig after_a_straight_run(const test::ScratchDir& dir) {
  TrainConfig c = tiny_config(dir);
  c.val_data.clear();
  c.out_dir = (dir / "straight").string();
  run_training(c);
  c.out_dir = (dir / "out").string();
  return c;
}

}  // namespace

TEST(Trainer, NonFiniteStepIsSkippedAndLeavesTheStateUntouched) {
  test::ScratchDir dir;
  TrainConfig c = tiny_config(dir);
  c.val_data.clear();
  c.stop_after = 2;
  LocalEngine two_steps(c.model, c.batch, c.seq_len(), c.seed);
  Trainer(c, two_steps).run();

  c.stop_after = 3;
  PoisonedEngine poisoned(c, {3});
  TrainResult r = Trainer(c, poisoned).run();
  ASSERT_EQ(r.steps.size(), 3u);
  EXPECT_FALSE(r.steps[1].skipped);
  EXPECT_TRUE(r.steps[2].skipped);
  EXPECT_TRUE(std::isnan(r.steps[2].grad_norm));
  EXPECT_TRUE(std::isfinite(r.steps[2].loss));  // only the gradients were poisoned
  EXPECT_EQ(r.summary["skipped_steps"], 1);
  EXPECT_EQ(params_of(poisoned), params_of(two_steps));  // bit for bit: the update never happened
}

// The trainer calls its step hook before each step and takes the step's gradient scale from it:
// a hook that poisons step 3's scale skips that step as a poisoned engine does.
TEST(Trainer, ItsStepHookRunsBeforeEachStepAndSetsTheGradientScale) {
  struct Poison : StepHook {
    mutable std::vector<std::int64_t> seen;
    void before_step(std::int64_t step, int) const override { seen.push_back(step); }
    float gradient_scale(std::int64_t step, int, float scale) const override {
      return step == 3 ? std::numeric_limits<float>::quiet_NaN() : scale;
    }
  };
  test::ScratchDir dir;
  TrainConfig c = tiny_config(dir);
  c.val_data.clear();
  c.stop_after = 3;
  LocalEngine engine(c.model, c.batch, c.seq_len(), c.seed);
  Trainer trainer(c, engine);
  const Poison hook;
  trainer.set_step_hook(hook);
  const TrainResult r = trainer.run();
  EXPECT_EQ(hook.seen, (std::vector<std::int64_t>{1, 2, 3}));
  ASSERT_EQ(r.steps.size(), 3u);
  EXPECT_FALSE(r.steps[1].skipped);
  EXPECT_TRUE(r.steps[2].skipped);
  EXPECT_TRUE(std::isnan(r.steps[2].grad_norm));
}

TEST(Trainer, TooManySkippedStepsInARowStopWithAClearError) {
  test::ScratchDir dir;
  TrainConfig c = tiny_config(dir);
  c.out_dir = (dir / "out").string();
  c.save_every = 2;
  c.max_skipped_steps = 3;
  PoisonedEngine poisoned(c, {3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  const std::string e = error_of([&] { Trainer(c, poisoned).run(); });
  EXPECT_NE(e.find("steps 3-5: loss or gradient norm not finite 3 steps in a row (train.max_skipped_steps = 3)"),
            std::string::npos)
      << e;
  // The checkpoint of step 4 holds the state of step 2 (step 3 and 4 changed nothing); it is whole.
  EXPECT_NE(e.find("step_00000004"), std::string::npos) << e;
  Checkpoint::open(dir / "out" / "ckpt" / "step_00000004").verify();
}

TEST(Trainer, DynamicLossScalingOfAnFp32EngineChangesNoBit) {
  // Scaling by a power of two commutes with fp32 rounding (no overflow, no subnormals here):
  // the scaled run must give the very same losses.
  test::ScratchDir dir;
  TrainConfig c = tiny_config(dir);
  TrainResult plain = run_training(c);
  c.loss_scale = "dynamic";
  c.initial_loss_scale = 1024;
  c.loss_scale_window = 4;  // and it doubles along the way
  TrainResult scaled = run_training(c);
  ASSERT_EQ(plain.steps.size(), scaled.steps.size());
  for (std::size_t i = 0; i < plain.steps.size(); ++i) {
    EXPECT_EQ(plain.steps[i].loss, scaled.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(plain.steps[i].grad_norm, scaled.steps[i].grad_norm) << "step " << i + 1;
  }
  EXPECT_EQ(scaled.steps.back().loss_scale, 1024 * 4);  // doubled after steps 4 and 8
  EXPECT_EQ(scaled.summary["loss_scale"], 1024 * 8);     // and after step 12
}

TEST(Trainer, KeepLastDeletesOnlyOlderCheckpointsOnceANewerOneIsComplete) {
  test::ScratchDir dir;
  TrainConfig c = tiny_config(dir);
  c.out_dir = (dir / "out").string();
  c.save_every = 2;
  c.keep_last = 2;
  c.stop_after = 6;
  run_training(c);
  const fs::path ckpt = dir / "out" / "ckpt";
  EXPECT_EQ(checkpoint_steps(ckpt), (std::vector<std::int64_t>{4, 6}));
  fs::create_directories(ckpt / "step_00000005.tmp");  // a save that crashed
  c.stop_after = 0;
  c.resume = "latest";
  run_training(c);
  EXPECT_EQ(checkpoint_steps(ckpt), (std::vector<std::int64_t>{10, 12}));
  EXPECT_FALSE(fs::exists(ckpt / "step_00000005.tmp"));
}

namespace {
// A run stopped after step 6 with checkpoints of steps 3 and 6; then `damage` spoils step 6's
// folder. Named explicitly it is refused, naming `file` in it: "<path of file><refusal>"; --resume latest
// passes over it (the summary's passed_over says `reason`), resumes from step 3 and ends with
// the losses of the straight run.
template <class Damage>
void expect_fallback_past_a_damaged_step_6(Damage&& damage, const std::string& file, const std::string& refusal,
                                           const std::string& reason) {
  test::ScratchDir dir;
  TrainConfig c = after_a_straight_run(dir);
  c.save_every = 3;
  c.stop_after = 6;
  run_training(c);
  const fs::path newest = dir / "out" / "ckpt" / "step_00000006";
  damage(newest);

  c.stop_after = 0;
  c.resume = newest.string();
  const std::string e = error_of([&] { run_training(c); });
  EXPECT_NE(e.find((newest / file).string() + refusal), std::string::npos) << e;

  c.resume = "latest";
  LocalEngine engine(c.model, c.batch, c.seq_len(), c.seed);
  Trainer trainer(c, engine);
  EXPECT_EQ(trainer.start_step(), 3);
  TrainResult r = trainer.run();
  ASSERT_EQ(r.summary["passed_over"].size(), 1u);
  EXPECT_NE(r.summary["passed_over"][0].get<std::string>().find(reason), std::string::npos);
  EXPECT_EQ(losses_of(dir / "out" / "metrics.jsonl"), losses_of(dir / "straight" / "metrics.jsonl"));
}
}  // namespace

TEST(Trainer, ResumeLatestFallsBackPastADamagedCheckpointAndSaysSo) {
  expect_fallback_past_a_damaged_step_6(
      [](const fs::path& newest) {
        std::fstream f(newest / "rank00000.bin", std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(4321);
        f.put('\x33');
      },
      "rank00000.bin", ": checksum mismatch in the shard of rank 0", "checksum mismatch");
}

TEST(Trainer, ResumeLatestFallsBackPastAManifestWhoseTrainerStateIsMalformed) {
  expect_fallback_past_a_damaged_step_6(
      [](const fs::path& newest) {
        auto j = test::read_json(newest / "manifest.json");
        j["data"]["train_position"] = -6;  // shards intact, the manifest not
        atomic_write_file(newest / "manifest.json", j.dump());
      },
      "manifest.json", ": malformed: field 'data.train_position' must be a non-negative integer",
      "'data.train_position'");
}

TEST(Trainer, StopRequestEndsTheRunAfterTheStepWithACheckpointAndResumeContinues) {
  test::ScratchDir dir;
  TrainConfig c = after_a_straight_run(dir);
  {
    LocalEngine engine(c.model, c.batch, c.seq_len(), c.seed);
    Trainer trainer(c, engine);
    int polls = 0;
    trainer.set_stop_request([&] { return ++polls == 4; });  // the signal arrives during step 4
    TrainResult r = trainer.run();
    EXPECT_TRUE(r.preempted);
    EXPECT_EQ(r.steps.size(), 4u);
    EXPECT_EQ(r.summary["preempted"], true);
    EXPECT_EQ(r.summary["steps"], 4);
  }
  EXPECT_EQ(checkpoint_steps(dir / "out" / "ckpt"), (std::vector<std::int64_t>{4}));
  c.resume = "latest";
  TrainResult rest = run_training(c);
  EXPECT_EQ(rest.steps.front().step, 5);
  EXPECT_EQ(losses_of(dir / "out" / "metrics.jsonl"), losses_of(dir / "straight" / "metrics.jsonl"));
}

TEST(Trainer, ResumeLatestBeforeAnyCheckpointStartsFromStepZero) {
  // A job script passes --resume latest from its first submission on; an attempt killed
  // before its first checkpoint left metrics that the new attempt replaces.
  test::ScratchDir dir;
  TrainConfig c = tiny_config(dir);
  c.val_data.clear();
  c.out_dir = (dir / "out").string();
  fs::create_directories(dir / "out" / "ckpt" / "step_00000002.tmp");
  atomic_write_file(dir / "out" / "metrics.jsonl", std::string("{\"step\": 1, \"loss\": 9.0}\n"));
  c.resume = "latest";
  LocalEngine engine(c.model, c.batch, c.seq_len(), c.seed);
  Trainer trainer(c, engine);
  EXPECT_EQ(trainer.start_step(), 0);
  trainer.run();
  EXPECT_EQ(losses_of(dir / "out" / "metrics.jsonl").size(), 12u);
  EXPECT_EQ(checkpoint_steps(dir / "out" / "ckpt"), (std::vector<std::int64_t>{12}));

  // Without --out there is nothing to look in.
  c.out_dir.clear();
  EXPECT_EQ(error_of([&] { run_training(c); }),
            "--resume latest: needs --out, the output folder whose newest checkpoint to continue");
}
