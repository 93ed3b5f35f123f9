// The checkpoint manifest reader: manifest.json -> Checkpoint::open -> read() of the arena.
// Also reads the trainer's state (data position, loss scaler) as a resume does.
// Input: the text of manifest.json. It is written into a scratch checkpoint folder that
// also holds shard files: those of the real checkpoint named by $STRATA_FUZZ_CHECKPOINT
// (scripts/fuzz.sh makes one with a 2-step training run), copied once at start-up, so
// manifests close to the real one open and read their shards, checksums and all. Without
// it the folder holds no shard file and every manifest stops at the shard checks.
// A strata::Error is the expected answer to bad input; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "base/error.hpp"
#include "fuzz_files.hpp"
#include "model/config.hpp"
#include "train/checkpoint.hpp"

namespace fs = std::filesystem;

namespace {

// Reads the arena back whole, then a run in the middle with one state skipped, as a
// sharded engine restoring its slice does.
void read_back(const strata::train::Checkpoint& ckpt) {
  const std::size_t n = ckpt.arena_floats();
  std::vector<float> master(n), exp_avg(n), exp_avg_sq(n);
  ckpt.read(0, n, master.data(), exp_avg.data(), exp_avg_sq.data());
  const std::size_t begin = n / 3, end = n - n / 3;
  ckpt.read(begin, end, master.data(), nullptr, exp_avg_sq.data());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const fs::path& dir = strata::fuzz::scratch_dir();
  const char* source = std::getenv("STRATA_FUZZ_CHECKPOINT");
  if (!source || !*source) {
    std::fprintf(stderr, "fuzz_checkpoint: STRATA_FUZZ_CHECKPOINT is not set: no shard files, manifests will "
                         "not get past the shard checks\n");
    return 0;
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(source, ec)) {
    if (!entry.is_regular_file() || entry.path().filename() == strata::train::kManifestName) continue;
    fs::copy_file(entry.path(), dir / entry.path().filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) break;
  }
  if (ec) {
    std::fprintf(stderr, "fuzz_checkpoint: cannot copy the shard files of %s: %s\n", source, ec.message().c_str());
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path& dir = strata::fuzz::scratch_dir();
  strata::fuzz::write_whole_file(dir / strata::train::kManifestName, data, size);
  try {
    const strata::train::Checkpoint ckpt = strata::train::Checkpoint::open(dir);
    try {
      strata::train::check_same_model(ckpt, strata::model::ModelConfig::preset("tiny"));
    } catch (const strata::Error&) {
    }
    try {
      strata::train::read_trainer_state(ckpt);
    } catch (const strata::Error&) {
    }
    read_back(ckpt);
  } catch (const strata::Error&) {
  }
  return 0;
}
