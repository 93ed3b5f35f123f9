#include "data/bpe.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <optional>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "data/utf8.hpp"

namespace strata::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// GPT-2's pattern with \s written as \p{White_Space}, the whitespace of Python's `regex`
// module that encoder.py uses: PCRE2's \s takes U+180E as well.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
    R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";
constexpr int kMaxTokenId = 65535;  // token files store uint16 ids

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others (control
// characters, space, DEL, NBSP, soft hyphen) for U+0100, U+0101, ... in byte order, so that
// every token is a string of visible characters.
constexpr std::array<char32_t, 256> byte_symbols() {
  std::array<char32_t, 256> symbol{};
  char32_t next = 256;
  for (char32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= U'!' && b <= U'~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    symbol[b] = printable ? b : next++;
  }
  return symbol;
}
constexpr std::array<char32_t, 256> kByteSymbol = byte_symbols();
constexpr char32_t kSymbolEnd = 256 + 68;  // symbols are below this

// UTF-8 of a byte symbol (all are below U+0800).
std::string utf8_of(char32_t c) {
  if (c < 0x80) return std::string(1, static_cast<char>(c));
  return {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
}

// A string for messages: JSON-quoted, so control characters and stray bytes show escaped.
std::string json_quoted(std::string_view s) {
  return json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

// The bytes a vocabulary key stands for, or the first character that is no byte symbol.
struct KeyBytes {
  std::string bytes;
  std::optional<char32_t> stray;
};
KeyBytes key_bytes(std::string_view key) {
  static const auto byte_of = [] {
    std::array<std::int16_t, kSymbolEnd> inverse;
    inverse.fill(-1);
    for (int b = 0; b < 256; ++b) inverse[kByteSymbol[b]] = static_cast<std::int16_t>(b);
    return inverse;
  }();
  KeyBytes out;
  for (std::size_t i = 0; i < key.size();) {
    // nlohmann-json has checked that keys are UTF-8.
    const std::size_t n = utf8_sequence_length(key, i);
    const auto lead = static_cast<unsigned char>(key[i]);
    char32_t c = n == 1 ? lead : lead & (0xFF >> (n + 1));
    for (std::size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(key[i + k]) & 0x3F);
    if (c >= kSymbolEnd || byte_of[c] < 0) {
      out.stray = c;
      return out;
    }
    out.bytes += static_cast<char>(byte_of[c]);
    i += n;
  }
  return out;
}

std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
}

struct BpeFiles {
  fs::path vocab, merges;
};

// Hugging Face's names when either of them is there, else OpenAI's.
BpeFiles find_files(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(fmt::format("--tokenizer {}: no such directory (it should hold vocab.json and merges.txt, or "
                            "encoder.json and vocab.bpe)",
                            dir.string()));
  const BpeFiles hf{dir / "vocab.json", dir / "merges.txt"}, openai{dir / "encoder.json", dir / "vocab.bpe"};
  const bool hf_named = fs::exists(hf.vocab, ec) || fs::exists(hf.merges, ec);
  const bool openai_named = fs::exists(openai.vocab, ec) || fs::exists(openai.merges, ec);
  if (!hf_named && !openai_named)
    throw Error(fmt::format("--tokenizer {}: no tokenizer files: expected vocab.json and merges.txt (Hugging Face's "
                            "names) or encoder.json and vocab.bpe (OpenAI's)",
                            dir.string()));
  const BpeFiles files = hf_named ? hf : openai;
  for (const fs::path& f : {files.vocab, files.merges})
    if (!fs::exists(f, ec))
      throw Error(fmt::format("--tokenizer {}: {} is missing (it goes with {})", dir.string(), f.filename().string(),
                              (f == files.vocab ? files.merges : files.vocab).filename().string()));
  return files;
}

std::string pcre2_message(int error_code) {
  std::array<PCRE2_UCHAR, 256> message{};
  pcre2_get_error_message(error_code, message.data(), message.size());
  return reinterpret_cast<const char*>(message.data());
}

// GPT-2's pattern, compiled once per process: compiled PCRE2 code is read-only, so encode()
// in several threads may share it, each call with match data of its own.
const pcre2_code* gpt2_pattern() {
  static const std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> code = [] {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* compiled = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern.data()), kGpt2Pattern.size(),
                                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code, &error_offset,
                                         nullptr);
    if (!compiled)
      throw Error(fmt::format("tokenizer: PCRE2 cannot compile GPT-2's pattern: {}", pcre2_message(error_code)));
    // Where the JIT is unavailable, matching falls back to the interpreter: same matches, slower.
    pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE);
    return std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)>(compiled, &pcre2_code_free);
  }();
  return code.get();
}

}  // namespace

