#pragma once
// Checkpoints, laid out for sharded engines from the start:
//
//   OUT/ckpt/step_00000050/
//     rank00000.bin   each StateShard of rank 0 in turn: master weights, exp_avg, exp_avg_sq of
//     rank00001.bin   its arena run [begin, end), fp32 little-endian, no header
//     manifest.json   written last: format version, step, model config, world size, the run
//                     settings a resume must match, data position, RNG state, and per shard
//                     its rank, file, byte offset, [begin, end), bytes and XXH3-64 checksum
//
// A save writes into step_00000050.tmp/, fsyncs every file and the folder, then renames the
// folder into place, so a checkpoint folder with a manifest is always whole and a failed save
// leaves every older checkpoint untouched. Loading copies any arena range from whichever
// shards cover it, so the reader does not depend on how the writer was sharded.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.hpp"
#include "train/engine.hpp"

namespace strata::train {

inline constexpr int kCheckpointVersion = 1;
inline constexpr const char* kManifestName = "manifest.json";

// Everything a checkpoint records besides the state shards.
struct CheckpointInfo {
  std::int64_t step = 0;           // optimizer steps completed
  model::GPTConfig model;
  int world_size = 1;
  nlohmann::json run;              // settings a resume must match; compared key by key
  nlohmann::json data;             // data loader position
  nlohmann::json rng;              // random state the run still draws from
};

struct ShardRecord {
  int rank = 0;
  std::string file;                // inside the checkpoint folder
  std::uint64_t offset = 0;        // bytes into the file
  std::size_t begin = 0, end = 0;  // arena run, in floats
  std::uint64_t bytes = 0;         // 3 states x (end - begin) x 4
  std::string xxh3;                // of those bytes, 16 hex digits
};

std::string checkpoint_name(std::int64_t step);  // "step_00000050"

// Collective over the engine's ranks: each writes its shards, rank 0 the manifest. Returns the
// checkpoint folder root/step_XXXXXXXX. Throws the same Error on every rank if any rank fails.
std::filesystem::path save_checkpoint(Engine& engine, const std::filesystem::path& root,
                                      const CheckpointInfo& info);

// A complete checkpoint on disk, its manifest parsed and checked against the shard files'
// sizes. Errors name the file and what is wrong with it.
class Checkpoint {
 public:
  static Checkpoint open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const CheckpointInfo& info() const { return info_; }
  const std::vector<ShardRecord>& shards() const { return shards_; }
  std::size_t arena_floats() const { return arena_floats_; }

  // Copies the arena run [begin, end) of each state (null: skip it) out of the shards that
  // cover it, verifying the checksum of every shard it reads.
  void read(std::size_t begin, std::size_t end, float* master, float* exp_avg, float* exp_avg_sq) const;

 private:
  std::filesystem::path dir_;
  CheckpointInfo info_;
  std::vector<ShardRecord> shards_;  // sorted by begin; they tile [0, arena_floats)
  std::size_t arena_floats_ = 0;
};

// Throws Error naming the first model field that differs, with both values.
void check_same_model(const Checkpoint& ckpt, const model::GPTConfig& config);

// Collective: fills every rank's state shards from the checkpoint and calls state_loaded().
// The checkpoint's model must equal the engine's. Every rank throws the same Error if any fails.
void load_checkpoint(Engine& engine, const Checkpoint& ckpt);

// A checkpoint folder (one with a manifest) as is; an output folder or its ckpt/ folder: the
// newest complete checkpoint in it. Throws Error if there is none.
std::filesystem::path find_checkpoint(const std::filesystem::path& path);

}  // namespace strata::train
