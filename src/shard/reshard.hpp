#pragma once
// Checkpoints in another layout, offline (`strata ckpt convert`). Any engine already loads
// any checkpoint (train/checkpoint.hpp reads arena ranges across shards), so conversion is
// for moving a checkpoint ahead of a job: the files come out as the target's ranks would
// have written them, so each rank of the new job reads just its own file, and a single-file
// layout serves tools that want one file.
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/layout.hpp"
#include "parallel/options.hpp"
#include "train/checkpoint.hpp"

namespace strata::shard {

// Which arena runs each writing rank holds, and how the layout describes itself in a
// manifest (the "engine" field, as Engine::describe() gives it).
struct CheckpointLayout {
  int world_size = 1;
  nlohmann::json describe;
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> runs;  // per writing rank
};

// The single-process trainer's layout: one file holding the whole arena.
CheckpointLayout single_process_layout(const model::ParamLayout& layout);
// What `strata train --strategy ...` on `world_size` ranks writes: the first OS domain's
// ranks, each its optimizer runs (shard/schedule.hpp). Throws Error naming a bad option.
CheckpointLayout sharded_layout(const model::ParamLayout& layout, const parallel::ShardOptions& options, int world_size);

// Writes the state of `source` as a new checkpoint folder `destination` (which must not
// exist) in `target`, through a .tmp folder renamed into place, and checks the new state
// digest against the source's. Everything else in the manifest is kept.
void convert_checkpoint(const train::Checkpoint& source, const std::filesystem::path& destination,
                        const CheckpointLayout& target);

}  // namespace strata::shard
