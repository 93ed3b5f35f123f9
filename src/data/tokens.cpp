#include "data/tokens.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "data/utf8.hpp"

namespace strata::data {

static_assert(std::endian::native == std::endian::little, "token files are little-endian; so is this code");

void write_token_file(const std::filesystem::path& path, std::span<const std::uint16_t> tokens) {
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw Error(fmt::format("{}: {} tokens do not fit the format's int32 count", path.string(), tokens.size()));
  std::vector<std::byte> bytes(kTokenHeaderBytes + tokens.size_bytes());
  std::array<std::int32_t, kTokenHeaderInts> header{};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<std::int32_t>(tokens.size());
  std::memcpy(bytes.data(), header.data(), kTokenHeaderBytes);
  if (!tokens.empty()) std::memcpy(bytes.data() + kTokenHeaderBytes, tokens.data(), tokens.size_bytes());
  atomic_write_file(path, bytes);
}

TokenFile::TokenFile(const std::filesystem::path& path, int vocab_size) : path_(path) {
  const std::string name = path.string();
  const auto file_bytes = static_cast<std::size_t>(check_input_file(path));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open token file: {}", name, std::strerror(errno)));
  map_ = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error(fmt::format("{}: cannot map: {}", name, std::strerror(map_errno)));
  }
  map_bytes_ = file_bytes;
  try {
    std::array<std::int32_t, 3> header{};
    std::memcpy(header.data(), map_, std::min(sizeof(header), file_bytes));
    if (header[0] != kTokenFileMagic &&
        looks_like_text(std::string_view(static_cast<const char*>(map_), file_bytes)))
      throw Error(fmt::format("{}: a text file, not a token file: make a token file with `strata data prepare "
                              "--input {} --out DIR` and train on DIR/train.bin",
                              name, name));
    if (file_bytes < kTokenHeaderBytes)
      throw Error(fmt::format("{}: truncated: {} bytes, shorter than the {}-byte header", name, file_bytes,
                              kTokenHeaderBytes));
    if (header[0] != kTokenFileMagic)
      throw Error(fmt::format("{}: not a token file: magic {} (expected {}, llm.c's .bin format)", name, header[0],
                              kTokenFileMagic));
    if (header[1] != kTokenFileVersion)
      throw Error(fmt::format("{}: unsupported token file version {} (expected {}: uint16 tokens)", name,
                              header[1], kTokenFileVersion));
    if (header[2] <= 0) throw Error(fmt::format("{}: header announces {} tokens", name, header[2]));
    count_ = static_cast<std::size_t>(header[2]);
    const std::size_t expected = kTokenHeaderBytes + count_ * sizeof(std::uint16_t);
    if (file_bytes < expected)
      throw Error(fmt::format("{}: truncated: the header announces {} tokens ({} bytes) but the file has {} bytes",
                              name, count_, expected, file_bytes));
    if (file_bytes > expected)
      throw Error(fmt::format("{}: {} stray bytes after the {} tokens the header announces", name,
                              file_bytes - expected, count_));
    tokens_ = reinterpret_cast<const std::uint16_t*>(static_cast<const std::byte*>(map_) + kTokenHeaderBytes);
    if (vocab_size > 0) {
      for (std::size_t i = 0; i < count_; ++i)
        if (tokens_[i] >= vocab_size)
          throw Error(fmt::format("{}: token id {} at position {} is outside the vocabulary (vocab_size = {}): "
                                  "made with a larger tokenizer? Set model.vocab_size (--vocab-size) to its "
                                  "vocabulary, e.g. 50257 for GPT-2's",
                                  name, tokens_[i], i, vocab_size));
    }
  } catch (...) {
    unmap();
    throw;
  }
}

TokenFile::TokenFile(TokenFile&& other) noexcept { *this = std::move(other); }

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    count_ = std::exchange(other.count_, 0);
  }
  return *this;
}

TokenFile::~TokenFile() { unmap(); }

void TokenFile::unmap() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
  count_ = 0;
}

TokenStats token_stats(std::span<const std::uint16_t> tokens) {
  TokenStats s;
  s.count = tokens.size();
  if (tokens.empty()) return s;
  std::vector<std::uint64_t> counts(65536, 0);
  for (std::uint16_t t : tokens) ++counts[t];
  s.min_id = 65535;
  const double total = static_cast<double>(tokens.size());
  for (int id = 0; id < 65536; ++id) {
    const std::uint64_t c = counts[static_cast<std::size_t>(id)];
    if (c == 0) continue;
    s.min_id = std::min(s.min_id, id);
    s.max_id = id;
    ++s.distinct;
    const double p = static_cast<double>(c) / total;
    s.entropy_nats -= p * std::log(p);
  }
  return s;
}

double unigram_entropy(const std::filesystem::path& path) { return token_stats(TokenFile(path).tokens()).entropy_nats; }

}  // namespace strata::data
