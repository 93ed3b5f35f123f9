#pragma once
// The vocab-parallel embedding and loss every family shares under tensor parallelism
// (tensor_parallel.hpp): a TP rank holds a slice of the vocabulary rows of the embedding and
// of the LM head (GPT-2's tied head is the embedding's slice, Llama's untied head a slice of
// its own), looks up only the tokens it holds and reduces its logits to per-row statistics
// that one all-gather combines. Serial over a Range, like the kernels (kernels.hpp).
#include <cstdint>
#include <vector>

#include "model/config.hpp"
#include "model/kernels.hpp"
#include "model/tensor_parallel.hpp"

namespace strata::model {

// TP rank split.rank's rows [first, first + rows) of the padded vocabulary, of which the
// first `real` are below vocab_size (logits past it carry no gradient). Without a split, every row.
struct VocabSlice {
  int rows = 0, first = 0, real = 0;
  VocabSlice(const ModelConfig& config, TensorSplit split);
  // A token's row in the slice, or -1 where another rank holds it.
  int local(std::int32_t token) const {
    const int l = token - first;
    return l >= 0 && l < rows ? l : -1;
  }
};

// Rows `rows` of out [N, C]: the token's row of `table` (the slice's rows) where this slice
// holds it, zeros elsewhere; the TP group's sum is the whole embedding's lookup, bit for bit.
void vocab_parallel_lookup(float* out, const std::int32_t* tokens, const float* table, const VocabSlice& slice, int C,
                           Range rows);
// Columns `cols` of dtable += dout[i] at the row of token i, for the n rows whose token the
// slice holds, in row order (repeated tokens sum deterministically).
void vocab_parallel_scatter(float* dtable, const float* dout, const std::int32_t* tokens, int n,
                            const VocabSlice& slice, int C, Range cols);

// Cross-entropy over logits split by vocabulary rows. Each rank reduces its slice of a row to
// (max, sum of exp(logit - max), the target's logit or 0); one all-gather of those three per
// row gives every rank every slice's, which each combines in rank order into the same
// log-sum-exp: Megatron's max and sum all-reduces (and the target logit's) in one collective.
class VocabParallelLoss {
 public:
  VocabParallelLoss(int rows, int ranks) : stats_(3 * static_cast<std::size_t>(rows)), all_(stats_.size() * ranks) {}
  // Rows `rows` of this rank's statistics from logits [N, slice.rows].
  void reduce_rows(const float* logits, const std::int32_t* targets, const VocabSlice& slice, Range rows);
  // After reduce_rows over every row: the gather over `group`, then each row's log-sum-exp and
  // loss; returns the mean loss (summed in row order: deterministic).
  float combine(TensorParallelGroup& group, float* lse, float* losses);

 private:
  std::vector<float> stats_, all_;
};

// Rows `rows` of dlogits = scale * (softmax - onehot(target)) over the slice's real rows, 0 past them.
void vocab_parallel_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                          const std::int32_t* targets, const VocabSlice& slice, float scale,
                                          Range rows);

}  // namespace strata::model
