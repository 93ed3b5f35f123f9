// GPT-2 byte-level BPE from files the tests write: a vocabulary of the 256 byte symbols (in
// GPT-2's id order, so single bytes get GPT-2's own ids: "!" 0, "a" 64, "\n" 198, " " 220)
// and a few merges. Expected ids are derived by hand in the comments: Debian's Python has no
// `regex` module to run encoder.py's pattern as a reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/bpe.hpp"
#include "data/tokenizer.hpp"
#include "data/utf8.hpp"
#include "support.hpp"

using namespace strata::data;
using strata::test::expect_error;
using strata::test::ScratchDir;
using strata::test::write_bytes;
using Ids = std::vector<std::int32_t>;

namespace {

// Printable ASCII holds GPT-2's first 94 ids, in order.
constexpr std::int32_t ascii(char c) { return c - '!'; }
constexpr std::int32_t kSpace = 220, kNewline = 198;  // "Ġ" and "Ċ" in GPT-2's vocabulary

// encoder.py's bytes_to_unicode, written out as it is there: the printable bytes first (their
// own characters), then the others in byte order as U+0100, U+0101, ...; GPT-2's ids 0..255
// follow this order.
std::vector<std::string> byte_symbols_in_id_order() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  for (int b = 0, n = 0; b < 256; ++b) {
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(256 + n++);
    }
  }
  std::vector<std::string> symbols;
  for (int c : cs) {
    if (c < 0x80)
      symbols.push_back(std::string(1, static_cast<char>(c)));
    else
      symbols.push_back({static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))});
  }
  return symbols;
}

// Merge k makes token 256 + k. Comments give the text each symbol stands for.
const std::vector<std::string> kMerges = {
    "Ġ t",      // 256 " t"
    "h e",      // 257 "he"
    "Ġt he",    // 258 " the"
    "' s",      // 259 "'s"
    "' l",      // 260 "'l"
    "'l l",     // 261 "'ll"
    "Ġ Ġ",      // 262 "  "
    "Ċ Ċ",      // 263 "\n\n"
    "1 2",      // 264 "12"
    "Ã ©",      // 265 "é" (C3 A9)
    "c a",      // 266 "ca"
    "ca f",     // 267 "caf"
    "caf Ã©",   // 268 "café"
    "Ð ¿",      // 269 "п" (D0 BF)
    "! !",      // 270 "!!"
    "b c",      // 271 "bc": before "ab", so "abc" is a + bc
    "a b",      // 272 "ab"
    "a a",      // 273 "aa"
    "Ġ 1",      // 274 " 1": after "12", so " 12" is " " + "12"
    "a 1",      // 275 "a1": never applies, "a1" is two pieces (letters, digits)
    "Ġ Ð¿",     // 276 " п"
};
constexpr std::int32_t kEndOfText = 300;  // "<|endoftext|>", after a gap of unused ids

std::string vocab_json() {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  const auto symbols = byte_symbols_in_id_order();
  for (std::size_t i = 0; i < symbols.size(); ++i) vocab[symbols[i]] = i;
  for (std::size_t k = 0; k < kMerges.size(); ++k) {
    const auto space = kMerges[k].find(' ');
    vocab[kMerges[k].substr(0, space) + kMerges[k].substr(space + 1)] = 256 + k;
  }
  vocab["<|endoftext|>"] = kEndOfText;
  return vocab.dump(1);
}

std::string merges_txt() {
  std::string text = "#version: 0.2\n";
  for (const auto& m : kMerges) text += m + "\n";
  return text;
}

// Hugging Face's file names, or OpenAI's.
void write_tokenizer(const std::filesystem::path& dir, const std::string& vocab, const std::string& merges,
                     bool openai_names = false) {
  write_bytes(dir / (openai_names ? "encoder.json" : "vocab.json"), vocab);
  write_bytes(dir / (openai_names ? "vocab.bpe" : "merges.txt"), merges);
}

class Gpt2Bpe : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tokenizer(dir_.path(), vocab_json(), merges_txt());
    bpe_ = make_tokenizer(dir_.path());
  }
  Ids encode(std::string_view text) const { return bpe_->encode(text); }

  ScratchDir dir_;
  std::unique_ptr<Tokenizer> bpe_;
};

}  // namespace

TEST_F(Gpt2Bpe, FilesGiveTheTokenizerAndItsVocabulary) {
  EXPECT_EQ(bpe_->vocab_size(), kEndOfText + 1);
  EXPECT_EQ(bpe_->name(), "gpt2-bpe (301 tokens, 21 merges)");
}

