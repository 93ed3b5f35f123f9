#pragma once
// `strata data prepare`: text files -> OUT/train.bin and OUT/val.bin, in tokens of the
// tokenizer named (tokenizer.hpp: bytes by default, or GPT-2 BPE from files).
//
// Which files. A named file must look like text and is used as is. A named directory is
// walked recursively and gives every regular file (symlinks resolved) that looks like text,
// in lexicographic path order; others are skipped and counted. "Looks like text" = no NUL
// byte and valid UTF-8: that skips binary files such as fortune's `.dat` indexes. Each file
// is read once, by its resolved path, so fortune's `.u8` symlinks add nothing. Files are
// concatenated in input order, each ended by a newline if it lacks one.
//
// Validation split. The text is cut into chunks of chunk_bytes; chunk i goes to validation
// when floor((i + 1) f) > floor(i f) for f = val_fraction (for f = 0.05: chunks 19, 39, 59,
// ...), so validation text is spread evenly over the whole corpus. The text is tokenized as
// a whole and each token goes where its first byte lies, so no word is cut at a chunk's edge
// into tokens the tokenizer would not make (for bytes: exactly the chunks' bytes).
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace strata::data {

struct PrepareOptions {
  std::vector<std::filesystem::path> inputs;
  std::filesystem::path out_dir;
  double val_fraction = 0.05;
  std::size_t chunk_bytes = 4096;
  std::filesystem::path tokenizer;  // its files' directory (make_tokenizer); empty: bytes
};

struct PrepareReport {
  std::vector<std::filesystem::path> files;  // used, in order
  std::size_t skipped_not_text = 0;          // directory entries that do not look like text
  std::size_t skipped_duplicates = 0;        // paths resolving to a file already taken
  std::string tokenizer;                     // its name()
  int vocab_size = 0;                        // the tokenizer's: a model needs at least this
  std::size_t train_tokens = 0, val_tokens = 0;
  std::filesystem::path train_path, val_path;
};

// Refuses bad options, a tokenizer directory make_tokenizer refuses, missing inputs, a
// named file that is not text, no text at all, and text too short to give both a training
// and a validation chunk. Writes nothing on refusal.
PrepareReport prepare_text(const PrepareOptions& options);

}  // namespace strata::data
