#include <gtest/gtest.h>

#include "base/error.hpp"
#include "shard/spec.hpp"
#include "support.hpp"
#include "test_topologies.hpp"

using namespace strata;
using namespace strata::shard;
using strata::test::error_of;

TEST(ShardSpec, PresetsResolveToTheDocumentedLevels) {
  auto topo = two_node_topology();
  struct Want { const char* name; int w, g, o, s; };
  for (Want want : {Want{"ddp", 0, 0, 0, 0}, Want{"zero1", 0, 0, 3, 0}, Want{"zero2", 0, 3, 3, 0},
                    Want{"zero3", 3, 3, 3, 0}, Want{"hsdp", 2, 2, 2, 0}, Want{"zeropp", 3, 3, 3, 2},
                    Want{"topo", 1, 2, 3, 0}}) {
    LevelSpec l = resolve(ShardSpec::preset_for(want.name, topo), topo);
    EXPECT_EQ(l.weights, want.w) << want.name;
    EXPECT_EQ(l.grads, want.g) << want.name;
    EXPECT_EQ(l.optimizer, want.o) << want.name;
    EXPECT_EQ(l.secondary, want.s) << want.name;
  }
  EXPECT_EQ(resolve(ShardSpec::preset_for("topo", topo), topo).degree(2), 4);
}

TEST(ShardSpec, ShardStringOverridesStates) {
  auto topo = two_node_topology();
  ShardSpec s = ShardSpec::preset_for("ddp", topo);
  s.apply_shard_string("W=gpu,g=node,OS=cluster");
  LevelSpec l = resolve(s, topo);
  EXPECT_EQ(l.weights, 1);
  EXPECT_EQ(l.grads, 2);
  EXPECT_EQ(l.optimizer, 3);
  EXPECT_EQ(s.preset, "custom");
  EXPECT_NE(error_of([&] { s.apply_shard_string("X=gpu"); }).find("unknown state"), std::string::npos);
  EXPECT_NE(error_of([&] { s.apply_shard_string("W"); }).find("STATE=TIER"), std::string::npos);
}

TEST(ShardSpec, RefusesBadSpecsNamingTheField) {
  auto topo = two_node_topology();
  ShardSpec s;
  s.weights = "node";
  s.grads = "gpu";
  s.optimizer = "cluster";
  std::string e = error_of([&] { resolve(s, topo); });
  EXPECT_NE(e.find("degree(G) >= degree(W)"), std::string::npos) << e;
  EXPECT_NE(e.find("node"), std::string::npos) << e;

  s = ShardSpec{};
  s.grads = "cluster";
  s.optimizer = "node";
  EXPECT_NE(error_of([&] { resolve(s, topo); }).find("degree(OS) >= degree(G)"), std::string::npos);

  s = ShardSpec{};
  s.weights = "rack";
  e = error_of([&] { resolve(s, topo); });
  EXPECT_NE(e.find("shard.weights = 'rack'"), std::string::npos) << e;
  EXPECT_NE(e.find("gpu, node, cluster"), std::string::npos) << e;

  s = ShardSpec::preset_for("zeropp", topo);
  s.block_size = 0;
  EXPECT_NE(error_of([&] { resolve(s, topo); }).find("shard.block_size = 0"), std::string::npos);
  s.block_size = 255;
  EXPECT_NE(error_of([&] { resolve(s, topo); }).find("even"), std::string::npos);

  s = ShardSpec::preset_for("zero3", topo);
  s.weight_wire = DType::I4;
  EXPECT_NE(error_of([&] { resolve(s, topo); }).find("shard.weight_wire = int4"), std::string::npos);

  s = ShardSpec::preset_for("zero3", topo);
  s.secondary = "cluster";
  EXPECT_NE(error_of([&] { resolve(s, topo); }).find("shard.secondary"), std::string::npos);

  EXPECT_NE(error_of([] { parse_dtype("int3", "--grad-wire"); }).find("--grad-wire = 'int3'"), std::string::npos);
  EXPECT_NE(error_of([&] { ShardSpec::preset_for("zero4", topo); }).find("strategy 'zero4'"), std::string::npos);
}

TEST(ShardSpec, WireBytesCountScales) {
  EXPECT_EQ(wire_bytes(DType::F32, 1000, 256), 4000u);
  EXPECT_EQ(wire_bytes(DType::BF16, 1000, 256), 2000u);
  EXPECT_EQ(wire_bytes(DType::I8, 1024, 256), 1024u + 16u);
  EXPECT_EQ(wire_bytes(DType::I4, 1024, 256), 512u + 16u);
  EXPECT_EQ(wire_bytes(DType::I8, 1000, 256), 1000u + 16u);  // a partial last block has a scale too
}
