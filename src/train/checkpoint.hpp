#pragma once
// Checkpoints, laid out for sharded engines and readable by any other layout:
//
//   OUT/ckpt/step_00000050/
//     rank00000.bin   each shard record of rank 0 in turn: master weights, exp_avg, exp_avg_sq
//     rank00001.bin   of its runs of the whole model's arena, fp32 little-endian, no header
//     manifest.json   written last: format version, step, model config, world size, the
//                     writer's layout (strategy, shard spec, topology, tensor_parallel), the
//                     run settings a resume must match, data position, RNG and trainer state,
//                     per record its rank, file, byte offset, arena runs, bytes, XXH3-64
//                     checksum, the XXH3-64 of each MiB of it (so damage is placed within a MiB)
//                     and content digest, and the digest of the whole state
//
// Every record is in whole-model (TP 1) arena coordinates, whatever wrote it: a record is one
// run ("begin", "end") or, from a tensor-parallel rank, a list of them ("runs": [begin, end]
// or [begin, end, stride, repeats], the runs [begin + i stride, end + i stride) for i <
// repeats), its values in that order. A TP rank writes its slices of the split tensors; TP
// rank 0 also the tensors whole on every TP rank and the whole arena's padding (zeros). So a
// checkpoint loads at any TP degree, and tp is not among the run settings a resume must match.
//
// A save writes into step_00000050.tmp/, fsyncs every file and the folder, then renames the
// folder into place, so a checkpoint folder with a manifest is always whole and a failed or
// killed save leaves every older checkpoint untouched. Loading copies any arena range from
// whichever records cover it, so a checkpoint written by one strategy, world size and TP
// degree loads into any other (the "universal checkpoint" of DeepSpeed, without a conversion
// step).
//
// The state digest is a sum over every arena position i and state k of mix(i, k, bits),
// modulo 2^64: it does not depend on how the arena is cut into records, so the digest a
// loading engine computes over its own slices must equal the writer's, whatever the layouts.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.hpp"
#include "train/engine.hpp"

namespace strata::train {

inline constexpr int kCheckpointVersion = 2;
inline constexpr const char* kManifestName = "manifest.json";
// A shard's bytes are checksummed block by block as well as whole, so that a damaged shard is
// reported with the byte range of its first damaged block. Manifests record the size they used
// ("block_bytes"); ones written before block checksums have none and are read as before.
inline constexpr std::uint64_t kChecksumBlockBytes = std::uint64_t{1} << 20;

// Everything a checkpoint records besides the state shards.
struct CheckpointInfo {
  std::int64_t step = 0;           // optimizer steps completed
  model::ModelConfig model;
  int world_size = 1;
  nlohmann::json engine;           // Engine::describe() of the writer
  nlohmann::json run;              // settings a resume must match; compared key by key
  nlohmann::json data;             // data loader position
  nlohmann::json rng;              // random state the run still draws from
  nlohmann::json trainer;          // trainer counters: skipped steps, loss scale
};

// A run [begin, end) of the whole model's arena, in floats.
struct ArenaRange {
  std::size_t begin = 0, end = 0;
  bool operator==(const ArenaRange&) const = default;
};

struct ShardRecord {
  int rank = 0;
  std::string file;                // inside the checkpoint folder
  std::uint64_t offset = 0;        // bytes into the file
  std::vector<ArenaRange> runs;    // where its values sit in the arena, in file order
  std::uint64_t bytes = 0;         // 3 states x floats() x 4
  std::string xxh3;                // of those bytes, 16 hex digits
  std::vector<std::uint64_t> blocks;  // XXH3-64 of each block of those bytes; empty: not recorded
  std::uint64_t digest = 0;        // this record's part of the state digest
  std::size_t floats() const;      // of each state
};

// What one record holds: its runs of the whole model's arena, in order, and each state's
// values for them, back to back.
struct SavedShard {
  std::vector<ArenaRange> runs;
  const float* master = nullptr;
  const float* exp_avg = nullptr;
  const float* exp_avg_sq = nullptr;
};

// What this rank of an engine saves (Engine::saved_shards()) in whole-model coordinates. A
// TP rank's slices are gathered into `packed`, which its shards point into.
struct SavedState {
  std::vector<SavedShard> shards;
  std::vector<std::vector<float>> packed;
};
SavedState saved_state(Engine& engine);

std::string checkpoint_name(std::int64_t step);  // "step_00000050"
std::string rank_file_name(int rank);            // "rank00003.bin"

// The state digest of a record's runs (see above); digests of disjoint runs add up.
std::uint64_t state_digest(const SavedShard& shard);
std::string digest_hex(std::uint64_t digest);
// Sum over ranks of the digests of their saved_state(): the digest of the engine's state.
// Collective.
std::uint64_t engine_state_digest(Engine& engine);

// The pieces of a save, also used by `strata ckpt convert` to write another layout offline.
// Writes `shards` into dir/rank_file_name(rank), fsynced, and returns their records.
std::vector<ShardRecord> write_rank_file(const std::filesystem::path& dir, int rank,
                                         const std::vector<SavedShard>& shards);
// Writes dir/manifest.json (atomically) for the given shards, which must tile the arena.
void write_manifest(const std::filesystem::path& dir, const CheckpointInfo& info, std::size_t arena_floats,
                    const std::vector<ShardRecord>& shards);
// Renames a finished tmp folder to its final name (replacing one of the same name) and
// fsyncs the parent, so the checkpoint appears whole or not at all.
void commit_checkpoint_dir(const std::filesystem::path& tmp_dir, const std::filesystem::path& final_dir);

// Collective over the engine's ranks: each writes its shards, rank 0 the manifest. Returns the
// checkpoint folder root/step_XXXXXXXX. Throws the same Error on every rank if any rank fails.
std::filesystem::path save_checkpoint(Engine& engine, const std::filesystem::path& root,
                                      const CheckpointInfo& info);

// A complete checkpoint on disk, its manifest parsed and checked against the shard files'
// sizes. Errors name the file (and for shard files the rank) and what is wrong with it.
class Checkpoint {
 public:
  static Checkpoint open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const CheckpointInfo& info() const { return info_; }
  const std::vector<ShardRecord>& shards() const { return shards_; }
  std::size_t arena_floats() const { return arena_floats_; }
  std::uint64_t state_digest() const { return state_digest_; }
  std::uint64_t block_bytes() const { return block_bytes_; }  // of ShardRecord::blocks; 0: none

