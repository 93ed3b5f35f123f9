#pragma once
// The software a published run used (--peer): how its framework calls the collectives strata's
// schedule prices, and what it overlaps. Each figure comes from the framework's code
// (docs/planner.md "Peers"); strata's own runtime is the default.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "plan/model_shapes.hpp"
#include "shard/spec.hpp"
#include "topo/topology.hpp"

namespace strata::plan {

enum class Peer { Strata, DeepSpeed05, DeepSpeed014, Fsdp1, Fsdp2, Megatron };
Peer parse_peer(std::string_view text);  // Error names --peer and lists the peers
std::string_view peer_name(Peer peer);
std::vector<std::string> peer_names();  // the choices, strata's own first

// What a peer does that strata's runtime does not, each from the framework's code.
struct PeerTraits {
  // DeepSpeed's overlap_comm (deepspeed/runtime/zero/config.py): true for stage 3, false for
  // stages 1 and 2 by default, in v0.5 and v0.14 alike; off, a gradient reduction runs on the
  // compute stream (stage_1_and_2.py / stage2.py average_tensor) and hides behind nothing.
  bool reductions_overlap_only_if_weights_sharded = false;
  // Megatron-Core's --overlap-param-gather: the distributed optimizer's post-step all-gathers
  // are issued at the next forward, each waited for by its bucket's forward pre-hook.
  bool param_gather_overlaps_forward = false;
  // Megatron-Core's --tp-comm-overlap (Transformer Engine userbuffers): each tensor-parallel
  // all-gather and reduce-scatter pipelined with the GEMM beside it.
  bool tp_comm_overlaps_gemm = false;
  // PyTorch FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): on the compute
  // stream, each all-gather's copy-out (split_with_sizes_copy of the gathered buffer into the
  // parameters) and each reduce-scatter's copy-in (the gradients into its input buffer).
  bool copies_on_compute_stream = false;
};
PeerTraits peer_traits(Peer peer);
std::string_view peer_means(Peer peer);  // the plan's assumptions: what the peer changes, and what is not priced

// DeepSpeed's documented defaults, in elements (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig):
inline constexpr double kDeepSpeedPrefetchBucket = 5e7;   // stage3_prefetch_bucket_size: ZeRO-3 parameter gathers
inline constexpr double kDeepSpeedReduceBucket = 5e8;     // reduce_bucket_size: gradient reductions
inline constexpr double kDeepSpeedAllgatherBucket = 5e8;  // allgather_bucket_size: ZeRO-1/2 post-step gathers
// DeepSpeed ZeRO-3 gathers only the parameters of at least stage3_param_persistence_threshold
// elements (1e5 by default, v0.5 and v0.14): smaller ones persist whole on every rank.
inline constexpr double kDeepSpeedPersistenceThreshold = 1e5;
// Megatron-Core's bucket when --ddp-bucket-size is not given: max(4e7, 1e6 x data-parallel
// size) elements (megatron/core/distributed/distributed_data_parallel.py).
double megatron_bucket_elements(int data_parallel_size);

// A spec's replicated-gradient buckets as the peer fills them (ddp, zero1: the step's reduction
// in buckets of ShardSpec::bucket_bytes of fp32 gradient): DeepSpeed's reduce_bucket_size (5e8
// elements), Megatron-Core's bucket of the data-parallel topology's size, each with no smaller
// first bucket; strata and FSDP keep the spec's. Command-line overrides apply after.
shard::ShardSpec apply_peer(shard::ShardSpec spec, Peer peer, const topo::Topology& data_parallel);

// A unit's parameters as DeepSpeed ZeRO-3 gathers them: tensors of at least the persistence
// threshold, and the modules that hold one (each module's fetch gathers its own).
struct GatheredParams {
  int tensors = 0;
  int modules = 0;
};
// Per unit of model.unit_plan(): embeddings (token, learned positions: one module each),
// blocks (two norms and block_linears(), each linear a module with its weight and bias), the
// final norm, an untied head; sliced by tensor parallelism as the units are.
std::vector<GatheredParams> deepspeed_gathered_params(const ModelShape& model);

}  // namespace strata::plan
