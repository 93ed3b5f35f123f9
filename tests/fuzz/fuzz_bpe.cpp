// GPT-2 BPE files and encoding: bytes -> vocab.json + merges.txt -> Gpt2BpeTokenizer, then the
// encoding of a text, which must decode back to that text.
// Input: vocab.json's bytes, a NUL, merges.txt's bytes, optionally a NUL and the text (any
// bytes; without it, the merges file's bytes are encoded).
// A strata::Error is the expected answer to bad files; anything else is a finding, and so is
// a text that does not come back whole.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "base/error.hpp"
#include "data/bpe.hpp"
#include "fuzz_files.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t vocab_end = input.find('\0');
  if (vocab_end == std::string_view::npos) return -1;  // not an input of this format: keep it out of the corpus
  std::string_view merges = input.substr(vocab_end + 1), text = merges;
  if (const std::size_t merges_end = merges.find('\0'); merges_end != std::string_view::npos) {
    text = merges.substr(merges_end + 1);
    merges = merges.substr(0, merges_end);
  }
  const auto& dir = strata::fuzz::scratch_dir();
  strata::fuzz::write_whole_file(dir / "vocab.json", data, vocab_end);
  strata::fuzz::write_whole_file(dir / "merges.txt", reinterpret_cast<const std::uint8_t*>(merges.data()),
                                 merges.size());
  try {
    const strata::data::Gpt2BpeTokenizer bpe(dir);
    if (bpe.decode(bpe.encode(text)) != text) {
      std::fprintf(stderr, "fuzz_bpe: decode(encode(text)) differs from the text\n");
      std::abort();
    }
  } catch (const strata::Error&) {
  }
  return 0;
}
