#pragma once
// What is sharded over which tier. For weights (W), gradients (G) and optimizer state (OS)
// the user names a tier of the topology, or `none` (replicated). A state sharded over tier
// t is split across the ranks of one tier-t domain; the outermost tier means all ranks.
//
// Internally a tier choice becomes a number of *levels*: sharding over tier t uses levels
// 0..t (each level is one tier's across-group, see topo/groups.hpp), `none` is 0 levels.
// Rank r's slice of a unit is found by reading r's position inside each tier as a digit,
// innermost digit most significant (docs/sharding.md). With that order every slice is
// nested in the coarser one: OS slice ⊂ G slice ⊂ W slice ⊂ secondary slice, so each
// collective is a run of per-level steps and never a permutation.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/dtype.hpp"
#include "topo/topology.hpp"

namespace strata::shard {

// How a state travels on the wire is a DType (base/dtype.hpp: names, sizes with scales).

struct ShardSpec {
  std::string preset = "custom";
  std::string weights = "none";     // tier name or "none"
  std::string grads = "none";
  std::string optimizer = "none";
  std::string secondary = "none";   // hpZ: tier of the secondary weight copy for backward
  DType weight_wire = DType::F32;     // weight gathers (forward, backward, after the step)
  DType grad_wire = DType::F32;       // per-micro-batch gradient reduction inside the G tier
  DType step_grad_wire = DType::F32;  // once-per-step reduction down to the OS shard and replicas
  int block_size = 256;             // elements per scale for quantized wires
  int prefetch = 1;                 // units gathered ahead of the one computing
  // Gradient reductions left in flight when the next gradient buffer is lent: each holds a
  // full-unit buffer until it completes, so this bounds their memory (schedule.hpp).
  int reductions_in_flight = 2;
  bool free_after_forward = true;   // drop gathered weights after forward (re-gather in backward)
  // Replicated gradients (G = none: ddp, zero1): the step's reduction runs in buckets of at
  // most this many bytes of fp32 gradient, each issued in the step's last micro-batch as soon
  // as backward has finished its units (PyTorch DDP's bucket_cap_mb = 25); 0 reduces them
  // after backward, unit by unit. Ignored when gradients are sharded.
  std::uint64_t bucket_bytes = 25ull << 20;
  // The first of those buckets (the units backward finishes first) holds at most this many:
  // small, so its reduction starts while backward still runs even when the whole gradient
  // fits one bucket (PyTorch DDP's first bucket, 1 MiB). Capped by bucket_bytes.
  std::uint64_t first_bucket_bytes = 1ull << 20;
  // The once-per-step reduction from the G shard down to the OS shard as an all-reduce
  // (reduce-scatter, then all-gather back to the G shard) instead of a reduce-scatter: how
  // ZeRO-topo's paper reduces gradients across nodes. Every rank then holds the whole summed
  // G shard but updates only its OS slice, so the all-gather half carries bytes no rank uses;
  // it exists to price that account, strata's own presets leave it off.
  bool step_grad_allreduce = false;

  // Presets: ddp, zero1, zero2, zero3, hsdp, zeropp, topo, or a framework's name for one
  // (preset_aliases). Tier choices depend on the topology (outermost tier = all ranks;
  // hsdp/zeropp use the tier just inside it).
  static ShardSpec preset_for(std::string_view name, const topo::Topology& topology);
  static std::vector<std::string> preset_names();
  // The frameworks' names for the presets: one table, resolved by preset_for (strata train)
  // and by the planner alike.
  struct Alias {
    std::string_view name;    // what the user may type: full_shard, zero-3, zero++, ...
    std::string_view preset;  // the preset it is
    std::string_view means;   // the framework's own term, e.g. "PyTorch FSDP's FULL_SHARD"
  };
  static const std::vector<Alias>& preset_aliases();
  // The preset a name or alias stands for (the name itself when it is neither).
  static std::string_view canonical_preset(std::string_view name);
  static std::string alias_list();  // "fsdp = zero3, full_shard = zero3, ..." for refusals

  // The spec in words, e.g. "W=cluster: weights sharded over all 128 ranks, gathered for
  // each unit's forward and backward; ...", and which framework setting each part is.
  std::string describe(const topo::Topology& topology) const;

  // "W=gpu,G=node,OS=cluster" (any subset, keys W/G/OS/S, case-insensitive).
  void apply_shard_string(std::string_view text);

  nlohmann::json to_json() const;
};

// A spec resolved against a topology: tier names become level counts.
struct LevelSpec {
  int num_levels = 0;   // tiers in the topology
  int weights = 0;      // levels W is sharded over (0 = replicated)
  int grads = 0;
  int optimizer = 0;
  int secondary = 0;    // 0 = no secondary copy
  std::vector<int> level_size;  // ranks per across-group at each level (= tier sizes)
  int degree(int levels) const;  // ranks sharing one slice's domain: product of the first `levels` sizes
};

// Checks degree(OS) >= degree(G) >= degree(W), secondary inside W, wire formats each
// collective can carry, block size; throws Error naming the field and the tiers.
LevelSpec resolve(const ShardSpec& spec, const topo::Topology& topology);

}  // namespace strata::shard
