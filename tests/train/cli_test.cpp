// Drives the real `strata` binary: what a user types, what a user sees.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "base/aligned.hpp"
#include "base/fileio.hpp"
#include "data/safetensors.hpp"
#include "model/layout.hpp"
#include "train/checkpoint.hpp"
#include "util.hpp"

using namespace strata;
namespace fs = std::filesystem;

namespace {

struct Corpus {
  fs::path train, val;
};

Corpus write_corpus(const test::ScratchDir& dir) {
  Corpus c{dir / "train.bin", dir / "val.bin"};
  test::write_tokens(c.train, test::sample_text_tokens(40000, 1));
  test::write_tokens(c.val, test::sample_text_tokens(8000, 2));
  return c;
}

// Flags of a quick tiny run; `extra` appends or overrides.
std::string tiny_args(const Corpus& c, const fs::path& out, const std::string& extra = "") {
  return "train --model tiny --batch 2 --seq 32 --lr 3e-3 --warmup 2 --val-batches 2 --train-data " +
         c.train.string() + " --val-data " + c.val.string() + " --out " + out.string() + " " + extra;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(Cli, PrintsItsVersion) {
  auto r = test::run_strata("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "strata " STRATA_VERSION)) << r.output;
}

TEST(Cli, BadInputsAreRefusedBeforeTrainingNamingTheFileOrField) {
  test::ScratchDir dir;
  Corpus c = write_corpus(dir);
  const fs::path cfg = dir / "bad.toml";
  atomic_write_file(cfg, std::string_view("[train]\nlerning_rate = 0.1\n"));
  const fs::path empty = dir / "empty.bin";
  atomic_write_file(empty, std::string_view(""));
  // A header that promises 1000 tokens in front of 10.
  const fs::path truncated = dir / "truncated.bin";
  {
    std::vector<std::int32_t> header(256, 0);
    header[0] = data::kTokenFileMagic;
    header[1] = data::kTokenFileVersion;
    header[2] = 1000;
    std::ofstream f(truncated, std::ios::binary);
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
    std::vector<std::uint16_t> tokens(10, 65);
    f.write(reinterpret_cast<const char*>(tokens.data()), 20);
  }

  const fs::path out = dir / "out";
  const std::pair<std::string, std::string> cases[] = {
      {"--config " + cfg.string(), cfg.string() + ": train.lerning_rate: unknown key"},
      {"--batch 0", "train.batch = 0: must be positive"},
      {"--steps -5", "train.steps = -5: must be positive"},
      {"--n-embd 0", "model.n_embd = 0: must be positive"},
      {"--n-head 5", "model.n_head = 5 does not divide model.n_embd = 64"},
      {"--seq 65", "train.seq = 65 exceeds model.seq_len = 64"},
      {"--train-data " + (dir / "missing.bin").string(), (dir / "missing.bin").string()},
      {"--train-data " + empty.string(), empty.string()},
      {"--train-data " + truncated.string(), truncated.string()},
      {"--val-data " + (dir / "missing_val.bin").string(), (dir / "missing_val.bin").string()},
      {"--vocab-size 64", c.train.string()},  // the sample text has bytes >= 64
  };
  for (auto& [extra, expected] : cases) {
    auto r = test::run_strata(tiny_args(c, out, "--steps 3 " + extra));
    EXPECT_EQ(r.exit_code, 2) << extra << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "strata: error: ")) << r.output;
    EXPECT_TRUE(contains(r.output, expected)) << extra << "\n" << r.output;
    EXPECT_FALSE(contains(r.output, "step 1/")) << r.output;
    EXPECT_FALSE(fs::exists(out)) << extra;
  }
}

TEST(Cli, FailedRunsOverwriteNothing) {
  test::ScratchDir dir;
  Corpus c = write_corpus(dir);
  const fs::path out = dir / "out";
  ASSERT_EQ(test::run_strata(tiny_args(c, out, "--steps 4")).exit_code, 0);
  const fs::path ckpt = out / "ckpt" / "step_00000004";
  auto snapshot = [&] {
    return read_file_text(out / "summary.json") + read_file_text(out / "metrics.jsonl") +
           read_file_text(ckpt / "manifest.json") + read_file_text(ckpt / "rank00000.bin");
  };
  const std::string before = snapshot();

  auto r = test::run_strata(tiny_args(c, out, "--steps 4"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, out.string() + ": holds the results of an earlier run")) << r.output;

  r = test::run_strata(tiny_args(c, out, "--steps 4 --overwrite --train-data " + (dir / "nope.bin").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "nope.bin")) << r.output;

  r = test::run_strata(tiny_args(c, out, "--steps 8 --n-embd 128 --n-head 4 --resume " + out.string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, ckpt.string() + ": checkpoint of another model shape: model.n_embd = 64 in the "
                                                 "checkpoint, 128 in this run"))
      << r.output;
  EXPECT_EQ(snapshot(), before);

  // A shard altered on disk: refused, naming the file, and the run's files stay as they were.
  std::string shard = read_file_text(ckpt / "rank00000.bin");
  shard[shard.size() / 2] ^= 0x10;
  {
    std::ofstream f(ckpt / "rank00000.bin", std::ios::binary);
    f << shard;
  }
  const std::string metrics = read_file_text(out / "metrics.jsonl");
  r = test::run_strata(tiny_args(c, out, "--steps 8 --resume " + out.string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, (ckpt / "rank00000.bin").string() + ": checksum mismatch")) << r.output;
  EXPECT_EQ(read_file_text(out / "metrics.jsonl"), metrics);

  // Truncated: refused the same way.
  fs::resize_file(ckpt / "rank00000.bin", shard.size() - 100);
  r = test::run_strata(tiny_args(c, out, "--steps 8 --resume " + out.string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, (ckpt / "rank00000.bin").string() + ": truncated shard file")) << r.output;
  EXPECT_EQ(read_file_text(out / "metrics.jsonl"), metrics);
}

TEST(Cli, ResumedRunReproducesTheUninterruptedLossesBitForBit) {
  test::ScratchDir dir;
  Corpus c = write_corpus(dir);
  const fs::path whole = dir / "whole", split = dir / "split";
  auto r = test::run_strata(tiny_args(c, whole, "--steps 100 --val-every 25 --save-every 50"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_strata(tiny_args(c, split, "--steps 100 --val-every 25 --stop-after 50"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(test::read_jsonl(split / "metrics.jsonl").size(), 50u);
  r = test::run_strata(tiny_args(c, split, "--steps 100 --val-every 25 --resume " + split.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "resumed from " + (split / "ckpt" / "step_00000050").string() + " at step 50"))
      << r.output;

  auto a = test::read_jsonl(whole / "metrics.jsonl"), b = test::read_jsonl(split / "metrics.jsonl");
  ASSERT_EQ(a.size(), 100u);
  ASSERT_EQ(b.size(), 100u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    // JSON numbers are printed to round-trip, so equal values are equal bits.
    EXPECT_EQ(a[i]["step"], b[i]["step"]);
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i]["lr"].get<double>(), b[i]["lr"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i].contains("val_loss"), b[i].contains("val_loss")) << "step " << i + 1;
    if (a[i].contains("val_loss")) {
      EXPECT_EQ(a[i]["val_loss"].get<double>(), b[i]["val_loss"].get<double>());
    }
  }
  // The final weights and moments too, byte for byte.
  EXPECT_EQ(read_file_text(whole / "ckpt" / "step_00000100" / "rank00000.bin"),
            read_file_text(split / "ckpt" / "step_00000100" / "rank00000.bin"));
  auto sa = test::read_json(whole / "summary.json"), sb = test::read_json(split / "summary.json");
  EXPECT_EQ(sa["loss"], sb["loss"]);
  EXPECT_EQ(sa["val_loss"], sb["val_loss"]);
  EXPECT_EQ(sb["start_step"], 50);
}

TEST(Cli, ConfigFileValuesAreOverriddenByFlags) {
  test::ScratchDir dir;
  Corpus c = write_corpus(dir);
  const fs::path cfg = dir / "run.toml";
  atomic_write_file(cfg, "[model]\npreset = \"tiny\"\nn_layer = 1\n[train]\nsteps = 3\nbatch = 2\nseq = 16\n[data]\ntrain = \"" +
                             c.train.string() + "\"\n");
  auto r = test::run_strata("train --config " + cfg.string() + " --steps 5 --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = test::read_json(dir / "out" / "summary.json");
  EXPECT_EQ(s["steps"], 5);
  EXPECT_EQ(s["model"]["config"]["n_layer"], 1);
  EXPECT_EQ(s["config"]["train"]["seq"], 16);
  EXPECT_TRUE(s["val_loss"].is_null());
  // Not a terminal: plain progress lines.
  EXPECT_TRUE(contains(r.output, "step 1/5 | loss ")) << r.output;
  EXPECT_TRUE(contains(r.output, "step 5/5 | loss ")) << r.output;
}

TEST(Cli, ShowsOneUpdatingProgressLineOnATerminal) {
  test::ScratchDir dir;
  Corpus c = write_corpus(dir);
  auto r = test::run_strata_on_terminal(tiny_args(c, dir / "out", "--steps 30 --val-every 10"));
  if (r.exit_code == test::kNoTerminal) GTEST_SKIP() << "no pseudo-terminal here: " << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Each update returns to the start of the line and clears it; validation notes stay above.
  EXPECT_TRUE(contains(r.output, "\r\033[Kstep 1/30 [")) << r.output;
  EXPECT_TRUE(contains(r.output, "\r\033[Kstep 30/30 [########################] loss ")) << r.output;
  EXPECT_TRUE(contains(r.output, " tok/s | ETA ")) << r.output;
  EXPECT_TRUE(contains(r.output, "\r\033[Kstep 20: val loss ")) << r.output;
  EXPECT_FALSE(contains(r.output, "step 10/30 | loss")) << r.output;  // no plain lines
}

TEST(Cli, ExportWritesEveryTensorUnderItsGpt2Name) {
  test::ScratchDir dir;
  Corpus c = write_corpus(dir);
  const fs::path out = dir / "out";
  // vocab 200 (padded to 256): the export must cut wte to the real vocabulary.
  ASSERT_EQ(test::run_strata(tiny_args(c, out, "--steps 3 --vocab-size 200")).exit_code, 0);
  const fs::path file = dir / "model.safetensors";
  auto r = test::run_strata("export " + out.string() + " --safetensors " + file.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const train::Checkpoint ckpt = train::Checkpoint::open(train::find_checkpoint(out));
  EXPECT_EQ(ckpt.info().step, 3);
  const model::ParamLayout layout(ckpt.info().model);
  AlignedBuffer<float> params(layout.total_floats());
  ckpt.read(0, layout.total_floats(), params.data(), nullptr, nullptr);

  data::SafetensorsFile st(file);
  EXPECT_EQ(st.entries().size(), layout.tensors().size());
  for (const model::TensorInfo& t : layout.tensors()) {
    SCOPED_TRACE(t.name);
    const data::SafetensorsEntry& e = st.find(t.name);
    std::vector<std::int64_t> shape = t.shape;
    if (t.hf_transposed) std::swap(shape[0], shape[1]);
    if (t.name == "wte.weight") shape[0] = 200;
    EXPECT_EQ(e.shape, shape);
    const std::vector<float> got = st.read_f32(t.name);
    const float* want = params.data() + t.offset;
    std::size_t mismatches = 0;
    if (t.hf_transposed) {
      const std::size_t rows = t.shape[0], cols = t.shape[1];  // stored [out, in]; HF [in, out]
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) mismatches += got[j * rows + i] != want[i * cols + j];
    } else {
      for (std::size_t i = 0; i < got.size(); ++i) mismatches += got[i] != want[i];
    }
    EXPECT_EQ(mismatches, 0u);
  }

  r = test::run_strata("export " + (dir / "no_such_run").string() + " --safetensors " + (dir / "x.st").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, (dir / "no_such_run").string())) << r.output;
  EXPECT_FALSE(fs::exists(dir / "x.st"));
}

TEST(Cli, ExportAndInspectOfAFolderWhoseNewestCheckpointIsDamagedNameTheIntactOne) {
  test::ScratchDir dir;
  Corpus c = write_corpus(dir);
  const fs::path out = dir / "out";
  ASSERT_EQ(test::run_strata(tiny_args(c, out, "--steps 4 --save-every 2")).exit_code, 0);
  const fs::path older = out / "ckpt" / "step_00000002", newest = out / "ckpt" / "step_00000004";
  const fs::path shard = newest / "rank00000.bin";
  {  // one byte in the middle of the newest shard
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    f.put('\x77');
  }

  // export of the folder: the newest intact checkpoint, saying what it passed over and why.
  const fs::path file = dir / "model.safetensors";
  auto r = test::run_strata("export " + out.string() + " --safetensors " + file.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "strata: export passes over a damaged checkpoint: " + shard.string() +
                                     ": checksum mismatch in the shard of rank 0: damage within bytes ["))
      << r.output;
  EXPECT_TRUE(contains(r.output, "strata: export uses " + older.string() + ", the newest intact checkpoint")) << r.output;
  EXPECT_TRUE(contains(r.output, "exported " + older.string() + " (step 2,")) << r.output;
  EXPECT_TRUE(fs::exists(file));

  // export of the damaged checkpoint itself: refused, naming the intact one beside it.
  r = test::run_strata("export " + newest.string() + " --safetensors " + (dir / "x.st").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "checksum mismatch")) << r.output;
  EXPECT_TRUE(contains(r.output, "the newest intact checkpoint beside it: " + older.string())) << r.output;
  EXPECT_FALSE(fs::exists(dir / "x.st"));

  // inspect shows the newest as it is; --verify finds the damage and names the intact one.
  r = test::run_strata("ckpt inspect " + out.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "checkpoint " + newest.string())) << r.output;
  r = test::run_strata("ckpt inspect " + out.string() + " --verify");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "strata: error: " + shard.string() + ": checksum mismatch")) << r.output;
  EXPECT_TRUE(contains(r.output, "the newest intact checkpoint beside it: " + older.string())) << r.output;
  // A shard cut short is found without --verify (the sizes are checked on opening).
  fs::resize_file(shard, fs::file_size(shard) - 8);
  r = test::run_strata("ckpt inspect " + out.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "truncated shard file (rank 0)")) << r.output;
  EXPECT_TRUE(contains(r.output, "the newest intact checkpoint beside it: " + older.string())) << r.output;

  // With no intact checkpoint left, export says so, listing what it passed over.
  fs::remove_all(older);
  r = test::run_strata("export " + out.string() + " --safetensors " + (dir / "y.st").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "no intact checkpoint in it")) << r.output;
}

