#pragma once
// Shared state of the multi-rank comm tests: the topology for this world size, the
// process groups, a communication context and every tier's collectives. Created on first
// use, destroyed before MPI is finalised (a gtest environment's TearDown, comm_world.cpp).
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/api/buffer.hpp"
#include "comm/backends/tier_comms.hpp"
#include "comm/runtime/context.hpp"
#include "topo/groups.hpp"

namespace strata::comm::testing {

// 2 ranks: node(1) x cluster(2); 4: gpu(2) x node(1) x cluster(2) (a level of one);
// 8 and other multiples of 4: gpu(2) x node(2) x cluster; otherwise one tier.
// `bandwidth_GBps` and `latency_us` apply to every tier (the emulation test slows them).
topo::Topology test_topology(int world_size, double bandwidth_GBps = 100.0, double latency_us = 1.0);

struct World {
  explicit World(int world_size);
  topo::Topology topology;
  Context ctx;
  topo::ProcessGroups groups;
  TierComms comms;
  int rank = 0;
  // Every group the tests exercise, each labelled.
  std::vector<std::pair<std::string, Collectives*>> all_groups();
};

World& world();
void destroy_world();

// A typed host buffer whose contents the tests generate deterministically.
struct HostBuf {
  DType dtype = DType::F32;
  std::size_t count = 0, block = 0;
  std::vector<std::uint8_t> data;
  std::vector<float> scales;

  HostBuf() = default;
  HostBuf(DType t, std::size_t n, std::size_t b = 0)
      : dtype(t), count(n), block(b), data(data_bytes(t, n)), scales(scale_count(t, n, b)) {}
  Buf view() { return Buf(dtype, data.data(), count, scales.empty() ? nullptr : scales.data(), block); }
  CBuf cview() const { return CBuf(dtype, data.data(), count, scales.empty() ? nullptr : scales.data(), block); }
  double value(std::size_t i) const;  // fp32/bf16/fp16 element as a double
  void set(std::size_t i, float v);   // rounds to nearest even for bf16/fp16
};

// Member data: integers in [-16, 16] (fp types: every sum and power-of-two average of up
// to 8 of them is exact in bf16, fp16 and fp32, so results must match bit for bit), random
// bytes and scales (int8/int4). Seeded by (test seed, world rank of the owner).
HostBuf member_data(DType t, std::size_t n, std::size_t block, std::uint64_t seed, int world_rank);

}  // namespace strata::comm::testing