Gpt2BpeTokenizer::Gpt2BpeTokenizer(const fs::path& dir) {
  const BpeFiles files = find_files(dir);
  const std::string vocab_name = files.vocab.string(), merges_name = files.merges.string();

  // The vocabulary: a JSON object token -> id. nlohmann-json keeps the last of repeated keys,
  // which would drop a token silently; the parse callback sees every key.
  std::unordered_set<std::string> keys;
  std::string repeated_key;
  json vocab;
  try {
    vocab = json::parse(read_file_text(files.vocab), [&](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && depth == 1 && !keys.insert(parsed.get<std::string>()).second &&
          repeated_key.empty())
        repeated_key = parsed.get<std::string>();
      return true;
    });
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw Error(fmt::format("{}: not valid JSON: {}", vocab_name, e.what()));
  }
  if (!vocab.is_object())
    throw Error(fmt::format("{}: expected a JSON object of token -> id, got a JSON {}", vocab_name, vocab.type_name()));
  if (!repeated_key.empty())
    throw Error(fmt::format("{}: token {} is listed twice", vocab_name, json_quoted(repeated_key)));

  std::unordered_map<std::string, std::int32_t> id_of;
  std::vector<std::string> key_of_id;
  for (const auto& [key, value] : vocab.items()) {
    if (!value.is_number_integer())
      throw Error(fmt::format("{}: token {}: the id must be an integer, got {}", vocab_name, json_quoted(key),
                              value.dump()));
    const auto id = value.get<std::int64_t>();
    if (id < 0 || id > kMaxTokenId)
      throw Error(fmt::format("{}: token {}: id {} is outside 0..{} (token files store 16-bit ids)", vocab_name,
                              json_quoted(key), id, kMaxTokenId));
    if (key.empty()) throw Error(fmt::format("{}: id {}: the token is empty", vocab_name, id));
    KeyBytes bytes = key_bytes(key);
    if (bytes.stray)
      throw Error(fmt::format("{}: token {} (id {}): U+{:04X} is not one of the 256 byte symbols of byte-level BPE",
                              vocab_name, json_quoted(key), id, static_cast<std::uint32_t>(*bytes.stray)));
    const auto slot = static_cast<std::size_t>(id);
    if (slot >= token_bytes_.size()) {
      token_bytes_.resize(slot + 1);
      key_of_id.resize(slot + 1);
    }
    if (!token_bytes_[slot].empty())
      throw Error(fmt::format("{}: tokens {} and {} both have id {}", vocab_name, json_quoted(key_of_id[slot]),
                              json_quoted(key), id));
    token_bytes_[slot] = std::move(bytes.bytes);
    key_of_id[slot] = key;
    id_of.emplace(key, static_cast<std::int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of.find(utf8_of(kByteSymbol[b]));
    if (it == id_of.end())
      throw Error(fmt::format("{}: no token for byte 0x{:02X} (symbol {}): byte-level BPE needs all 256", vocab_name,
                              b, json_quoted(utf8_of(kByteSymbol[b]))));
    byte_id_[b] = it->second;
  }

  // The merges, one "left right" per line, by rank.
  const std::string merges_text = read_file_text(files.merges);
  std::vector<std::size_t> line_of_rank;
  std::size_t line_number = 0;
  for (std::size_t begin = 0; begin < merges_text.size();) {
    std::size_t end = merges_text.find('\n', begin);
    if (end == std::string::npos) end = merges_text.size();
    const std::string_view line(merges_text.data() + begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (line_number == 1 && line.starts_with("#version")) continue;
    const std::string where = fmt::format("{}:{}", merges_name, line_number);
    if (line.ends_with('\r'))
      throw Error(fmt::format("{}: the line ends in a carriage return (CRLF line ends): expected LF only", where));
    const std::size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      throw Error(fmt::format("{}: {} is not two symbols separated by one space", where, json_quoted(line)));
    const std::string left(line.substr(0, space)), right(line.substr(space + 1));
    const std::string joined = left + right;
    auto id_in_vocab = [&](const std::string& part) {
      const auto it = id_of.find(part);
      if (it == id_of.end())
        throw Error(fmt::format("{}: {} merges into {}, but {} is not in {}", where, json_quoted(line),
                                json_quoted(joined), json_quoted(part), vocab_name));
      return it->second;
    };
    const std::int32_t left_id = id_in_vocab(left), right_id = id_in_vocab(right), joined_id = id_in_vocab(joined);
    const auto rank = static_cast<std::int32_t>(line_of_rank.size());
    const auto [it, inserted] = merges_.try_emplace(pair_key(left_id, right_id), Merge{rank, joined_id});
    if (!inserted)
      throw Error(fmt::format("{}: {} repeats line {}", where, json_quoted(line), line_of_rank[it->second.rank]));
    line_of_rank.push_back(line_number);
  }
}

std::string Gpt2BpeTokenizer::name() const {
  return fmt::format("gpt2-bpe ({} tokens, {} merges)", vocab_size(), merges_.size());
}

std::vector<std::int32_t> Gpt2BpeTokenizer::merge_piece(std::string_view piece) const {
  std::vector<std::int32_t> word(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) word[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  while (word.size() > 1) {
    const Merge* best = nullptr;
    std::int32_t left = 0, right = 0;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = merges_.find(pair_key(word[i], word[i + 1]));
      if (it != merges_.end() && (!best || it->second.rank < best->rank)) {
        best = &it->second;
        left = word[i];
        right = word[i + 1];
      }
    }
    if (!best) break;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
        word[kept++] = best->result;
        i += 2;
      } else {
        word[kept++] = word[i++];
      }
    }
    word.resize(kept);
  }
  return word;
}

