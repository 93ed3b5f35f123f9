// The pipeline's program as data: 1F1B per stage, the stages' programs matching message for
// message (a simulation of blocking sends finishes for every shape), no more micro-batches in
// flight than a stage keeps activations for, the split refused naming --pp, and the ranks of
// one replica's stages reading the same data.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"
#include "parallel/dims.hpp"
#include "parallel/pipeline.hpp"
#include "shard/test_topologies.hpp"

using namespace strata;
using parallel::PipelineAction;

namespace {

// Runs every stage's program with rendezvous messages (a send completes only together with
// the matching receive on the neighbour); returns the actions left undone per stage (all
// zero when it finishes, else it deadlocked) and checks each message pairs with its match.
std::vector<std::size_t> simulate(int stages, int m) {
  std::vector<std::vector<PipelineAction>> programs;
  for (int s = 0; s < stages; ++s) programs.push_back(parallel::one_f_one_b(stages, s, m));
  std::vector<std::size_t> at(stages, 0);
  auto current = [&](int s) -> const PipelineAction* { return at[s] < programs[s].size() ? &programs[s][at[s]] : nullptr; };
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < stages; ++s) {
      const PipelineAction* a = current(s);
      if (!a) continue;
      if (a->kind == PipelineAction::Forward || a->kind == PipelineAction::Backward) {
        ++at[s], moved = true;
        continue;
      }
      // A message: both ends must stand at the matching action.
      const bool up = a->kind == PipelineAction::SendActivation || a->kind == PipelineAction::ReceiveGradient;
      const int peer = up ? s + 1 : s - 1;
      const PipelineAction* b = peer >= 0 && peer < stages ? current(peer) : nullptr;
      if (!b || b->micro_batch != a->micro_batch) continue;
      const std::map<PipelineAction::Kind, PipelineAction::Kind> match{
          {PipelineAction::SendActivation, PipelineAction::ReceiveActivation},
          {PipelineAction::ReceiveActivation, PipelineAction::SendActivation},
          {PipelineAction::SendGradient, PipelineAction::ReceiveGradient},
          {PipelineAction::ReceiveGradient, PipelineAction::SendGradient}};
      if (b->kind != match.at(a->kind)) continue;
      ++at[s], ++at[peer], moved = true;
    }
  }
  std::vector<std::size_t> left;
  for (int s = 0; s < stages; ++s) left.push_back(programs[s].size() - at[s]);
  return left;
}

}  // namespace

TEST(Pipeline, EveryStagesProgramRunsEachMicroBatchForwardThenBackwardWithinItsActivationSlots) {
  for (int P : {2, 3, 4, 8})
    for (int m : {1, 2, 3, 4, 7, 8, 16})
      for (int s = 0; s < P; ++s) {
        const std::vector<PipelineAction> program = parallel::one_f_one_b(P, s, m);
        std::vector<int> forwards(m, 0), backwards(m, 0);
        int in_flight = 0, most = 0;
        for (const PipelineAction& a : program) {
          if (a.kind == PipelineAction::Forward) ++forwards[a.micro_batch], most = std::max(most, ++in_flight);
          if (a.kind == PipelineAction::Backward) {
            ASSERT_EQ(forwards[a.micro_batch], 1) << "P " << P << " m " << m << " stage " << s;
            ++backwards[a.micro_batch], --in_flight;
          }
          if (a.kind == PipelineAction::ReceiveActivation || a.kind == PipelineAction::SendGradient) {
            ASSERT_GT(s, 0);
          }
          if (a.kind == PipelineAction::SendActivation || a.kind == PipelineAction::ReceiveGradient) {
            ASSERT_LT(s, P - 1);
          }
        }
        EXPECT_EQ(forwards, std::vector<int>(m, 1));
        EXPECT_EQ(backwards, std::vector<int>(m, 1));
        EXPECT_EQ(most, parallel::micro_batches_in_flight(P, s, m)) << "P " << P << " m " << m << " stage " << s;
      }
}

