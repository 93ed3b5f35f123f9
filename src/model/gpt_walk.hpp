#pragma once
// The walks over the units (gpt.hpp and llama.hpp document them), written once for every
// model that computes them: model::GPT and model::Llama on the CPU, CudaGPT and CudaLlama
// (device/cuda/). Each model passes its per-unit steps; the order of acquires, releases and
// grads_ready is this file's.
#include <cstdint>

#include "model/layout.hpp"
#include "model/model.hpp"

namespace strata::model {

// The forward: embed(embed_params), block(l, params), then head(norm_params, head_params)
// returns the loss. The families differ only in where the LM head lives (layout.hpp's
// head_unit): GPT-2's is the tied wte, so the embeddings stay acquired until the head is
// done; Llama's is a unit of its own, and the embeddings are released at once (only their
// lookup reads them).
template <class Embed, class Block, class Head>
float forward_walk(const ParamLayout& layout, UnitAccess& access, Embed&& embed, Block&& block, Head&& head) {
  const int E = layout.embeddings_unit(), N = layout.final_norm_unit(), H = layout.head_unit();
  const bool tied = H == E;
  const float* embed_params = access.acquire(E, Phase::Forward);
  embed(embed_params);
  if (!tied) access.release(E, Phase::Forward);
  for (int l = 0; l < layout.config().n_layer; ++l) {
    block(l, access.acquire(layout.block_unit(l), Phase::Forward));
    access.release(layout.block_unit(l), Phase::Forward);
  }
  // Named one by one: the walk is UnitAccess's documented order, whatever order a compiler
  // evaluates arguments in.
  const float* norm = access.acquire(N, Phase::Forward);
  const float* head_params = tied ? embed_params : access.acquire(H, Phase::Forward);
  const float loss = head(norm, head_params);
  if (!tied) access.release(H, Phase::Forward);
  access.release(N, Phase::Forward);
  if (tied) access.release(E, Phase::Forward);
  return loss;
}

// The backward, after the forward: head(norm_params, head_params, norm_grads, head_grads),
// block(l, params, grads) from the last block down, embed(embed_grads).
template <class Head, class Block, class Embed>
void backward_walk(const ParamLayout& layout, UnitAccess& access, Head&& head, Block&& block, Embed&& embed) {
  const int N = layout.final_norm_unit(), H = layout.head_unit();
  const bool tied = H == layout.embeddings_unit();
  const float* norm = access.acquire(N, Phase::Backward);
  const float* head_params = access.acquire(H, Phase::Backward);
  // Named one by one, as in the forward (an engine lends gradient buffers at the acquire
  // before them); each family asks for them in its own order.
  float *norm_grads, *head_grads;
  if (tied) {
    norm_grads = access.grads(N);
    head_grads = access.grads(H);
  } else {
    head_grads = access.grads(H);
    norm_grads = access.grads(N);
  }
  head(norm, head_params, norm_grads, head_grads);
  access.release(H, Phase::Backward);
  access.release(N, Phase::Backward);
  if (!tied) access.grads_ready(H);
  access.grads_ready(N);
  for (int l = layout.config().n_layer - 1; l >= 0; --l) {
    const int unit = layout.block_unit(l);
    const float* params = access.acquire(unit, Phase::Backward);
    block(l, params, access.grads(unit));
    access.release(unit, Phase::Backward);
    access.grads_ready(unit);
  }
  // The embeddings' backward reads no parameters.
  const int E = layout.embeddings_unit();
  embed(access.grads(E));
  access.grads_ready(E);
}

}  // namespace strata::model
