// Peers priced as they run (issue 13 item 3, issue 40): --collectives nccl (alias flat-ring)
// builds one call over the whole group, as NCCL runs FSDP's and DeepSpeed's gathers and
// reduce-scatters, into the schedule itself; the planner prices each call by NCCL's model.
#include <tuple>

#include <gtest/gtest.h>

#include "base/error.hpp"
#include "plan/cost_model.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::plan;
using shard::Composition;
using strata::Collective;
using shard::Purpose;
using strata::test::error_of;

namespace {

topo::Topology resolved(const char* preset, int nodes) {
  topo::Topology t = topo::Topology::preset(preset);
  t.resolve(t.world_size_for_nodes(nodes));
  return t;
}

shard::Schedule llama_schedule(const topo::Topology& t, const char* strategy, Composition collectives) {
  const shard::UnitPlan units = ModelShape::preset("llama2-7b").unit_plan();
  return shard::Schedule(units, t, apply_precision(strategy_spec(strategy, t), Precision::BF16), 1, collectives);
}

// The ops of one purpose for one unit, in schedule order.
std::vector<shard::ScheduledOp> ops_of(const shard::Schedule& s, Purpose purpose, int unit) {
  std::vector<shard::ScheduledOp> out;
  for (const shard::ScheduledOp& op : s.micro_batch_ops())
    if (op.purpose == purpose && op.unit == unit) out.push_back(op);
  return out;
}

Estimate llama_estimate(const topo::Topology& t, const char* strategy, Composition collectives) {
  Workload w;
  w.seq = 4096;
  w.collectives = collectives;
  // The scalars (8-byte all-gathers, per tier in either form) are left out: unit ops only.
  PlanContext c(ModelShape::preset("llama2-7b"), t, *device_for_topology(t.name()), w,
                {{Purpose::GradNormAllReduce, ""}, {Purpose::LossAllReduce, ""}});
  return c.estimate(strategy, apply_precision(strategy_spec(strategy, t), Precision::BF16));
}

// A flat ring all-gather booked on `level`, spanning `levels` tiers, over `group` ranks.
shard::ScheduledOp flat_gather(int level, int levels, int group, std::size_t bytes) {
  shard::ScheduledOp op{{Collective::AllGather}, shard::When::Forward, Purpose::WeightGatherForward};
  op.level = level;
  op.levels_spanned = levels;
  op.group_size = group;
  op.messages = group - 1;
  op.bytes_sent = op.bytes_received = bytes;
  return op;
}

}  // namespace

TEST(FlatRing, OneOpOverTheWholeGroupWithTheHierarchicalRunsBytes) {
  const topo::Topology t = resolved("dgx-h100", 4);  // node 8 x cluster 4
  const shard::Schedule hier = llama_schedule(t, "zero3", Composition::Hierarchical);
  const shard::Schedule flat = llama_schedule(t, "zero3", Composition::Nccl);
  EXPECT_EQ(flat.collectives(), Composition::Nccl);
  for (Purpose p : {Purpose::WeightGatherForward, Purpose::GradReduce}) {
    const auto h = ops_of(hier, p, 1), f = ops_of(flat, p, 1);
    ASSERT_EQ(h.size(), 2u);  // per tier
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].group_size, 32);
    EXPECT_EQ(f[0].messages, 31);
    EXPECT_EQ(f[0].levels_spanned, 2);
    EXPECT_EQ(f[0].level, 1);  // booked on the outermost tier it crosses
    EXPECT_EQ(f[0].kind, h[0].kind);
    // A ring sends d-1 chunks of 1/d of the unit; the hierarchical run sends as many in all.
    EXPECT_EQ(f[0].bytes_sent, h[0].bytes_sent + h[1].bytes_sent);
    EXPECT_EQ(f[0].messages, 31);
    EXPECT_EQ(h[0].messages + h[1].messages, 7 + 3);
  }
  // The runtime's form is still the default and still per tier.
  const shard::Schedule dflt(ModelShape::preset("llama2-7b").unit_plan(), t,
                             apply_precision(strategy_spec("zero3", t), Precision::BF16), 1);
  EXPECT_EQ(dflt.collectives(), Composition::Hierarchical);
  EXPECT_EQ(dflt.micro_batch_ops().size(), hier.micro_batch_ops().size());
  // Whole-step totals: the same bytes a rank, all on the cluster tier for the flat ring.
  const auto ht = hier.traffic_per_step(), ft = flat.traffic_per_step();
  EXPECT_EQ(ft[0].bytes_sent + ft[1].bytes_sent, ht[0].bytes_sent + ht[1].bytes_sent);
  EXPECT_EQ(ft[0].bytes_sent, 8u * 7u * 3u);  // only the scalars stay per tier (3 fp64 values)
}

