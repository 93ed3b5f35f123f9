#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "model/layout.hpp"
#include "shard/schedule.hpp"
#include "test_topologies.hpp"

using namespace strata;
using namespace strata::shard;

namespace {

const model::ParamLayout& tiny_layout() {
  static model::ParamLayout l(model::ModelConfig::preset("tiny"));
  return l;
}

std::uint64_t tier_bytes(const Schedule& s, const std::string& tier) {
  for (auto& t : s.traffic_per_step())
    if (t.tier == tier) return t.bytes_sent;
  ADD_FAILURE() << "no tier " << tier;
  return 0;
}

std::uint64_t total_bytes(const Schedule& s) {
  std::uint64_t n = 0;
  for (auto& t : s.traffic_per_step()) n += t.bytes_sent;
  return n;
}

// Bytes of the 8-byte scalar all-reduces in the step (norm and loss).
std::uint64_t scalar_bytes(const Schedule& s) {
  std::uint64_t n = 0;
  for (auto& op : s.step_ops())
    if (op.purpose == Purpose::GradNormAllReduce || op.purpose == Purpose::LossAllReduce) n += op.bytes_sent;
  return n;
}

Schedule make(const char* preset, int accum = 1, int world = 8) {
  auto topo = two_node_topology(world);
  return Schedule(tiny_layout(), topo, ShardSpec::preset_for(preset, topo), accum);
}

}  // namespace

TEST(Schedule, Zero3MovesThreeModelsPerStepWhateverTheWorld) {
  // zero3 per rank per step: gather forward, gather backward, reduce-scatter: 3 x M (d-1)/d.
  for (int world : {8, 16}) {
    auto topo = two_node_topology(world);
    ShardSpec spec = ShardSpec::preset_for("zero3", topo);
    spec.weight_wire = spec.grad_wire = spec.step_grad_wire = DType::BF16;
    Schedule s(tiny_layout(), topo, spec, 1);
    double psi = static_cast<double>(s.total_padded());
    double expect = 3 * 2 * psi * (world - 1) / world;
    EXPECT_DOUBLE_EQ(static_cast<double>(total_bytes(s) - scalar_bytes(s)), expect) << world;
  }
}

TEST(Schedule, TheStepsScalarsAreScheduledAsTheFp64TheyTravelIn) {
  const Schedule s = make("zero3");
  int scalar_ops = 0;
  for (const ScheduledOp& op : s.step_ops()) {
    if (op.purpose != Purpose::GradNormAllReduce && op.purpose != Purpose::LossAllReduce) continue;
    ++scalar_ops;
    EXPECT_EQ(op.wire, DType::F64) << to_string(op.purpose);
    // 1 (grad norm) or 2 (loss, stop flag) doubles to each of the level's other members.
    const std::size_t values = op.purpose == Purpose::GradNormAllReduce ? 1 : 2;
    EXPECT_EQ(op.elements_in, values);
    EXPECT_EQ(op.bytes_sent, 8 * values * static_cast<std::size_t>(op.group_size - 1));
  }
  EXPECT_EQ(scalar_ops, 6);  // each over the 3 tiers of the two-node topology
}

TEST(Schedule, HsdpCrossNodeBytesAreARingAllReduceOfTheNodeShard) {
  auto topo = two_node_topology(16);  // 4 nodes of 4 ranks
  ShardSpec spec = ShardSpec::preset_for("hsdp", topo);
  spec.weight_wire = spec.grad_wire = spec.step_grad_wire = DType::BF16;
  Schedule s(tiny_layout(), topo, spec, 1);
  const double psi = static_cast<double>(s.total_padded()), g = 4, R = 4;
  // Less the loss all-reduce's two fp64 (loss and stop flag) to each of R - 1 peers.
  EXPECT_DOUBLE_EQ(static_cast<double>(tier_bytes(s, "cluster") - 16 * (R - 1)), 2 * (2 * psi / g) * (R - 1) / R);
}

