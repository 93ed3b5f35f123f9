#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/error.hpp"
#include "data/tokens.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::data;
using strata::test::expect_error;
using strata::test::ScratchDir;
using strata::test::write_bytes;

namespace {

// A token file assembled byte by byte, independently of write_token_file.
std::string raw_token_file(std::int32_t magic, std::int32_t version, std::int32_t count,
                           const std::vector<std::uint16_t>& tokens) {
  std::array<std::int32_t, 256> header{};
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::string bytes(reinterpret_cast<const char*>(header.data()), sizeof(header));
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return bytes;
}

}  // namespace

TEST(TokenFile, WritesLlmcFormatAndReadsItBack) {
  ScratchDir dir;
  std::vector<std::uint16_t> tokens{0, 1, 255, 256, 50256, 65535, 7};
  write_token_file(dir / "t.bin", tokens);
  // Byte-exact llm.c layout: 256-int header, then the uint16 ids.
  std::string raw = raw_token_file(20240520, 1, 7, tokens);
  std::ifstream in(dir / "t.bin", std::ios::binary);
  std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(written, raw);

  TokenFile file(dir / "t.bin");
  ASSERT_EQ(file.size(), tokens.size());
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), file.tokens().begin()));
  TokenFile moved = std::move(file);
  EXPECT_EQ(moved.tokens()[4], 50256);
  // Nothing but the file itself is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
}

TEST(TokenFile, ReadsAFileMadeByAnotherTool) {
  ScratchDir dir;
  write_bytes(dir / "gpt2.bin", raw_token_file(20240520, 1, 3, {15496, 995, 50256}));
  TokenFile file(dir / "gpt2.bin", 50257);
  EXPECT_EQ(file.tokens()[0], 15496);
  EXPECT_EQ(file.tokens()[2], 50256);
}

TEST(TokenFile, RefusesBadFilesNamingThem) {
  ScratchDir dir;
  const auto path = [&](const char* name) { return (dir / name).string(); };
  expect_error([&] { TokenFile(dir / "missing.bin"); }, {path("missing.bin"), "cannot open"});

  write_bytes(dir / "empty.bin", "");
  expect_error([&] { TokenFile(dir / "empty.bin"); }, {path("empty.bin"), "empty"});

  write_bytes(dir / "short_header.bin", raw_token_file(20240520, 1, 3, {}).substr(0, 100));
  expect_error([&] { TokenFile(dir / "short_header.bin"); }, {path("short_header.bin"), "truncated", "header"});

  write_bytes(dir / "truncated.bin", raw_token_file(20240520, 1, 5, {1, 2, 3}));
  expect_error([&] { TokenFile(dir / "truncated.bin"); }, {path("truncated.bin"), "truncated", "5 tokens"});

  write_bytes(dir / "long.bin", raw_token_file(20240520, 1, 2, {1, 2, 3}));
  expect_error([&] { TokenFile(dir / "long.bin"); }, {path("long.bin"), "2 stray bytes"});

  write_bytes(dir / "magic.bin", raw_token_file(20240521, 1, 1, {1}));
  expect_error([&] { TokenFile(dir / "magic.bin"); }, {path("magic.bin"), "magic 20240521"});

  write_bytes(dir / "version.bin", raw_token_file(20240520, 2, 1, {1}));
  expect_error([&] { TokenFile(dir / "version.bin"); }, {path("version.bin"), "version 2"});

  write_bytes(dir / "zero.bin", raw_token_file(20240520, 1, 0, {}));
  expect_error([&] { TokenFile(dir / "zero.bin"); }, {path("zero.bin"), "0 tokens"});

  write_bytes(dir / "vocab.bin", raw_token_file(20240520, 1, 4, {10, 255, 256, 300}));
  EXPECT_NO_THROW(TokenFile(dir / "vocab.bin", 301));
  EXPECT_NO_THROW(TokenFile(dir / "vocab.bin"));
  expect_error([&] { TokenFile(dir / "vocab.bin", 256); },
               {path("vocab.bin"), "token id 256", "position 2", "vocab_size = 256"});
}

TEST(TokenStats, EntropyInNatsOfKnownDistributions) {
  std::vector<std::uint16_t> two{3, 3, 9, 9};
  auto s = token_stats(two);
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.min_id, 3);
  EXPECT_EQ(s.max_id, 9);
  EXPECT_EQ(s.distinct, 2);
  EXPECT_NEAR(s.entropy_nats, std::log(2.0), 1e-15);

  std::vector<std::uint16_t> skewed{1, 1, 1, 2};  // p = 3/4, 1/4
  EXPECT_NEAR(token_stats(skewed).entropy_nats, -(0.75 * std::log(0.75) + 0.25 * std::log(0.25)), 1e-15);

  ScratchDir dir;
  std::vector<std::uint16_t> uniform(256 * 3);
  for (std::size_t i = 0; i < uniform.size(); ++i) uniform[i] = static_cast<std::uint16_t>(i % 256);
  write_token_file(dir / "u.bin", uniform);
  EXPECT_NEAR(unigram_entropy(dir / "u.bin"), std::log(256.0), 1e-12);
  EXPECT_EQ(token_stats(std::vector<std::uint16_t>{5}).entropy_nats, 0.0);
}