TEST(FlatRing, OneTierStrategiesHaveTheSameOpsEitherWay) {
  // hsdp shards inside the node and reduces replicas over the cluster: every op spans one tier,
  // so the schedules hold the same ops (NCCL's model prices them, not the per-tier α-β).
  const topo::Topology t = resolved("dgx-h100", 4);
  const shard::Schedule h = llama_schedule(t, "hsdp", Composition::Hierarchical);
  const shard::Schedule f = llama_schedule(t, "hsdp", Composition::Nccl);
  ASSERT_EQ(h.micro_batch_ops().size(), f.micro_batch_ops().size());
  for (std::size_t i = 0; i < h.micro_batch_ops().size(); ++i) {
    EXPECT_EQ(h.micro_batch_ops()[i].levels_spanned, 1);
    EXPECT_EQ(f.micro_batch_ops()[i].levels_spanned, 1);
    EXPECT_EQ(h.micro_batch_ops()[i].bytes_sent, f.micro_batch_ops()[i].bytes_sent);
  }
  EXPECT_EQ(llama_estimate(t, "hsdp", Composition::Hierarchical).bytes_on("cluster"),
            llama_estimate(t, "hsdp", Composition::Nccl).bytes_on("cluster"));
}

TEST(FlatRing, AGathersLatencyGrowsWithItsNodesByHopType) {
  // One Llama-2-7B block's forward gather (bf16, 404,766,720 bytes) on dgx-h100, ring rate 320 GB/s:
  //   2 nodes, Simple:  8.4 + 14 NVLink x 3.4 + 1 network x 14.0 = 70.0 us + 379,468,800 B / 320 GB/s
  //     (1255.8 us in all; LL128 44.6 + 1288.96)
  //   16 nodes, LL128: 14.0 + 112 x 1.9 + 15 x 4.0 = 286.8 us + 401,604,480 B / 294.4 GB/s (1650.9 us;
  //     Simple 8.4 + 112 x 3.4 + 15 x 14.0 = 599.2 + 1255.0 = 1854.2)
  // (the flat-ring rule before: 15 and 127 steps of 5 us, 75 and 635 us).
  for (auto [nodes, protocol, latency_us] :
       {std::tuple{2, NcclProtocol::Simple, 70.0}, {16, NcclProtocol::LL128, 286.8}}) {
    const topo::Topology t = resolved("dgx-h100", nodes);
    const NcclSystem system = nccl_system("NVIDIA H100 SXM5", t);
    const auto op = ops_of(llama_schedule(t, "zero3", Composition::Nccl), Purpose::WeightGatherForward, 1).at(0);
    const OpPrice p = price_op(op, t, nullptr, 1.0, &system);
    ASSERT_TRUE(p.nccl);
    EXPECT_EQ(p.nccl->protocol, protocol) << nodes;
    EXPECT_EQ(p.nccl->network_hops, nodes - 1);
    EXPECT_EQ(p.nccl->nvlink_hops, 8 * nodes - 1 - (nodes - 1));
    EXPECT_NEAR(p.latency_s * 1e6, latency_us, 1e-9) << nodes;
  }
}

TEST(FlatRing, ARingThatStaysInsideOneDomainRunsOnItsTier) {
  // One dgx-h100 node: the cluster level is one rank, so zero3's ring over node..cluster is
  // the node's ring of 8. A Llama-2-7B block, bf16: 202,383,360 x 2 x 7/8 = 354,170,880 bytes
  // sent in 7 steps, on NVLink: 7 x 3 us = 21 us, 354,170,880 B / (450 x 0.8 GB/s) = 983.808 us.
  // (Booked on the cluster tier it was 7 x 5 us and 8 x 50 x 0.8 = 320 GB/s: 1106.784 us.)
  const topo::Topology t = resolved("dgx-h100", 1);
  const shard::Schedule flat = llama_schedule(t, "zero3", Composition::Nccl);
  // The per-tier form, as hierarchical: the one-rank cluster step moves nothing.
  const auto f = ops_of(flat, Purpose::WeightGatherForward, 1);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].level, 1);
  EXPECT_EQ(f[0].bytes_sent, 0u);
  EXPECT_EQ(f[1].level, 0);
  EXPECT_EQ(f[1].levels_spanned, 1);
  EXPECT_EQ(f[1].group_size, 8);
  EXPECT_EQ(f[1].bytes_sent, 354'170'880u);
  const OpPrice p = price_op(f[1], t, nullptr);
  EXPECT_NEAR(p.latency_s * 1e6, 21.0, 1e-9);
  EXPECT_NEAR(p.bandwidth_s * 1e6, 983.808, 1e-9);
  // NCCL's model of that call: one node (no network hop), Hopper; Simple 8.4 + 7 x 3.4 = 32.2 us
  // + 983.808 us beats LL128's 14.0 + 7 x 1.9 = 27.3 us + 354,170,880 B / 331.2 GB/s (0.92 x 360).
  const NcclSystem system = nccl_system("NVIDIA H100 SXM5", t);
  const OpPrice n = price_op(f[1], t, nullptr, 1.0, &system);
  ASSERT_TRUE(n.nccl);
  EXPECT_EQ(n.nccl->network_hops, 0);
  EXPECT_EQ(n.nccl->protocol, NcclProtocol::Simple);
  EXPECT_NEAR(n.seconds() * 1e6, 32.2 + 983.808, 1e-9);
  EXPECT_EQ(nodes_of(f[1], t), 1);
  // Nothing a step crosses the (one-node) cluster tier; the node carries what it carries per tier.
  EXPECT_EQ(flat.traffic_per_step()[1].bytes_sent, 0u);
  EXPECT_EQ(llama_estimate(t, "zero3", Composition::Nccl).bytes_on("node"),
            llama_estimate(t, "zero3", Composition::Hierarchical).bytes_on("node"));
  // One Frontier node (GCD pair 2 x node 4 x cluster 1): the ring spans gpu..node only.
  const topo::Topology fr = resolved("frontier", 1);
  const auto g = ops_of(llama_schedule(fr, "zero3", Composition::Nccl), Purpose::GradReduce, 1);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].level, 1);
  EXPECT_EQ(g[0].levels_spanned, 2);
  EXPECT_EQ(g[0].group_size, 8);
}