std::vector<std::int32_t> Gpt2BpeTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  std::unordered_map<std::string_view, std::vector<std::int32_t>> merged;  // text repeats its words
  auto add = [&](std::string_view piece) {
    auto [it, inserted] = merged.try_emplace(piece);
    if (inserted) it->second = merge_piece(piece);
    ids.insert(ids.end(), it->second.begin(), it->second.end());
  };
  const pcre2_code* pattern = gpt2_pattern();
  const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(pattern, nullptr), &pcre2_match_data_free);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (std::size_t pos = 0; pos < text.size();) {
    const int rc = pcre2_match(pattern, subject, text.size(), pos, 0, match.get(), nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
      throw Error(fmt::format("tokenizer: pre-tokenizing at byte {}: {}", pos, pcre2_message(rc)));
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match.get());
    const std::size_t start = rc < 0 ? text.size() : span[0], end = rc < 0 ? text.size() : span[1];
    if (start > pos) add(text.substr(pos, start - pos));  // bytes no item matches: not UTF-8
    if (end > start) add(text.substr(start, end - start));
    pos = end;
  }
  return ids;
}

std::string Gpt2BpeTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size() || token_bytes_[static_cast<std::size_t>(ids[i])].empty())
      throw Error(fmt::format("tokenizer: token {} at position {} is not in the vocabulary of {}", ids[i], i, name()));
    out += token_bytes_[static_cast<std::size_t>(ids[i])];
  }
  return out;
}

}  // namespace strata::data
