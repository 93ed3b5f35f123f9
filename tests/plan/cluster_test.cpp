// --cluster: a common GPU cluster in one line (or a [cluster] TOML table) gives the tiers and
// the device of the topology preset of the same shape; bad strings are refused naming the key.
#include <gtest/gtest.h>

#include "plan/cluster.hpp"
#include "plan/device.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::plan;
using strata::test::error_of;

namespace {

// Every priced figure of each tier (the sources differ: a preset cites its system's datasheet).
void expect_same_tiers(const topo::Topology& a, const topo::Topology& b) {
  ASSERT_EQ(a.num_tiers(), b.num_tiers()) << b.name();
  for (int t = 0; t < a.num_tiers(); ++t) {
    const topo::Tier &x = a.tier(t), &y = b.tier(t);
    EXPECT_EQ(x.name, y.name) << b.name();
    EXPECT_EQ(x.size, y.size) << b.name() << " " << x.name;
    EXPECT_DOUBLE_EQ(x.bandwidth_GBps, y.bandwidth_GBps) << b.name() << " " << x.name;
    EXPECT_DOUBLE_EQ(x.latency_us, y.latency_us) << b.name() << " " << x.name;
    EXPECT_DOUBLE_EQ(x.efficiency, y.efficiency) << b.name() << " " << x.name;
    EXPECT_EQ(x.ports, y.ports) << b.name() << " " << x.name;
    EXPECT_DOUBLE_EQ(x.port_GBps, y.port_GBps) << b.name() << " " << x.name;
  }
}

}  // namespace

TEST(Cluster, ALineOfTheCommonShapesGivesThePresetsTiersAndDevice) {
  const struct {
    const char* line;
    const char* preset;
  } cases[] = {
      {"nodes=16,gpus=8,gpu=h100-sxm,nvlink=450,nics=8x400", "dgx-h100"},
      {"gpus=8,gpu=h100-sxm,nics=8x400", "dgx-h100"},  // nvlink from the datasheet
      {"gpus=8,gpu=a100-80,nics=8x200", "dgx-a100"},
      {"gpus=4,gpu=mi250x,nics=4x200", "frontier"},  // 4 packages of 2 GCDs: the die-pair tier too
  };
  for (const auto& c : cases) {
    const ClusterSpec spec = ClusterSpec::parse(c.line);
    expect_same_tiers(topo::Topology::preset(c.preset), spec.topology());
    const DeviceFacts mine = spec.device(), preset = *device_for_topology(c.preset);
    EXPECT_EQ(mine.name, preset.name) << c.line;
    EXPECT_EQ(mine.peak_tflops, preset.peak_tflops) << c.line;
    EXPECT_EQ(mine.memory_gb, preset.memory_gb) << c.line;
    EXPECT_EQ(mine.hbm_GBps, preset.hbm_GBps) << c.line;
  }
  EXPECT_EQ(ClusterSpec::parse("nodes=16,gpus=8,gpu=h100-sxm,nics=8x400").nodes, 16);
  // Another shape: 4 NICs shared by 8 GPUs, a given link rate; 16 nodes resolve to 128 ranks.
  topo::Topology t = ClusterSpec::parse("gpus=8,gpu=h200,nvlink=400,nics=4x400").topology();
  EXPECT_DOUBLE_EQ(t.tier(0).bandwidth_GBps, 400);
  t.resolve(t.world_size_for_nodes(16));
  EXPECT_EQ(t.world_size(), 128);
  EXPECT_DOUBLE_EQ(t.rank_bandwidth_GBps(1), 4 * 50.0 / 8);
  // Every named GPU has its datasheet figures, cited.
  for (const std::string& gpu : gpu_names()) {
    const GpuDatasheet& d = gpu_datasheet(gpu);
    d.device.validate();
    EXPECT_GT(d.link_GBps, 0) << gpu;
    EXPECT_NE(d.device.source.find("datasheet"), std::string::npos) << gpu;
    EXPECT_TRUE(d.link_source.find("datasheet") != std::string::npos ||
                d.link_source.find("User Guide") != std::string::npos)
        << gpu;
  }
}

TEST(Cluster, TheSameKeysInToml) {
  test::ScratchDir dir;
  test::write_bytes(dir / "c.toml", "[cluster]\nnodes = 16\ngpus = 8\ngpu = \"h100-sxm\"\nnvlink = 450\nnics = \"8x400\"\n");
  const ClusterSpec spec = ClusterSpec::parse((dir / "c.toml").string());
  EXPECT_EQ(spec.nodes, 16);
  expect_same_tiers(topo::Topology::preset("dgx-h100"), spec.topology());
  test::write_bytes(dir / "bad.toml", "[cluster]\ngpus = 8\ngpu = \"h100-sxm\"\nnics = \"8x400\"\nnvlnk = 450\n");
  const std::string e = error_of([&] { ClusterSpec::parse((dir / "bad.toml").string()); });
  EXPECT_NE(e.find("bad.toml: cluster.nvlnk: unknown key 'nvlnk'"), std::string::npos) << e;
}

TEST(Cluster, BadStringsAreRefusedNamingTheKey) {
  const struct {
    const char* line;
    const char* part;
  } cases[] = {
      {"gpus=8,gpu=h100,nics=8x400", "gpu=h100: unknown GPU (known: h100-sxm"},
      {"gpus=8,gpu=h100-sxm,nics=8*400", "nics=8*400: expected COUNTxGBITS"},
      {"gpus=8,gpu=h100-sxm,nics=0x400", "nics (count)=0: must be a positive integer"},
      {"gpus=eight,gpu=h100-sxm,nics=8x400", "gpus=eight: must be a positive integer"},
      {"gpus=8,gpu=h100-sxm,nvlink=-1,nics=8x400", "nvlink=-1: must be a positive number"},
      {"gpus=8,gpu=h100-sxm,nic=8x400", "unknown key 'nic'"},
      {"gpus=8,gpu=h100-sxm", "missing nics"},
      {"gpus=8,gpus=4,gpu=h100-sxm,nics=8x400", "gpus given twice"},
      {"h100", "neither KEY=VALUE"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of([&] { ClusterSpec::parse(c.line); });
    EXPECT_NE(e.find(c.part), std::string::npos) << c.line << ": " << e;
  }
}
