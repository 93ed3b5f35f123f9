#include "base/text.hpp"

#include <cstdint>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

using Items = std::vector<std::string_view>;

TEST(SplitList, KeepsEveryItemEmptyOnesIncluded) {
  EXPECT_EQ(split_list("zero3,ddp"), (Items{"zero3", "ddp"}));
  EXPECT_EQ(split_list("a,,b"), (Items{"a", "", "b"}));
  EXPECT_EQ(split_list("a,"), (Items{"a", ""}));
  EXPECT_EQ(split_list(",a"), (Items{"", "a"}));
  EXPECT_EQ(split_list(""), (Items{""}));
}

TEST(ParseWhole, TakesOnlyTheWholeTextAsANumber) {
  int i = -1;
  EXPECT_TRUE(parse_whole("42", i));
  EXPECT_EQ(i, 42);
  EXPECT_TRUE(parse_whole("-7", i));
  EXPECT_EQ(i, -7);
  for (std::string_view bad : {"", " 1", "+1", "12x", "1.5", "0x10"}) EXPECT_FALSE(parse_whole(bad, i)) << bad;
  std::int8_t small = 0;
  EXPECT_FALSE(parse_whole("300", small));  // outside the type's range
  double d = 0;
  EXPECT_TRUE(parse_whole("1.5e3", d));
  EXPECT_EQ(d, 1500.0);
  EXPECT_FALSE(parse_whole("1.5 ", d));
}

}  // namespace
}  // namespace strata
