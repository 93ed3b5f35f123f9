#pragma once
// Batches for data-parallel training, identical whatever the world size.
//
// The file's token stream is cut into consecutive, non-overlapping windows of seq + 1
// tokens; a window gives seq inputs and the same seq tokens shifted by one as targets. A
// *global micro-batch* is batch x world windows; rank r takes windows [r*batch, (r+1)*batch)
// of it. The position is the index of the next global micro-batch, so as long as
// batch x world stays the same, every world size sees the same stream, and a checkpoint
// needs only that one number.
//
// An epoch holds batches_per_epoch() = floor(windows / (batch x world)) global micro-batches;
// the position wraps around at its end (epoch = position / batches_per_epoch()). Windows
// left over after the last whole micro-batch are skipped in that epoch.
// Without a shuffle seed, windows are taken in file order. With one, epoch e takes the
// windows in the order of a Fisher-Yates permutation drawn from SplitMix64 seeded by
// (seed, e), unbiased bounded draws: the same seed and epoch give the same order on every
// machine, and each epoch skips a different leftover.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "data/tokens.hpp"

namespace strata::data {

class DataLoader {
 public:
  // vocab_size > 0 refuses files with an id outside the vocabulary (see TokenFile). Refuses
  // sizes <= 0, a rank outside [0, world), and a file too short for one global micro-batch.
  DataLoader(const std::filesystem::path& path, int batch, int seq, int rank, int world,
             std::optional<std::uint64_t> shuffle_seed = std::nullopt, int vocab_size = 0);

  // Fills batch x seq inputs and targets (row-major [batch][seq]) and advances the position.
  void next(std::int32_t* tokens, std::int32_t* targets);

  std::int64_t position() const { return position_; }
  void set_position(std::int64_t position);  // throws Error if negative
  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  std::int64_t epoch() const { return position_ / batches_per_epoch_; }

  int batch() const { return batch_; }
  int seq() const { return seq_; }
  const TokenFile& file() const { return file_; }

 private:
  std::size_t window_at(std::int64_t epoch, std::size_t slot);

  TokenFile file_;
  int batch_, seq_, rank_, world_;
  std::optional<std::uint64_t> shuffle_seed_;
  std::size_t windows_ = 0;
  std::int64_t batches_per_epoch_ = 0;
  std::int64_t position_ = 0;
  std::int64_t order_epoch_ = -1;       // epoch whose permutation `order_` holds
  std::vector<std::uint32_t> order_;    // window index per slot, when shuffling
};

}  // namespace strata::data
