#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <set>
#include <vector>

#include "base/error.hpp"
#include "data/loader.hpp"
#include "data/tokens.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::data;
using strata::test::expect_error;
using strata::test::ScratchDir;

namespace {

// Token i is i (mod 65536), so a batch shows exactly which windows it came from.
std::filesystem::path counting_file(const ScratchDir& dir, std::size_t n, const char* name = "count.bin") {
  std::vector<std::uint16_t> tokens(n);
  for (std::size_t i = 0; i < n; ++i) tokens[i] = static_cast<std::uint16_t>(i % 65536);
  write_token_file(dir / name, tokens);
  return dir / name;
}

struct Batch {
  std::vector<std::int32_t> tokens, targets;
  bool operator==(const Batch&) const = default;
};

Batch next_batch(DataLoader& loader) {
  const std::size_t n = static_cast<std::size_t>(loader.batch()) * static_cast<std::size_t>(loader.seq());
  Batch b{std::vector<std::int32_t>(n), std::vector<std::int32_t>(n)};
  loader.next(b.tokens.data(), b.targets.data());
  return b;
}

// Rows [first_row, first_row + rows) of a batch with `seq` columns.
Batch rows_of(const Batch& b, int seq, int first_row, int rows) {
  auto cut = [&](const std::vector<std::int32_t>& v) {
    return std::vector<std::int32_t>(v.begin() + first_row * seq, v.begin() + (first_row + rows) * seq);
  };
  return {cut(b.tokens), cut(b.targets)};
}

}  // namespace

TEST(DataLoader, WindowsOfSeqPlusOneWithShiftedTargets) {
  ScratchDir dir;
  auto path = counting_file(dir, 100);
  DataLoader loader(path, 2, 4, 0, 1);
  EXPECT_EQ(loader.batches_per_epoch(), 10);  // 100 / 5 = 20 windows, 2 per batch
  Batch b = next_batch(loader);
  EXPECT_EQ(b.tokens, (std::vector<std::int32_t>{0, 1, 2, 3, 5, 6, 7, 8}));
  EXPECT_EQ(b.targets, (std::vector<std::int32_t>{1, 2, 3, 4, 6, 7, 8, 9}));
  b = next_batch(loader);
  EXPECT_EQ(b.tokens, (std::vector<std::int32_t>{10, 11, 12, 13, 15, 16, 17, 18}));
  EXPECT_EQ(loader.position(), 2);
}

TEST(DataLoader, EachRankGetsItsSliceOfTheWorldOneBatch) {
  ScratchDir dir;
  auto path = counting_file(dir, 5000);
  const int B = 3, T = 7;
  for (int world : {2, 4}) {
    for (std::optional<std::uint64_t> seed : {std::optional<std::uint64_t>{}, std::optional<std::uint64_t>{42}}) {
      DataLoader global(path, B * world, T, 0, 1, seed);
      std::vector<DataLoader> ranks;
      for (int r = 0; r < world; ++r) ranks.emplace_back(path, B, T, r, world, seed);
      EXPECT_EQ(ranks[0].batches_per_epoch(), global.batches_per_epoch());
      // Past the end of the first epoch, to cover the wrap-around too.
      for (std::int64_t step = 0; step < global.batches_per_epoch() + 5; ++step) {
        Batch all = next_batch(global);
        for (int r = 0; r < world; ++r)
          ASSERT_EQ(next_batch(ranks[static_cast<std::size_t>(r)]), rows_of(all, T, r * B, B))
              << "world " << world << " rank " << r << " step " << step << " shuffled " << seed.has_value();
      }
    }
  }
}

TEST(DataLoader, SameSeedSameStreamOtherSeedOtherStream) {
  ScratchDir dir;
  auto path = counting_file(dir, 4000);
  DataLoader a(path, 2, 8, 0, 1, 7), b(path, 2, 8, 0, 1, 7), c(path, 2, 8, 0, 1, 8), plain(path, 2, 8, 0, 1);
  bool differs_from_other_seed = false, differs_from_file_order = false;
  for (int i = 0; i < 20; ++i) {
    Batch x = next_batch(a);
    ASSERT_EQ(x, next_batch(b));
    differs_from_other_seed |= !(x == next_batch(c));
    differs_from_file_order |= !(x == next_batch(plain));
  }
  EXPECT_TRUE(differs_from_other_seed);
  EXPECT_TRUE(differs_from_file_order);
}

TEST(DataLoader, WrapsAroundWithAnEpochCounter) {
  ScratchDir dir;
  auto path = counting_file(dir, 103);  // 20 windows of 5 and 3 stray tokens
  DataLoader loader(path, 3, 4, 0, 1);
  ASSERT_EQ(loader.batches_per_epoch(), 6);  // 18 windows used, 2 left over
  std::vector<Batch> first;
  for (int i = 0; i < 6; ++i) first.push_back(next_batch(loader));
  EXPECT_EQ(loader.epoch(), 1);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(next_batch(loader), first[static_cast<std::size_t>(i)]) << i;
  EXPECT_EQ(loader.position(), 12);
  EXPECT_EQ(loader.epoch(), 2);
}

