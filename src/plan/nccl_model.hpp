#pragma once
// NCCL's own cost model of one collective call (NVIDIA/nccl src/graph/tuning.cc,
// ncclTopoTuneModel and ncclTopoGetAlgoTime, v2.30; docs/planner.md "NCCL's model"): for
// each algorithm (ring, tree, PAT) and protocol (LL, LL128, Simple) a latency (a base plus a
// per-hop latency by hop type: NVLink inside a node, network between nodes) and a bus
// bandwidth (the ring's rate, cut by each protocol's factor and capped per channel), the
// call's time = latency + bytes / algorithm bandwidth; NCCL runs the pair with the least
// time. What NCCL's topology search finds (channels x per-channel rate) is taken from the
// topology: the flat ring's rate over its tiers. NVLS and CollNet (switch reductions) and
// RCCL's own tables are not modelled.
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "plan/calibration.hpp"
#include "topo/topology.hpp"

namespace strata::plan {

enum class NcclAlgorithm { Ring, Tree, Pat };
enum class NcclProtocol { LL, LL128, Simple };
std::string_view nccl_algorithm_name(NcclAlgorithm a);  // "ring", "tree", "pat"
std::string_view nccl_protocol_name(NcclProtocol p);    // "LL", "LL128", "Simple"

// The GPU generation and host CPU NCCL's constants are indexed by (tuning.cc's compCapIndex
// and cpuVendor), and the channels its topology search lays.
enum class GpuGeneration { Volta, Ampere, Hopper, Blackwell };
struct NcclSystem {
  GpuGeneration generation = GpuGeneration::Ampere;
  bool amd_cpu = false;  // the network's per-step overhead: 2 us on AMD hosts, 1 us on Intel
  int channels = 16;
  std::string note;  // where the three come from
  nlohmann::json to_json() const;
};
// The system of a device on a topology: the generation from the device's name (H100, H200,
// GH200: Hopper; A100: Ampere; others, AMD's included, not known: Ampere's constants, said in
// the note), the host CPU from the topology preset's datasheet (dgx-a100 and frontier: AMD
// EPYC; others Intel), the channels 2 a NIC of a node (the search's one ring a NIC, doubled:
// ncclTopoDupChannels), 2 a rank of the node where the outermost tier names no NICs.
NcclSystem nccl_system(std::string_view device_name, const topo::Topology& topology);

// A collective's group as NCCL sees it: ranks, nodes (domains of the topology's
// second-outermost tier, --nodes), and the ring's bus rate (all channels together, GB/s).
struct NcclGroup {
  int ranks = 1, nodes = 1;
  double bus_GBps = 0;
};

struct NcclCall {
  NcclAlgorithm algorithm = NcclAlgorithm::Ring;
  NcclProtocol protocol = NcclProtocol::Simple;
  int nvlink_hops = 0, network_hops = 0;  // the ring's steps by hop type (tree: its depth's hops)
  double latency_us = 0;
  double bus_GBps = 0;        // the protocol's bus bandwidth (before the algorithm's ratio)
  double seconds = 0;         // latency + total bytes / algorithm bandwidth
  nlohmann::json to_json() const;
};

// The call NCCL runs for `total_bytes` (the whole buffer: an all-gather's output, a
// reduce-scatter's input, an all-reduce's buffer): the least time over the algorithms and
// protocols enabled for the collective (all-gather, reduce-scatter: ring, and PAT with one
// rank a node; all-reduce: ring, tree). An all-to-all is not a tuned collective: refused.
NcclCall nccl_call(Collective collective, double total_bytes, const NcclGroup& group, const NcclSystem& system);
// One algorithm and protocol's call; seconds is infinite where NCCL disables the pair.
NcclCall nccl_call(Collective collective, double total_bytes, const NcclGroup& group, const NcclSystem& system,
                   NcclAlgorithm algorithm, NcclProtocol protocol);

}  // namespace strata::plan
