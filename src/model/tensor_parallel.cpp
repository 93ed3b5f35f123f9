#include "model/tensor_parallel.hpp"

namespace strata::model {

std::vector<TensorParallelCall> tensor_parallel_calls(const TensorParallelWalk& walk) {
  using K = TensorParallelCall;
  const std::size_t rows = static_cast<std::size_t>(walk.batch) * walk.seq, activation = rows * walk.hidden;
  const TensorParallelCall forward{K::AllReduce, activation, walk.activation_bytes, false};
  const TensorParallelCall backward{K::AllReduce, activation, walk.activation_bytes, true};
  std::vector<TensorParallelCall> calls;
  if (walk.embedding) calls.push_back(forward);
  calls.insert(calls.end(), 2 * static_cast<std::size_t>(walk.blocks), forward);
  if (walk.head) {
    calls.push_back({K::AllGather, 3 * rows, 4, false});
    calls.push_back(backward);
  }
  calls.insert(calls.end(), (walk.recompute ? 4 : 2) * static_cast<std::size_t>(walk.blocks), backward);
  return calls;
}

}  // namespace strata::model
