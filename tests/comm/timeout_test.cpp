// The collective timeout's setting and the message a timed-out wait prints.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/error.hpp"
#include "comm/runtime/wait.hpp"

namespace strata::comm {
namespace {

TEST(CollectiveTimeout, DefaultsToTenMinutesAndRefusesNonPositiveValues) {
  EXPECT_EQ(collective_timeout(), 600.0);
  set_collective_timeout(2.5);
  EXPECT_EQ(collective_timeout(), 2.5);
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    try {
      set_collective_timeout(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("collective timeout"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(collective_timeout(), 2.5);  // a refused value changes nothing
  set_collective_timeout(kDefaultCollectiveTimeout);
}

TEST(CollectiveTimeout, MessageNamesRankCollectiveGroupPeersAndTime) {
  TimedOutWait w{5, "shard:step_reduce", "across-node#1.0", {"rank 3 (receive, tier node)"}, 10.04, 10, {3}};
  EXPECT_EQ(timeout_message(w),
            "strata: rank 5: collective timeout after 10.0 s in shard:step_reduce on group "
            "'across-node#1.0', waiting for rank 3 (receive, tier node). A rank died or stalls; if the job "
            "is only slow, raise train.collective_timeout (now 10 s). Aborting the job.");
  w.peers.push_back("rank 7 (receive and send, tier gpu)");
  w.timeout_s = 0.5;
  const std::string both = "waiting for rank 3 (receive, tier node) and rank 7 (receive and send, tier gpu).";
  EXPECT_NE(timeout_message(w).find(both), std::string::npos);
  EXPECT_NE(timeout_message(w).find("(now 0.5 s)"), std::string::npos);
}

TEST(CollectiveTimeout, RankRangesAreSortedRuns) {
  EXPECT_EQ(rank_ranges({}), "");
  EXPECT_EQ(rank_ranges({4}), "4");
  EXPECT_EQ(rank_ranges({7, 0, 1, 2, 4, 6}), "0-2, 4, 6-7");
  EXPECT_EQ(rank_ranges({1, 3, 5}), "1, 3, 5");
}

// A flight dump names the rank a timed-out one waited for only when it can be only that one.
TEST(CollectiveTimeout, TheAwaitedRankIsNamedOnlyWhenItIsTheOneOther) {
  EXPECT_EQ(definite_peers({4, 5}, 4), std::vector<int>{5});
  EXPECT_EQ(definite_peers({4, 5, 6}, 4), std::vector<int>{});
  EXPECT_EQ(definite_peers({4}, 4), std::vector<int>{});
}

}  // namespace
}  // namespace strata::comm
