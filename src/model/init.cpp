#include "model/init.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/rng.hpp"

namespace strata::model {

void init_params(const ParamLayout& layout, float* params, std::uint64_t seed) {
  init_params_range(layout, 0, layout.total_floats(), params, seed);
}

namespace {

// A TP slice's values are the whole model's at the positions the slice came from: each
// tensor's part of the whole arena that covers its runs inside [begin, end) is drawn once
// (into `whole`), then the runs are copied out.
void init_slice_range(const ParamLayout& slice, std::size_t begin, std::size_t end, float* out,
                      std::uint64_t seed) {
  const ParamLayout full(slice.config());
  std::fill(out, out + (end - begin), 0.f);
  std::vector<float> whole;
  for (std::size_t ti = 0; ti < slice.tensors().size(); ++ti) {
    const TensorInfo& t = slice.tensors()[ti];
    if (end <= t.offset || begin >= t.offset + t.numel) continue;
    struct Piece {
      std::size_t at, from, count;  // slice arena position, whole-tensor element, elements
    };
    std::vector<Piece> pieces;
    std::size_t lo = SIZE_MAX, hi = 0;
    for (const SliceRun& run : slice.slice_runs(t)) {
      const std::size_t a = std::max(begin, t.offset + run.local), b = std::min(end, t.offset + run.local + run.count);
      if (a >= b) continue;
      const std::size_t from = run.full + (a - t.offset - run.local);
      pieces.push_back({a, from, b - a});
      lo = std::min(lo, from);
      hi = std::max(hi, from + (b - a));
    }
    if (pieces.empty()) continue;
    const std::size_t whole_offset = full.tensors()[ti].offset;
    whole.resize(hi - lo);
    init_params_range(full, whole_offset + lo, whole_offset + hi, whole.data(), seed);
    for (const Piece& p : pieces) std::copy_n(whole.data() + (p.from - lo), p.count, out + (p.at - begin));
  }
}

}  // namespace

void init_params_range(const ParamLayout& layout, std::size_t begin, std::size_t end, float* out,
                       std::uint64_t seed) {
  if (begin > end || end > layout.total_floats())
    throw Error(fmt::format("model: init range [{}, {}) is outside the arena of {} floats", begin, end,
                            layout.total_floats()));
  if (layout.split().size > 1) return init_slice_range(layout, begin, end, out, seed);
  const ModelConfig& cfg = layout.config();
  std::fill(out, out + (end - begin), 0.f);  // biases, padding
  const double residual_std = 0.02 / std::sqrt(2.0 * cfg.n_layer);
  constexpr std::size_t kChunk = 1 << 16;  // each chunk of a tensor draws from its own stream
  for (std::size_t ti = 0; ti < layout.tensors().size(); ++ti) {
    const TensorInfo& t = layout.tensors()[ti];
    if (t.init == Init::Zero) continue;
    // The part of this tensor inside the range, in the tensor's element indices [lo, stop).
    if (end <= t.offset || begin >= t.offset + t.numel) continue;
    const std::size_t lo = std::max(begin, t.offset) - t.offset;
    const std::size_t stop = std::min(end, t.offset + t.numel) - t.offset;
    // The tensor's element i, for i in [lo, stop): its arena position t.offset + i is >= begin.
    float* const first = out + (t.offset + lo - begin);
    auto element = [&](std::size_t i) -> float& { return first[i - lo]; };
    if (t.init == Init::One) {
      std::fill(first, first + (stop - lo), 1.f);
      continue;
    }
    const double stddev = t.init == Init::ResidualNormal ? residual_std : 0.02;
    // Padded vocabulary rows never receive a gradient; they stay zero.
    const std::size_t drawn = t.vocab_rows ? static_cast<std::size_t>(cfg.vocab_size) * cfg.n_embd : t.numel;
    const std::size_t n = std::min(stop, drawn);
    if (lo >= n) continue;
    const std::int64_t first_chunk = static_cast<std::int64_t>(lo / kChunk);
    const std::int64_t last_chunk = static_cast<std::int64_t>((n - 1) / kChunk);
#pragma omp parallel for schedule(static)
    for (std::int64_t c = first_chunk; c <= last_chunk; ++c) {
      Rng rng(seed, (static_cast<std::uint64_t>(ti) << 32) | static_cast<std::uint64_t>(c));
      const std::size_t chunk_begin = static_cast<std::size_t>(c) * kChunk;
      const std::size_t chunk_end = std::min(drawn, chunk_begin + kChunk);
      // Values come in pairs from the chunk's start: skip the pairs before the range, so every
      // value is the one the whole-arena walk gives it.
      const std::size_t from = std::max(lo, chunk_begin), to = std::min(n, chunk_end);
      const std::size_t first_pair = chunk_begin + (from - chunk_begin) / 2 * 2;
      rng.skip_normal_pairs((first_pair - chunk_begin) / 2);
      for (std::size_t i = first_pair; i < to; i += 2) {
        const auto z = rng.normal_pair();
        if (i >= from) element(i) = static_cast<float>(stddev * z[0]);
        if (i + 1 < to) element(i + 1) = static_cast<float>(stddev * z[1]);
      }
    }
  }
}

}  // namespace strata::model