TEST(FlatRing, CalibratedByItsBoundingTiersCurveAtTheBytesOfOneRingMember) {
  // dgx-h100, 2 nodes. Measured all-gather curves (every rank of a node crossing at once):
  // node 400 GB/s a rank, cluster 40 GB/s a rank, alpha 1 us for 1 message (half_bytes = B x 1 us). The node's 8 ranks
  // carry one ring member's bytes over the cluster tier together (8 x 40 = 320 GB/s, below the
  // node's 1 x 400): the cluster bounds the ring, 15 MB / 8 at 40 GB/s = 46.875 us; 15 steps x
  // 1 us = 15 us.
  const topo::Topology t = resolved("dgx-h100", 2);
  auto calibration = [](double node_GBps) {
    Calibration cal;
    for (const char* name : {"node", "cluster"}) {
      const bool node = name == std::string("node");
      TierCalibration tier{name, node ? 8 : 2, node ? 1 : 8, {}};
      const double bus = node ? node_GBps : 40.0;
      CollectiveCurve curve;
      curve.bus_GBps = bus, curve.half_bytes = bus * 1e3, curve.messages = 1;  // alpha = 1 us
      for (auto& c : tier.curves) c = curve;
      cal.tiers.push_back(tier);
    }
    return cal;
  };
  shard::ScheduledOp op = flat_gather(1, 2, 16, 15'000'000);
  const NcclSystem system = nccl_system("NVIDIA H100 SXM5", t);
  const Calibration fast_node = calibration(400);
  const OpPrice p = price_op(op, t, &fast_node, 1.0, &system);
  EXPECT_NEAR(p.bandwidth_s * 1e6, 46.875, 1e-9);
  EXPECT_NEAR(p.latency_s * 1e6, 15.0, 1e-9);
  // A node measured at 200 GB/s a rank is slower than the cluster's 320: it bounds the ring,
  // 15 MB at 200 GB/s = 75 us, its own alpha (1 us) a step.
  const Calibration slow_node = calibration(200);
  const OpPrice q = price_op(op, t, &slow_node, 1.0, &system);
  EXPECT_NEAR(q.bandwidth_s * 1e6, 75.0, 1e-9);
  EXPECT_NEAR(q.latency_s * 1e6, 15.0, 1e-9);
}

TEST(FlatRing, TheNameIsCheckedNamingTheFlag) {
  EXPECT_EQ(shard::parse_composition("nccl"), Composition::Nccl);
  EXPECT_EQ(shard::parse_composition("flat-ring"), Composition::Nccl);  // the earlier name
  EXPECT_EQ(shard::to_string(Composition::Nccl), "nccl");
  EXPECT_EQ(shard::parse_composition("hierarchical"), Composition::Hierarchical);
  const std::string e = error_of([] { shard::parse_composition("ring"); });
  EXPECT_NE(e.find("--collectives 'ring'"), std::string::npos) << e;
  EXPECT_NE(e.find("flat-ring"), std::string::npos) << e;
}

