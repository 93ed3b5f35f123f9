// Token files and the data loader: bytes -> a .bin file -> TokenFile, and a DataLoader
// drawing a few batches from it.
// Input: a 16-byte loader set-up, then the token file's bytes:
//   [0] batch - 1 (mod 8)   [1] seq - 1 (mod 64)   [2] world - 1 (mod 4)   [3] rank (mod world + 1)
//   [4..5] vocab_size, little-endian (0: no id check)   [6] shuffle if odd, seed [7]
//   [8..15] start position, little-endian int64
// All-zero set-up bytes give batch 1, seq 1, one rank, no id check, file order, position 0.
// A strata::Error is the expected answer to bad input; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "base/error.hpp"
#include "data/loader.hpp"
#include "data/tokens.hpp"
#include "fuzz_files.hpp"

namespace {

constexpr std::size_t kSetupBytes = 16;

struct LoaderSetup {
  int batch, seq, world, rank, vocab_size;
  std::optional<std::uint64_t> shuffle_seed;
  std::int64_t position;
};

LoaderSetup decode_setup(const std::uint8_t* p) {
  LoaderSetup s;
  s.batch = 1 + p[0] % 8;
  s.seq = 1 + p[1] % 64;
  s.world = 1 + p[2] % 4;
  s.rank = p[3] % (s.world + 1);  // rank == world: one past the last, refused
  s.vocab_size = p[4] | (p[5] << 8);
  if (p[6] & 1) s.shuffle_seed = p[7];
  std::memcpy(&s.position, p + 8, sizeof(s.position));
  return s;
}

// The loader reads the file (TokenFile) before it checks its own arguments, so every input
// goes through the file's checks.
void load_batches(const std::filesystem::path& path, const LoaderSetup& s) {
  strata::data::DataLoader loader(path, s.batch, s.seq, s.rank, s.world, s.shuffle_seed, s.vocab_size);
  loader.set_position(s.position);
  const std::size_t n = static_cast<std::size_t>(s.batch) * static_cast<std::size_t>(s.seq);
  std::vector<std::int32_t> tokens(n), targets(n);
  // Enough batches to wrap around an epoch of up to two batches.
  for (int i = 0; i < 3; ++i) {
    loader.next(tokens.data(), targets.data());
    (void)loader.epoch();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kSetupBytes) return -1;  // not an input of this format: keep it out of the corpus
  const LoaderSetup setup = decode_setup(data);
  const std::filesystem::path path = strata::fuzz::scratch_dir() / "tokens.bin";
  strata::fuzz::write_whole_file(path, data + kSetupBytes, size - kSetupBytes);
  try {
    load_batches(path, setup);
  } catch (const strata::Error&) {
  }
  return 0;
}