TEST(Schedule, ZeroppCrossNodeIsAboutAQuarterOfZero3) {
  auto topo = two_node_topology();
  ShardSpec z3 = ShardSpec::preset_for("zero3", topo);
  z3.weight_wire = z3.grad_wire = z3.step_grad_wire = DType::BF16;
  Schedule a(tiny_layout(), topo, z3, 1);
  Schedule b(tiny_layout(), topo, ShardSpec::preset_for("zeropp", topo), 1);
  double ratio = static_cast<double>(tier_bytes(b, "cluster")) / static_cast<double>(tier_bytes(a, "cluster"));
  EXPECT_NEAR(ratio, 0.25, 0.02);
}

TEST(Schedule, CrossNodeBytesOrderTopoZeroppZero3WithAccumulation) {
  // topo crosses nodes only once per optimizer step; zeropp and zero3 every micro-batch.
  std::uint64_t topo = tier_bytes(make("topo", 4), "cluster");
  std::uint64_t zpp = tier_bytes(make("zeropp", 4), "cluster");
  std::uint64_t z3 = tier_bytes(make("zero3", 4), "cluster");
  EXPECT_LT(topo, zpp);
  EXPECT_LT(zpp, z3);
}

TEST(Schedule, DdpAndZeroStagesMoveTheSameGradientBytes) {
  // ddp's hierarchical all-reduce = zero1's reduce-scatter + weight all-gather.
  EXPECT_EQ(total_bytes(make("ddp")) - scalar_bytes(make("ddp")),
            total_bytes(make("zero1")) - scalar_bytes(make("zero1")));
  EXPECT_EQ(total_bytes(make("zero1")), total_bytes(make("zero2")));
  EXPECT_TRUE(make("ddp").micro_batch_ops().empty());
}

TEST(Schedule, SlicesNestAndCoverEachUnitOnce) {
  auto topo = two_node_topology();
  Schedule s(tiny_layout(), topo, ShardSpec::preset_for("topo", topo), 1);
  const LevelSpec& L = s.levels();
  for (int u = 0; u < static_cast<int>(tiny_layout().units().size()); ++u) {
    std::set<std::size_t> os_offsets;
    for (int r = 0; r < 8; ++r) {
      Slice w = s.slice(u, r, L.weights), g = s.slice(u, r, L.grads), o = s.slice(u, r, L.optimizer);
      EXPECT_LE(w.offset, g.offset);
      EXPECT_LE(g.offset + g.count, w.offset + w.count);
      EXPECT_LE(g.offset, o.offset);
      EXPECT_LE(o.offset + o.count, g.offset + g.count);
      os_offsets.insert(o.offset);
    }
    EXPECT_EQ(os_offsets.size(), 8u);  // OS over all ranks: 8 distinct slices of equal size
    EXPECT_EQ(*os_offsets.rbegin() + s.slice(u, 0, L.optimizer).count, s.padded_numel(u));
  }
}

TEST(Schedule, MemoryFollowsTheSpecFormula) {
  auto topo = two_node_topology();
  Schedule s(tiny_layout(), topo, ShardSpec::preset_for("topo", topo), 1);
  StateMemory m = s.memory_per_rank();
  std::uint64_t n = s.total_padded();
  EXPECT_EQ(m.weights, wire_bytes(DType::I8, n / 2, 256));  // W over gpu: degree 2, int8 + scales
  EXPECT_EQ(m.grads, 4 * n / 4);                           // G over node: degree 4
  EXPECT_EQ(m.optimizer, 16 * n / 8);                      // OS over all 8: master, m, v, gradient
  EXPECT_EQ(m.secondary, 0u);
}

TEST(Schedule, QuantizedReductionsUseAllToAllAndChunksAreWholeBlocks) {
  Schedule s = make("zeropp");
  bool saw_a2a = false;
  for (auto& op : s.micro_batch_ops()) {
    if (op.purpose == Purpose::GradReduce) {
      EXPECT_EQ(op.kind, Collective::AllToAll);
      saw_a2a = true;
      EXPECT_EQ(op.elements_out % 256, 0u);
    }
  }
  EXPECT_TRUE(saw_a2a);
  // hpZ: the backward gathers never leave the node.
  for (auto& op : s.micro_batch_ops()) {
    if (op.purpose == Purpose::WeightGatherBackward) {
      EXPECT_LT(op.level, 2);
    }
  }
}

