#include <gtest/gtest.h>

#include "base/cpu.hpp"
#include "base/error.hpp"

using namespace strata;

TEST(Cpu, ParsesKnownNamesAndRefusesOthers) {
  EXPECT_EQ(parse_isa("scalar"), Isa::Scalar);
  EXPECT_EQ(parse_isa("avx2"), Isa::Avx2);
  EXPECT_EQ(parse_isa("avx512"), Isa::Avx512);
  EXPECT_THROW(parse_isa("sse9"), Error);
  EXPECT_EQ(isa_name(detected_isa()), isa_name(parse_isa(isa_name(detected_isa()))));
}
