#include <gtest/gtest.h>

#include "base/error.hpp"
#include "model/layout.hpp"

using namespace strata::model;

TEST(Layout, Gpt2SmallHas124MParameters) {
  ParamLayout l(GPTConfig::preset("gpt2-124m"));
  // GPT-2 124M with the vocabulary padded to 50304: 124,475,904 parameters.
  EXPECT_EQ(l.num_params(), 124475904);
  EXPECT_EQ(l.num_params(), GPTConfig::preset("gpt2-124m").num_params());
  EXPECT_EQ(static_cast<int>(l.units().size()), 12 + 2);
}

TEST(Layout, UnitsAreAlignedContiguousAndCoverEveryTensor) {
  ParamLayout l(GPTConfig::preset("tiny"));
  std::size_t prev_end = 0;
  for (auto& u : l.units()) {
    EXPECT_EQ(u.offset % kUnitAlignFloats, 0u);
    EXPECT_EQ(u.numel % kUnitAlignFloats, 0u);
    EXPECT_EQ(u.offset, prev_end);
    prev_end = u.offset + u.numel;
    for (int ti : u.tensors) {
      auto& t = l.tensors()[ti];
      EXPECT_EQ(t.offset % kTensorAlignFloats, 0u);
      EXPECT_GE(t.offset, u.offset);
      EXPECT_LE(t.offset + t.numel, u.offset + u.numel);
    }
  }
  EXPECT_EQ(prev_end, l.total_floats());
  EXPECT_EQ(l.find("h.1.attn.c_attn.weight").shape, (std::vector<std::int64_t>{192, 64}));
  EXPECT_TRUE(l.find("h.1.attn.c_attn.weight").hf_transposed);
  EXPECT_FALSE(l.find("h.0.ln_1.bias").decay);
  EXPECT_THROW(l.find("h.9.mlp.c_fc.weight"), strata::Error);
}

TEST(Layout, DecaySegmentsCoverARangeExactly) {
  ParamLayout l(GPTConfig::preset("tiny"));
  std::size_t lo = 1000, hi = l.total_floats() - 777;
  auto segs = l.decay_segments(lo, hi);
  ASSERT_FALSE(segs.empty());
  EXPECT_EQ(segs.front().begin, lo);
  EXPECT_EQ(segs.back().end, hi);
  for (std::size_t i = 1; i < segs.size(); ++i) {
    EXPECT_EQ(segs[i].begin, segs[i - 1].end);
    EXPECT_NE(segs[i].decay, segs[i - 1].decay);
  }
}

TEST(Config, RefusesBadFieldsNamingThem) {
  GPTConfig c = GPTConfig::preset("tiny");
  c.n_head = 5;
  try {
    c.validate();
    FAIL();
  } catch (const strata::Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_head"), std::string::npos);
  }
  c = GPTConfig::preset("tiny");
  c.n_layer = 0;
  EXPECT_THROW(c.validate(), strata::Error);
  EXPECT_THROW(GPTConfig::preset("huge"), strata::Error);
  EXPECT_EQ(pad_vocab(50257), 50304);
}
