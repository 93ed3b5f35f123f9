#include "model/init.hpp"

#include <algorithm>
#include <cmath>

#include "base/rng.hpp"

namespace strata::model {

void init_params(const ParamLayout& layout, float* params, std::uint64_t seed) {
  const GPTConfig& cfg = layout.config();
  std::fill(params, params + layout.total_floats(), 0.f);  // biases, padding
  const double residual_std = 0.02 / std::sqrt(2.0 * cfg.n_layer);
  constexpr std::size_t kChunk = 1 << 16;  // each chunk of a tensor draws from its own stream
  for (std::size_t ti = 0; ti < layout.tensors().size(); ++ti) {
    const TensorInfo& t = layout.tensors()[ti];
    float* dst = params + t.offset;
    if (t.init == Init::Zero) continue;
    if (t.init == Init::One) {
      std::fill(dst, dst + t.numel, 1.f);
      continue;
    }
    const double stddev = t.init == Init::ResidualNormal ? residual_std : 0.02;
    // Padded vocabulary rows never receive a gradient; they stay zero.
    const std::size_t n = t.vocab_rows ? static_cast<std::size_t>(cfg.vocab_size) * cfg.n_embd : t.numel;
    const std::int64_t chunks = static_cast<std::int64_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
    for (std::int64_t c = 0; c < chunks; ++c) {
      Rng rng(seed, (static_cast<std::uint64_t>(ti) << 32) | static_cast<std::uint64_t>(c));
      const std::size_t begin = static_cast<std::size_t>(c) * kChunk, end = std::min(n, begin + kChunk);
      for (std::size_t i = begin; i < end; i += 2) {
        const auto z = rng.normal_pair();
        dst[i] = static_cast<float>(stddev * z[0]);
        if (i + 1 < end) dst[i + 1] = static_cast<float>(stddev * z[1]);
      }
    }
  }
}

}  // namespace strata::model
