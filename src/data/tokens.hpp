#pragma once
// Byte-level tokens and token files in llm.c's `.bin` format, so data tokenized by llm.c or
// nanoGPT-style GPT-2 tools loads as is:
//   256 little-endian int32 header: [0] = 20240520 (magic), [1] = 1 (version),
//   [2] = token count, the rest zero; then `count` little-endian uint16 token ids.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::data {

inline constexpr std::int32_t kTokenFileMagic = 20240520;
inline constexpr std::int32_t kTokenFileVersion = 1;
inline constexpr std::size_t kTokenHeaderInts = 256;
inline constexpr std::size_t kTokenHeaderBytes = kTokenHeaderInts * sizeof(std::int32_t);

// Writes the file atomically (it exists whole or not at all).
void write_token_file(const std::filesystem::path& path, std::span<const std::uint16_t> tokens);

// A validated, read-only memory map of a token file. Refuses, naming the file: a missing,
// empty or truncated file, a bad magic or version, a size that disagrees with the header's
// count, and, given vocab_size > 0, any id >= vocab_size (first offending position and id).
class TokenFile {
 public:
  explicit TokenFile(const std::filesystem::path& path, int vocab_size = 0);
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  const std::filesystem::path& path() const { return path_; }
  std::span<const std::uint16_t> tokens() const { return {tokens_, count_}; }
  std::size_t size() const { return count_; }

 private:
  void unmap();
  std::filesystem::path path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const std::uint16_t* tokens_ = nullptr;
  std::size_t count_ = 0;
};

struct TokenStats {
  std::size_t count = 0;
  int min_id = 0, max_id = 0;
  int distinct = 0;           // ids that occur at least once
  double entropy_nats = 0.0;  // of the unigram (token-frequency) distribution
};
TokenStats token_stats(std::span<const std::uint16_t> tokens);

// Unigram entropy in nats of a token file: the loss of a model that knows only token
// frequencies, which a trained model's validation loss should beat.
double unigram_entropy(const std::filesystem::path& path);

}  // namespace strata::data
