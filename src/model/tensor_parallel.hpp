#pragma once
// Tensor parallelism as a model sees it (Megatron's splits, and optionally its sequence
// parallelism, below): which
// slice of every split tensor this rank holds (TensorSplit, used by the layout), and the
// group its forward and backward reduce over (TensorParallelGroup, implemented by the
// sharding runtime over comm::Collectives, so a device backend brings its own).
//
// GPT-2 under a split of size N, rank r:
//   attn.c_attn   column-parallel: the q, k and v rows of heads [r H/N, (r+1) H/N)
//   attn.c_proj   row-parallel: the input columns of those heads; bias whole
//   mlp.c_fc      column-parallel: rows [r 4C/N, (r+1) 4C/N), with their bias entries
//   mlp.c_proj    row-parallel: the matching input columns; bias whole
//   wte           vocab-parallel: rows [r Vp/N, (r+1) Vp/N); the tied LM head is the same slice
//   wpe, norms    whole on every rank
// Llama likewise: q_proj, k_proj and v_proj column-parallel over its query heads and the K/V
// heads they share (n_kv_head divisible by N, so a group of query heads and its K/V head sit
// on one rank; rotary embeddings rotate the local heads), gate_proj and up_proj column-parallel
// over the SwiGLU width, o_proj and down_proj row-parallel, embed_tokens and the untied
// lm_head vocab-parallel (each its own slice); norms whole.
// A row-parallel output is a partial sum: TP rank 0 starts it from the residual and the
// whole bias, the others from zero, and one all-reduce gives every rank the block's sum
// (so the bias is added once). Backward all-reduces the gradient of each column-parallel
// input. Whole tensors get identical gradients on every TP rank (their inputs are
// all-reduced), so they stay identical without a reduction of their own.
//
// Sequence parallelism (Megatron's): the residual stream and the norms run on a 1/N
// share of the micro-batch's B*T token rows (rank r: rows [r BT/N, (r+1) BT/N), batch-major):
// each all-reduce of a row-parallel output becomes a reduce-scatter to the rank's rows, and
// each norm's output is all-gathered to every row before the column-parallel layers; in
// backward their conjugates (an all-gather of the residual gradient before the row-parallel
// layers, a reduce-scatter of the column-parallel inputs' gradient). The norms' parameter
// gradients then sum over the rank's rows only: one all-reduce a unit completes them. The
// gathered norm outputs are kept for the weight gradients (Megatron gathers them again in
// backward instead).
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "base/collective.hpp"
#include "base/dtype.hpp"

namespace strata::model {

struct TensorSplit {
  int size = 1;  // TP degree (1: nothing split)
  int rank = 0;  // this rank's index in its TP group
  bool operator==(const TensorSplit&) const = default;
};

class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  // In place: every rank of the group gets the element-wise sum, the same bits on each.
  virtual void all_reduce_sum(float* data, std::size_t n) = 0;
  // Rank k's `n` values land at all[k n, (k+1) n) on every rank.
  virtual void all_gather(const float* mine, std::size_t n, float* all) = 0;
  // Rank k gets elements [k n/N, (k+1) n/N) of the group's element-wise sum of `all` (n
  // elements, N dividing n) in `mine`.
  virtual void reduce_scatter_sum(const float* all, std::size_t n, float* mine) = 0;
};

// One collective of a training micro-batch's TP walk, in the order the model runs them
// (forward's first: evaluation runs those alone). The sharding schedule makes each an op, so
// the accounting counts them, the runtime checks every call against them and the planner
// prices them.
struct TensorParallelCall {
  Collective kind = Collective::AllReduce;
  std::size_t elements = 0;  // a rank's: the buffer reduced (all of it), or what each rank contributes
  DType wire = DType::F32;   // the activations' precision; the loss's statistics are fp32
  bool backward = false;
  bool operator==(const TensorParallelCall&) const = default;
};

// What decides a micro-batch's TP collectives, whoever asks: the runtime's models (fp32, the
// whole model) and the planner's shapes of every family (its precision, one pipeline
// stage's slice). Every family splits the same way (above): per block one all-reduce after
// each row-parallel output, one per column-parallel input's gradient; the SwiGLU gate is
// column-parallel beside its up projection, so it adds none.
struct TensorParallelWalk {
  int blocks = 0;            // blocks this rank runs
  int hidden = 0;
  int batch = 0, seq = 0;    // one micro-batch
  bool recompute = false;    // backward runs each block's forward (and its all-reduces) again
  bool embedding = true;     // holds the vocab-parallel embedding (a pipeline's first stage)
  bool head = true;          // holds the vocab-parallel LM head and loss (a pipeline's last stage)
  DType activations = DType::F32;  // fp32: strata's runtime; bf16: a bf16 system
  bool sequence_parallel = false;
  int degree = 1;            // the TP degree (sequence parallelism's shares are 1/degree of the rows)
  int norm_params = 0;       // one norm's parameters (sequence parallelism all-reduces their gradients)
};
// In the order the model runs them: the embedding's output, each block's two row-parallel
// outputs, the loss's gather of (max, sum of exponentials, target logit) per row (3·B·T fp32
// from each rank: one all-gather instead of three all-reduces, as many bytes at TP 2 and
// fewer messages); then in backward the head input's gradient and each block's two
// column-parallel input gradients (after its two forward all-reduces again under recompute).
// Under sequence parallelism: the embedding's reduce-scatter; a block's all-gather, reduce-
// scatter, all-gather, reduce-scatter; the final norm's all-gather and the loss's; in backward
// the head input gradient's reduce-scatter and the final norm's gradient all-reduce, a block's
// (after its forward four again under recompute) all-gather, reduce-scatter, all-gather,
// reduce-scatter and its two norms' gradient all-reduce, and the embedding's all-gather of the
// residual gradient.
std::vector<TensorParallelCall> tensor_parallel_calls(const TensorParallelWalk& walk);

// Sequence parallelism's collectives over a TP group of `ranks`, for activations of `rows`
// token rows of `width` (a rank's share: rows / ranks of them), as both families run them.
class SequenceShards {
 public:
  SequenceShards(TensorParallelGroup* group, int ranks, std::size_t rows, std::size_t width)
      : group_(group), ranks_(ranks), whole_(rows * width), width_(width) {}
  // The rank's share (rows / ranks rows) to every rank's, `all` holding every row.
  void gather(const float* mine, float* all) const { group_->all_gather(mine, whole_ / ranks_, all); }
  // A whole partial sum (every row) to the sum's rows of this rank.
  void scatter(const float* all, float* mine) const { group_->reduce_scatter_sum(all, whole_, mine); }
  // A unit's norm parameter gradients summed over the rank's rows (`sums`: `width` floats for
  // each offset of `to`, back to back) completed over the group and added to `grads` there.
  void finish_norm_grads(float* sums, float* grads, std::initializer_list<std::size_t> to) const;

 private:
  TensorParallelGroup* group_;
  int ranks_;
  std::size_t whole_, width_;
};

// What a model computes with under tensor parallelism; the default is no split.
struct TensorParallel {
  TensorSplit split;
  TensorParallelGroup* group = nullptr;  // required when split.size > 1
  bool sequence_parallel = false;        // under split.size > 1 only
};

}  // namespace strata::model
