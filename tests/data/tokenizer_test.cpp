#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "data/tokenizer.hpp"
#include "data/utf8.hpp"
#include "support.hpp"

using namespace strata::data;
using strata::test::expect_error;

TEST(ByteTokenizer, EveryByteRoundTrips) {
  std::string text(256, '\0');
  std::iota(text.begin(), text.end(), '\0');
  text += "Hello, wörld!\n";
  const ByteTokenizer bytes;
  const std::vector<std::int32_t> ids = bytes.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[200], 200);
  EXPECT_EQ(ids[256], 'H');
  EXPECT_EQ(bytes.decode(ids), text);
}

TEST(ByteTokenizer, DecodeRefusesIdsOutsideTheByteRange) {
  const ByteTokenizer bytes;
  std::vector<std::int32_t> ids{72, 105, 256};
  expect_error([&] { bytes.decode(ids); }, {"256", "position 2"});
  ids = {-1};
  expect_error([&] { bytes.decode(ids); }, {"-1", "position 0"});
}

TEST(Tokenizer, NoDirectoryMeansBytes) {
  const auto tokenizer = make_tokenizer({});
  EXPECT_EQ(tokenizer->name(), "bytes");
  EXPECT_EQ(tokenizer->vocab_size(), 256);
}

TEST(Utf8, InvalidSequencesBecomeOneReplacementCharacterPerMaximalSubpart) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(to_valid_utf8("caf\xC3\xA9 \xF0\x9D\x84\x9E"), "caf\xC3\xA9 \xF0\x9D\x84\x9E");  // valid: unchanged
  EXPECT_EQ(to_valid_utf8("ok \xE2\x82"), "ok " + fffd);             // cut short at the end
  EXPECT_EQ(to_valid_utf8("\xE2\x82!"), fffd + "!");                 // cut short inside
  EXPECT_EQ(to_valid_utf8("\x80\x80"), fffd + fffd);                 // lone continuation bytes
  EXPECT_EQ(to_valid_utf8("\xC0\xAF"), fffd + fffd);                 // overlong '/': neither byte fits
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), fffd + fffd + fffd);      // surrogate: second byte out of range
  EXPECT_EQ(to_valid_utf8("latin-1 caf\xE9 ok"), "latin-1 caf" + fffd + " ok");
  EXPECT_TRUE(looks_like_text(to_valid_utf8("\xF4\x90\x80\x80 \xFF")));
}