TEST(Pipeline, TheStagesProgramsMatchMessageForMessageUnderBlockingSends) {
  for (int P : {2, 3, 4, 8})
    for (int m : {1, 2, 3, 4, 5, 8, 16}) EXPECT_EQ(simulate(P, m), std::vector<std::size_t>(P, 0)) << "P " << P << " m " << m;
}

TEST(Pipeline, TheFirstStageWarmsUpThenAlternates) {
  using K = PipelineAction;
  const std::vector<PipelineAction> first = parallel::one_f_one_b(2, 0, 3);
  const std::vector<PipelineAction> want{{K::Forward, 0}, {K::SendActivation, 0}, {K::Forward, 1},
                                         {K::ReceiveGradient, 0}, {K::SendActivation, 1}, {K::Backward, 0},
                                         {K::Forward, 2}, {K::ReceiveGradient, 1}, {K::SendActivation, 2},
                                         {K::Backward, 1}, {K::ReceiveGradient, 2}, {K::Backward, 2}};
  EXPECT_EQ(first, want);
}

TEST(Pipeline, StagesSplitTheBlocksEquallyAndAnUnevenSplitIsRefusedNamingTheFlag) {
  const parallel::StageSplit mid = parallel::stage_split(12, 4, 2);
  EXPECT_EQ(std::make_pair(mid.first_layer, mid.layers), std::make_pair(6, 3));
  EXPECT_FALSE(mid.first || mid.last);
  EXPECT_TRUE(parallel::stage_split(12, 4, 0).first);
  EXPECT_TRUE(parallel::stage_split(12, 4, 3).last);
  try {
    parallel::stage_split(12, 5, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--pp 5"), std::string::npos) << e.what();
  }
}

// --pp-layers: each stage's own block count; a list of another length or sum, or a count that
// is not a positive integer, is refused naming the flag and what is wrong.
TEST(Pipeline, AnExplicitSplitGivesEachStageItsBlocksAndABadOneIsRefusedNamingPpLayers) {
  const std::vector<int> layers = parallel::parse_stage_layers("--pp-layers", "1,3,2");
  EXPECT_EQ(layers, (std::vector<int>{1, 3, 2}));
  const parallel::StageSplit mid = parallel::stage_split(6, 3, 1, layers);
  EXPECT_EQ(std::make_pair(mid.first_layer, mid.layers), std::make_pair(1, 3));
  EXPECT_EQ(parallel::stage_split(6, 3, 2, layers).first_layer, 4);
  EXPECT_TRUE(parallel::stage_split(6, 3, 2, layers).last);
  auto refusal = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string count = refusal([&] { parallel::stage_split(6, 2, 0, layers); });
  EXPECT_NE(count.find("--pp-layers 1,3,2: 3 block counts for --pp 2"), std::string::npos) << count;
  const std::string sum = refusal([&] { parallel::stage_split(8, 3, 0, layers); });
  EXPECT_NE(sum.find("--pp-layers 1,3,2: 6 blocks in all, but the model has 8"), std::string::npos) << sum;
  const std::string empty_stage = refusal([] { parallel::stage_split(4, 2, 0, {0, 4}); });
  EXPECT_NE(empty_stage.find("--pp-layers 0,4: stage 0 has no blocks"), std::string::npos) << empty_stage;
  for (const char* bad : {"1,x", "1,,3", "2,-1", "3,"}) {
    const std::string parse = refusal([&] { parallel::parse_stage_layers("--pp-layers", bad); });
    EXPECT_NE(parse.find(fmt::format("--pp-layers '{}'", bad)), std::string::npos) << parse;
  }
}

TEST(Pipeline, StagesAreConsecutiveDomainsOfTheOuterTierAndOneReplicasStagesReadTheSameData) {
  const topo::Topology t = two_node_topology(8);  // 2 x 2 x 2
  const parallel::ParallelDims d = parallel::ParallelDims::model_parallel(t, 1, 0, 2, t.outermost());
  EXPECT_EQ(d.data_parallel_size(), 4);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(parallel::pipeline_stage(d, t, r), r / 4);
    EXPECT_EQ(parallel::pipeline_peer(d, t, r, 1 - r / 4), r < 4 ? r + 4 : r - 4);
    EXPECT_EQ(d.data_parallel_rank(r), r % 4);
  }
}
