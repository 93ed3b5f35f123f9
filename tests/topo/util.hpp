#pragma once
// Shared by the topo tests.
#include <string>
#include <utility>

#include "topo/topology.hpp"

namespace strata::test {

// A tier with only the figures a test needs.
inline topo::Tier plain_tier(std::string name, int size, double bandwidth_GBps, double latency_us) {
  topo::Tier t;
  t.name = std::move(name);
  t.size = size;
  t.bandwidth_GBps = bandwidth_GBps;
  t.latency_us = latency_us;
  return t;
}

}  // namespace strata::test