TEST(DataLoader, ShuffledEpochsArePermutationsThatDiffer) {
  ScratchDir dir;
  auto path = counting_file(dir, 60 * 9);  // 60 windows of 9
  DataLoader loader(path, 4, 8, 0, 1, 123);
  ASSERT_EQ(loader.batches_per_epoch(), 15);
  std::vector<std::vector<std::int32_t>> starts(2);  // window start tokens per epoch
  for (int e = 0; e < 2; ++e) {
    for (int i = 0; i < 15; ++i) {
      Batch b = next_batch(loader);
      for (int r = 0; r < 4; ++r) {
        const std::int32_t start = b.tokens[static_cast<std::size_t>(r * 8)];
        ASSERT_EQ(start % 9, 0);  // windows stay aligned to the file's cut
        for (int t = 0; t < 8; ++t) ASSERT_EQ(b.tokens[static_cast<std::size_t>(r * 8 + t)], start + t);
        EXPECT_EQ(b.targets[static_cast<std::size_t>(r * 8 + 7)], start + 8);
        starts[static_cast<std::size_t>(e)].push_back(start);
      }
    }
  }
  for (auto s : starts) {
    std::sort(s.begin(), s.end());
    EXPECT_EQ(std::adjacent_find(s.begin(), s.end()), s.end());
    EXPECT_EQ(s.size(), 60u);  // every window exactly once
  }
  EXPECT_NE(starts[0], starts[1]);
}

TEST(DataLoader, PositionRestoresTheStream) {
  ScratchDir dir;
  auto path = counting_file(dir, 3000);
  for (std::optional<std::uint64_t> seed : {std::optional<std::uint64_t>{}, std::optional<std::uint64_t>{5}}) {
    DataLoader loader(path, 2, 16, 1, 2, seed);
    // 3000 tokens: 176 windows of 17, 44 global micro-batches of 4: 30 + 40 steps cross an epoch.
    for (int i = 0; i < 30; ++i) next_batch(loader);
    const std::int64_t saved = loader.position();
    std::vector<Batch> expected;
    for (int i = 0; i < 40; ++i) expected.push_back(next_batch(loader));
    DataLoader resumed(path, 2, 16, 1, 2, seed);
    resumed.set_position(saved);
    for (int i = 0; i < 40; ++i) ASSERT_EQ(next_batch(resumed), expected[static_cast<std::size_t>(i)]) << i;
  }
}

// Found by tests/fuzz/fuzz_tokens: a position (as a checkpoint restores it) at the end of the
// int64 range overflowed on the next batch, and the wrapped negative position indexed outside
// the file on the one after.
TEST(DataLoader, LastPositionThereIsIsRefusedInsteadOfWrapping) {
  ScratchDir dir;
  auto path = counting_file(dir, 50);
  DataLoader loader(path, 1, 4, 0, 1);  // 10 windows of 5, one a batch
  const std::int64_t last = std::numeric_limits<std::int64_t>::max();
  loader.set_position(last - 1);
  // (2^63 - 2) mod 10 = 6: window 6, tokens 30..34.
  EXPECT_EQ(next_batch(loader).tokens, (std::vector<std::int32_t>{30, 31, 32, 33}));
  EXPECT_EQ(loader.position(), last);
  expect_error([&] { next_batch(loader); }, {"position = 9223372036854775807"});
  EXPECT_EQ(loader.position(), last);
}

TEST(DataLoader, RefusesBadArgumentsAndShortFiles) {
  ScratchDir dir;
  auto path = counting_file(dir, 50);
  expect_error([&] { DataLoader(path, 0, 4, 0, 1); }, {"batch = 0"});
  expect_error([&] { DataLoader(path, 1, -4, 0, 1); }, {"seq = -4"});
  expect_error([&] { DataLoader(path, 1, 4, 2, 2); }, {"rank = 2", "world = 2"});
  expect_error([&] { DataLoader(path, 1, 4, 0, 0); }, {"world = 0"});
  // 50 tokens hold 10 windows of 5: 5 x 2 fit, 6 x 2 do not.
  EXPECT_NO_THROW(DataLoader(path, 5, 4, 1, 2));
  expect_error([&] { DataLoader(path, 6, 4, 1, 2); }, {path.string(), "50 tokens", "global micro-batch", "60"});
  DataLoader ok(path, 1, 4, 0, 1);
  expect_error([&] { ok.set_position(-1); }, {"position = -1"});
  auto wide = counting_file(dir, 400, "wide.bin");
  expect_error([&] { DataLoader(wide, 1, 4, 0, 1, std::nullopt, 256); }, {"token id 256", "position 256"});
}
