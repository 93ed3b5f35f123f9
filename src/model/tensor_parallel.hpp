#pragma once
// Tensor parallelism as a model sees it (Megatron's splits, no sequence parallelism): which
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
// A row-parallel output is a partial sum: TP rank 0 starts it from the residual and the
// whole bias, the others from zero, and one all-reduce gives every rank the block's sum
// (so the bias is added once). Backward all-reduces the gradient of each column-parallel
// input. Whole tensors get identical gradients on every TP rank (their inputs are
// all-reduced), so they stay identical without a reduction of their own.
#include <cstddef>
#include <cstdint>

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
};

// One collective of a training micro-batch's TP walk, in the order the model runs them
// (forward's first: evaluation runs those alone). The sharding schedule makes each an op, so
// the accounting counts them and the runtime checks every call against them.
struct TensorParallelCall {
  enum Kind { AllReduce, AllGather } kind = AllReduce;
  std::size_t elements = 0;  // fp32 a rank: the buffer reduced, or what each rank contributes
  bool backward = false;
  bool operator==(const TensorParallelCall&) const = default;
};

// What a model computes with under tensor parallelism; the default is no split.
struct TensorParallel {
  TensorSplit split;
  TensorParallelGroup* group = nullptr;  // required when split.size > 1
};

}  // namespace strata::model
