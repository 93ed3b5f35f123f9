#include <cblas.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/error.hpp"
#include "model/decoder.hpp"
#include "model/team.hpp"

namespace strata::model {

Decoder::Decoder(const ModelConfig& config, int max_len, const Kernels& kernels)
    : layout_(config), max_len_(max_len), kernels_(kernels) {
  if (max_len <= 0 || max_len > config.seq_len)
    throw Error(fmt::format("decoder: max_len = {}: must be in [1, model.seq_len = {}]", max_len, config.seq_len));
}

int Decoder::begin_step(std::int32_t token) {
  check_ids(&token, 1, config().vocab_size, "token");
  if (position_ >= max_len_)
    throw Error(fmt::format("decoder: position {} is past max_len = {} (model.seq_len = {}): reset() first",
                            position_, max_len_, config().seq_len));
  return position_;
}

std::unique_ptr<Decoder> make_decoder(const ModelConfig& config, int max_len, const Kernels& kernels) {
  return config.family == Family::Llama ? make_llama_decoder(config, max_len, kernels)
                                        : make_gpt_decoder(config, max_len, kernels);
}

void attend_cached(float* out, float* scores, const float* q, const float* k_cache, const float* v_cache, int n,
                   int NH, int NKV, int hd, int kv_stride) {
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int group = NH / NKV;  // query heads per K/V head
  for (int h = 0; h < NH; ++h) {
    const float* k = k_cache + static_cast<std::size_t>(h / group) * hd;
    const float* v = v_cache + static_cast<std::size_t>(h / group) * hd;
    // scores = scale K q over the cached rows, then their softmax, then out = V^T scores.
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, hd, scale, k, kv_stride, q + static_cast<std::size_t>(h) * hd, 1,
                0.f, scores, 1);
    const float max = *std::max_element(scores, scores + n);
    float sum = 0;
    for (int u = 0; u < n; ++u) sum += scores[u] = std::exp(scores[u] - max);
    const float inv = 1.f / sum;
    for (int u = 0; u < n; ++u) scores[u] *= inv;
    cblas_sgemv(CblasRowMajor, CblasTrans, n, hd, 1.f, v, kv_stride, scores, 1, 0.f,
                out + static_cast<std::size_t>(h) * hd, 1);
  }
}

}  // namespace strata::model
