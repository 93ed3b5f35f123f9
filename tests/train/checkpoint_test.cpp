#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <limits>
#include <fstream>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "base/aligned.hpp"
#include "base/error.hpp"
#include "base/fileio.hpp"
#include "train/checkpoint.hpp"
#include "util.hpp"

using namespace strata;
using namespace strata::train;
using strata::test::error_of;
namespace fs = std::filesystem;

namespace {

// An engine holding the whole arena but owning it as several state shards, the way one rank
// of a sharding engine may own several runs. Only the state side of Engine is used here.
class ShardedStateEngine final : public Engine {
 public:
  ShardedStateEngine(const model::ModelConfig& config, std::vector<std::size_t> cuts)
      : layout_(config), cuts_(std::move(cuts)) {
    for (auto* b : {&master_, &exp_avg_, &exp_avg_sq_}) b->resize(layout_.total_floats());
    cuts_.insert(cuts_.begin(), 0);
    cuts_.push_back(layout_.total_floats());
  }
  ~ShardedStateEngine() override {
    if (page_) ::munmap(page_, page_bytes_);
  }
  void fill(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal;
    for (auto* b : {&master_, &exp_avg_, &exp_avg_sq_})
      for (auto& x : *b) x = normal(rng);
  }
  // The master weights of shard `k` come from unreadable memory, so writing it fails.
  void poison_shard(int k) { poisoned_ = k; }

