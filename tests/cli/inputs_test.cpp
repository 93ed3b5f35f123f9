// A path that names no readable file, given to any of strata's readers, is refused naming the
// path and what is wrong with it (base/fileio.hpp check_input_file), with status 2: never a
// std::bad_alloc from a folder's size, never a reader blocked on a FIFO. And the fix-it hints
// for inputs whose fix is known.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "support.hpp"

using namespace strata;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// What stands where a file is expected, and the words the refusal uses for it.
enum class Bad { Folder, Device, Fifo, Empty, Unreadable };
struct BadKind {
  Bad bad;
  const char* name;
  const char* says;
};
constexpr BadKind kBadKinds[] = {{Bad::Folder, "folder", "is a folder, not a file"},
                                 {Bad::Device, "device", "is a character device, not a regular file"},
                                 {Bad::Fifo, "fifo", "is a FIFO (named pipe), not a regular file"},
                                 {Bad::Empty, "empty", "is empty"},
                                 {Bad::Unreadable, "unreadable", "cannot read: Permission denied"}};

void make_bad(const fs::path& path, Bad bad) {
  fs::create_directories(path.parent_path());
  switch (bad) {
    case Bad::Folder: fs::create_directories(path); break;
    case Bad::Device: fs::create_symlink("/dev/null", path); break;  // stat follows: a character device
    case Bad::Fifo: ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0) << path; break;
    case Bad::Empty: test::write_bytes(path, ""); break;
    case Bad::Unreadable:
      test::write_bytes(path, "x");
      fs::permissions(path, fs::perms::none);
      break;
  }
}

// Root reads any file whatever its mode: an unreadable file is unreadable to another user, so
// as root the command runs as nobody (setpriv, util-linux); every other input it names is
// world-readable.
std::string as_reader(Bad bad) {
  if (bad != Bad::Unreadable || ::geteuid() != 0) return "";
  return "setpriv --reuid=65534 --regid=65534 --clear-groups ";
}

// One reader: the command line that reads `bad`, and where `bad` lies under the reader's folder
// (the file itself, or a file a folder argument holds, as a checkpoint holds its manifest).
struct Reader {
  const char* name;
  const char* leaf;  // under scratch/<kind>/<reader>/
  std::function<std::string(const fs::path& bad)> args;
  bool takes_folders = false;  // a folder is an input it walks, not a mistake
};

class Inputs : public ::testing::Test {
 protected:
  void SetUp() override {
    // A readable text file and a token file for the readers that take more than the bad one.
    text_ = scratch_ / "text.txt";
    test::write_bytes(text_, "A line of text.\nAnother line, for the split.\n");
    fs::permissions(scratch_.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                         fs::perms::others_read | fs::perms::others_exec);
  }
  test::ScratchDir scratch_;
  fs::path text_;
};

std::string strata_exe() { return STRATA_EXE; }

}  // namespace

TEST_F(Inputs, EveryReaderRefusesAFolderASpecialFileAnEmptyOrAnUnreadableFileNamingThePath) {
  const std::string text = text_.string();
  const std::string plan = "plan --model tinyllama-1.1b --topology " +
                           test::source_path("configs/topology/2node-2gpu-2die.toml").string() +
                           " --nodes 2 --precision fp32 --peak-tflops 1 --device-memory-gb 8 --hbm-gbps 50";
  const Reader readers[] = {
      {"config", "run.toml", [](const fs::path& p) { return "train --config " + p.string(); }},
      {"train-data", "train.bin", [](const fs::path& p) { return "train --train-data " + p.string(); }},
      {"data-inspect", "val.bin", [](const fs::path& p) { return "data inspect " + p.string(); }},
      {"data-prepare", "corpus.txt",
       [this](const fs::path& p) { return "data prepare --input " + p.string() + " --out " + (scratch_ / "o").string(); },
       true},
      {"tokenizer", "gpt2/vocab.json",
       [&](const fs::path& p) {
         test::write_bytes(p.parent_path() / "merges.txt", "#version: 0.2\n");
         return "data prepare --input " + text + " --out " + (scratch_ / "o").string() + " --tokenizer " +
                p.parent_path().string();
       }},
      {"topology", "topo.toml",
       [](const fs::path& p) { return "plan --model tinyllama-1.1b --topology " + p.string(); }},
      {"calibration", "calibration.toml",
       [&](const fs::path& p) { return plan + " --calibration " + p.string(); }},
      {"compare-summary", "summary.json",
       [&](const fs::path& p) { return plan + " --strategy zero3 --compare-summary " + p.string(); }},
      {"compare", "run/summary.json", [](const fs::path& p) { return "compare " + p.parent_path().string(); }},
      {"prompt-file", "prompt.txt",
       [](const fs::path& p) { return "sample --safetensors x.safetensors --model tiny --prompt-file " + p.string(); }},
      {"safetensors", "model.safetensors",
       [](const fs::path& p) { return "sample --model tiny --safetensors " + p.string(); }},
      {"checkpoint", "ckpt/manifest.json",
       [](const fs::path& p) { return "ckpt inspect " + p.parent_path().string(); }},
  };
  for (const BadKind& kind : kBadKinds) {
    for (const Reader& reader : readers) {
      if (kind.bad == Bad::Folder && reader.takes_folders) continue;
      const fs::path bad = scratch_ / kind.name / reader.name / reader.leaf;
      make_bad(bad, kind.bad);
      const std::string command = as_reader(kind.bad) + strata_exe() + " " + reader.args(bad);
      const auto r = test::run_command("timeout 20 " + command, test::Stderr::Capture);
      const std::string what = std::string(kind.name) + " as " + reader.name + ": " + command + "\n" + r.output;
      EXPECT_EQ(r.exit_code, 2) << what;
      EXPECT_TRUE(contains(r.output, bad.string() + ": " + kind.says)) << what;
      EXPECT_FALSE(contains(r.output, "bad_alloc")) << what;
    }
  }
}

