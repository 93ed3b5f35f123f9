#include <gtest/gtest.h>

#include "base/error.hpp"
#include "support.hpp"
#include "train/faults.hpp"

using namespace strata;
using namespace strata::train;

TEST(FaultPlan, FiresOnItsStepsAndRanksOnly) {
  FaultPlan p = FaultPlan::parse("nan_grad@3-5/1;kill_in_save@10");
  EXPECT_FALSE(p.fires(FaultAction::NanGrad, 2, 1));
  EXPECT_TRUE(p.fires(FaultAction::NanGrad, 3, 1));
  EXPECT_TRUE(p.fires(FaultAction::NanGrad, 5, 1));
  EXPECT_FALSE(p.fires(FaultAction::NanGrad, 6, 1));
  EXPECT_FALSE(p.fires(FaultAction::NanGrad, 4, 0));
  EXPECT_TRUE(p.fires(FaultAction::KillInSave, 10, 7));  // no rank: every rank
  EXPECT_FALSE(p.fires(FaultAction::Kill, 10, 7));
  EXPECT_TRUE(FaultPlan::parse("").empty());
}

TEST(FaultPlan, BadEntriesAreRefusedNamingTheVariableAndTheEntry) {
  auto error = [](const char* text) { return test::error_of([&] { FaultPlan::parse(text); }); };
  EXPECT_EQ(error("explode@3"),
            "STRATA_FAULT: 'explode@3': unknown action 'explode' (kill, term, int, stop, nan_grad, kill_in_save)");
  EXPECT_EQ(error("kill"), "STRATA_FAULT: 'kill': expected ACTION@STEP[-LAST][/RANK]");
  EXPECT_EQ(error("kill@x"), "STRATA_FAULT: 'kill@x': step 'x' is not a non-negative integer");
  EXPECT_EQ(error("kill@5-3"), "STRATA_FAULT: 'kill@5-3': the step range ends before it begins");
  EXPECT_EQ(error("kill@5/-1"), "STRATA_FAULT: 'kill@5/-1': rank '-1' is not a non-negative integer");
}
