#include "model/vocab_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace strata::model {

VocabSlice::VocabSlice(const ModelConfig& config, TensorSplit split)
    : rows(config.padded_vocab_size / split.size),
      first(split.rank * rows),
      real(std::clamp(config.vocab_size - first, 0, rows)) {}

void vocab_parallel_lookup(float* out, const std::int32_t* tokens, const float* table, const VocabSlice& slice, int C,
                           Range rows) {
  for (int i = rows.begin; i < rows.end; ++i) {
    float* o = out + static_cast<std::size_t>(i) * C;
    const int local = slice.local(tokens[i]);
    if (local >= 0) std::memcpy(o, table + static_cast<std::size_t>(local) * C, sizeof(float) * C);
    else std::fill_n(o, C, 0.f);
  }
}

void vocab_parallel_scatter(float* dtable, const float* dout, const std::int32_t* tokens, int n,
                            const VocabSlice& slice, int C, Range cols) {
  for (int i = 0; i < n; ++i) {
    const int local = slice.local(tokens[i]);
    if (local < 0) continue;
    float* dst = dtable + static_cast<std::size_t>(local) * C;
    const float* src = dout + static_cast<std::size_t>(i) * C;
    for (int c = cols.begin; c < cols.end; ++c) dst[c] += src[c];
  }
}

void VocabParallelLoss::reduce_rows(const float* logits, const std::int32_t* targets, const VocabSlice& slice,
                                    Range rows) {
  for (int i = rows.begin; i < rows.end; ++i) {
    const float* l = logits + static_cast<std::size_t>(i) * slice.rows;
    float mx = -3.4e38f;
    for (int j = 0; j < slice.real; ++j) mx = std::max(mx, l[j]);
    float sum = 0;
    for (int j = 0; j < slice.real; ++j) sum += std::exp(l[j] - mx);
    const int t = targets[i] - slice.first;
    float* st = stats_.data() + 3 * static_cast<std::size_t>(i);
    st[0] = mx, st[1] = sum, st[2] = t >= 0 && t < slice.real ? l[t] : 0.f;
  }
}

float VocabParallelLoss::combine(TensorParallelGroup& group, float* lse, float* losses) {
  group.all_gather(stats_.data(), stats_.size(), all_.data());
  const std::size_t per_rank = stats_.size(), ranks = all_.size() / per_rank;
  const int n = static_cast<int>(per_rank / 3);
  double total = 0;  // in row order: deterministic
  for (int i = 0; i < n; ++i) {
    float mx = -3.4e38f, sum = 0, target = 0;
    for (std::size_t r = 0; r < ranks; ++r) mx = std::max(mx, all_[r * per_rank + 3 * i]);
    for (std::size_t r = 0; r < ranks; ++r) {
      const float* st = all_.data() + r * per_rank + 3 * i;
      sum += st[1] * std::exp(st[0] - mx);
      target += st[2];
    }
    lse[i] = mx + std::log(sum);
    losses[i] = lse[i] - target;
    total += losses[i];
  }
  return static_cast<float>(total / n);
}

void vocab_parallel_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                          const std::int32_t* targets, const VocabSlice& slice, float scale,
                                          Range rows) {
  for (int i = rows.begin; i < rows.end; ++i) {
    const float* l = logits + static_cast<std::size_t>(i) * slice.rows;
    float* d = dlogits + static_cast<std::size_t>(i) * slice.rows;
    for (int j = 0; j < slice.real; ++j) d[j] = scale * std::exp(l[j] - lse[i]);
    std::fill(d + slice.real, d + slice.rows, 0.f);
    const int t = targets[i] - slice.first;
    if (t >= 0 && t < slice.real) d[t] -= scale;
  }
}

}  // namespace strata::model
