#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "model/layout.hpp"

using namespace strata::model;

TEST(Layout, Gpt2SmallHas124MParameters) {
  ParamLayout l(ModelConfig::preset("gpt2-124m"));
  // GPT-2 124M with the vocabulary padded to 50304: 124,475,904 parameters.
  EXPECT_EQ(l.num_params(), 124475904);
  EXPECT_EQ(l.num_params(), ModelConfig::preset("gpt2-124m").num_params());
  EXPECT_EQ(static_cast<int>(l.units().size()), 12 + 2);
}

TEST(Layout, UnitsAreAlignedContiguousAndCoverEveryTensor) {
  ParamLayout l(ModelConfig::preset("tiny"));
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
  ParamLayout l(ModelConfig::preset("tiny"));
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

// Checkpoints are written in whole-model coordinates: what the TP ranks save of their arenas,
// cut anywhere, covers every float of the whole arena exactly once (padding as zeros), and
// what a rank loads is every float of its tensors, at the place its slice came from.
// GPT-2 (tiny at 4 heads: room for --tp 4) and Llama (llama-tiny's 2 K/V heads: --tp 2), each
// checked on a row-parallel matrix.
static void expect_whole_runs_cover_the_arena_once(const ModelConfig& config, std::vector<int> degrees, const char* row_parallel) {
  const ParamLayout whole(config);
  for (int tp : degrees) {
    std::vector<int> saved(whole.total_floats(), 0);
    for (int r = 0; r < tp; ++r) {
      const ParamLayout slice(config, {tp, r});
      const std::size_t n = slice.total_floats(), cut = n / 3 + 5;  // two runs, cut inside a tensor
      for (auto [begin, end] : {std::pair{std::size_t{0}, cut}, std::pair{cut, n}})
        for (const WholeRun& w : slice.whole_runs(begin, end, WholeCover::Saved)) {
          ASSERT_LE(w.whole + w.count, whole.total_floats());
          if (!w.zeros) {
            ASSERT_LE(begin + w.local + w.count, end);
          }
          for (std::size_t i = 0; i < w.count; ++i) ++saved[w.whole + i];
        }
      // Loaded: each tensor element of the slice maps to the whole tensor's element slice_runs names.
      std::size_t loaded = 0;
      for (const WholeRun& w : slice.whole_runs(0, n, WholeCover::Loaded)) {
        EXPECT_FALSE(w.zeros);
        loaded += w.count;
      }
      EXPECT_EQ(loaded, static_cast<std::size_t>(slice.num_params())) << "tp " << tp << " rank " << r;
      const TensorInfo& fc = slice.find(row_parallel);  // a run per row
      const auto runs = slice.whole_runs(fc.offset, fc.offset + fc.numel, WholeCover::Loaded);
      ASSERT_EQ(runs.size(), tp == 1 ? 1u : static_cast<std::size_t>(fc.shape[0]));
      EXPECT_EQ(runs.back().whole + runs.back().count - slice.slice_runs(fc).back().count,
                whole.find(row_parallel).offset + slice.slice_runs(fc).back().full);
    }
    EXPECT_TRUE(std::all_of(saved.begin(), saved.end(), [](int c) { return c == 1; })) << "tp " << tp;
  }
}

TEST(Layout, WholeRunsOfTheTpRanksCoverTheWholeArenaOnce) {
  ModelConfig config = ModelConfig::preset("tiny");
  config.n_head = 4;
  expect_whole_runs_cover_the_arena_once(config, {1, 2, 4}, "h.1.mlp.c_proj.weight");
  expect_whole_runs_cover_the_arena_once(ModelConfig::preset("llama-tiny"), {1, 2}, "model.layers.1.mlp.down_proj.weight");
}

TEST(Config, RefusesBadFieldsNamingThem) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.n_head = 5;
  try {
    c.validate();
    FAIL();
  } catch (const strata::Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_head"), std::string::npos);
  }
  c = ModelConfig::preset("tiny");
  c.n_layer = 0;
  EXPECT_THROW(c.validate(), strata::Error);
  EXPECT_THROW(ModelConfig::preset("huge"), strata::Error);
  EXPECT_EQ(pad_vocab(50257), 50304);
}
