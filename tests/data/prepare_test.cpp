#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "data/prepare.hpp"
#include "data/tokens.hpp"
#include "data/utf8.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::data;
using strata::test::expect_error;
using strata::test::ScratchDir;
using strata::test::write_bytes;
namespace fs = std::filesystem;

namespace {

std::string text_of(const fs::path& token_file) {
  TokenFile f(token_file, 256);
  std::string s;
  for (std::uint16_t t : f.tokens()) s.push_back(static_cast<char>(t));
  return s;
}

std::string lines(const std::string& tag, int count) {
  std::string s;
  for (int i = 0; i < count; ++i) s += tag + " line " + std::to_string(i) + ": the quick brown fox.\n";
  return s;
}

}  // namespace

TEST(LooksLikeText, AcceptsUtf8AndRefusesBinary) {
  EXPECT_TRUE(looks_like_text(""));
  EXPECT_TRUE(looks_like_text("plain ASCII\twith\bcontrol\n"));
  EXPECT_TRUE(looks_like_text("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9D\x84\x9E"));  // é € 𝄞
  EXPECT_FALSE(looks_like_text(std::string_view("a\0b", 3)));
  EXPECT_FALSE(looks_like_text("\x80"));                  // lone continuation byte
  EXPECT_FALSE(looks_like_text("\xC0\xAF"));              // overlong '/'
  EXPECT_FALSE(looks_like_text("\xED\xA0\x80"));          // UTF-16 surrogate
  EXPECT_FALSE(looks_like_text("\xF4\x90\x80\x80"));      // past U+10FFFF
  EXPECT_FALSE(looks_like_text("ok \xE2\x82"));           // cut short at the end
  EXPECT_FALSE(looks_like_text("latin-1 caf\xE9 ok"));
}

TEST(Prepare, WalksDirectoriesSkipsBinaryAndDuplicatesAndSplitsByInterleaving) {
  ScratchDir dir;
  const std::string a = lines("a", 40), b = lines("b", 30) + "no final newline", c = lines("c", 25);
  write_bytes(dir / "in/a.txt", a);
  write_bytes(dir / "in/sub/b", b);
  write_bytes(dir / "in/a.dat", std::string("\0\0\0\2index", 9));
  write_bytes(dir / "in/latin1.txt", "caf\xE9\n");
  fs::create_symlink("a.txt", dir / "in/a.u8");
  write_bytes(dir / "c.txt", c);

  PrepareOptions opt;
  opt.inputs = {dir / "in", dir / "c.txt"};
  opt.out_dir = dir / "out";
  opt.val_fraction = 0.25;
  opt.chunk_bytes = 100;
  PrepareReport report = prepare_text(opt);

  ASSERT_EQ(report.files.size(), 3u);
  EXPECT_EQ(report.files[0], dir / "in/a.txt");
  EXPECT_EQ(report.files[1], dir / "in/sub/b");
  EXPECT_EQ(report.files[2], dir / "c.txt");
  EXPECT_EQ(report.skipped_not_text, 2u);
  EXPECT_EQ(report.skipped_duplicates, 1u);

  // Dealing the chunks back in order must give the inputs' concatenation exactly.
  const std::string corpus = a + b + "\n" + c;
  const std::string train = text_of(report.train_path), val = text_of(report.val_path);
  EXPECT_EQ(report.train_tokens + report.val_tokens, corpus.size());
  EXPECT_EQ(train.size(), report.train_tokens);
  std::string rebuilt;
  std::size_t ti = 0, vi = 0, chunks = 0, val_chunks = 0;
  for (std::size_t begin = 0; begin < corpus.size(); begin += 100, ++chunks) {
    const std::size_t len = std::min<std::size_t>(100, corpus.size() - begin);
    const bool to_val = chunks % 4 == 3;  // f = 1/4: chunks 3, 7, 11, ...
    val_chunks += to_val;
    rebuilt += to_val ? val.substr(vi, len) : train.substr(ti, len);
    (to_val ? vi : ti) += len;
  }
  EXPECT_EQ(rebuilt, corpus);
  EXPECT_EQ(vi, val.size());
  EXPECT_EQ(ti, train.size());
  EXPECT_EQ(val_chunks, chunks / 4);
}

TEST(Prepare, DefaultSplitSendsEveryTwentiethChunkToValidation) {
  ScratchDir dir;
  std::string text = lines("x", 4000);  // about 136 KB: 34 chunks of 4 KiB, so only chunk 19 is held out
  write_bytes(dir / "t.txt", text);
  PrepareOptions opt;
  opt.inputs = {dir / "t.txt"};
  opt.out_dir = dir / "out";
  auto report = prepare_text(opt);
  const std::string val = text_of(report.val_path);
  ASSERT_EQ(val.size(), 4096u);  // chunk 19 only
  EXPECT_EQ(val, text.substr(19 * 4096, 4096));
}

TEST(Prepare, RefusesBadInputAndKeepsOldOutputs) {
  ScratchDir dir;
  write_bytes(dir / "out/train.bin", "previous");
  write_bytes(dir / "bin.dat", std::string("\x01\x00\x02", 3));
  write_bytes(dir / "short.txt", "too short to split\n");
  fs::create_directories(dir / "empty_dir");
  write_bytes(dir / "only_binary/x.dat", std::string("\0", 1));

  PrepareOptions opt;
  opt.out_dir = dir / "out";
  expect_error([&] { prepare_text(opt); }, {"no --input"});
  opt.inputs = {dir / "nope.txt"};
  expect_error([&] { prepare_text(opt); }, {(dir / "nope.txt").string(), "no such file"});
  opt.inputs = {dir / "bin.dat"};
  expect_error([&] { prepare_text(opt); }, {(dir / "bin.dat").string(), "does not look like text"});
  opt.inputs = {dir / "empty_dir", dir / "only_binary"};
  expect_error([&] { prepare_text(opt); }, {"no text found", "1 files skipped"});
  opt.inputs = {dir / "short.txt"};
  expect_error([&] { prepare_text(opt); }, {"too few to split", "--val-fraction"});
  opt.val_fraction = 1.0;
  expect_error([&] { prepare_text(opt); }, {"--val-fraction = 1"});
  opt.val_fraction = 0.5;
  opt.chunk_bytes = 0;
  expect_error([&] { prepare_text(opt); }, {"--chunk-bytes = 0"});

  EXPECT_EQ(strata::read_file_text(dir / "out/train.bin"), "previous");
  EXPECT_FALSE(fs::exists(dir / "out/val.bin"));
}
