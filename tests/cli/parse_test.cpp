// The pieces of strata's command-line reading that need no process: the edit distance behind
// "did you mean" and the forms a count may be typed in.
#include <gtest/gtest.h>

#include "base/suggest.hpp"
#include "cli/parse.hpp"

using namespace strata;

TEST(Suggest, EditDistanceCountsInsertionsDeletionsSubstitutionsAndSwaps) {
  EXPECT_EQ(edit_distance("train", "train"), 0u);
  EXPECT_EQ(edit_distance("trian", "train"), 1u);  // a swap of neighbours is one edit
  EXPECT_EQ(edit_distance("--step", "--steps"), 1u);
  EXPECT_EQ(edit_distance("plna", "plan"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
}

TEST(Suggest, NamesOnlyTheNearestAndOnlyWhenNearEnough) {
  const std::vector<std::string> commands{"train", "compare", "data", "export", "ckpt", "topo", "bench", "plan"};
  EXPECT_EQ(did_you_mean("trian", commands), " (did you mean 'train'?)");
  EXPECT_EQ(did_you_mean("calibrate", commands), "");
  EXPECT_EQ(did_you_mean("--step", {"--steps", "--seed", "--stop-after"}, ""), " (did you mean --steps?)");
  EXPECT_EQ(did_you_mean("--sed", {"--seed", "--seq"}, ""), " (did you mean --seed or --seq?)");
}

TEST(Counts, AcceptWhatAUserTypesForAWholeNumber) {
  const std::pair<const char*, const char*> accepted[] = {
      {"1000", "1000"}, {"1_000", "1000"}, {"1e3", "1000"},   {"1E3", "1000"}, {"2.5e3", "2500"},
      {"1_000e1", "10000"}, {"0", "0"},    {"-5", "-5"},      {"+7", "7"},     {"0e5", "0"},
      {"1000e-3", "1"}, {"007", "7"},      {"999999999999999999", "999999999999999999"}};
  for (auto [typed, digits] : accepted) {
    auto got = cli::normalize_count(typed);
    ASSERT_TRUE(got.has_value()) << typed;
    EXPECT_EQ(*got, digits) << typed;
  }
}

TEST(Counts, RefuseFractionsAndOtherTextSayingWhy) {
  const std::pair<const char*, const char*> refused[] = {
      {"1.5e0", "a count has no fraction"}, {"1e-3", "a count has no fraction"},
      {"1.5", "write 1000, 1_000 or 1e3"},  {"1__000", "write 1000, 1_000 or 1e3"},
      {"_1", "write 1000, 1_000 or 1e3"},   {"1_", "write 1000, 1_000 or 1e3"},
      {"abc", "write 1000, 1_000 or 1e3"},  {"", "write 1000, 1_000 or 1e3"},
      {"0x10", "write 1000, 1_000 or 1e3"}, {"1e", "write 1000, 1_000 or 1e3"},
      {"1e30", "too large"},                {"1000000000000000000", "too large"}};
  for (auto [typed, why] : refused) {
    std::string problem;
    EXPECT_FALSE(cli::normalize_count(typed, &problem).has_value()) << typed;
    EXPECT_NE(problem.find(why), std::string::npos) << typed << ": " << problem;
  }
}