TEST_F(Gpt2Bpe, SingleBytesGetGpt2sByteIds) {
  EXPECT_EQ(encode("!"), Ids{0});
  EXPECT_EQ(encode("a"), Ids{64});
  EXPECT_EQ(encode("~"), Ids{93});
  EXPECT_EQ(encode("\n"), Ids{kNewline});
  EXPECT_EQ(encode(" "), Ids{kSpace});
  EXPECT_EQ(encode("\x7F"), Ids{221});  // DEL, the first non-printable after the 33 below "!"
  // U+4E2D is E4 B8 AD: printable bytes 0xAE..0xFF have ids 106 + (b - 0xAE), and the soft
  // hyphen 0xAD is the last of the 68 non-printable bytes: id 255.
  EXPECT_EQ(encode("中"), (Ids{106 + 0xE4 - 0xAE, 106 + 0xB8 - 0xAE, 255}));
  EXPECT_TRUE(encode("").empty());
}

TEST_F(Gpt2Bpe, ContractionsSplitOffAsGpt2Lists) {
  EXPECT_EQ(encode("he's"), (Ids{257, 259}));                           // "he" "'s"
  EXPECT_EQ(encode("they'll"), (Ids{ascii('t'), 257, ascii('y'), 261}));  // "they" -> t he y, "'ll"
  // The pattern is case-sensitive: "'S" is punctuation then a letter.
  EXPECT_EQ(encode("HE'S"), (Ids{ascii('H'), ascii('E'), ascii('\''), ascii('S')}));
}

TEST_F(Gpt2Bpe, ASpaceStartsTheNextWord) {
  EXPECT_EQ(encode(" the"), Ids{258});
  EXPECT_EQ(encode("the the"), (Ids{ascii('t'), 257, 258}));  // "the" " the"
}

TEST_F(Gpt2Bpe, MergesApplyByRankNotPosition) {
  EXPECT_EQ(encode("abc"), (Ids{64, 271}));   // "bc" (rank 15) before "ab" (rank 16)
  EXPECT_EQ(encode("ab"), (Ids{272}));
  EXPECT_EQ(encode("aaa"), (Ids{273, 64}));   // every occurrence, left to right
  EXPECT_EQ(encode("aaaa"), (Ids{273, 273}));
  EXPECT_EQ(encode(" 12"), (Ids{kSpace, 264}));  // "12" (rank 8) first; no merge of " " + "12"
}

TEST_F(Gpt2Bpe, DigitsLettersAndPunctuationArePiecesOfTheirOwn) {
  EXPECT_EQ(encode("a1"), (Ids{64, ascii('1')}));  // merge "a 1" exists but crosses pieces
  EXPECT_EQ(encode("x2024"), (Ids{ascii('x'), ascii('2'), ascii('0'), ascii('2'), ascii('4')}));
  EXPECT_EQ(encode("!!!"), (Ids{270, 0}));
  EXPECT_EQ(encode("a!!"), (Ids{64, 270}));
  EXPECT_EQ(encode(" !!"), (Ids{kSpace, 270}));  // " ?[^\s\p{L}\p{N}]+": the space leads the piece
}

TEST_F(Gpt2Bpe, WhitespaceBeforeAWordLeavesItsLastSpaceToTheWord) {
  // "a   b": \s+(?!\S) takes two spaces, leaving " b"; without the lookahead it would be "  ".
  EXPECT_EQ(encode("a  b"), (Ids{64, kSpace, kSpace, 65}));  // "a" " " " b"
  EXPECT_EQ(encode("a   b"), (Ids{64, 262, kSpace, 65}));   // "a" "  " " b"
  EXPECT_EQ(encode("a   "), (Ids{64, 262, kSpace}));        // at the end all spaces are one piece
  // Newlines: before a word the last one is a piece of its own, at the end they stay together.
  EXPECT_EQ(encode("a\n\nb"), (Ids{64, kNewline, kNewline, 65}));
  EXPECT_EQ(encode("a\n\n"), (Ids{64, 263}));
  EXPECT_EQ(encode("a\n\n\n b"), (Ids{64, 263, kNewline, kSpace, 65}));  // "\n\n\n" then " b"
  // Whitespace is Unicode's White_Space, as in encoder.py: U+180E (E1 A0 8E) is not, so the last
  // space goes with it: "a" " " " \u180E", where PCRE2's \s would make "  \u180E" (262 ...).
  EXPECT_EQ(encode("a  \u180E"), (Ids{64, kSpace, kSpace, 106 + 0xE1 - 0xAE, 254, 221 + 0x8E - 0x7F}));
}