// DeepSpeed ZeRO-3 as it runs (issue 13 item 3): its prefetcher gathers parameters in buckets of
// stage3_prefetch_bucket_size (5e7 elements) and reduces gradients in buckets of
// reduce_bucket_size (5e8), its documented defaults; FSDP gathers and reduces once a wrapped
// block. The bytes are the same; the fixed cost is paid once a call, and NCCL picks each
// call's protocol by the call's size.
TEST(Granularity, DeepSpeedPaysTheFixedCostOnceABucketOfItsDefaultSizes) {
  const topo::Topology t = resolved("dgx-h100", 4);
  const shard::Schedule s = llama_schedule(t, "zero3", Composition::Nccl);
  const shard::UnitPlan& units = s.units();
  // A Llama-2-7B block: 4 x 4096^2 attention + 3 x 4096 x 11008 MLP + 2 x 4096 norm elements.
  ASSERT_EQ(units.numel[1], 202'383'360u);
  const shard::ScheduledOp gather = ops_of(s, Purpose::WeightGatherForward, 1).at(0);
  const shard::ScheduledOp reduce = ops_of(s, Purpose::GradReduce, 1).at(0);
  EXPECT_EQ(collective_launches(gather, units, Granularity::Unit), 1.0);
  EXPECT_DOUBLE_EQ(collective_launches(gather, units, Granularity::DeepSpeed), 202'383'360 / 5e7);  // 4.05 calls
  EXPECT_DOUBLE_EQ(collective_launches(reduce, units, Granularity::DeepSpeed), 202'383'360 / 5e8);  // 0.40 calls
  // One call over 32 ranks on 4 nodes (28 NVLink steps, 3 network), ring rate 320 GB/s:
  //   FSDP, one call of the 404,766,720-byte block: Simple 8.4 + 28 x 3.4 + 3 x 14.0 = 145.6 us
  //     + 392,117,760 B / 320 GB/s (1225.368 us) beats LL128's 79.2 + 1331.92 us;
  //   DeepSpeed, 4.0476672 calls of 1e8 bytes: LL128 14.0 + 28 x 1.9 + 3 x 4.0 = 79.2 us +
  //     96,875,000 B / 294.4 GB/s (329.06 us) beats Simple's 145.6 + 302.73 us.
  ASSERT_EQ(gather.messages, 31);
  const NcclSystem system = nccl_system("NVIDIA H100 SXM5", t);
  const OpPrice fsdp = price_op(gather, t, nullptr, 1.0, &system),
                deepspeed = price_op(gather, t, nullptr, 202'383'360 / 5e7, &system);
  EXPECT_EQ(fsdp.nccl->protocol, NcclProtocol::Simple);
  EXPECT_EQ(deepspeed.nccl->protocol, NcclProtocol::LL128);
  EXPECT_NEAR(fsdp.latency_s * 1e6, 145.6, 1e-9);
  EXPECT_NEAR(fsdp.bandwidth_s * 1e6, 392'117'760 / 320e3, 1e-9);
  EXPECT_NEAR(deepspeed.latency_s * 1e6, 79.2 * 4.0476672, 1e-9);
  EXPECT_NEAR(deepspeed.bandwidth_s * 1e6, 4.0476672 * 96'875'000 / 294.4e3, 1e-6);

  // The whole step: every unit op's fixed cost scaled by its calls, bytes untouched.
  Workload w;
  w.seq = 4096;
  w.collectives = Composition::Nccl;
  const PlanContext fsdp_plan(ModelShape::preset("llama2-7b"), t, *device_for_topology("dgx-h100"), w);
  w.granularity = Granularity::DeepSpeed;
  const PlanContext deepspeed_plan(ModelShape::preset("llama2-7b"), t, *device_for_topology("dgx-h100"), w);
  const shard::ShardSpec spec = apply_precision(strategy_spec("zero3", t), Precision::BF16);
  const Estimate a = fsdp_plan.estimate("zero3", spec), b = deepspeed_plan.estimate("zero3", spec);
  double expected = 0;
  for (const shard::ScheduledOp& op : s.micro_batch_ops()) {
    const double calls = op.unit < 0                                     ? 1.0
                         : op.purpose == Purpose::GradReduce             ? units.numel[op.unit] / 5e8
                                                                         : units.numel[op.unit] / 5e7;
    if (op.level == 1) expected += price_op(op, t, nullptr, calls, &system).latency_s;
  }
  for (const shard::ScheduledOp& op : s.step_ops())
    if (op.level == 1) expected += price_op(op, t, nullptr, 1.0, &system).latency_s;  // scalars: one call each
  EXPECT_NEAR(b.tiers[1].latency_s, expected, 1e-12 * expected);
  EXPECT_GT(b.tiers[1].latency_s, a.tiers[1].latency_s);
  EXPECT_EQ(b.tiers[1].traffic.bytes_sent, a.tiers[1].traffic.bytes_sent);
  EXPECT_EQ(deepspeed_plan.assumptions()["granularity"], "deepspeed");

  EXPECT_EQ(parse_granularity("fsdp"), Granularity::Unit);
  const std::string e = error_of([] { parse_granularity("bucket"); });
  EXPECT_NE(e.find("--granularity 'bucket'"), std::string::npos) << e;
}