  const model::ParamLayout& layout() const override { return layout_; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  float micro_step(const std::int32_t*, const std::int32_t*, float) override { throw std::logic_error("unused"); }
  float eval_loss(const std::int32_t*, const std::int32_t*) override { throw std::logic_error("unused"); }
  StepOutcome optimizer_step(const optim::AdamWConfig&, const StepArgs&) override { throw std::logic_error("unused"); }
  std::pair<double, bool> all_mean_and_any(double local, bool flag) override { return {local, flag}; }
  nlohmann::json describe() const override { return {{"strategy", "test"}}; }
  std::vector<std::string> all_gather_strings(const std::string& local) override { return {local}; }
  std::vector<StateShard> state_shards() override {
    std::vector<StateShard> out;
    for (std::size_t k = 0; k + 1 < cuts_.size(); ++k) {
      const std::size_t b = cuts_[k];
      out.push_back({b, cuts_[k + 1], master_.data() + b, exp_avg_.data() + b, exp_avg_sq_.data() + b});
      if (static_cast<int>(k) == poisoned_) out.back().master = poisoned_page();
    }
    return out;
  }
  void state_loaded() override { ++loaded_; }
  void gather_params(float* full) override { std::memcpy(full, master_.data(), master_.size() * sizeof(float)); }

  AlignedBuffer<float> master_, exp_avg_, exp_avg_sq_;
  int loaded_ = 0;

 private:
  float* poisoned_page() {
    if (!page_) {
      page_bytes_ = (layout_.total_floats() * sizeof(float) + 4095) / 4096 * 4096;
      page_ = ::mmap(nullptr, page_bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    return static_cast<float*>(page_);
  }

  model::ParamLayout layout_;
  std::vector<std::size_t> cuts_;
  int poisoned_ = -1;
  void* page_ = nullptr;
  std::size_t page_bytes_ = 0;
};

CheckpointInfo info_at(std::int64_t step, const model::ModelConfig& config) {
  CheckpointInfo info;
  info.step = step;
  info.model = config;
  info.run = {{"train.batch", 4}};
  info.data = {{"train_position", 17}};
  info.rng = {{"data_shuffle_seed", 5}};
  return info;
}

bool same_bits(const AlignedBuffer<float>& a, const AlignedBuffer<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const model::ModelConfig kTiny = model::ModelConfig::preset("tiny");

}  // namespace

TEST(Checkpoint, SavesAndLoadsEveryStateBitExactAcrossDifferentShardings) {
  test::ScratchDir dir;
  ShardedStateEngine writer(kTiny, {1000, 5000, 20000});
  writer.fill(1);
  fs::path saved = save_checkpoint(writer, dir / "ckpt", info_at(50, kTiny));
  EXPECT_EQ(saved, dir / "ckpt" / "step_00000050");
  EXPECT_TRUE(fs::exists(saved / "manifest.json"));
  EXPECT_TRUE(fs::exists(saved / "rank00000.bin"));
  EXPECT_FALSE(fs::exists(dir / "ckpt" / "step_00000050.tmp"));

  Checkpoint ckpt = Checkpoint::open(saved);
  EXPECT_EQ(ckpt.info().step, 50);
  EXPECT_EQ(ckpt.info().model, kTiny);
  EXPECT_EQ(ckpt.info().data["train_position"], 17);
  EXPECT_EQ(ckpt.info().run["train.batch"], 4);
  EXPECT_EQ(ckpt.shards().size(), 4u);

  ShardedStateEngine reader(kTiny, {3000});
  load_checkpoint(reader, ckpt);
  EXPECT_TRUE(same_bits(reader.master_, writer.master_));
  EXPECT_TRUE(same_bits(reader.exp_avg_, writer.exp_avg_));
  EXPECT_TRUE(same_bits(reader.exp_avg_sq_, writer.exp_avg_sq_));
  EXPECT_EQ(reader.loaded_, 1);
}

// Tensor-parallel ranks write records of several arena runs (docs/faults.md): rows of a
// row-parallel weight alternate between them. Such records read back into any layout, their
// run lists are written compactly ([begin, end, stride, repeats]), and a bad run list is
// refused naming the field, before anything is expanded.
TEST(Checkpoint, RecordsOfSeveralRunsReadBackAndBadRunListsAreRefusedNamingTheField) {
  test::ScratchDir dir;
  ShardedStateEngine source(kTiny, {});
  source.fill(7);
  const std::size_t n = source.layout().total_floats(), row = 100, rows = n / row;
  std::vector<ArenaRange> even, odd;
  for (std::size_t i = 0; i < rows; ++i) (i % 2 ? odd : even).push_back({i * row, (i + 1) * row});
  if (rows * row < n) odd.push_back({rows * row, n});
  std::vector<std::vector<float>> packed;
  auto record = [&](const std::vector<ArenaRange>& runs) {
    std::vector<float>& buf = packed.emplace_back();
    for (const float* state : {source.master_.data(), source.exp_avg_.data(), source.exp_avg_sq_.data()})
      for (const ArenaRange& r : runs) buf.insert(buf.end(), state + r.begin, state + r.end);
    const std::size_t floats = buf.size() / 3;
    return SavedShard{runs, buf.data(), buf.data() + floats, buf.data() + 2 * floats};
  };
  const fs::path saved = dir / "multi";
  fs::create_directories(saved);
  const SavedShard a = record(even), b = record(odd);
  std::vector<ShardRecord> records = write_rank_file(saved, 0, {a});
  for (auto& r : write_rank_file(saved, 1, {b})) records.push_back(r);
  write_manifest(saved, info_at(3, kTiny), n, records);

  const Checkpoint ckpt = Checkpoint::open(saved);
  ckpt.verify();
  EXPECT_EQ(ckpt.state_digest(), engine_state_digest(source));
  ShardedStateEngine reader(kTiny, {12345, 40000});
  load_checkpoint(reader, ckpt);
  EXPECT_TRUE(same_bits(reader.master_, source.master_));
  EXPECT_TRUE(same_bits(reader.exp_avg_sq_, source.exp_avg_sq_));

  const fs::path manifest = saved / "manifest.json";
  const auto good = nlohmann::json::parse(read_file_text(manifest));
  ASSERT_EQ(good["shards"][0]["runs"][0], nlohmann::json({0, row, 2 * row, (rows + 1) / 2}));
  auto refused = [&](const nlohmann::json& runs) {
    auto j = good;
    j["shards"][0]["runs"] = runs;
    atomic_write_file(manifest, j.dump());
    return error_of([&] { Checkpoint::open(saved); });
  };
  const std::string m = manifest.string() + ": malformed: field ";
  EXPECT_EQ(refused({{5, 3}}), m + fmt::format("'shards[0].runs[0]' = [5, 3) is not a run of the arena of {} floats", n));
  EXPECT_EQ(refused({{0, 100, 50, 2}}),
            m + fmt::format("'shards[0].runs[0]': 2 runs 50 apart from [0, 100) do not fit the arena of {} floats "
                            "without overlapping",
                            n));
  // A trillion runs are refused by arithmetic, not by allocating them.
  EXPECT_NE(refused({{0, 1, 1, std::uint64_t{1} << 40}}).find("do not fit the arena"), std::string::npos);
  EXPECT_EQ(refused("x"), m + "'shards[0].runs' must be a non-empty array");
  EXPECT_EQ(refused({{0, 100, 7}}), m + "'shards[0].runs[0]' must be [begin, end] or [begin, end, stride, repeats]");
}

TEST(Checkpoint, ReadsAnyRangeFromTheShardsThatCoverIt) {
  test::ScratchDir dir;
  ShardedStateEngine writer(kTiny, {1000, 5000});
  writer.fill(2);
  Checkpoint ckpt = Checkpoint::open(save_checkpoint(writer, dir.path(), info_at(1, kTiny)));
  std::vector<float> v(4500);
  ckpt.read(700, 5200, nullptr, nullptr, v.data());
  EXPECT_EQ(std::memcmp(v.data(), writer.exp_avg_sq_.data() + 700, v.size() * sizeof(float)), 0);
  EXPECT_NE(error_of([&] { ckpt.read(0, ckpt.arena_floats() + 1, v.data(), nullptr, nullptr); }), "");
}

TEST(Checkpoint, CorruptShardIsRefusedNamingTheFile) {
  test::ScratchDir dir;
  ShardedStateEngine writer(kTiny, {});
  writer.fill(3);
  fs::path saved = save_checkpoint(writer, dir.path(), info_at(1, kTiny));
  {
    std::fstream f(saved / "rank00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12345);
    f.put('\x5a');
  }
  ShardedStateEngine reader(kTiny, {});
  std::string e = error_of([&] { load_checkpoint(reader, Checkpoint::open(saved)); });
  EXPECT_NE(e.find((saved / "rank00000.bin").string()), std::string::npos) << e;
  EXPECT_NE(e.find("checksum mismatch"), std::string::npos) << e;
  EXPECT_EQ(reader.loaded_, 0);
}

TEST(Checkpoint, TruncatedOrMissingShardIsRefusedNamingTheFile) {
  test::ScratchDir dir;
  ShardedStateEngine writer(kTiny, {});
  writer.fill(4);
  fs::path saved = save_checkpoint(writer, dir.path(), info_at(1, kTiny));
  const fs::path shard = saved / "rank00000.bin";
  const auto size = fs::file_size(shard);
  fs::resize_file(shard, size - 4);
  std::string e = error_of([&] { Checkpoint::open(saved); });
  EXPECT_NE(e.find(shard.string() + ": truncated shard file (rank 0)"), std::string::npos) << e;
  fs::remove(shard);
  e = error_of([&] { Checkpoint::open(saved); });
  EXPECT_NE(e.find(shard.string() + ": missing shard file (rank 0)"), std::string::npos) << e;
}

TEST(Checkpoint, MalformedManifestIsRefusedNamingTheField) {
  test::ScratchDir dir;
  ShardedStateEngine writer(kTiny, {});
  fs::path saved = save_checkpoint(writer, dir.path(), info_at(1, kTiny));
  const fs::path manifest = saved / "manifest.json";
  const std::string good = read_file_text(manifest);

  atomic_write_file(manifest, std::string_view("{\"format\": \"strata-checkpoint\", "));
  EXPECT_NE(error_of([&] { Checkpoint::open(saved); }).find(manifest.string() + ": malformed:"), std::string::npos);

  auto j = nlohmann::json::parse(good);
  j["shards"][0].erase("xxh3");
  atomic_write_file(manifest, j.dump());
  EXPECT_EQ(error_of([&] { Checkpoint::open(saved); }),
            manifest.string() + ": malformed: field 'shards[0].xxh3' missing");

  j = nlohmann::json::parse(good);
  j["shards"][0]["file"] = "../elsewhere.bin";
  atomic_write_file(manifest, j.dump());
  EXPECT_NE(error_of([&] { Checkpoint::open(saved); }).find("is not a file name"), std::string::npos);

  j = nlohmann::json::parse(good);
  j["step"] = std::uint64_t{1} << 63;  // would wrap to a negative step
  atomic_write_file(manifest, j.dump());
  EXPECT_EQ(error_of([&] { Checkpoint::open(saved); }),
            manifest.string() + ": malformed: field 'step' = 9223372036854775808 exceeds 9223372036854775807");

  j = nlohmann::json::parse(good);
  j["shards"][0]["rank"] = std::uint64_t{1} << 31;
  atomic_write_file(manifest, j.dump());
  EXPECT_EQ(error_of([&] { Checkpoint::open(saved); }),
            manifest.string() + ": malformed: field 'shards[0].rank' = 2147483648 exceeds 2147483647");

  j = nlohmann::json::parse(good);
  j["version"] = 99;
  atomic_write_file(manifest, j.dump());
  EXPECT_NE(error_of([&] { Checkpoint::open(saved); }).find("format version 99 is not supported"), std::string::npos);

  fs::remove(manifest);
  EXPECT_NE(error_of([&] { Checkpoint::open(saved); }).find("is not a complete checkpoint"), std::string::npos);
}

// Found by tests/fuzz/fuzz_checkpoint: a manifest's model was laid out (time and memory in
// n_layer) before its size was checked against the shard files, so one edited number made
// open() run out of memory; and bytes = 12 x floats could wrap around 2^64 and pass.
TEST(Checkpoint, TrainerStateIsReadWithRangesAndBadFieldsAreNamed) {
  test::ScratchDir dir;
  ShardedStateEngine writer(kTiny, {});
  CheckpointInfo info = info_at(1, kTiny);
  info.trainer = {{"skipped_steps", 2}, {"loss_scale", 4096.0}, {"good_steps", 7}, {"loss_scaling", "dynamic"}};
  fs::path saved = save_checkpoint(writer, dir.path(), info);
  const fs::path manifest = saved / "manifest.json";
  const TrainerState state = read_trainer_state(Checkpoint::open(saved));
  EXPECT_EQ(state.train_position, 17);
  EXPECT_EQ(state.skipped_steps, 2);
  EXPECT_TRUE(state.dynamic_loss_scaling);
  EXPECT_EQ(state.loss_scale, 4096.0);
  EXPECT_EQ(state.good_steps, 7);

  const auto good = nlohmann::json::parse(read_file_text(manifest));
  auto refused = [&](const char* section, const char* key, const nlohmann::json& value) {
    auto j = good;
    if (value.is_null())
      j[section].erase(key);
    else
      j[section][key] = value;
    atomic_write_file(manifest, j.dump());
    return error_of([&] { read_trainer_state(Checkpoint::open(saved)); });
  };
  const std::string m = manifest.string() + ": malformed: field ";
  EXPECT_EQ(refused("data", "train_position", nullptr), m + "'data.train_position' missing");
  EXPECT_EQ(refused("data", "train_position", -1), m + "'data.train_position' must be a non-negative integer");
  // 2^63 would wrap to a negative position.
  EXPECT_EQ(refused("data", "train_position", std::uint64_t{1} << 63),
            m + "'data.train_position' = 9223372036854775808 exceeds 9223372036854775807");
  EXPECT_EQ(refused("trainer", "skipped_steps", 1.5), m + "'trainer.skipped_steps' must be a non-negative integer");
  EXPECT_EQ(refused("trainer", "good_steps", nullptr), m + "'trainer.good_steps' missing");
  EXPECT_EQ(refused("trainer", "loss_scaling", "static"),
            m + "'trainer.loss_scaling' = 'static': expected 'dynamic' or 'off'");
  EXPECT_EQ(refused("trainer", "loss_scale", "big"), m + "'trainer.loss_scale' must be a number");
  EXPECT_EQ(refused("trainer", "loss_scale", 3.0),
            m + "'trainer.loss_scale' = 3.0: a dynamic scale is a power of two >= 1");
  EXPECT_EQ(refused("trainer", "loss_scale", 0.5),
            m + "'trainer.loss_scale' = 0.5: a dynamic scale is a power of two >= 1");
  // JSON has no infinity: it is written as null.
  EXPECT_EQ(refused("trainer", "loss_scale", std::numeric_limits<double>::infinity()), m + "'trainer.loss_scale' must be a number");
}

TEST(Checkpoint, ManifestSizesBeyondTheShardFilesAreRefusedBeforeTheModelIsLaidOut) {
  test::ScratchDir dir;
  ShardedStateEngine writer(kTiny, {});
  fs::path saved = save_checkpoint(writer, dir.path(), info_at(1, kTiny));
  const fs::path manifest = saved / "manifest.json";
  const auto good = nlohmann::json::parse(read_file_text(manifest));
  const std::uint64_t floats = good["arena_floats"];

  // More layers than the arena has floats (each layer holds some): refused without laying
  // out 200000 layers.
  auto j = good;
  j["model"]["n_layer"] = 200000;
  atomic_write_file(manifest, j.dump());
  EXPECT_EQ(error_of([&] { Checkpoint::open(saved); }),
            fmt::format("{}: malformed: model.n_layer = 200000 cannot fit arena_floats = {}", manifest.string(),
                        floats));

  // An arena of 2^40 floats the shard file does not hold: the file is checked first.
  j = good;
  const std::uint64_t big = std::uint64_t{1} << 40;
  j["arena_floats"] = big;
  j["shards"][0]["end"] = big;
  j["shards"][0]["bytes"] = 12 * big;
  atomic_write_file(manifest, j.dump());
  std::string e = error_of([&] { Checkpoint::open(saved); });
  EXPECT_NE(e.find((saved / "rank00000.bin").string() + ": truncated shard file (rank 0)"), std::string::npos) << e;

  // 2^62 floats make 12 x 2^62 = 3 x 2^64 bytes, which wraps to the 0 claimed here.
  j = good;
  const std::uint64_t wrapping = std::uint64_t{1} << 62;
  j["arena_floats"] = wrapping;
  j["shards"][0]["end"] = wrapping;
  j["shards"][0]["bytes"] = 0;
  atomic_write_file(manifest, j.dump());
  EXPECT_EQ(error_of([&] { Checkpoint::open(saved); }),
            fmt::format("{}: malformed: shards[0].bytes = 0 does not hold 3 states of [0, {})", manifest.string(),
                        wrapping));
}

TEST(Checkpoint, CheckpointOfAnotherShapeIsRefusedNamingFieldAndBothValues) {
  test::ScratchDir dir;
  ShardedStateEngine writer(kTiny, {});
  fs::path saved = save_checkpoint(writer, dir.path(), info_at(1, kTiny));
  model::ModelConfig wider = kTiny;
  wider.n_embd = 128;
  ShardedStateEngine reader(wider, {});
  EXPECT_EQ(error_of([&] { load_checkpoint(reader, Checkpoint::open(saved)); }),
            saved.string() + ": checkpoint of another model shape: model.n_embd = 64 in the checkpoint, 128 in this run");
}

TEST(Checkpoint, FailedSaveLeavesOlderCheckpointsWhole) {
  test::ScratchDir dir;
  ShardedStateEngine engine(kTiny, {2000});
  engine.fill(5);
  fs::path older = save_checkpoint(engine, dir.path(), info_at(10, kTiny));
  const std::string older_manifest = read_file_text(older / "manifest.json");

  engine.fill(6);
  engine.poison_shard(1);  // the write of the second shard fails (EFAULT)
  std::string e = error_of([&] { save_checkpoint(engine, dir.path(), info_at(20, kTiny)); });
  EXPECT_NE(e.find("rank00000.bin: write failed"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir / "step_00000020"));
  EXPECT_FALSE(fs::exists(dir / "step_00000020.tmp"));
  EXPECT_EQ(find_checkpoint(dir.path()), older);
  EXPECT_EQ(read_file_text(older / "manifest.json"), older_manifest);

  ShardedStateEngine reader(kTiny, {});
  load_checkpoint(reader, Checkpoint::open(older));  // still loads, checksums intact
  EXPECT_EQ(reader.loaded_, 1);
}

TEST(Checkpoint, SavingTheSameStepAgainReplacesItWhole) {
  test::ScratchDir dir;
  ShardedStateEngine engine(kTiny, {});
  engine.fill(7);
  save_checkpoint(engine, dir.path(), info_at(10, kTiny));
  engine.fill(8);
  fs::path again = save_checkpoint(engine, dir.path(), info_at(10, kTiny));
  ShardedStateEngine reader(kTiny, {});
  load_checkpoint(reader, Checkpoint::open(again));
  EXPECT_TRUE(same_bits(reader.master_, engine.master_));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(Checkpoint, FindsTheNewestCompleteCheckpoint) {
  test::ScratchDir dir;
  ShardedStateEngine engine(kTiny, {});
  const fs::path root = dir / "ckpt";
  save_checkpoint(engine, root, info_at(10, kTiny));
  save_checkpoint(engine, root, info_at(20, kTiny));
  fs::create_directories(root / "step_00000030.tmp");  // a save that never finished
  fs::create_directories(root / "step_00000040");      // no manifest: incomplete
  EXPECT_EQ(find_checkpoint(dir.path()), root / "step_00000020");
  EXPECT_EQ(find_checkpoint(root), root / "step_00000020");
  EXPECT_EQ(find_checkpoint(root / "step_00000010"), root / "step_00000010");
  EXPECT_NE(error_of([&] { find_checkpoint(dir / "nothing_here"); }), "");
  fs::create_directories(dir / "empty");
  EXPECT_NE(error_of([&] { find_checkpoint(dir / "empty"); }).find("no complete checkpoint"), std::string::npos);
}

TEST(Checkpoint, StateDigestIsTheSameWhateverTheSharding) {
  test::ScratchDir dir;
  ShardedStateEngine a(kTiny, {1000, 5000, 20000}), b(kTiny, {77});
  a.fill(9);
  b.fill(9);
  EXPECT_EQ(engine_state_digest(a), engine_state_digest(b));
  b.exp_avg_sq_[100000] = std::nextafter(b.exp_avg_sq_[100000], 1e9f);  // one bit of one state
  EXPECT_NE(engine_state_digest(a), engine_state_digest(b));

  const Checkpoint ckpt = Checkpoint::open(save_checkpoint(a, dir.path(), info_at(3, kTiny)));
  EXPECT_EQ(ckpt.state_digest(), engine_state_digest(a));
  ckpt.verify();
  load_checkpoint(b, ckpt);  // checks the loaded digest against the manifest's
  EXPECT_TRUE(same_bits(a.exp_avg_sq_, b.exp_avg_sq_));
}

TEST(Checkpoint, VerifyReadsEveryShardAndNamesTheDamagedOneAndItsRank) {
  test::ScratchDir dir;
  ShardedStateEngine writer(kTiny, {5000});
  writer.fill(4);
  const fs::path saved = save_checkpoint(writer, dir.path(), info_at(2, kTiny));
  {
    std::fstream f(saved / "rank00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000000);
    f.put('\x01');
  }
  std::string e = error_of([&] { Checkpoint::open(saved).verify(); });
  EXPECT_NE(e.find((saved / "rank00000.bin").string() + ": checksum mismatch in the shard of rank 0"),
            std::string::npos)
      << e;

  // A manifest whose digest was edited: the shard reads fine but does not add up.
  ShardedStateEngine again(kTiny, {5000});
  again.fill(4);
  const fs::path other = save_checkpoint(again, dir / "b", info_at(2, kTiny));
  nlohmann::json m = nlohmann::json::parse(read_file_text(other / kManifestName));
  m["shards"][1]["digest"] = "0123456789abcdef";
  atomic_write_file(other / kManifestName, m.dump());
  e = error_of([&] { Checkpoint::open(other).verify(); });
  EXPECT_NE(e.find("content digest"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 0"), std::string::npos) << e;
}

// Flips one byte of `file` at `at`.
void flip_byte(const fs::path& file, std::uint64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  const char c = static_cast<char>(f.get());
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x5a));
}

TEST(Checkpoint, DamageIsPlacedWithinTheBlockThatHoldsIt) {
  test::ScratchDir dir;
  ShardedStateEngine writer(kTiny, {5000});  // two shards in one file: the second at byte 60000
  writer.fill(6);
  const fs::path saved = save_checkpoint(writer, dir.path(), info_at(2, kTiny));
  const fs::path file = saved / "rank00000.bin";
  const std::uint64_t size = fs::file_size(file), second = 3 * 5000 * sizeof(float), block = kChecksumBlockBytes;
  ASSERT_GT(size, second + block + 100) << "the test needs a second shard of more than one block";

  // Deep in the second block of the second shard: its block, not "byte 0" nor the shard's start.
  const std::uint64_t at = second + block + 77;
  flip_byte(file, at);
  std::string e = error_of([&] { Checkpoint::open(saved).verify(); });
  EXPECT_NE(e.find(fmt::format("{}: checksum mismatch in the shard of rank 0: damage within bytes [{}, {}) of the "
                               "file (block 1 of 2,",
                               file.string(), second + block, size)),
            std::string::npos)
      << e;
  // Loading reads the same way and says the same.
  ShardedStateEngine reader(kTiny, {});
  EXPECT_EQ(error_of([&] { load_checkpoint(reader, Checkpoint::open(saved)); }), e);
  flip_byte(file, at);  // mended

  // In the first shard's only block.
  flip_byte(file, 1234);
  e = error_of([&] { Checkpoint::open(saved).verify(); });
  EXPECT_NE(e.find(fmt::format("damage within bytes [0, {}) of the file (block 0 of 1,", second)), std::string::npos)
      << e;
  flip_byte(file, 1234);
  Checkpoint::open(saved).verify();
}

TEST(Checkpoint, ManifestsWithoutBlockChecksumsStillReadAndPlaceDamageInTheShard) {
  test::ScratchDir dir;
  ShardedStateEngine writer(kTiny, {5000});
  writer.fill(7);
  const fs::path saved = save_checkpoint(writer, dir.path(), info_at(2, kTiny));
  nlohmann::json m = nlohmann::json::parse(read_file_text(saved / kManifestName));
  ASSERT_EQ(m["block_bytes"], kChecksumBlockBytes);
  m.erase("block_bytes");  // as written before block checksums
  for (auto& shard : m["shards"]) shard.erase("blocks");
  atomic_write_file(saved / kManifestName, m.dump());
  ShardedStateEngine reader(kTiny, {});
  load_checkpoint(reader, Checkpoint::open(saved));
  EXPECT_TRUE(same_bits(writer.exp_avg_sq_, reader.exp_avg_sq_));

  const std::uint64_t second = 3 * 5000 * sizeof(float), size = fs::file_size(saved / "rank00000.bin");
  flip_byte(saved / "rank00000.bin", second + 2 * kChecksumBlockBytes / 3);
  const std::string e = error_of([&] { Checkpoint::open(saved).verify(); });
  // Only the whole shard's checksum to go by: the shard's bytes, no byte claimed.
  EXPECT_NE(e.find(fmt::format("checksum mismatch in the shard of rank 0 (bytes [{}, {}) of the file): xxh3", second,
                               size)),
            std::string::npos)
      << e;
}

TEST(Checkpoint, BlockChecksumsThatDoNotFitTheShardAreRefused) {
  test::ScratchDir dir;
  ShardedStateEngine writer(kTiny, {});
  const fs::path saved = save_checkpoint(writer, dir.path(), info_at(2, kTiny));
  const fs::path manifest = saved / kManifestName;
  const nlohmann::json good = nlohmann::json::parse(read_file_text(manifest));
  auto j = good;
  j["shards"][0]["blocks"].erase(0);
  atomic_write_file(manifest, j.dump());
  test::expect_error([&] { Checkpoint::open(saved); }, {manifest.string(), "malformed", "checksums", "need 2"});
  j = good;
  j["shards"][0]["blocks"][1] = "xyz";
  atomic_write_file(manifest, j.dump());
  test::expect_error([&] { Checkpoint::open(saved); }, {"'shards[0].blocks[1]' must be 16 hex digits"});
  j = good;
  j["block_bytes"] = 0;
  atomic_write_file(manifest, j.dump());
  test::expect_error([&] { Checkpoint::open(saved); }, {"'block_bytes' must be positive"});
}

TEST(Checkpoint, PruneKeepsTheNewestAndLeavesLaterStepsAlone) {
  test::ScratchDir dir;
  const fs::path root = dir / "ckpt";
  for (int step : {2, 4, 6, 8, 10}) {
    fs::create_directories(root / checkpoint_name(step));
    atomic_write_file(root / checkpoint_name(step) / kManifestName, std::string("{}"));
  }
  fs::create_directories(root / "step_00000003.tmp");
  fs::create_directories(root / "step_00000009.tmp");
  auto deleted = prune_checkpoints(root, 8, 2);
  EXPECT_EQ(deleted.size(), 3u);
  // 10 is from an attempt a resume abandoned: saving step 10 again replaces it.
  EXPECT_EQ(checkpoint_steps(root), (std::vector<std::int64_t>{6, 8, 10}));
  EXPECT_FALSE(fs::exists(root / "step_00000003.tmp"));
  EXPECT_TRUE(fs::exists(root / "step_00000009.tmp"));
  EXPECT_TRUE(prune_checkpoints(root, 8, 0).empty());  // 0 keeps everything
}
