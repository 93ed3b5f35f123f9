#pragma once
// What the models' per-unit code shares: one OpenMP parallel region per unit, whose
// threads each take a fixed share of the work (kernels.hpp explains why), the id check, and
// what the host models' activations hold alike.
#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "base/aligned.hpp"
#include "base/error.hpp"
#include "model/config.hpp"
#include "model/kernels.hpp"

namespace strata::model {

class VocabParallelLoss;

inline void check_ids(const std::int32_t* ids, std::size_t n, int vocab, const char* what) {
  for (std::size_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw Error(fmt::format("model: {} id {} at position {} is outside the vocabulary [0, {})", what, ids[i], i,
                              vocab));
}

// One OpenMP parallel region per unit: f(team) runs on every thread, which works on its
// share of rows, columns or (batch, head) pairs.
struct Team {
  int id, size;
  Range share(int n, int align = 1) const { return model::share(n, size, id, align); }
  // When the batch divides evenly, a thread's share of the B*T rows is whole sequences and
  // its share of the (batch, head) pairs is theirs: attention then reads only rows this
  // thread wrote, and the barriers around it can go.
  bool owns_whole_sequences(int B) const { return B % size == 0; }
};
template <class F>
inline void in_parallel(F&& f) {
#pragma omp parallel
  f(Team{omp_get_thread_num(), omp_get_num_threads()});
}
inline void barrier() {
#pragma omp barrier
}

// Rows `rows` of y [R, C] += x.
inline void add_rows(float* y, const float* x, int C, Range rows) {
  for (std::size_t i = static_cast<std::size_t>(rows.begin) * C; i < static_cast<std::size_t>(rows.end) * C; ++i)
    y[i] += x[i];
}

// The activations GPT and Llama (gpt.cpp, llama.cpp) hold alike, which HostModel's head and
// accessors read (model.hpp); each family places them, with its layers' (HostActivations),
// from `storage`.
struct HostBuffers {
  const Kernels* k = nullptr;  // the table the model computes with
  AlignedBuffer<float> storage;
  float *encoded = nullptr, *logits = nullptr, *lse = nullptr, *losses = nullptr;
  // Gradients: dres is the residual stream's gradient, walked from the head to the
  // embeddings; a block also fills dres_mid (after its attention) and dres_in (its input).
  float *dres = nullptr, *dres_mid = nullptr, *dres_in = nullptr, *dlogits = nullptr;
  // Sequence parallelism: the rank's rows of a norm's output (before its gather) or of a
  // reduce-scatter's sum, two whole [BT, C] buffers (a row-parallel output before its
  // reduce-scatter; the gathered residual gradients), and a unit's norm gradients before
  // their all-reduce.
  float *sp_rows = nullptr, *sp_whole = nullptr, *sp_whole2 = nullptr, *sp_norm_grads = nullptr;
  AlignedBuffer<float> attention_scratch;         // T x T per thread
  std::vector<std::int32_t> tokens, targets;      // the micro-batch's
  std::unique_ptr<VocabParallelLoss> vocab_loss;  // under TP

  // Storage for what place(base) hands out (base nullptr: it only counts the floats), the
  // ids of BT rows and, under a TP split of `tp` ranks, the vocab-parallel loss.
  template <class Place>
  void allocate(Place&& place, std::size_t BT, int tp) {
    storage.resize(place(nullptr));
    place(storage.data());
    if (tp > 1) vocab_loss = std::make_unique<VocabParallelLoss>(static_cast<int>(BT), tp);
    tokens.resize(BT);
    targets.resize(BT);
  }
  void reserve_attention_scratch(int T) {
    const std::size_t n = static_cast<std::size_t>(T) * T * omp_get_max_threads();
    if (attention_scratch.size() < n) attention_scratch.resize(n);
  }
};

// HostBuffers with the blocks' activations, of type L.
template <class L>
struct HostActivations : HostBuffers {
  using Layer = L;
  std::vector<Layer> layers;
  // The input of block `layer`, also the final norm's when layer == n_layer.
  const float* block_input(int layer) const { return layer == 0 ? encoded : layers[layer - 1].res3; }
};

}  // namespace strata::model