TEST_F(Gpt2Bpe, NonAsciiLettersAreLetters) {
  // "é" is a letter (\p{L}), so "café" is one piece and merges to one token; were it not, the
  // piece "caf" and the piece "é" would give 267 265.
  EXPECT_EQ(encode("café"), Ids{268});
  EXPECT_EQ(encode(" é"), (Ids{kSpace, 265}));
  EXPECT_EQ(encode("п п"), (Ids{269, 276}));  // Cyrillic: "п" " п"
  EXPECT_EQ(encode("пa1"), (Ids{269, 64, ascii('1')}));  // letters of two scripts, one piece; a digit
  // CJK letters join the leading space: " 中" is one piece, its bytes unmerged.
  EXPECT_EQ(encode(" 中"), (Ids{kSpace, 160, 116, 255}));
  // An emoji is neither letter nor digit: with "!!" it makes one punctuation piece.
  // U+1F600 is F0 9F 98 80: 0xF0 -> 106 + 0x42; 0x9F, 0x98, 0x80 -> 221 + (b - 0x7F).
  EXPECT_EQ(encode("a😀!!"), (Ids{64, 172, 253, 246, 222, 270}));
}

TEST_F(Gpt2Bpe, EndOfTextIsOrdinaryText) {
  const Ids ids = encode("<|endoftext|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kEndOfText), 0);
  // "<|" "endoftext" "|>": punctuation, letters (e n d o f t e x t: "he" does not occur), punctuation.
  EXPECT_EQ(ids.size(), 2u + 9u + 2u);
  EXPECT_EQ(bpe_->decode(ids), "<|endoftext|>");
  EXPECT_EQ(bpe_->decode(Ids{kEndOfText}), "<|endoftext|>");  // its id decodes to the same text
}

TEST_F(Gpt2Bpe, DecodeInvertsEncodeOnUtf8AndOnArbitraryBytes) {
  const std::string samples[] = {
      "Hello, world! It's 2024: café, naïve, привет мир, 中文字符, 😀👍🏽, ١٢٣ ²\n\n\t  end   ",
      "they'll've  \r\n\r\n x\u00A0y\u3000z\u2028", std::string("nul\0byte", 8)};
  for (const std::string& text : samples) EXPECT_EQ(bpe_->decode(encode(text)), text);

  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255), code_point(1, 0x10FFFF);
  for (int trial = 0; trial < 50; ++trial) {
    std::string bytes(static_cast<std::size_t>(trial * 7), '\0');
    for (char& b : bytes) b = static_cast<char>(byte(rng));
    EXPECT_EQ(bpe_->decode(encode(bytes)), bytes);  // not UTF-8 in general: pieces of their own
    std::string utf8;
    for (int i = 0; i < trial * 3; ++i) {
      const char32_t c = static_cast<char32_t>(code_point(rng));
      if (c >= 0xD800 && c <= 0xDFFF) continue;  // surrogates are no characters
      if (c < 0x80) {
        utf8 += static_cast<char>(c);
      } else if (c < 0x800) {
        utf8 += {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
      } else if (c < 0x10000) {
        utf8 += {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
                 static_cast<char>(0x80 | (c & 0x3F))};
      } else {
        utf8 += {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
                 static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
      }
    }
    ASSERT_TRUE(looks_like_text(utf8));
    EXPECT_EQ(bpe_->decode(encode(utf8)), utf8);
  }
}

TEST_F(Gpt2Bpe, DecodeRefusesIdsWithoutAToken) {
  expect_error([&] { bpe_->decode(Ids{64, 290}); }, {"token 290 at position 1", "not in the vocabulary"});
  expect_error([&] { bpe_->decode(Ids{301}); }, {"token 301 at position 0"});
  expect_error([&] { bpe_->decode(Ids{-1}); }, {"token -1 at position 0"});
}

TEST(Gpt2BpeFiles, OpenAiNamesGiveTheSameTokenizer) {
  ScratchDir hf, openai;
  write_tokenizer(hf.path(), vocab_json(), merges_txt());
  write_tokenizer(openai.path(), vocab_json(), merges_txt(), true);
  const std::string text = "they'll café the  12 abc\n\n";
  EXPECT_EQ(make_tokenizer(openai.path())->encode(text), make_tokenizer(hf.path())->encode(text));
  EXPECT_EQ(make_tokenizer(openai.path())->encode(" the"), Ids{258});
}

TEST(Gpt2BpeFiles, MissingFilesAreNamed) {
  ScratchDir dir;
  expect_error([&] { make_tokenizer(dir / "none"); }, {"none: no such directory"});
  expect_error([&] { make_tokenizer(dir.path()); }, {"no tokenizer files", "vocab.json", "encoder.json"});
  write_bytes(dir / "vocab.json", vocab_json());
  expect_error([&] { make_tokenizer(dir.path()); }, {"merges.txt is missing"});
  std::filesystem::remove(dir / "vocab.json");
  write_bytes(dir / "vocab.bpe", merges_txt());
  expect_error([&] { make_tokenizer(dir.path()); }, {"encoder.json is missing"});
}

namespace {

// The error make_tokenizer gives for this vocabulary and these merges.
void expect_refusal(const std::string& vocab, const std::string& merges,
                    std::initializer_list<std::string_view> parts) {
  ScratchDir dir;
  write_tokenizer(dir.path(), vocab, merges);
  expect_error([&] { make_tokenizer(dir.path()); }, parts);
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST(Gpt2BpeFiles, MalformedVocabulariesAreRefusedNamingTheFile) {
  const std::string vocab = vocab_json(), merges = merges_txt();
  expect_refusal("{\"a\": 1,\n \"b\" 2}", merges, {"vocab.json: not valid JSON", "line 2"});
  expect_refusal("[1, 2]", merges, {"vocab.json: expected a JSON object", "array"});
  // nlohmann-json reports a number too large for a double as out_of_range, not parse_error (a fuzz finding).
  expect_refusal(replaced(vocab, "\"<|endoftext|>\": 300", "\"<|endoftext|>\": 1e999"), merges,
                 {"vocab.json: not valid JSON", "number overflow"});
  expect_refusal(replaced(vocab, "\"<|endoftext|>\": 300", "\"<|endoftext|>\": \"300\""), merges,
                 {"vocab.json: token \"<|endoftext|>\": the id must be an integer, got \"300\""});
  expect_refusal(replaced(vocab, "\"<|endoftext|>\": 300", "\"<|endoftext|>\": 65536"), merges,
                 {"vocab.json: token \"<|endoftext|>\": id 65536 is outside 0..65535"});
  expect_refusal(replaced(vocab, "\"<|endoftext|>\": 300", "\"<|endoftext|>\": -1"), merges, {"id -1 is outside"});
  expect_refusal(replaced(vocab, "\"<|endoftext|>\": 300", "\"<|endoftext|>\": 64"), merges,
                 {"vocab.json: tokens ", "\"a\"", "\"<|endoftext|>\"", " both have id 64"});
  expect_refusal(replaced(vocab, "\"<|endoftext|>\": 300", "\"a\": 300"), merges,
                 {"vocab.json: token \"a\" is listed twice"});
  expect_refusal(replaced(vocab, "\"<|endoftext|>\": 300", "\"中\": 300"), merges,
                 {"vocab.json: token \"中\" (id 300): U+4E2D is not one of the 256 byte symbols"});
  expect_refusal(replaced(vocab, "\"<|endoftext|>\": 300", "\"\": 300"), merges, {"id 300: the token is empty"});
  expect_refusal(replaced(vocab, "\"a\": 64", "\"<|a|>\": 64"), merges,
                 {"vocab.json: no token for byte 0x61 (symbol \"a\")"});
}

TEST(Gpt2BpeFiles, MalformedMergesAreRefusedNamingFileAndLine) {
  const std::string vocab = vocab_json(), merges = merges_txt();
  // Line 1 is "#version: 0.2", line 2 the first merge "Ġ t".
  expect_refusal(vocab, replaced(merges, "h e\n", "h e x\n"), {"merges.txt:3: \"h e x\" is not two symbols"});
  expect_refusal(vocab, replaced(merges, "h e\n", "he\n"), {"merges.txt:3: \"he\" is not two symbols"});
  expect_refusal(vocab, replaced(merges, "h e\n", "h  e\n"), {"merges.txt:3:", "not two symbols"});
  expect_refusal(vocab, replaced(merges, "h e\n", "\n"), {"merges.txt:3: \"\" is not two symbols"});
  expect_refusal(vocab, replaced(merges, "h e\n", "h e\r\n"), {"merges.txt:3: the line ends in a carriage return"});
  expect_refusal(vocab, replaced(merges, "h e\n", "#version: 0.2\n"), {"merges.txt:3: \"#version: 0.2\" merges"});
  expect_refusal(vocab, replaced(merges, "h e\n", "h x\n"),
                 {"merges.txt:3: \"h x\" merges into \"hx\", but \"hx\" is not in", "vocab.json"});
  expect_refusal(vocab, replaced(merges, "Ġt he\n", "Ġt hx\n"), {"merges.txt:4:", "but \"hx\" is not in"});
  expect_refusal(vocab, merges + "h e\n", {"merges.txt:23: \"h e\" repeats line 3"});
  // The last line needs no newline, and a file of merges alone (no #version line) is fine.
  ScratchDir dir;
  write_tokenizer(dir.path(), vocab, merges.substr(merges.find('\n') + 1, merges.size() - merges.find('\n') - 2));
  EXPECT_EQ(make_tokenizer(dir.path())->encode(" the café"), (Ids{258, kSpace, 268}));
}
