#include "data/tokenizer.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "data/bpe.hpp"

namespace strata::data {

std::vector<std::int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string ByteTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string out(ids.size(), '\0');
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= kVocabSize)
      throw Error(fmt::format("tokenizer: token {} at position {} is not a byte (vocabulary 0..{})", ids[i], i,
                              kVocabSize - 1));
    out[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
  }
  return out;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::filesystem::path& dir) {
  if (dir.empty()) return std::make_unique<ByteTokenizer>();
  return std::make_unique<Gpt2BpeTokenizer>(dir);
}

}  // namespace strata::data
