#include "shard/reshard.hpp"

#include <fmt/format.h>

#include "base/aligned.hpp"
#include "base/error.hpp"
#include "shard/runtime.hpp"
#include "shard/schedule.hpp"

namespace strata::shard {

namespace fs = std::filesystem;

CheckpointLayout single_process_layout(const model::ParamLayout& layout) {
  CheckpointLayout out;
  out.world_size = 1;
  out.describe = {{"strategy", "single"}, {"world_size", 1}};
  out.runs = {{{0, layout.total_floats()}}};
  return out;
}

CheckpointLayout sharded_layout(const model::ParamLayout& layout, const parallel::ShardOptions& options, int world_size) {
  if (world_size <= 0) throw Error(fmt::format("--world-size {}: must be positive", world_size));
  const topo::Topology topology = resolve_topology(options, world_size);
  const ShardSpec spec = build_spec(options, topology);
  const Schedule schedule(layout, topology, spec, /*accumulation_steps=*/1);
  CheckpointLayout out;
  out.world_size = world_size;
  out.describe = {{"strategy", spec.preset},
                  {"world_size", world_size},
                  {"shard_spec", spec.to_json()},
                  {"topology", topology.to_json()}};
  for (int rank = 0; rank < world_size && saves_optimizer_state(schedule, rank); ++rank) {
    auto& mine = out.runs.emplace_back();
    for (const ArenaRun& run : optimizer_runs(schedule, layout, rank)) mine.emplace_back(run.begin, run.end);
  }
  return out;
}

void convert_checkpoint(const train::Checkpoint& source, const fs::path& destination, const CheckpointLayout& target) {
  if (fs::exists(destination))
    throw Error(fmt::format("{}: exists; convert writes a new checkpoint folder", destination.string()));
  fs::path tmp = destination;
  tmp += ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);  // a conversion that crashed
  fs::create_directories(tmp, ec);
  if (ec) throw Error(fmt::format("{}: cannot create: {}", tmp.string(), ec.message()));
  try {
    std::vector<train::ShardRecord> records;
    for (std::size_t rank = 0; rank < target.runs.size(); ++rank) {
      // One rank's runs in memory at a time.
      std::vector<AlignedBuffer<float>> buffers;
      std::vector<train::SavedShard> shards;
      buffers.reserve(3 * target.runs[rank].size());  // the shards point into them
      for (auto [begin, end] : target.runs[rank]) {
        for (int k = 0; k < 3; ++k) buffers.emplace_back(end - begin);
        float* m = buffers[buffers.size() - 3].data();
        float* a = buffers[buffers.size() - 2].data();
        float* v = buffers[buffers.size() - 1].data();
        source.read(begin, end, m, a, v);
        shards.push_back({{{begin, end}}, m, a, v});
      }
      auto written = train::write_rank_file(tmp, static_cast<int>(rank), shards);
      records.insert(records.end(), written.begin(), written.end());
    }
    std::uint64_t digest = 0;
    for (const auto& r : records) digest += r.digest;
    if (digest != source.state_digest())
      throw Error(fmt::format("{}: the converted state has digest {}, the source {}: the target layout does not "
                              "cover the arena exactly once",
                              destination.string(), train::digest_hex(digest), train::digest_hex(source.state_digest())));
    train::CheckpointInfo info = source.info();
    info.world_size = target.world_size;
    info.engine = target.describe;
    info.engine["converted_from"] = {{"checkpoint", source.dir().string()}, {"engine", source.info().engine}};
    train::write_manifest(tmp, info, source.arena_floats(), records);
    train::commit_checkpoint_dir(tmp, destination);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace strata::shard
