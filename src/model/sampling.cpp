#include "model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/rng.hpp"

namespace strata::model {

void SamplingOptions::validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw Error(fmt::format("--temperature = {}: must be finite and >= 0", temperature));
  if (top_k < 0) throw Error(fmt::format("--top-k = {}: must be >= 0 (0: off)", top_k));
  if (!(top_p > 0 && top_p <= 1)) throw Error(fmt::format("--top-p = {}: must be in (0, 1]", top_p));
}

std::int32_t sample_token(const float* logits, int vocab, const SamplingOptions& options, double u) {
  // Larger logit first, lower id first among equals: a strict order, so no sort is left to chance.
  auto before = [logits](std::int32_t a, std::int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::vector<std::int32_t> ids(static_cast<std::size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  if (options.temperature == 0 || options.top_k == 1) return *std::min_element(ids.begin(), ids.end(), before);

  const int kept = options.top_k > 0 ? std::min(options.top_k, vocab) : vocab;
  std::partial_sort(ids.begin(), ids.begin() + kept, ids.end(), before);
  ids.resize(static_cast<std::size_t>(kept));
  // Softmax of logit / temperature over the kept candidates, in double.
  std::vector<double> probs(ids.size());
  const double max = logits[ids[0]];
  double total = 0;
  for (std::size_t i = 0; i < ids.size(); ++i)
    total += probs[i] = std::exp((logits[ids[i]] - max) / static_cast<double>(options.temperature));
  // Nucleus: the shortest prefix whose probability reaches top_p (at least the first token).
  std::size_t n = 0;
  double mass = 0;
  while (n < probs.size() && (n == 0 || mass < options.top_p * total)) mass += probs[n++];
  const double target = u * mass;
  double cumulative = 0;
  for (std::size_t i = 0; i < n; ++i)
    if ((cumulative += probs[i]) > target) return ids[i];
  return ids[n - 1];  // u * mass rounded up to mass
}

double sampling_uniform(std::uint64_t seed, std::uint64_t index) { return Rng(seed, index).uniform(); }

std::vector<std::int32_t> generate(Decoder& decoder, const float* params, std::span<const std::int32_t> prompt,
                                   int max_new_tokens, int vocab, const SamplingOptions& options,
                                   std::uint64_t seed) {
  options.validate();
  if (prompt.empty()) throw Error("generate: the prompt has no tokens");
  if (max_new_tokens < 0) throw Error(fmt::format("generate: max_new_tokens = {}: must be >= 0", max_new_tokens));
  if (vocab <= 0 || vocab > decoder.config().vocab_size)
    throw Error(fmt::format("generate: vocab = {}: must be in [1, model.vocab_size = {}]", vocab,
                            decoder.config().vocab_size));
  // The last drawn token is never fed back, so it needs no position.
  const std::size_t positions = prompt.size() + std::max(max_new_tokens - 1, 0);
  if (positions > static_cast<std::size_t>(decoder.max_len()))
    throw Error(fmt::format("generate: {} prompt tokens and max_new_tokens = {} need {} positions; the decoder has "
                            "max_len = {}",
                            prompt.size(), max_new_tokens, positions, decoder.max_len()));
  decoder.reset();
  const float* logits = nullptr;
  for (std::int32_t token : prompt) logits = decoder.step(params, token);
  std::vector<std::int32_t> drawn;
  for (int i = 0; i < max_new_tokens; ++i) {
    drawn.push_back(sample_token(logits, vocab, options, sampling_uniform(seed, static_cast<std::uint64_t>(i))));
    if (i + 1 < max_new_tokens) logits = decoder.step(params, drawn.back());
  }
  return drawn;
}

}  // namespace strata::model
