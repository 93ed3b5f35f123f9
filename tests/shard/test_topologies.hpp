#pragma once
#include "topo/topology.hpp"

// The test topology of issue 3: 2 nodes x 2 GPUs x 2 dies = 8 ranks.
inline strata::topo::Topology two_node_topology(int world = 8) {
  auto t = strata::topo::Topology::from_toml_string(R"(
[[tiers]]
name = "gpu"
size = 2
bandwidth_GBps = 200
latency_us = 2
[[tiers]]
name = "node"
size = 2
bandwidth_GBps = 50
latency_us = 3
[[tiers]]
name = "cluster"
bandwidth_GBps = 25
latency_us = 5
)");
  t.resolve(world);
  return t;
}
