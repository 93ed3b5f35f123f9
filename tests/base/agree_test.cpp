#include <gtest/gtest.h>

#include <new>
#include <string>
#include <vector>

#include "base/agree.hpp"

using strata::AgreedError;
using strata::Error;
using strata::failure_of;
using strata::settle;

namespace {
std::string settled(const std::vector<std::string>& failures) {
  try {
    settle(failures);
  } catch (const AgreedError& e) {
    return e.what();
  }
  return "(returned)";
}
}  // namespace

TEST(Agree, FailureOfNamesWhatTheWorkThrew) {
  EXPECT_EQ(failure_of([] {}), "");
  EXPECT_EQ(failure_of([] { throw Error("train.batch = 0: must be positive"); }), "train.batch = 0: must be positive");
  EXPECT_EQ(failure_of([] { throw std::bad_alloc(); }), "std::bad_alloc");
  EXPECT_EQ(failure_of([] { throw Error(""); }), "unknown error");
}

TEST(Agree, SettleReportsOnceWhatEveryRankHitAlikeAndNamesTheRankOtherwise) {
  EXPECT_EQ(settled({"", "", ""}), "(returned)");
  EXPECT_EQ(settled({"bad file", "bad file", "bad file"}), "bad file");
  EXPECT_EQ(settled({"", "disk full", ""}), "rank 1: disk full");
  EXPECT_EQ(settled({"", "disk full", "disk full"}), "rank 1: disk full (and 1 more ranks failed)");
  EXPECT_EQ(settled({"a", "b"}), "rank 0: a (and 1 more ranks failed)");
}
