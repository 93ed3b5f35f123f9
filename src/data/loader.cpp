#include "data/loader.hpp"

#include <limits>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/rng.hpp"

namespace strata::data {

namespace {

// SplitMix64: tiny, fully specified, so a permutation is the same on every platform
// (std::shuffle's distributions are implementation-defined).
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return splitmix64(state_); }
  // Uniform in [0, range), unbiased (multiply-shift with rejection).
  std::uint64_t below(std::uint64_t range) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * range;
    auto low = static_cast<std::uint64_t>(m);
    if (low < range) {
      const std::uint64_t threshold = (0 - range) % range;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * range;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

 private:
  std::uint64_t state_;
};

void check_positive(const char* field, int value) {
  if (value <= 0) throw Error(fmt::format("data loader: {} = {}: must be positive", field, value));
}

}  // namespace

DataLoader::DataLoader(const std::filesystem::path& path, int batch, int seq, int rank, int world,
                       std::optional<std::uint64_t> shuffle_seed, int vocab_size)
    : file_(path, vocab_size), batch_(batch), seq_(seq), rank_(rank), world_(world), shuffle_seed_(shuffle_seed) {
  check_positive("batch", batch);
  check_positive("seq", seq);
  check_positive("world", world);
  if (rank < 0 || rank >= world)
    throw Error(fmt::format("data loader: rank = {} is outside [0, world = {})", rank, world));
  const std::size_t window = static_cast<std::size_t>(seq) + 1;
  const std::size_t per_batch = static_cast<std::size_t>(batch) * static_cast<std::size_t>(world);
  windows_ = file_.size() / window;
  batches_per_epoch_ = static_cast<std::int64_t>(windows_ / per_batch);
  if (batches_per_epoch_ == 0)
    throw Error(fmt::format("{}: {} tokens, fewer than one global micro-batch needs: batch {} x world {} x "
                            "(seq {} + 1) = {} tokens",
                            path.string(), file_.size(), batch, world, seq, per_batch * window));
}

void DataLoader::set_position(std::int64_t position) {
  if (position < 0) throw Error(fmt::format("data loader: position = {}: must not be negative", position));
  position_ = position;
}

std::size_t DataLoader::window_at(std::int64_t epoch, std::size_t slot) {
  if (!shuffle_seed_) return slot;
  if (order_epoch_ != epoch) {
    order_.resize(windows_);
    std::iota(order_.begin(), order_.end(), 0u);
    // The epoch enters hashed, so neighbouring seeds do not replay each other's epochs.
    SplitMix64 rng(*shuffle_seed_ ^ SplitMix64(static_cast<std::uint64_t>(epoch)).next());
    for (std::size_t i = windows_ - 1; i > 0; --i) std::swap(order_[i], order_[rng.below(i + 1)]);
    order_epoch_ = epoch;
  }
  return order_[slot];
}

void DataLoader::next(std::int32_t* tokens, std::int32_t* targets) {
  // Only a position restored from a corrupt checkpoint gets here; advancing would overflow.
  if (position_ == std::numeric_limits<std::int64_t>::max())
    throw Error(fmt::format("data loader: position = {}: the last one there is, no batch follows it", position_));
  const std::int64_t epoch = position_ / batches_per_epoch_;
  const auto in_epoch = static_cast<std::size_t>(position_ % batches_per_epoch_);
  const std::size_t B = static_cast<std::size_t>(batch_), T = static_cast<std::size_t>(seq_);
  const std::size_t first_slot = in_epoch * B * static_cast<std::size_t>(world_) + static_cast<std::size_t>(rank_) * B;
  const std::uint16_t* stream = file_.tokens().data();
  for (std::size_t b = 0; b < B; ++b) {
    const std::uint16_t* window = stream + window_at(epoch, first_slot + b) * (T + 1);
    for (std::size_t t = 0; t < T; ++t) {
      tokens[b * T + t] = window[t];
      targets[b * T + t] = window[t + 1];
    }
  }
  ++position_;
}

}  // namespace strata::data
