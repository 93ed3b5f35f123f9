#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::parallel {

// What a user chooses for a sharded run ([shard] in a config file, or flags). Here, below
// both train/ (whose config carries it) and shard/ (which builds the run from it), so the
// layering runs one way: shard/ implements train::Engine, train/ never includes shard/.
struct ShardOptions {
  std::string strategy;                  // preset name; empty = single process, no sharding
  std::string topology = "host";         // preset name or TOML file
  std::vector<std::string> tier_overrides;  // NAME.FIELD=VALUE
  std::string shard;                     // "W=gpu,G=node,OS=cluster" on top of the preset
  std::string secondary;                 // tier or "none"; empty = the preset's
  std::string weight_wire, grad_wire, step_grad_wire;  // empty = the preset's
  int block_size = 0;                    // 0 = the preset's (256)
  int prefetch = -1;                     // -1 = the preset's (1)
  std::int64_t bucket_bytes = -1;        // -1 = the preset's (25 MiB); 0 = no buckets
  std::int64_t first_bucket_bytes = -1;  // -1 = the preset's (1 MiB)
  bool keep_weights_after_forward = false;
  int tp = 1;                            // tensor-parallel degree (ParallelDims::tensor)
  std::string tp_tier;                   // the tier the TP groups lie in; empty = the innermost
  bool sequence_parallel = false;        // Megatron's sequence parallelism over the TP group
  int pp = 1;                            // pipeline stages (ParallelDims::pipeline)
  std::string pp_tier;                   // the tier the stages cross; empty = the outermost
  std::vector<int> pp_layers;            // blocks of each stage (--pp-layers); empty = equal stages
  bool emulate_links = false;
  double emulate_scale = 1.0;

  bool sharded() const { return !strategy.empty(); }
  // Given a traffic of its own (tiers, secondary copy, wires, block size): the preset is no
  // longer what runs.
  bool changes_traffic() const {
    return !shard.empty() || !secondary.empty() || !weight_wire.empty() || !grad_wire.empty() ||
           !step_grad_wire.empty() || block_size != 0;
  }
  // Anything of the preset's changed, its program (prefetch, buckets, kept weights) included.
  bool overrides_preset() const {
    return changes_traffic() || prefetch >= 0 || bucket_bytes >= 0 || keep_weights_after_forward;
  }
};

}  // namespace strata::parallel
