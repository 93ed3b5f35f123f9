#pragma once
// GPT-2's byte-level BPE, read from the files a user points at, encoding as OpenAI's
// encoder.py and Hugging Face's GPT2Tokenizer do:
//   1. pre-tokenization: the text is cut by GPT-2's pattern
//      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (PCRE2 with Unicode classes; \s is Unicode's White_Space, as in Python's `regex`).
//      Bytes that are not UTF-8, which no pattern item matches (and which the Python
//      tokenizers cannot be given at all), form a piece of their own;
//   2. each piece's bytes become byte symbols (bytes_to_unicode: the printable bytes stand for
//      themselves, the other 68 for U+0100..U+0143), and the adjacent pair of lowest merge
//      rank is merged, every occurrence left to right, until no pair has a rank;
//   3. each resulting symbol string's id comes from the vocabulary.
// Special tokens are not special: the text "<|endoftext|>" encodes as the ordinary text it is
// (GPT-2's vocabulary lists it as a plain entry, so its id decodes back to that text).
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.hpp"

namespace strata::data {

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // Reads DIR/vocab.json + DIR/merges.txt (Hugging Face's names) or, when neither of those is
  // there, DIR/encoder.json + DIR/vocab.bpe (OpenAI's). Refuses, naming the file: a missing
  // file, malformed JSON, an id that is not an integer in 0..65535 (token files store uint16),
  // two tokens with one id, a token that is not made of the 256 byte symbols, a byte without
  // its symbol; and naming file and line: a merges line that is not two symbols separated by
  // one space (a first line "#version..." is allowed), a merge whose parts or result are not
  // in the vocabulary (such a merge could never apply, or would make a token without an id),
  // a merge listed twice. Ids may have gaps: vocab_size() is the largest id + 1.
  explicit Gpt2BpeTokenizer(const std::filesystem::path& dir);

  int vocab_size() const override { return static_cast<int>(token_bytes_.size()); }
  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::string name() const override;

 private:
  struct Merge {
    std::int32_t rank;    // its line among the merges: lower merges first
    std::int32_t result;  // id of the two symbols joined
  };
  std::vector<std::int32_t> merge_piece(std::string_view piece) const;

  std::array<std::int32_t, 256> byte_id_{};                 // id of each byte's symbol
  std::unordered_map<std::uint64_t, Merge> merges_;         // (left id << 32 | right id) -> merge
  std::vector<std::string> token_bytes_;                    // by id; empty: no token has that id
};

}  // namespace strata::data
