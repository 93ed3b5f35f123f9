// The one composition of per-level collectives (comm/compose.hpp): its order and level
// sizes, and run_chain over levels that record what they are asked to run.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.hpp"
#include "comm/composition/compose.hpp"

namespace strata::comm {
namespace {

// A group of `d` members that all hold what this one holds: a gather repeats the shard, a
// reduction sums d equal chunks, an all-to-all hands back d copies of chunk 0. Records each
// call as "op@name n->m /divisor".
class Mirror final : public Collectives {
 public:
  Mirror(std::string name, int d, std::vector<std::string>& log) : name_(std::move(name)), d_(d), log_(log) {}
  const std::string& name() const override { return name_; }
  int size() const override { return d_; }
  int index() const override { return 0; }
  int world_rank_of(int index) const override { return index; }
  Work all_gather_async(CBuf, Buf) override { return {}; }
  Work reduce_scatter_async(CBuf, Buf, ReduceOp) override { return {}; }
  Work all_reduce_async(Buf, ReduceOp) override { return {}; }
  Work all_to_all_async(CBuf, Buf) override { return {}; }
  Work broadcast_async(Buf, int) override { return {}; }
  Work barrier_async() override { return {}; }

  void all_gather_inline(CBuf shard, Buf full) override {
    record("ag", shard.count, full.count, 1);
    for (std::size_t i = 0; i < full.count; ++i) out(full)[i] = in(shard)[i % shard.count];
  }
  void reduce_scatter_inline(CBuf full, Buf shard, float divisor) override {
    record("rs", full.count, shard.count, divisor);
    for (std::size_t i = 0; i < shard.count; ++i) out(shard)[i] = float(d_) * in(full)[i] / divisor;
  }
  void all_to_all_inline(CBuf send, Buf recv) override {
    record("a2a", send.count, recv.count, 1);
    const std::size_t c = send.count / std::size_t(d_);
    for (std::size_t i = 0; i < recv.count; ++i) out(recv)[i] = in(send)[i % c];
  }

 private:
  static const float* in(const CBuf& b) { return static_cast<const float*>(b.data); }
  static float* out(const Buf& b) { return static_cast<float*>(b.data); }
  void record(const char* op, std::size_t n, std::size_t m, float divisor) {
    log_.push_back(std::string(op) + "@" + name_ + " " + std::to_string(n) + "->" + std::to_string(m) + " /" +
                   std::to_string(int(divisor)));
  }
  std::string name_;
  int d_;
  std::vector<std::string>& log_;
};

TEST(Compose, ReductionsRunInnerLevelFirstAndGathersOuterFirstWithTheLevelsSizes) {
  const std::vector<int> sizes{2, 4, 3};
  const auto rs = reduce_scatter_steps(sizes, 48, 0, 3, Collective::ReduceScatter, DType::F32, 0);
  ASSERT_EQ(rs.size(), 3u);
  for (int l = 0; l < 3; ++l) EXPECT_EQ(rs[l].level, l);
  EXPECT_EQ(rs[0].elements_in, 48u);
  EXPECT_EQ(rs[1].elements_in, 24u);
  EXPECT_EQ(rs[2].elements_in, 6u);
  EXPECT_EQ(rs[2].elements_out, 2u);
  const auto ag = all_gather_steps(sizes, 48, 3, 1, DType::BF16, 0);  // back to sharded over level 0
  ASSERT_EQ(ag.size(), 2u);
  EXPECT_EQ(ag[0].level, 2);
  EXPECT_EQ(ag[0].elements_in, 2u);
  EXPECT_EQ(ag[0].elements_out, 6u);
  EXPECT_EQ(ag[1].level, 1);
  EXPECT_EQ(ag[1].elements_out, 24u);
  EXPECT_EQ(ag[1].wire, DType::BF16);
  EXPECT_TRUE(reduce_scatter_steps(sizes, 48, 2, 2, Collective::ReduceScatter, DType::F32, 0).empty());
  EXPECT_EQ(level_elements(sizes, 48, 3), 2u);
}

TEST(Compose, AChainRunsItsStepsInOrderAndDividesOnlyAtTheLast) {
  std::vector<std::string> log;
  Mirror inner("inner", 2, log), outer("outer", 4, log);
  std::vector<Collectives*> levels{&inner, &outer};
  const std::vector<int> sizes{2, 4};
  Scratch scratch;
  HostChainScratch between(scratch);
  std::vector<float> x(16, 1.0f), shard(2);
  // Average over all 8: 2 x 4 equal contributions summed, divided by 8 once at the end.
  Buf out = f32(shard.data(), shard.size());
  run_chain(levels, reduce_scatter_steps(sizes, 16, 0, 2, Collective::ReduceScatter, DType::F32, 0), f32(x.data(), 16),
            &out, 8.0f, between);
  EXPECT_EQ(log, (std::vector<std::string>{"rs@inner 16->8 /1", "rs@outer 8->2 /8"}));
  EXPECT_EQ(shard, (std::vector<float>{1.0f, 1.0f}));
  // The qgZ reduction: an all-to-all, then the received chunks summed in member order.
  log.clear();
  const CBuf got = run_chain(levels, reduce_scatter_steps(sizes, 16, 0, 2, Collective::AllToAll, DType::F32, 0),
                             f32(x.data(), 16), nullptr, 1.0f, between);
  EXPECT_EQ(log, (std::vector<std::string>{"a2a@inner 16->16 /1", "a2a@outer 8->8 /1"}));
  ASSERT_EQ(got.count, 2u);
  EXPECT_EQ(static_cast<const float*>(got.data)[1], 8.0f);
  // No steps: the input itself.
  EXPECT_EQ(run_chain(levels, {}, f32(x.data(), 16), nullptr, 1.0f, between).data, x.data());
}

TEST(Compose, AStepInAnotherWireNeedsACodec) {
  std::vector<std::string> log;
  Mirror level("level", 2, log);
  std::vector<Collectives*> levels{&level};
  Scratch scratch;
  HostChainScratch between(scratch);
  std::vector<float> x(4, 1.0f);
  const std::vector<int> sizes{2};
  EXPECT_THROW(run_chain(levels, all_gather_steps(sizes, 4, 1, 0, DType::I8, 2), f32(x.data(), 2), nullptr, 1.0f,
                         between),
               Error);
  EXPECT_TRUE(log.empty());
}

}  // namespace
}  // namespace strata::comm