TEST(Schedule, RefusesNonPositiveAccumulation) {
  auto topo = two_node_topology();
  EXPECT_THROW(Schedule(tiny_layout(), topo, ShardSpec::preset_for("ddp", topo), 0), Error);
}

TEST(Schedule, JsonCarriesEachOpsIssuePointsSlotsAndTheProgramsParameters) {
  auto topo = two_node_topology(8);
  for (int prefetch : {0, 2}) {
    ShardSpec spec = ShardSpec::preset_for("zeropp", topo);
    spec.prefetch = prefetch;
    spec.reductions_in_flight = 3;
    const Schedule s(tiny_layout(), topo, spec, 1);
    const nlohmann::json j = s.to_json();
    EXPECT_EQ(j["program"]["prefetch"], prefetch);
    EXPECT_EQ(j["program"]["reductions_in_flight"], 3);
    EXPECT_EQ(j["program"]["peak_buffers"], s.peak_buffers(s.training_program()));
    ASSERT_EQ(j["program"]["events"].size(), s.units().events.size());
    ASSERT_EQ(j["micro_batch_ops"].size(), s.micro_batch_ops().size());
    std::set<std::string> algorithms;
    for (std::size_t i = 0; i < s.micro_batch_ops().size(); ++i) {
      const ScheduledOp& op = s.micro_batch_ops()[i];
      const nlohmann::json& o = j["micro_batch_ops"][i];
      EXPECT_EQ(o["event"], op.event);
      EXPECT_EQ(o["issue_event"], op.issue_event);
      EXPECT_EQ(o["complete_by"], op.complete_by);
      EXPECT_LE(op.issue_event, op.event);  // issued no later than the event it serves
      EXPECT_EQ(o["reads"], to_string(op.reads));
      EXPECT_EQ(o["writes"], to_string(op.writes));
      EXPECT_EQ(o["algorithm"], algorithm_name(op));
      const nlohmann::json& e = j["program"]["events"][static_cast<std::size_t>(op.event)];
      EXPECT_EQ(e["unit"], op.unit);
      EXPECT_EQ(e["kind"], op.kind == Collective::AllGather ? "acquire" : "grads_ready");
      algorithms.insert(o["algorithm"].get<std::string>());
    }
    EXPECT_EQ(algorithms, (std::set<std::string>{"ring", "all-to-all"}));
    // Step ops run in order after the micro-batches: no issue points.
    for (const nlohmann::json& o : j["step_ops"]) EXPECT_FALSE(o.contains("issue_event"));
  }
}

