#include "plan/nccl_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace strata::plan {

namespace {

// NVIDIA/nccl v2.30 src/graph/tuning.cc, ncclTunerConstantsDefaults (us and GB/s). Rows:
// algorithm (tree, ring, PAT); columns: protocol (LL, LL128, Simple).
constexpr int kTree = 0, kRing = 1, kPat = 2;
constexpr double kBaseLatency[3][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {8.0, 8.0, 8.0}};
constexpr double kNvlinkLatency[3][3] = {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}, {0, 0, 4.0}};
constexpr double kNetLatency[3][3] = {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}, {0, 0, 14.0}};
// Indexed [generation][nodes: 1, 2, more]; LL's cap on several nodes by CPU instead (row 0
// Intel, row 1 AMD).
constexpr double kLlMaxBw[4][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
constexpr double kPerChannelRingLl128[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}, {40.0, 40.0, 40.0}};
constexpr double kPerChannelTreeLl128[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
constexpr double kPerChannelTree[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
// ncclTopoGetAlgoTime: the tree's bandwidth at powers of two from 64 B (all-reduce).
constexpr double kTreeCorrection[3][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};

int log2i(double n) { return n < 1 ? -1 : static_cast<int>(std::floor(std::log2(n))); }

int algorithm_row(NcclAlgorithm a) { return a == NcclAlgorithm::Tree ? kTree : a == NcclAlgorithm::Ring ? kRing : kPat; }

bool enabled(Collective c, NcclAlgorithm a, NcclProtocol p, const NcclGroup& g) {
  if (c == Collective::AllReduce) return a != NcclAlgorithm::Pat;
  if (a == NcclAlgorithm::Tree) return false;
  // PAT: all-gather and reduce-scatter, Simple only, one rank a node (ncclPatEnable).
  if (a == NcclAlgorithm::Pat) return p == NcclProtocol::Simple && g.nodes == g.ranks;
  return true;
}

// ncclTopoTuneModel's bus bandwidth of one algorithm and protocol ("various model refinements").
double bus_bandwidth(Collective c, NcclAlgorithm a, NcclProtocol p, const NcclGroup& g, const NcclSystem& s) {
  const int gen = static_cast<int>(s.generation);
  const int nodes_index = std::min(g.nodes, 3) - 1;
  const double ll_max = kLlMaxBw[g.nodes == 1 ? gen : (s.amd_cpu ? 1 : 0)][nodes_index];
  const double channels = s.channels;
  double bw = g.bus_GBps;
  if (a == NcclAlgorithm::Ring && p == NcclProtocol::LL) bw = std::min(ll_max, bw * 0.5);
  if (a == NcclAlgorithm::Ring && p == NcclProtocol::LL128)
    bw = std::min(bw * 0.92, channels * kPerChannelRingLl128[gen][nodes_index]);
  if (a == NcclAlgorithm::Tree && c == Collective::AllReduce)
    bw = std::min(bw * 0.92, channels * kPerChannelTree[gen][nodes_index]);
  if (a == NcclAlgorithm::Tree && p == NcclProtocol::LL) bw = std::min(bw / 3.8, ll_max);
  if (a == NcclAlgorithm::Tree && p == NcclProtocol::LL128)
    bw = std::min(bw * (g.nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), channels * kPerChannelTreeLl128[gen][nodes_index]);
  if (a == NcclAlgorithm::Pat) bw *= 0.75;
  return bw;
}

// Latency (us) and the hops it counts, by algorithm.
struct Latency {
  double us = 0;
  int nvlink_hops = 0, network_hops = 0;
};

Latency latency(Collective c, NcclAlgorithm a, NcclProtocol p, const NcclGroup& g, const NcclSystem& s) {
  const int row = algorithm_row(a), col = static_cast<int>(p);
  const int per_node = g.ranks / g.nodes;
  double intra = kNvlinkLatency[row][col];
  // With one rank a node every step is a network one: NCCL takes the tree's network latency.
  const double inter = per_node == 1 ? kNetLatency[kTree][col] : kNetLatency[row][col];
  Latency l{kBaseLatency[row][col]};
  if (a == NcclAlgorithm::Ring) {
    const bool all_reduce = c == Collective::AllReduce;
    const int steps = (all_reduce ? 2 : 1) * (g.ranks - 1);
    // Inter-node rings pay the network's per-step post overhead on every step (x3 for Simple).
    if (g.nodes > 1) intra = std::max(intra, (s.amd_cpu ? 2.0 : 1.0) * (p == NcclProtocol::Simple ? 3 : 1));
    l.network_hops = g.nodes == 1 ? 0 : (all_reduce ? 2 : 1) * (g.nodes - 1);
    l.nvlink_hops = steps - l.network_hops;
    l.us += l.nvlink_hops * intra + l.network_hops * inter;
  } else if (a == NcclAlgorithm::Tree) {
    l.nvlink_hops = 2 * (per_node - 1);
    l.network_hops = 2 * std::max(0, log2i(g.nodes));
    l.us += l.nvlink_hops * intra + l.network_hops * inter;
  } else {
    l.network_hops = std::max(0, log2i(g.nodes));
    l.us += l.network_hops * (inter / 3.5) + g.ranks * 2.8;
  }
  return l;
}

}  // namespace

std::string_view nccl_algorithm_name(NcclAlgorithm a) {
  return a == NcclAlgorithm::Ring ? "ring" : a == NcclAlgorithm::Tree ? "tree" : "pat";
}

std::string_view nccl_protocol_name(NcclProtocol p) {
  return p == NcclProtocol::LL ? "LL" : p == NcclProtocol::LL128 ? "LL128" : "Simple";
}

NcclCall nccl_call(Collective c, double total_bytes, const NcclGroup& g, const NcclSystem& s, NcclAlgorithm a,
                   NcclProtocol p) {
  if (c == Collective::AllToAll) throw Error("NCCL's model: an all-to-all is point-to-point sends, not a tuned collective");
  if (g.ranks < 2 || g.nodes < 1 || g.ranks % g.nodes != 0 || !(g.bus_GBps > 0))
    throw Error(fmt::format("NCCL's model: a group of {} ranks on {} nodes at {} GB/s", g.ranks, g.nodes, g.bus_GBps));
  NcclCall call{a, p};
  const Latency l = latency(c, a, p, g, s);
  call.nvlink_hops = l.nvlink_hops, call.network_hops = l.network_hops, call.latency_us = l.us;
  call.bus_GBps = bus_bandwidth(c, a, p, g, s);
  if (!enabled(c, a, p, g) || call.bus_GBps <= 0) {
    call.seconds = std::numeric_limits<double>::infinity();
    return call;
  }
  // Bus bandwidth to algorithm bandwidth: a ring moves (steps / ranks) of the buffer a rank,
  // a tree half; PAT's all-gather and reduce-scatter are kept at their bus figure.
  const int steps = (c == Collective::AllReduce ? 2 : 1) * (g.ranks - 1);
  double algorithm_GBps = a == NcclAlgorithm::Ring   ? call.bus_GBps * g.ranks / steps
                          : a == NcclAlgorithm::Tree ? call.bus_GBps * 0.5
                                                     : call.bus_GBps;
  const int log_size = log2i(std::floor(total_bytes / 64));
  if (a == NcclAlgorithm::Tree && log_size >= 0 && log_size < 23)
    algorithm_GBps *= kTreeCorrection[static_cast<int>(p)][log_size];
  // The ring's plateau effect on several nodes (all-reduce, Simple).
  double latency_us = call.latency_us;
  if (a == NcclAlgorithm::Ring && p == NcclProtocol::Simple && g.nodes > 1 && c == Collective::AllReduce &&
      total_bytes / (static_cast<double>(s.channels) * g.ranks) >= 64)
    latency_us *= s.generation == GpuGeneration::Volta ? 1.9 : 1.4;
  call.latency_us = latency_us;
  call.seconds = latency_us * 1e-6 + total_bytes / (algorithm_GBps * 1e9);
  return call;
}

NcclCall nccl_call(Collective c, double total_bytes, const NcclGroup& g, const NcclSystem& s) {
  NcclCall best;
  best.seconds = std::numeric_limits<double>::infinity();
  for (NcclAlgorithm a : {NcclAlgorithm::Tree, NcclAlgorithm::Ring, NcclAlgorithm::Pat})
    for (NcclProtocol p : {NcclProtocol::LL, NcclProtocol::LL128, NcclProtocol::Simple}) {
      const NcclCall call = nccl_call(c, total_bytes, g, s, a, p);
      if (call.seconds < best.seconds) best = call;
    }
  return best;
}

NcclSystem nccl_system(std::string_view device_name, const topo::Topology& topology) {
  NcclSystem s;
  const auto has = [&](std::string_view what) { return device_name.find(what) != std::string_view::npos; };
  std::string generation;
  if (has("H100") || has("H200") || has("GH200"))
    s.generation = GpuGeneration::Hopper, generation = "Hopper (the device's name)";
  else if (has("A100"))
    s.generation = GpuGeneration::Ampere, generation = "Ampere (the device's name)";
  else
    generation = fmt::format("not known for device '{}': NCCL's Ampere constants (RCCL's own tables not read)",
                             device_name);
  s.amd_cpu = topology.name() == "dgx-a100" || topology.name() == "frontier";
  const topo::Tier& network = topology.tier(topology.outermost());
  const int nics = topology.num_tiers() > 1 ? network.ports : 0;
  s.channels = 2 * (nics > 0 ? nics : topology.ranks_per_outer_domain());
  s.note = fmt::format(
      "generation {}; host CPU {} (DGX A100 and Frontier: AMD EPYC, their datasheets; other topologies taken as "
      "Intel); {} channels: 2 a {} (NCCL's search lays one ring a NIC and doubles it)",
      generation, s.amd_cpu ? "AMD" : "Intel", s.channels, nics > 0 ? "NIC of a node" : "rank of a node");
  return s;
}

nlohmann::json NcclSystem::to_json() const {
  constexpr std::string_view names[] = {"volta", "ampere", "hopper", "blackwell"};
  return {{"generation", names[static_cast<int>(generation)]},
          {"cpu", amd_cpu ? "amd" : "intel"},
          {"channels", channels},
          {"source", note}};
}

nlohmann::json NcclCall::to_json() const {
  return {{"algorithm", nccl_algorithm_name(algorithm)},
          {"protocol", nccl_protocol_name(protocol)},
          {"nvlink_hops", nvlink_hops},
          {"network_hops", network_hops},
          {"latency_us", latency_us},
          {"protocol_bus_GBps", bus_GBps}};
}

}  // namespace strata::plan
