#include "data/prepare.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "data/tokenizer.hpp"
#include "data/tokens.hpp"
#include "data/utf8.hpp"

namespace strata::data {

namespace fs = std::filesystem;

namespace {

fs::path resolved(const fs::path& path) {
  std::error_code ec;
  fs::path p = fs::canonical(path, ec);
  return ec ? fs::absolute(path) : p;
}

}  // namespace

PrepareReport prepare_text(const PrepareOptions& options) {
  if (!(options.val_fraction > 0.0 && options.val_fraction < 1.0))
    throw Error(fmt::format("data prepare: --val-fraction = {}: must be in (0, 1)", options.val_fraction));
  if (options.chunk_bytes == 0) throw Error("data prepare: --chunk-bytes = 0: must be positive");
  if (options.inputs.empty()) throw Error("data prepare: no --input given");
  if (options.out_dir.empty()) throw Error("data prepare: no --out directory given");

  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(options.tokenizer);
  PrepareReport report;
  report.tokenizer = tokenizer->name();
  report.vocab_size = tokenizer->vocab_size();
  std::set<fs::path> taken;
  std::string text;
  auto take = [&](const fs::path& path, std::string bytes) {
    report.files.push_back(path);
    text += bytes;
    if (!bytes.empty() && bytes.back() != '\n') text += '\n';
  };

  for (const fs::path& input : options.inputs) {
    std::error_code ec;
    const fs::file_status status = fs::status(input, ec);
    if (ec || !fs::exists(status))
      throw Error(fmt::format("data prepare: {}: no such file or directory", input.string()));
    if (fs::is_directory(status)) {
      std::vector<fs::path> files;
      for (fs::recursive_directory_iterator it(input, fs::directory_options::skip_permission_denied, ec), end;
           !ec && it != end; it.increment(ec)) {
        if (it->is_regular_file()) files.push_back(it->path());
      }
      if (ec) throw Error(fmt::format("data prepare: {}: cannot list: {}", input.string(), ec.message()));
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) {
        if (!taken.insert(resolved(f)).second) {
          ++report.skipped_duplicates;
          continue;
        }
        std::string bytes = read_file_text(f, Empty::allow);  // an empty file adds nothing
        if (!looks_like_text(bytes)) {
          ++report.skipped_not_text;
          continue;
        }
        take(f, std::move(bytes));
      }
    } else {  // a file: read_file_text refuses a special, unreadable or empty one, naming it
      if (!taken.insert(resolved(input)).second) {
        ++report.skipped_duplicates;
        continue;
      }
      std::string bytes = read_file_text(input);
      if (!looks_like_text(bytes))
        throw Error(fmt::format("data prepare: {}: does not look like text (a NUL byte or invalid UTF-8); "
                                "name its directory instead to skip such files",
                                input.string()));
      take(input, std::move(bytes));
    }
  }
  if (text.empty()) {
    std::string names;
    for (const fs::path& input : options.inputs) names += (names.empty() ? "" : ", ") + input.string();
    throw Error(fmt::format("data prepare: no text found in {} ({} files skipped as not text)", names,
                            report.skipped_not_text));
  }

  const std::vector<std::int32_t> ids = tokenizer->encode(text);
  std::vector<std::uint16_t> train, val;
  train.reserve(ids.size());
  const double f = options.val_fraction;
  std::size_t offset = 0;  // of the token's first byte in the text
  for (const std::int32_t id : ids) {
    const std::size_t chunk = offset / options.chunk_bytes;
    const bool to_val = std::floor(static_cast<double>(chunk + 1) * f) > std::floor(static_cast<double>(chunk) * f);
    // Tokenizers keep ids below 65536 (bpe.hpp refuses larger ones): they fit the file's uint16.
    (to_val ? val : train).push_back(static_cast<std::uint16_t>(id));
    offset += tokenizer->decode(std::span(&id, 1)).size();
  }
  if (train.empty() || val.empty())
    throw Error(fmt::format("data prepare: {} bytes of text are too few to split: --val-fraction {} with {}-byte "
                            "chunks gives {} validation and {} training tokens (use more text, a larger "
                            "--val-fraction or smaller --chunk-bytes)",
                            text.size(), f, options.chunk_bytes, val.size(), train.size()));

  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) throw Error(fmt::format("data prepare: {}: cannot create directory: {}", options.out_dir.string(), ec.message()));
  report.train_path = options.out_dir / "train.bin";
  report.val_path = options.out_dir / "val.bin";
  write_token_file(report.train_path, train);
  write_token_file(report.val_path, val);
  report.train_tokens = train.size();
  report.val_tokens = val.size();
  return report;
}

}  // namespace strata::data
