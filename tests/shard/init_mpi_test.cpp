// Sharded initialisation at world sizes 1, 2, 4 and 8 (one ctest entry each): under every
// strategy each rank's optimizer slices hold exactly the single-process initial weights, the
// gathered model equals them bit for bit, and the weights the model computes with give the
// single-process trainer's loss.
#include <gtest/gtest.h>

#include <cstring>

#include <fmt/format.h>

#include "base/error.hpp"
#include "comm/backends/tier_comms.hpp"
#include "comm/runtime/context.hpp"
#include "device/device.hpp"
#include "model/init.hpp"
#include "shard/sharded_engine.hpp"
#include "test_topologies.hpp"
#include "topo/groups.hpp"
#include "train/local_engine.hpp"

using namespace strata;

namespace {

constexpr int kBatch = 2, kSeq = 16;
constexpr std::uint64_t kSeed = 77;

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// The test topology where it fits; below 4 ranks, the world's ranks in one "gpu" tier inside
// the cluster (hierarchical presets need two tiers).
topo::Topology topology_for(int world) {
  if (world >= 4) return two_node_topology(world);
  auto t = topo::Topology::from_toml_string(fmt::format(R"(
[[tiers]]
name = "gpu"
size = {}
bandwidth_GBps = 200
latency_us = 2
[[tiers]]
name = "cluster"
bandwidth_GBps = 25
latency_us = 5
)",
                                                        world));
  t.resolve(world);
  return t;
}

model::ModelConfig test_config() {
  model::ModelConfig c = model::ModelConfig::preset("tiny");
  c.seq_len = kSeq;
  return c;
}

}  // namespace

TEST(ShardedInit, EveryStrategyStartsFromTheSingleProcessWeights) {
  const model::ModelConfig config = test_config();
  const model::ParamLayout layout(config);
  std::vector<float> want(layout.total_floats());
  model::init_params(layout, want.data(), kSeed);

  std::vector<std::int32_t> tokens(kBatch * kSeq), targets(kBatch * kSeq);
  for (int i = 0; i < kBatch * kSeq; ++i) tokens[i] = (7 * i) % 256, targets[i] = (7 * i + 3) % 256;
  train::LocalEngine local(config, kBatch, kSeq, kSeed);
  const float local_loss = local.eval_loss(tokens.data(), targets.data());

  const topo::Topology topology = topology_for(world_size());
  comm::Context ctx(topology);
  topo::ProcessGroups groups(topology);
  comm::TierComms comms(ctx, groups);
  int tried = 0;
  for (const std::string& name : shard::ShardSpec::preset_names()) {
    SCOPED_TRACE(name + " on " + std::to_string(world_size()) + " ranks");
    const shard::ShardSpec spec = shard::ShardSpec::preset_for(name, topology);
    shard::ShardedEngine engine(config, kBatch, kSeq, ctx, comms, spec, 1, kSeed, device::host());
    ++tried;
    std::size_t held = 0;
    for (const train::StateShard& s : engine.state_shards()) {
      held += s.end - s.begin;
      ASSERT_EQ(0, std::memcmp(s.master, want.data() + s.begin, 4 * (s.end - s.begin)))
          << "master slice [" << s.begin << ", " << s.end << ")";
    }
    EXPECT_GT(held, 0u);
    std::vector<float> gathered(layout.total_floats(), -1.f);
    engine.gather_params(gathered.data());
    EXPECT_EQ(0, std::memcmp(gathered.data(), want.data(), 4 * want.size()));
    // The weights the model reads: full precision wires give the single-process loss exactly.
    if (spec.weight_wire == DType::F32) {
      EXPECT_EQ(engine.eval_loss(tokens.data(), targets.data()), local_loss);
    }
  }
  EXPECT_EQ(tried, static_cast<int>(shard::ShardSpec::preset_names().size()));
}