TEST(Cli, BenchStepReportsTokensPerSecondAndFlops) {
  auto r = test::run_strata("bench step --model tiny --batch 2 --seq 32 --steps 2 --warmup 1 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["seq"], 32);
  EXPECT_EQ(j["steps"], 2);
  const double tps = j["tokens_per_s"].get<double>();
  EXPECT_GT(tps, 0);
  EXPECT_DOUBLE_EQ(j["flops_per_token"].get<double>(), model::ModelConfig::preset("tiny").flops_per_token(32));
  EXPECT_NEAR(j["gflops"].get<double>(), tps * j["flops_per_token"].get<double>() / 1e9, 1e-9 * tps);
  EXPECT_NEAR(j["step_s"]["mean"].get<double>(), 64 / tps, 1e-9);

  r = test::run_strata("bench step --model tiny --batch 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "--batch = 0: must be positive")) << r.output;
}

TEST(Cli, BenchStepRunsLlamaWithItsOverrides) {
  auto r = test::run_strata("bench step --model llama-tiny --n-kv-head 1 --ffn-hidden 96 --batch 2 --seq 16 "
                            "--steps 1 --warmup 0 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  model::ModelConfig want = model::ModelConfig::preset("llama-tiny");
  want.n_kv_head = 1;
  want.ffn_hidden = 96;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(r.output)["flops_per_token"].get<double>(), want.flops_per_token(16));

  r = test::run_strata("bench step --model llama-tiny --n-kv-head 3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "strata: error: model.n_kv_head = 3 does not divide model.n_head = 4")) << r.output;
}

TEST(Cli, BenchCkptTimesSaveVerifyAndLoadAndCleansUp) {
  test::ScratchDir dir;
  auto r = test::run_strata("bench ckpt --model tiny --repeats 1 --json --dir " + dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["state_bytes"].get<double>(), 3.0 * 4 * model::ParamLayout(model::ModelConfig::preset("tiny")).total_floats());
  for (const char* k :
       {"memcpy_GBps", "digest_GBps", "xxh3_GBps", "write_fsync_GBps", "save_GBps", "verify_GBps", "load_GBps"})
    EXPECT_GT(j[k].get<double>(), 0) << k;
  EXPECT_FALSE(fs::exists(dir / "ckpt"));  // its checkpoints are removed, the folder given is kept
  EXPECT_FALSE(fs::exists(dir / "raw.bin"));
  EXPECT_TRUE(fs::exists(dir.path()));
}