TEST_F(Inputs, ATextFileAsTrainingDataSaysHowToMakeATokenFile) {
  const auto r = test::run_command(strata_exe() + " train --train-data " + text_.string(), test::Stderr::Capture);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, text_.string() + ": a text file, not a token file: make a token file with `strata "
                                                  "data prepare --input " + text_.string()))
      << r.output;
}

TEST_F(Inputs, ASequenceOverTheModelsNamesTheSettingThatRaisesIt) {
  const auto r = test::run_command(strata_exe() + " train --model tiny --seq 128 --train-data x.bin",
                                   test::Stderr::Capture);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "train.seq = 128 exceeds model.seq_len = 64: raise model.seq_len (--seq-len 128"))
      << r.output;
}

TEST_F(Inputs, AWarmUpLongerThanTheRunIsWarnedAbout) {
  const fs::path data = scratch_ / "data";
  ASSERT_EQ(test::run_command(strata_exe() + " data prepare --input " + text_.string() + " --val-fraction 0.5 "
                                  "--chunk-bytes 16 --out " + data.string(),
                              test::Stderr::Capture)
                .exit_code,
            0);
  const auto r = test::run_command(strata_exe() + " train --model tiny --batch 1 --seq 8 --steps 2 --warmup 5 "
                                                  "--train-data " + (data / "train.bin").string(),
                                   test::Stderr::Capture);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "strata: warning: optim.warmup = 5 is longer than train.steps = 2")) << r.output;
}

// `--recompute` given alone is full recomputation, in `strata train` as in `strata plan`.
TEST_F(Inputs, ABareRecomputeIsFullRecomputation) {
  const fs::path data = scratch_ / "data", out = scratch_ / "run";
  ASSERT_EQ(test::run_command(strata_exe() + " data prepare --input " + text_.string() + " --val-fraction 0.5 "
                                  "--chunk-bytes 16 --out " + data.string(),
                              test::Stderr::Capture)
                .exit_code,
            0);
  const auto r = test::run_command(strata_exe() + " train --model tiny --batch 1 --seq 8 --steps 1 --recompute --out " +
                                       out.string() + " --train-data " + (data / "train.bin").string(),
                                   test::Stderr::Capture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::read_json(out / "summary.json")["config"]["train"]["recompute"], "full");
}

TEST_F(Inputs, ExportToAMissingFolderNamesTheFolder) {
  const fs::path missing = scratch_ / "no" / "such";
  const auto r = test::run_command(strata_exe() + " export " + (scratch_ / "run").string() + " --safetensors " +
                                       (missing / "m.safetensors").string(),
                                   test::Stderr::Capture);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "the folder " + missing.string() + " does not exist")) << r.output;
  EXPECT_FALSE(contains(r.output, ".tmp.")) << r.output;
}

TEST_F(Inputs, AShardedRunWithoutItsRanksGivesTheMpirunLine) {
  const std::string topology = test::source_path("configs/topology/2node-2gpu-2die.toml").string();
  const auto r = test::run_command(strata_exe() + " train --strategy zero3 --topology " + topology +
                                       " --train-data x.bin",
                                   test::Stderr::Capture);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "world size 1 is not a multiple of 4 ranks per node")) << r.output;
  EXPECT_TRUE(contains(r.output, "a sharded run needs its ranks launched: mpirun -np 4 strata train")) << r.output;
}
