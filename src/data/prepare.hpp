#pragma once
// `strata data prepare`: text files -> OUT/train.bin and OUT/val.bin, byte-level tokens.
//
// Which files. A named file must look like text and is used as is. A named directory is
// walked recursively and gives every regular file (symlinks resolved) that looks like text,
// in lexicographic path order; others are skipped and counted. "Looks like text" = no NUL
// byte and valid UTF-8: that skips binary files such as fortune's `.dat` indexes. Each file
// is read once, by its resolved path, so fortune's `.u8` symlinks add nothing. Files are
// concatenated in input order, each ended by a newline if it lacks one.
//
// Validation split. The byte stream is cut into chunks of chunk_bytes; chunk i goes to
// validation when floor((i + 1) f) > floor(i f) for f = val_fraction (for f = 0.05: chunks
// 19, 39, 59, ...), so validation text is spread evenly over the whole corpus.
#include <cstddef>
#include <filesystem>
#include <vector>

namespace strata::data {

struct PrepareOptions {
  std::vector<std::filesystem::path> inputs;
  std::filesystem::path out_dir;
  double val_fraction = 0.05;
  std::size_t chunk_bytes = 4096;
};

struct PrepareReport {
  std::vector<std::filesystem::path> files;  // used, in order
  std::size_t skipped_not_text = 0;          // directory entries that do not look like text
  std::size_t skipped_duplicates = 0;        // paths resolving to a file already taken
  std::size_t train_tokens = 0, val_tokens = 0;
  std::filesystem::path train_path, val_path;
};

// Refuses bad options, missing inputs, a named file that is not text, no text at all, and
// text too short to give both a training and a validation chunk. Writes nothing on refusal.
PrepareReport prepare_text(const PrepareOptions& options);

}  // namespace strata::data
