#pragma once
// GPT-2's walk over its units (gpt.hpp documents it), written once for every model that
// computes it: model::GPT on the CPU and the GPU's CudaGPT (device/cuda/gpt_cuda.hpp). Each
// passes its per-unit steps; the order of acquires, releases and grads_ready is this file's.
#include <cstdint>

#include "model/layout.hpp"
#include "model/model.hpp"

namespace strata::model {

// The forward half: embed(embed_params), block(l, params), then head(lnf_params,
// embed_params) returns the loss.
template <class Embed, class Block, class Head>
float gpt2_forward_walk(const ParamLayout& layout, UnitAccess& access, Embed&& embed, Block&& block, Head&& head) {
  const int L = layout.config().n_layer, E = layout.embeddings_unit(), F = layout.final_norm_unit();
  const float* embed_params = access.acquire(E, Phase::Forward);
  embed(embed_params);
  for (int l = 0; l < L; ++l) {
    block(l, access.acquire(layout.block_unit(l), Phase::Forward));
    access.release(layout.block_unit(l), Phase::Forward);
  }
  const float loss = head(access.acquire(F, Phase::Forward), embed_params);
  access.release(F, Phase::Forward);
  access.release(E, Phase::Forward);
  return loss;
}

// The backward half, after the forward: head(lnf_params, embed_params, lnf_grads,
// embed_grads), block(l, params, grads) from the last block down, embed(embed_grads).
template <class Head, class Block, class Embed>
void gpt2_backward_walk(const ParamLayout& layout, UnitAccess& access, Head&& head, Block&& block, Embed&& embed) {
  const int L = layout.config().n_layer, E = layout.embeddings_unit(), F = layout.final_norm_unit();
  const float* lnf = access.acquire(F, Phase::Backward);
  const float* embed_params = access.acquire(E, Phase::Backward);
  // Named one by one: the walk is UnitAccess's documented order, whatever order a compiler
  // evaluates arguments in (an engine lends gradient buffers at the acquire before them).
  float* lnf_grads = access.grads(F);
  float* embed_grads = access.grads(E);
  head(lnf, embed_params, lnf_grads, embed_grads);
  access.release(E, Phase::Backward);
  access.release(F, Phase::Backward);
  access.grads_ready(F);
  for (int l = L - 1; l >= 0; --l) {
    const int unit = layout.block_unit(l);
    const float* params = access.acquire(unit, Phase::Backward);
    block(l, params, access.grads(unit));
    access.release(unit, Phase::Backward);
    access.grads_ready(unit);
  }
  embed(access.grads(E));
  access.grads_ready(E);
}

}  // namespace strata::model