  // `count` floats of the arena from `begin` on, to each state's destination (null: skip it).
  struct Copy {
    std::size_t begin = 0, count = 0;
    float* master = nullptr;
    float* exp_avg = nullptr;
    float* exp_avg_sq = nullptr;
  };
  // Copies each run (they must not overlap) out of the records that cover it, reading each of
  // those records once and verifying its checksums.
  void read(std::vector<Copy> copies) const;
  void read(std::size_t begin, std::size_t end, float* master, float* exp_avg, float* exp_avg_sq) const {
    read({{begin, end - begin, master, exp_avg, exp_avg_sq}});
  }
  // Reads every shard: checksums, per-shard digests and the state digest. Throws naming
  // the first bad shard file, its rank and the byte range of its first damaged block.
  void verify() const;

 private:
  std::filesystem::path dir_;
  CheckpointInfo info_;
  std::vector<ShardRecord> shards_;  // sorted by their first run; their runs tile [0, arena_floats)
  struct Placed {
    std::size_t begin, end, record;
  };
  std::vector<Placed> runs_;  // every record's runs, sorted by begin
  std::size_t arena_floats_ = 0;
  std::uint64_t state_digest_ = 0;
  std::uint64_t block_bytes_ = 0;
};

// Throws Error naming the first model field that differs, with both values.
void check_same_model(const Checkpoint& ckpt, const model::ModelConfig& config);

// What the trainer continues from, read from the manifest's data and trainer fields.
struct TrainerState {
  std::int64_t train_position = 0;     // data.train_position: windows the loader has served
  std::int64_t skipped_steps = 0;      // trainer.skipped_steps: non-finite steps so far
  bool dynamic_loss_scaling = false;   // trainer.loss_scaling: "dynamic" or "off"
  double loss_scale = 1;               // trainer.loss_scale: a power of two >= 1 when dynamic
  std::int64_t good_steps = 0;         // trainer.good_steps: finite steps since the last change
};
// Throws Error naming manifest.json and the field that is missing, mistyped or out of range.
TrainerState read_trainer_state(const Checkpoint& ckpt);
// Sets those fields of `info` (data.train_position and trainer): what read_trainer_state reads.
void put_trainer_state(CheckpointInfo& info, const TrainerState& state);

// Collective: fills every rank's state shards from the checkpoint (a TP rank its slices,
// model::WholeCover::Loaded), checks that the state digest of what was loaded equals the
// checkpoint's, and calls state_loaded(). The checkpoint's model must equal the engine's.
// Every rank throws the same Error if any fails.
void load_checkpoint(Engine& engine, const Checkpoint& ckpt);

// The steps of the complete checkpoints (folders step_<digits> with a manifest) under
// `root`, ascending.
std::vector<std::int64_t> checkpoint_steps(const std::filesystem::path& root);
// A checkpoint folder (one with a manifest) as is; an output folder or its ckpt/ folder: the
// newest complete checkpoint in it. Throws Error if there is none.
std::filesystem::path find_checkpoint(const std::filesystem::path& path);

// A checkpoint a resume can read: it opens, every shard verifies, its trainer state reads.
// Throws Error naming the bad shard file or manifest field.
void verify_resumable(const std::filesystem::path& dir);

// The hint for a refusal of the damaged checkpoint `damaged`: a line naming the newest intact
// checkpoint in the same folder (one verify_resumable accepts), or saying there is none.
std::string intact_alternative(const std::filesystem::path& damaged);

// What --resume, export and convert read. A checkpoint folder must be intact
// (verify_resumable; its refusal names the newest intact one beside it). An output folder or
// ckpt/ folder gives its newest intact checkpoint; each newer one passed over is listed in
// `passed_over` with the reason.
struct ResumeChoice {
  std::filesystem::path dir;
  std::vector<std::string> passed_over;
};
ResumeChoice choose_checkpoint(const std::filesystem::path& path);

// After the checkpoint of step `newest` is complete: deletes the complete checkpoints of
// older steps beyond the `keep_last` - 1 newest of them, and unfinished step_*.tmp folders of
// older steps. Checkpoints of later steps (from an attempt that was abandoned by a resume)
// are left alone; saving their step again replaces them. keep_last <= 0 keeps everything.
// Returns the folders deleted.
std::vector<std::filesystem::path> prune_checkpoints(const std::filesystem::path& root, std::int64_t newest,
                                                     int keep_last);

}  // namespace strata::train
