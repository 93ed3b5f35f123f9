#include "model/tensor_parallel.hpp"

namespace strata::model {

namespace {

std::vector<TensorParallelCall> sequence_parallel_calls(const TensorParallelWalk& walk) {
  using K = Collective;
  const std::size_t rows = static_cast<std::size_t>(walk.batch) * walk.seq, whole = rows * walk.hidden;
  const std::size_t share = whole / walk.degree, norm = static_cast<std::size_t>(walk.norm_params);
  const DType a = walk.activations;
  const TensorParallelCall gather{K::AllGather, share, a, false}, scatter{K::ReduceScatter, whole, a, false};
  std::vector<TensorParallelCall> calls;
  auto block_forward = [&](bool backward) {
    for (int i = 0; i < 2; ++i) {
      calls.push_back({K::AllGather, share, a, backward});
      calls.push_back({K::ReduceScatter, whole, a, backward});
    }
  };
  if (walk.embedding) calls.push_back(scatter);
  for (int b = 0; b < walk.blocks; ++b) block_forward(false);
  if (walk.head) {
    calls.push_back(gather);
    calls.push_back({K::AllGather, 3 * rows, DType::F32, false});
    calls.push_back({K::ReduceScatter, whole, a, true});
    calls.push_back({K::AllReduce, norm, DType::F32, true});
  }
  for (int b = 0; b < walk.blocks; ++b) {
    if (walk.recompute) block_forward(true);
    block_forward(true);
    calls.push_back({K::AllReduce, 2 * norm, DType::F32, true});
  }
  if (walk.embedding) calls.push_back({K::AllGather, share, a, true});
  return calls;
}

}  // namespace

std::vector<TensorParallelCall> tensor_parallel_calls(const TensorParallelWalk& walk) {
  using K = Collective;
  if (walk.sequence_parallel) return sequence_parallel_calls(walk);
  const std::size_t rows = static_cast<std::size_t>(walk.batch) * walk.seq, activation = rows * walk.hidden;
  const TensorParallelCall forward{K::AllReduce, activation, walk.activations, false};
  const TensorParallelCall backward{K::AllReduce, activation, walk.activations, true};
  std::vector<TensorParallelCall> calls;
  if (walk.embedding) calls.push_back(forward);
  calls.insert(calls.end(), 2 * static_cast<std::size_t>(walk.blocks), forward);
  if (walk.head) {
    calls.push_back({K::AllGather, 3 * rows, DType::F32, false});
    calls.push_back(backward);
  }
  calls.insert(calls.end(), (walk.recompute ? 4 : 2) * static_cast<std::size_t>(walk.blocks), backward);
  return calls;
}

void SequenceShards::finish_norm_grads(float* sums, float* grads, std::initializer_list<std::size_t> to) const {
  group_->all_reduce_sum(sums, width_ * to.size());
  std::size_t at = 0;
  for (std::size_t offset : to) {
    for (std::size_t c = 0; c < width_; ++c) grads[offset + c] += sums[at + c];
    at += width_;
  }
}

}  // namespace strata::model
