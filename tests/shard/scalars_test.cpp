// The step's scalar sums (shard::sum_scalars, which OpExecutor::scalar_sum and the TP group's
// sum run): the views come from the scheduled op's wire, and an op that says otherwise is
// refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "base/error.hpp"
#include "model/layout.hpp"
#include "shard/executor.hpp"
#include "test_topologies.hpp"

using namespace strata;
using namespace strata::shard;

namespace {

// The loss's sum over the second tier of an 8-rank topology (2 members).
ScheduledOp loss_op() {
  const topo::Topology topology = two_node_topology(8);
  const Schedule s(model::ParamLayout(model::ModelConfig::preset("tiny")), topology,
                   ShardSpec::preset_for("zero3", topology), 1);
  const auto& step = s.step_ops();
  const auto op = std::find_if(step.begin(), step.end(),
                               [](const ScheduledOp& o) { return o.purpose == Purpose::LossAllReduce && o.level == 1; });
  EXPECT_NE(op, step.end());
  return *op;
}

}  // namespace

TEST(ScalarSum, GathersInTheOpsWireAndAddsTheMembersInOrder) {
  const ScheduledOp op = loss_op();
  ASSERT_EQ(op.group_size, 2);
  std::vector<double> values{0.25, 1.0};
  std::vector<DType> wires;
  sum_scalars(op, values, [&](comm::CBuf mine, comm::Buf all) {
    wires = {mine.dtype, all.dtype};
    ASSERT_EQ(mine.count, 2u);
    ASSERT_EQ(all.count, 4u);
    // Member m holds (m + 0.25, 1): this rank is member 0.
    auto* out = static_cast<double*>(all.data);
    for (int m = 0; m < 2; ++m) out[2 * m] = m + 0.25, out[2 * m + 1] = 1.0;
  });
  EXPECT_EQ(wires, (std::vector<DType>{DType::F64, DType::F64}));
  EXPECT_EQ(values, (std::vector<double>{1.5, 2.0}));  // 0.25 + 1.25; two ones
}

TEST(ScalarSum, RefusesAnOpOfAnotherWireOrCount) {
  ScheduledOp op = loss_op();
  std::vector<double> values{1.0, 0.0};
  bool gathered = false;
  const auto gather = [&](comm::CBuf, comm::Buf) { gathered = true; };
  op.wire = DType::F32;
  EXPECT_THROW(
      {
        try {
          sum_scalars(op, values, gather);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("travels in fp32"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  op.wire = DType::F64;
  values.push_back(0.0);  // three values against the op's two
  EXPECT_THROW(sum_scalars(op, values, gather), Error);
  EXPECT_FALSE(gathered);
}
