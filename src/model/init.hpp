#pragma once
// Initial parameters of either family, from the layout alone (TensorInfo::init): normal
// std 0.02 matrices and embeddings, residual output projections 0.02/sqrt(2 n_layer), unit
// norm gains, zero biases, padded vocabulary rows and alignment padding. Tensor i's chunk c
// of 64Ki elements draws normal pairs from Rng(seed, i << 32 | c), so any element's value
// depends on (seed, tensor, element index) only. A TP slice's layout (layout.hpp) gets the
// whole model's values at the elements it holds, so TP runs start from the TP-1 model.
#include <cstddef>
#include <cstdint>

#include "model/layout.hpp"

namespace strata::model {

void init_params(const ParamLayout& layout, float* params, std::uint64_t seed);
// The same values for arena positions [begin, end) only, written to out[0, end - begin): a
// rank initialises just the slices it holds, bit for bit as init_params would.
void init_params_range(const ParamLayout& layout, std::size_t begin, std::size_t end, float* out,
                       std::uint64_t seed);

}  // namespace strata::model
