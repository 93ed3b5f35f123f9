#pragma once
// The walks over the units (gpt.hpp and llama.hpp document them), written once for every
// model that computes them: GPT-2's for model::GPT on the CPU and the GPU's CudaGPT, Llama's
// for model::Llama and CudaLlama (device/cuda/). Each model passes its per-unit steps; the
// order of acquires, releases and grads_ready is this file's.
#include <cstdint>

#include "model/layout.hpp"
#include "model/model.hpp"

namespace strata::model {

// The blocks' forward, first to last: block(l, params).
template <class Block>
void blocks_forward_walk(const ParamLayout& layout, UnitAccess& access, Block&& block) {
  for (int l = 0; l < layout.config().n_layer; ++l) {
    block(l, access.acquire(layout.block_unit(l), Phase::Forward));
    access.release(layout.block_unit(l), Phase::Forward);
  }
}

// The blocks' backward, last to first: block(l, params, grads); then the embeddings'
// backward, embed(embed_grads), which reads no parameters.
template <class Block, class Embed>
void blocks_and_embed_backward_walk(const ParamLayout& layout, UnitAccess& access, Block&& block, Embed&& embed) {
  for (int l = layout.config().n_layer - 1; l >= 0; --l) {
    const int unit = layout.block_unit(l);
    const float* params = access.acquire(unit, Phase::Backward);
    block(l, params, access.grads(unit));
    access.release(unit, Phase::Backward);
    access.grads_ready(unit);
  }
  const int E = layout.embeddings_unit();
  embed(access.grads(E));
  access.grads_ready(E);
}

// GPT-2's forward: embed(embed_params), block(l, params), then head(lnf_params,
// embed_params) returns the loss. The embeddings stay acquired: the tied LM head is wte.
template <class Embed, class Block, class Head>
float gpt2_forward_walk(const ParamLayout& layout, UnitAccess& access, Embed&& embed, Block&& block, Head&& head) {
  const int E = layout.embeddings_unit(), F = layout.final_norm_unit();
  const float* embed_params = access.acquire(E, Phase::Forward);
  embed(embed_params);
  blocks_forward_walk(layout, access, block);
  const float loss = head(access.acquire(F, Phase::Forward), embed_params);
  access.release(F, Phase::Forward);
  access.release(E, Phase::Forward);
  return loss;
}

// GPT-2's backward, after the forward: head(lnf_params, embed_params, lnf_grads,
// embed_grads), block(l, params, grads) from the last block down, embed(embed_grads).
template <class Head, class Block, class Embed>
void gpt2_backward_walk(const ParamLayout& layout, UnitAccess& access, Head&& head, Block&& block, Embed&& embed) {
  const int E = layout.embeddings_unit(), F = layout.final_norm_unit();
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
  blocks_and_embed_backward_walk(layout, access, block, embed);
}

// Llama's forward: embed(embed_params), block(l, params), then head(norm_params,
// head_params) returns the loss. The embeddings are released at once: only their lookup
// reads them.
template <class Embed, class Block, class Head>
float llama_forward_walk(const ParamLayout& layout, UnitAccess& access, Embed&& embed, Block&& block, Head&& head) {
  const int E = layout.embeddings_unit(), N = layout.final_norm_unit(), H = layout.head_unit();
  embed(access.acquire(E, Phase::Forward));
  access.release(E, Phase::Forward);
  blocks_forward_walk(layout, access, block);
  const float* norm = access.acquire(N, Phase::Forward);  // named one by one, as below
  const float* head_params = access.acquire(H, Phase::Forward);
  const float loss = head(norm, head_params);
  access.release(H, Phase::Forward);
  access.release(N, Phase::Forward);
  return loss;
}

// Llama's backward, after the forward: head(norm_params, head_params, norm_grads,
// head_grads), block(l, params, grads) from the last block down, embed(embed_grads).
template <class Head, class Block, class Embed>
void llama_backward_walk(const ParamLayout& layout, UnitAccess& access, Head&& head, Block&& block, Embed&& embed) {
  const int N = layout.final_norm_unit(), H = layout.head_unit();
  // Named one by one, as GPT-2's.
  const float* norm = access.acquire(N, Phase::Backward);
  const float* head_params = access.acquire(H, Phase::Backward);
  float* head_grads = access.grads(H);
  float* norm_grads = access.grads(N);
  head(norm, head_params, norm_grads, head_grads);
  access.release(H, Phase::Backward);
  access.release(N, Phase::Backward);
  access.grads_ready(H);
  access.grads_ready(N);
  blocks_and_embed_backward_walk(layout, access, block, embed);
}

}  // namespace strata::model
