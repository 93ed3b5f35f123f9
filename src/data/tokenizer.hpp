#pragma once
// What turns text into token ids and back. Bytes (vocabulary 256) are the default; other
// tokenizers are read from files a user points at (`--tokenizer DIR`). `strata data
// prepare` encodes the corpus with one, `strata sample` encodes the prompt and decodes the
// generated ids with the same one.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Ids are in [0, vocab_size()); a model needs at least this many rows of embedding.
  virtual int vocab_size() const = 0;
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // The bytes the ids stand for, concatenated. Ids cut from a longer stream may split a
  // character: pass the result through to_valid_utf8 (utf8.hpp) before showing it. Throws
  // Error naming the position and value of the first id outside the vocabulary.
  virtual std::string decode(std::span<const std::int32_t> ids) const = 0;
  // For messages and run records: "bytes", or what the files say they are.
  virtual std::string name() const = 0;
};

// Token = byte value: any byte string encodes, and decoding gives the bytes back.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int kVocabSize = 256;
  int vocab_size() const override { return kVocabSize; }
  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::string name() const override { return "bytes"; }
};

// The tokenizer whose files are in `dir`: GPT-2's byte-level BPE (bpe.hpp); an empty path
// gives ByteTokenizer. Throws Error naming the directory or file and what is missing or
// malformed.
std::unique_ptr<Tokenizer> make_tokenizer(const std::filesystem::path& dir);

}  // namespace strata::data
