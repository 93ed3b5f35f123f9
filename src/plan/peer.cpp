#include "plan/peer.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "base/error.hpp"
#include "plan/compute_shape.hpp"
#include "plan/cost_model.hpp"
#include "plan/names.hpp"

namespace strata::plan {

namespace {

// Each peer in one row: its name, what it does that strata's runtime does not, the granularity
// it calls its collectives at (none: --granularity's), the kernels of its time, and what the plan
// says of it (what it changes, and what is not priced).
struct PeerFacts {
  Peer value;
  std::string_view name;
  PeerTraits traits;
  std::optional<Granularity> granularity;
  KernelGeneration kernels;
  std::string_view means;
};

constexpr std::string_view kDeepSpeedMeans =
    "DeepSpeed ZeRO as the version ran: its gathers' calls (granularity_means); overlap_comm at its default "
    "(stage 3: on; stages 1 and 2: off, each gradient reduction on the compute stream, never hidden). Not "
    "priced: Python and hook overhead per call (no published figure), persistent parameters' bytes (each "
    "under 1e5 elements, kept in the gathers), stage 1/2's per-owner dist.reduce calls";

constexpr PeerFacts kPeers[] = {
    {Peer::Strata, "strata", {}, std::nullopt, KernelGeneration::Y2024,
     "strata's own runtime: its calls (--granularity) and overlap"},
    {Peer::DeepSpeed05, "deepspeed-0.5", {.reductions_overlap_only_if_weights_sharded = true},
     Granularity::DeepSpeedTensors, KernelGeneration::Y2021, kDeepSpeedMeans},
    {Peer::DeepSpeed014, "deepspeed-0.14", {.reductions_overlap_only_if_weights_sharded = true},
     Granularity::DeepSpeedModules, KernelGeneration::Y2024, kDeepSpeedMeans},
    {Peer::Fsdp1, "fsdp1", {}, Granularity::Unit, KernelGeneration::Y2021,
     "PyTorch FSDP1: one flat parameter a wrapped block, one all-gather and one reduce-scatter a unit, the "
     "parameters views into the gathered buffer (no copies)"},
    {Peer::Fsdp2, "fsdp2", {.copies_on_compute_stream = true}, Granularity::Unit, KernelGeneration::Y2024,
     "PyTorch FSDP2: one all-gather and one reduce-scatter a unit (foreach over its parameters), with its "
     "copies on the compute stream at the memory-bound rate: each all-gather's copy-out (unit bytes read and "
     "written) and each reduce-scatter's copy-in (gradient bytes read and written); the all-gather copy-in "
     "runs on its own stream (shard-sized, not priced)"},
    {Peer::Megatron, "megatron", {.param_gather_overlaps_forward = true, .tp_comm_overlaps_gemm = true},
     Granularity::MegatronBuckets, KernelGeneration::Y2024,
     "Megatron-Core's distributed optimizer with --overlap-grad-reduce --overlap-param-gather "
     "--tp-comm-overlap: reduce-scatters and all-gathers in max(4e7, 1e6 x DP) element buckets; the post-step "
     "all-gathers hidden behind the next forward, one issued ahead (only what forward waits is paid); "
     "tensor-parallel collectives hidden behind the micro-batch's compute (Transformer Engine pipelines each "
     "with its GEMM; the first chunk each op exposes is not priced: its split count is not sourced)"},
};

// Adds one module's tensors (elements each) to `g`: the module counts when one of them is gathered.
void add_module(GatheredParams& g, std::initializer_list<double> tensors) {
  int gathered = 0;
  for (double n : tensors)
    if (n >= kDeepSpeedPersistenceThreshold) ++gathered;
  g.tensors += gathered;
  g.modules += gathered > 0 ? 1 : 0;
}

GatheredParams block_params(const ModelShape& m) {
  GatheredParams g;
  const double h = m.hidden, tp = m.tensor_parallel;
  const double norm_bias = m.norm == Norm::LayerNorm ? h : 0;
  for (int norm = 0; norm < 2; ++norm) add_module(g, {h, norm_bias});
  for (const BlockLinear& l : m.block_linears()) {
    const std::string_view name = l.name;
    const bool bias = m.biases || (m.qkv_biases && (name == "wq" || name == "wk" || name == "wv" || name == "qkv"));
    // Column-parallel weights and biases split by output; row-parallel weights by input, their biases whole.
    const double weight = static_cast<double>(l.in) * l.out / tp;
    const double bias_elements = !bias ? 0 : l.row_parallel ? l.out : l.out / tp;
    add_module(g, {weight, bias_elements});
  }
  return g;
}

}  // namespace

Peer parse_peer(std::string_view text) {
  if (const Peer* p = value_of(kPeers, text)) return *p;
  throw Error(fmt::format("--peer '{}': unknown (known: {})", text, fmt::join(peer_names(), ", ")));
}

std::string_view peer_name(Peer peer) { return name_of(kPeers, peer); }

std::vector<std::string> peer_names() {
  const std::vector<std::string_view> names = names_of(kPeers);
  return {names.begin(), names.end()};
}

PeerTraits peer_traits(Peer peer) { return row_of(kPeers, peer).traits; }

std::string_view peer_means(Peer peer) { return row_of(kPeers, peer).means; }

Granularity peer_granularity(Peer peer, Granularity given) { return row_of(kPeers, peer).granularity.value_or(given); }

KernelGeneration peer_kernel_generation(Peer peer) { return row_of(kPeers, peer).kernels; }

double megatron_bucket_elements(int data_parallel_size) { return std::max(4e7, 1e6 * data_parallel_size); }

shard::ShardSpec apply_peer(shard::ShardSpec spec, Peer peer, const topo::Topology& data_parallel) {
  double elements = 0;
  if (peer == Peer::DeepSpeed05 || peer == Peer::DeepSpeed014) elements = kDeepSpeedReduceBucket;
  if (peer == Peer::Megatron) elements = megatron_bucket_elements(data_parallel.world_size());
  if (elements > 0) spec.bucket_bytes = spec.first_bucket_bytes = static_cast<std::uint64_t>(4 * elements);
  return spec;
}

std::vector<GatheredParams> deepspeed_gathered_params(const ModelShape& m) {
  const double h = m.hidden, tp = m.tensor_parallel;
  const shard::UnitPlan units = m.unit_plan();
  std::vector<GatheredParams> out;
  for (std::size_t u = 0; u < units.names.size(); ++u) {
    const std::string_view name = units.names[u];
    GatheredParams g;
    if (name == "embeddings") {
      add_module(g, {m.vocab * h / tp});
      add_module(g, {m.learned_positions * h});
    } else if (name.starts_with("h.")) {
      g = block_params(m);
    } else if (name == "ln_f") {
      add_module(g, {h, m.norm == Norm::LayerNorm ? h : 0});
    } else {  // the LM head, or a unit of strata's own model: its parameters as one tensor
      add_module(g, {static_cast<double>(units.numel[u])});
    }
    out.push_back(g);
  }
  return out;
}

}  // namespace strata::plan
