#pragma once
// Choosing the next token from a model's logits: greedy (temperature 0) or a draw from the
// temperature-scaled softmax, restricted first to the top_k largest logits and then to the
// smallest set of those whose probabilities (renormalized over the top k) reach top_p, as
// Hugging Face's generate() filters them. Candidates are ordered by logit, ties by lower id,
// so the choice depends on nothing but the logits and the uniform number given.
#include <cstdint>
#include <span>
#include <vector>

#include "model/decoder.hpp"

namespace strata::model {

struct SamplingOptions {
  float temperature = 1.f;  // >= 0; 0: greedy (the argmax)
  int top_k = 0;            // >= 0; 0: every token
  float top_p = 1.f;        // in (0, 1]; 1: no nucleus cut
  // Throws Error naming the field as `strata sample`'s flag does ("--top-p = 0: must be in (0, 1]").
  void validate() const;
};

// The token of the first `vocab` logits that the options select for the uniform u in [0, 1):
// walking the kept candidates in order, the first whose cumulative probability exceeds u.
std::int32_t sample_token(const float* logits, int vocab, const SamplingOptions& options, double u);

// The uniform number of draw `index` under `seed`: a function of the two alone (a stream of
// base/rng.hpp's generator per draw), so a draw does not depend on the draws before it and the
// same seed gives the same text on every machine.
double sampling_uniform(std::uint64_t seed, std::uint64_t index);

// Text generation: resets the decoder, feeds it the (non-empty) prompt, then draws
// max_new_tokens tokens among the first `vocab` ids (<= model.vocab_size; a tokenizer may
// decode fewer ids than the model has), draw i with sampling_uniform(seed, i), feeding each
// back but the last. Returns the drawn tokens. Throws Error when the prompt and the tokens fed
// back do not fit decoder.max_len().
std::vector<std::int32_t> generate(Decoder& decoder, const float* params, std::span<const std::int32_t> prompt,
                                   int max_new_tokens, int vocab, const SamplingOptions& options,
                                   std::uint64_t seed);

}  // namespace strata::model
