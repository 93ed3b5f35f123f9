#pragma once
// For comparing runs whose reduction order differs (tensor or pipeline parallel against one
// process): the key biases' gradient is zero in exact arithmetic, so what Adam makes of
// their rounding noise differs with any other summation order; comparisons leave them out.
#include <cstddef>
#include <string>

#include "model/layout.hpp"

inline bool key_bias(const strata::model::ParamLayout& layout, std::size_t i) {
  const std::size_t C = layout.config().n_embd;
  for (int l = 0; l < layout.config().n_layer; ++l) {
    const auto* t = layout.try_find("h." + std::to_string(l) + ".attn.c_attn.bias");  // Llama has none
    if (t && i >= t->offset + C && i < t->offset + 2 * C) return true;
  }
  return false;
}
