#include "comm_world.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

namespace strata::comm::testing {

topo::Topology test_topology(int world_size, double bw, double lat) {
  auto tier = [&](const char* name, int size) {
    std::string s = fmt::format("[[tiers]]\nname = \"{}\"\n", name);
    if (size > 0) s += fmt::format("size = {}\n", size);
    return s + fmt::format("bandwidth_GBps = {}\nlatency_us = {}\n", bw, lat);
  };
  std::string toml;
  if (world_size == 2)
    toml = tier("node", 1) + tier("cluster", 0);
  else if (world_size == 4)
    toml = tier("gpu", 2) + tier("node", 1) + tier("cluster", 0);
  else if (world_size % 4 == 0)
    toml = tier("gpu", 2) + tier("node", 2) + tier("cluster", 0);
  else
    toml = tier("cluster", 0);
  auto t = topo::Topology::from_toml_string(toml, "test topology");
  t.resolve(world_size);
  return t;
}

namespace {
int mpi_world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
std::unique_ptr<World> g_world;

// The world's communicators must go before MPI is finalised, which mpi_main.cpp does after
// RUN_ALL_TESTS returns; a global environment's TearDown runs just before that.
class WorldTeardown final : public ::testing::Environment {
 public:
  void TearDown() override { destroy_world(); }
};
[[maybe_unused]] ::testing::Environment* const kWorldTeardown =
    ::testing::AddGlobalTestEnvironment(new WorldTeardown);
}  // namespace

World::World(int world_size)
    : topology(test_topology(world_size)), ctx(topology), groups(topology), comms(ctx, groups) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
}

std::vector<std::pair<std::string, Collectives*>> World::all_groups() {
  std::vector<std::pair<std::string, Collectives*>> g;
  for (int t = 0; t < comms.num_tiers(); ++t) {
    g.emplace_back("ring " + comms.within(t).name(), &comms.within(t));
    if (t > 0) g.emplace_back("ring " + comms.across(t).name(), &comms.across(t));
    if (t > 0) g.emplace_back(comms.hierarchical(t).name(), &comms.hierarchical(t));
    g.emplace_back(comms.mpi(t).name(), &comms.mpi(t));
  }
  return g;
}

World& world() {
  if (!g_world) g_world = std::make_unique<World>(mpi_world_size());
  return *g_world;
}

void destroy_world() { g_world.reset(); }

double HostBuf::value(std::size_t i) const {
  if (dtype == DType::F32) {
    float f;
    std::memcpy(&f, data.data() + 4 * i, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, data.data() + 2 * i, 2);
  return dtype == DType::BF16 ? bf16_to_float(h) : fp16_to_float(h);
}

void HostBuf::set(std::size_t i, float v) {
  if (dtype == DType::F32) {
    std::memcpy(data.data() + 4 * i, &v, 4);
    return;
  }
  std::uint16_t h = dtype == DType::BF16 ? float_to_bf16(v) : float_to_fp16(v);
  std::memcpy(data.data() + 2 * i, &h, 2);
}

HostBuf member_data(DType t, std::size_t n, std::size_t block, std::uint64_t seed, int world_rank) {
  HostBuf b(t, n, block);
  std::mt19937_64 rng(seed * 1000003u + std::uint64_t(world_rank));
  if (is_quantized(t)) {
    for (auto& x : b.data) x = std::uint8_t(rng());
    std::uniform_real_distribution<float> s(0.01f, 2.0f);
    for (auto& x : b.scales) x = s(rng);
  } else {
    std::uniform_int_distribution<int> v(-16, 16);
    for (std::size_t i = 0; i < n; ++i) b.set(i, float(v(rng)));
  }
  return b;
}

}  // namespace strata::comm::testing