// ddp and zero1 (gradients replicated) reduce them in buckets during the step's last
// backward: units grouped in the order backward finishes them, each bucket issued at its
// last unit's GradsReady and done by the end of the micro-batch, with the step's bytes
// unchanged and fewer messages when buckets hold several units.
TEST(Schedule, ReplicatedGradientsReduceInBucketsDuringTheLastBackward) {
  auto topo = two_node_topology(8);
  for (const char* name : {"ddp", "zero1"}) {
    ShardSpec off_spec = ShardSpec::preset_for(name, topo);
    off_spec.bucket_bytes = 0;
    const Schedule off(tiny_layout(), topo, off_spec, 2);
    EXPECT_TRUE(off.buckets().empty()) << name;
    EXPECT_TRUE(off.bucket_ops().empty()) << name;
    const std::vector<model::UnitEvent>& events = off.units().events;
    std::vector<int> finished;  // units in GradsReady order
    for (const model::UnitEvent& e : events)
      if (e.kind == model::UnitEvent::GradsReady) finished.push_back(e.unit);
    ASSERT_EQ(static_cast<int>(finished.size()), off.num_units());

    for (std::uint64_t cap : {std::uint64_t{1}, std::uint64_t{250'000}, std::uint64_t{1} << 30}) {
      const std::string what = std::string(name) + " buckets of " + std::to_string(cap) + " B";
      ShardSpec spec = off_spec;
      spec.bucket_bytes = cap;
      const Schedule s(tiny_layout(), topo, spec, 2);
      std::vector<int> walked;
      for (const std::vector<int>& b : s.buckets()) {
        std::uint64_t bytes = 0;
        for (int u : b) bytes += 4 * s.padded_numel(u), walked.push_back(u);
        EXPECT_TRUE(b.size() == 1 || bytes <= cap) << what;
      }
      EXPECT_EQ(walked, finished) << what;
      const int buckets = static_cast<int>(s.buckets().size());
      if (cap == 1) {
        EXPECT_EQ(buckets, s.num_units()) << what;  // every unit is larger than a bucket
      } else if (cap == 250'000) {
        EXPECT_GT(buckets, 1) << what;
        EXPECT_LT(buckets, s.num_units()) << what;
      } else {
        EXPECT_EQ(buckets, 1) << what;  // the whole model
      }

      // The step phase keeps no gradient reduction; the last micro-batch's program carries them.
      for (const ScheduledOp& op : s.step_ops())
        EXPECT_TRUE(op.purpose != Purpose::StepGradReduce && op.purpose != Purpose::ReplicaReduce &&
                    op.purpose != Purpose::ReplicaGather)
            << what << ": " << to_string(op.purpose);
      for (const EventStep& step : s.training_program().steps) EXPECT_TRUE(step.bucket_issue.empty()) << what;
      const int num_events = static_cast<int>(events.size());
      ASSERT_FALSE(s.bucket_ops().empty()) << what;
      for (const ScheduledOp& op : s.bucket_ops()) {
        ASSERT_GE(op.bucket, 0);
        const int last_unit = s.buckets()[op.bucket].back();
        EXPECT_EQ(events[op.issue_event].kind, model::UnitEvent::GradsReady) << what;
        EXPECT_EQ(events[op.issue_event].unit, last_unit) << what;
        EXPECT_EQ(op.complete_by, num_events) << what;
        const std::vector<int>& issued = s.last_micro_batch_program().steps[op.issue_event].bucket_issue;
        EXPECT_NE(std::find(issued.begin(), issued.end(), op.bucket), issued.end()) << what;
      }
      EXPECT_EQ(s.last_micro_batch_program().steps[num_events].bucket_complete.size(), s.buckets().size()) << what;

      // The same bytes a step on every tier; one op a level per bucket instead of per unit.
      const std::vector<TierTraffic> a = off.traffic_per_step(), b = s.traffic_per_step();
      for (std::size_t t = 0; t < a.size(); ++t) {
        EXPECT_EQ(a[t].bytes_sent, b[t].bytes_sent) << what << " tier " << a[t].tier;
        EXPECT_EQ(a[t].bytes_received, b[t].bytes_received) << what << " tier " << a[t].tier;
        if (cap == 1) {
          EXPECT_EQ(a[t].messages, b[t].messages) << what << " tier " << a[t].tier;
        } else {
          EXPECT_LT(b[t].messages, a[t].messages) << what << " tier " << a[t].tier;
        }
      }
      // --print-schedule shows them, with issue points in the JSON.
      const nlohmann::json j = s.to_json();
      EXPECT_EQ(j["program"]["bucket_bytes"], cap) << what;
      EXPECT_EQ(j["program"]["buckets"].size(), s.buckets().size()) << what;
      ASSERT_EQ(j["bucket_ops"].size(), s.bucket_ops().size()) << what;
      EXPECT_EQ(j["bucket_ops"][0]["issue_event"], s.bucket_ops()[0].issue_event) << what;
      EXPECT_NE(s.table().find("bucket 0"), std::string::npos) << what;
    }
  }
  // Gradients sharded over every level: the step only copies them, in the step phase.
  for (const char* name : {"zero2", "zero3"}) EXPECT_TRUE(make(name).buckets().empty()) << name;
}

// The first bucket is capped apart (PyTorch DDP's small first bucket): with a bucket that
// would hold the whole gradient, the units backward finishes first go alone into bucket 0,
// issued at their GradsReady while the rest of backward runs; bytes a step unchanged.
TEST(Schedule, TheFirstBucketIsSmallSoItsReductionOverlapsBackward) {
  auto topo = two_node_topology(8);
  for (const char* name : {"ddp", "zero1"}) {
    ShardSpec spec = ShardSpec::preset_for(name, topo);
    spec.bucket_bytes = std::uint64_t{1} << 30;
    spec.first_bucket_bytes = spec.bucket_bytes;
    const Schedule one(tiny_layout(), topo, spec, 2);
    ASSERT_EQ(one.buckets().size(), 1u) << name;
    const std::vector<int>& order = one.buckets()[0];  // every unit, in GradsReady order
    ASSERT_GT(order.size(), 2u);
    spec.first_bucket_bytes = 4 * one.padded_numel(order[0]) + 4 * one.padded_numel(order[1]);
    const Schedule s(tiny_layout(), topo, spec, 2);
    ASSERT_EQ(s.buckets().size(), 2u) << name;
    EXPECT_EQ(s.buckets()[0], (std::vector<int>{order[0], order[1]})) << name;
    EXPECT_EQ(s.buckets()[1], std::vector<int>(order.begin() + 2, order.end())) << name;
    EXPECT_LT(s.bucket_ops().front().issue_event, s.bucket_ops().back().issue_event) << name;
    const std::vector<TierTraffic> a = one.traffic_per_step(), b = s.traffic_per_step();
    for (std::size_t t = 0; t < a.size(); ++t) EXPECT_EQ(a[t].bytes_sent, b[t].bytes_sent) << name << " tier " << t;
    EXPECT_EQ(s.to_json()["program"]["first_bucket_bytes"], spec.first_bucket_bytes) << name;
    // Never above bucket_bytes.
    spec.bucket_bytes = 1;
    EXPECT_EQ(Schedule(tiny_layout(), topo, spec, 2).buckets().size(), order.size()) << name;
  }
  EXPECT_EQ(ShardSpec{}.first_bucket_bytes, std::uint64_t{1} << 20);  // PyTorch DDP's
}

// Sharded gradients the step still reduces (hsdp across replicas; G over the node with OS
// over the cluster) are whole once the last micro-batch has reduced them: each unit's step
// reduction is a bucket of its own, issued at the event its micro-batch reduction is issued
// (after it: the runtime's FIFO) and done by the micro-batch's end; the step phase keeps none.
TEST(Schedule, ShardedGradientsStillReducedByTheStepReduceUnitByUnitInTheLastBackward) {
  auto topo = two_node_topology(8);
  ShardSpec node_grads = ShardSpec::preset_for("zero3", topo);
  node_grads.apply_shard_string("W=node,G=node,OS=cluster");
  static_cast<void>(resolve(node_grads, topo));  // a valid spec
  for (const auto& [what, spec, purposes] :
       {std::tuple{"hsdp", ShardSpec::preset_for("hsdp", topo),
                   std::vector<Purpose>{Purpose::ReplicaReduce, Purpose::ReplicaGather}},
        std::tuple{"G=node,OS=cluster", node_grads, std::vector<Purpose>{Purpose::StepGradReduce}}}) {
    for (int accum : {1, 3}) {
      const Schedule s(tiny_layout(), topo, spec, accum);
      const std::vector<model::UnitEvent>& events = s.units().events;
      const int num_events = static_cast<int>(events.size());
      std::vector<int> finished;
      for (const model::UnitEvent& e : events)
        if (e.kind == model::UnitEvent::GradsReady) finished.push_back(e.unit);
      ASSERT_EQ(static_cast<int>(s.buckets().size()), s.num_units()) << what;
      for (int b = 0; b < s.num_units(); ++b) EXPECT_EQ(s.buckets()[b], std::vector<int>{finished[b]}) << what;
      for (const ScheduledOp& op : s.step_ops())
        EXPECT_TRUE(op.purpose != Purpose::StepGradReduce && op.purpose != Purpose::ReplicaReduce &&
                    op.purpose != Purpose::ReplicaGather)
            << what << ": " << to_string(op.purpose);
      std::vector<Purpose> seen;
      for (const ScheduledOp& op : s.bucket_ops()) {
        ASSERT_GE(op.bucket, 0) << what;
        EXPECT_EQ(op.unit, s.buckets()[op.bucket].front()) << what;
        EXPECT_EQ(events[op.event].kind, model::UnitEvent::GradsReady) << what;
        EXPECT_EQ(events[op.event].unit, op.unit) << what;
        // Issued where the unit's micro-batch reduction is, and after it.
        const std::vector<int>& issued = s.last_micro_batch_program().steps[op.issue_event].issue;
        EXPECT_NE(std::find(issued.begin(), issued.end(), op.event), issued.end()) << what;
        const std::vector<int>& buckets = s.last_micro_batch_program().steps[op.issue_event].bucket_issue;
        EXPECT_NE(std::find(buckets.begin(), buckets.end(), op.bucket), buckets.end()) << what;
        EXPECT_EQ(op.complete_by, num_events) << what;
        if (std::find(seen.begin(), seen.end(), op.purpose) == seen.end()) seen.push_back(op.purpose);
      }
      EXPECT_EQ(seen, purposes) << what;
      for (const EventStep& step : s.training_program().steps) EXPECT_TRUE(step.bucket_issue.empty()) << what;
      EXPECT_NE(s.table().find("right behind its gradient reduction"), std::string::npos) << what;
    }
  }
}

TEST(Schedule, TensorParallelCollectivesAreOpsOnTheTpTierThatPrintScheduleShows) {
  // TP 2 in the GPU tier of the test topology: sharding over the 4 ranks of each TP index.
  const strata::topo::Topology physical = two_node_topology(8);
  const strata::parallel::ParallelDims dims = strata::parallel::ParallelDims::model_parallel(physical, 2, 0, 1, 2);
  const strata::model::ModelConfig config = strata::model::ModelConfig::preset("tiny");
  const int B = 4, T = 32, accum = 2;
  const strata::topo::Topology topology = dims.data_parallel_topology(physical);
  const strata::shard::Schedule with(strata::model::ParamLayout(config, {2, 0}), topology,
                                     strata::shard::ShardSpec::preset_for("zero3", topology), accum,
                                     strata::shard::tensor_parallel_plan(dims, config, B, T, false));
  const strata::shard::Schedule without(strata::model::ParamLayout(config, {2, 0}), topology,
                                        strata::shard::ShardSpec::preset_for("zero3", topology), accum);
  // Forward: the embedding, 2 a block, the loss's gather; backward: the head, 2 a block.
  const auto& ops = with.tensor_parallel_ops();
  ASSERT_EQ(ops.size(), 1u + 2 * 2 + 1 + 1 + 2 * 2);
  EXPECT_EQ(with.eval_tensor_parallel_ops(), 6);
  const std::size_t activation = static_cast<std::size_t>(B) * T * config.n_embd;
  for (const auto& op : ops) {
    EXPECT_EQ(op.level, 0);
    EXPECT_EQ(op.group_size, 2);
    EXPECT_EQ(op.purpose, strata::shard::Purpose::TensorParallel);
    if (op.kind == strata::Collective::AllReduce) {
      EXPECT_EQ(op.elements_in, activation);
      EXPECT_EQ(op.bytes_sent, 2 * (activation / 2) * 4);  // reduce-scatter and all-gather of half each
    } else {
      EXPECT_EQ(op.elements_in, 3u * B * T);  // (max, sum, target logit) a row
      EXPECT_EQ(op.bytes_sent, 3u * B * T * 4);
    }
  }
  // Per step: every micro-batch's TP ops and the two TP scalar sums, on the GPU tier only.
  std::uint64_t tp_bytes = 8 + 16;
  for (const auto& op : ops) tp_bytes += accum * op.bytes_sent;
  EXPECT_EQ(with.traffic_per_step()[0].bytes_sent, without.traffic_per_step()[0].bytes_sent + tp_bytes);
  for (int t : {1, 2})
    EXPECT_EQ(with.traffic_per_step()[t].bytes_sent, without.traffic_per_step()[t].bytes_sent);
  EXPECT_NE(with.table().find("tensor parallel"), std::string::npos);
  EXPECT_EQ(with.to_json()["tensor_parallel_ops"].size(), ops.size());
  EXPECT_EQ(without.to_json()["tensor_parallel_ops"].size(), 0u);
  // The header counts the run's ranks and how they split, not only the sharding's.
  EXPECT_EQ(with.table().rfind("schedule: strategy zero3 on 8 ranks: tp 2 x 4 data-parallel of '", 0), 0u)
      << with.table().substr(0, 120);
  EXPECT_EQ(without.table().rfind("schedule: strategy zero3 on 4 ranks of '", 0), 0u);
  EXPECT_EQ(with.to_json()["tensor_parallel"], 2);
  EXPECT_EQ(with.to_json()["world_size"], 4);
}

TEST(Schedule, TensorParallelOpsTakeTheirCallsWire) {
  // A bf16 system's activations (the planner's): half the bytes on a bf16 wire; the loss's
  // statistics stay fp32.
  const strata::topo::Topology physical = two_node_topology(8);
  const strata::parallel::ParallelDims dims = strata::parallel::ParallelDims::model_parallel(physical, 2, 0, 1, 2);
  const strata::topo::Topology topology = dims.data_parallel_topology(physical);
  const strata::model::ModelConfig config = strata::model::ModelConfig::preset("tiny");
  const int B = 2, T = 16;
  strata::model::TensorParallelWalk walk{config.n_layer, config.n_embd, B, T, false};
  walk.activations = strata::DType::BF16;
  const strata::shard::Schedule s(strata::model::ParamLayout(config, {2, 0}), topology,
                                  strata::shard::ShardSpec::preset_for("zero3", topology), 1,
                                  {2, 0, strata::model::tensor_parallel_calls(walk)});
  const std::size_t activation = static_cast<std::size_t>(B) * T * config.n_embd;
  for (const auto& op : s.tensor_parallel_ops()) {
    if (op.kind == strata::Collective::AllReduce) {
      EXPECT_EQ(op.wire, strata::DType::BF16);
      EXPECT_EQ(op.bytes_sent, 2 * (activation / 2) * 2);
    } else {
      EXPECT_EQ(op.wire, strata::DType::F32);
      EXPECT_EQ(op.bytes_sent, 3u * B * T * 4);
    }
  }
}

// The halves of a pipeline stage's micro-batch (Schedule::halves_program): every chain issued
// before the cut completes before it, for every preset and prefetch depth, and with the
// buckets of the step's last micro-batch; the uncut program prefetches across the cut
// wherever weights are gathered (what the cut changes). Weights kept from forward to
// backward cannot be cut: refused naming the field.
TEST(Schedule, TheHalvesProgramRunsNoChainAcrossTheCut) {
  auto topo = two_node_topology(8);
  for (const std::string& preset : ShardSpec::preset_names())
    for (int prefetch : {0, 1, 2}) {
      ShardSpec spec = ShardSpec::preset_for(preset, topo);
      spec.prefetch = prefetch;
      const Schedule s(tiny_layout(), topo, spec, 2);
      const int cut = s.forward_events();
      ASSERT_GT(cut, 0);
      bool uncut_crosses = false;
      for (const MicroBatchProgram* p : {&s.halves_program(false), &s.halves_program(true), &s.training_program()}) {
        std::vector<int> issued_at(p->steps.size(), -1);
        for (int e = 0; e < static_cast<int>(p->steps.size()); ++e)
          for (int c : p->steps[e].issue) issued_at[c] = e;
        for (int e = cut; e < static_cast<int>(p->steps.size()); ++e)
          for (int c : p->steps[e].complete) {
            ASSERT_GE(issued_at[c], 0) << preset;
            if (p == &s.training_program()) uncut_crosses |= issued_at[c] < cut;
            else EXPECT_GE(issued_at[c], cut) << preset << " prefetch " << prefetch << ": chain " << c;
          }
        // Nothing gathered in one half is given back in the other.
        for (int e = cut; e < static_cast<int>(p->steps.size()) && p != &s.training_program(); ++e)
          for (int a : p->steps[e].free) EXPECT_GE(a, cut) << preset;
      }
      EXPECT_EQ(uncut_crosses, s.levels().weights > 0 && prefetch > 0) << preset << " prefetch " << prefetch;
      EXPECT_EQ(s.halves_program(true).steps.back().bucket_complete.size(), s.buckets().size()) << preset;
    }
  ShardSpec kept = ShardSpec::preset_for("zero3", topo);
  kept.free_after_forward = false;
  try {
    static_cast<void>(Schedule(tiny_layout(), topo, kept, 2).halves_program(false));
    ADD_FAILURE() << "kept weights cut into halves";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard.free_after_forward"), std::string::npos) << e.what();
  }
}
